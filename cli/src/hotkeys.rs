//! `stripecount hotkeys`: placeholder, filled in by the keyed work.

use std::process::ExitCode;

pub fn run(_args: &[String]) -> ExitCode {
    eprintln!("hotkeys: not implemented yet");
    ExitCode::FAILURE
}
