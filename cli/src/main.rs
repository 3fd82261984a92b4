//! The `stripecount` command.
//!
//! - `stripecount` (no arguments, or report options): the contention report.
//! - `stripecount hotkeys ...`: hot-key detection over keys read from stdin.

mod hotkeys;
mod report;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("hotkeys") {
        hotkeys::run(&args[2..])
    } else {
        report::run(&args[1..])
    }
}
