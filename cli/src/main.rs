//! The `stripecount` command.
//!
//! - `stripecount` (no arguments, or report options): the contention report.
//! - `stripecount hotkeys ...`: hot-key detection over keys read from stdin.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("hotkeys") {
        stripecount_cli::hotkeys(&args[2..])
    } else {
        stripecount_cli::report(&args[1..])
    }
}
