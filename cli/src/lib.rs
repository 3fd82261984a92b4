//! The `stripecount` command (`src/main.rs` is its entry point): the
//! contention report (`report`) and hot-key detection over standard input
//! (`hotkeys`). A library so that the fuzz targets (`fuzz/` in the
//! repository) can reach the command's parsers; not published.

mod hotkeys;
mod report;

pub use hotkeys::run as hotkeys;
pub use report::run as report;

/// The parsers of the command's input, for the fuzz targets (feature
/// `fuzzing`, off by default).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::hotkeys::fuzz::*;
}
