//! [`ConfigError`]: why a constructor refused its arguments.

use std::fmt;
use std::time::Duration;

/// Why a window, limiter or registry could not be built. One variant per
/// reason, each carrying the offending values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The window is zero long.
    ZeroWindow,
    /// Zero slices were asked for.
    ZeroSlices,
    /// More slices than [`MAX_SLICES`](crate::window::MAX_SLICES).
    TooManySlices {
        /// Slices asked for.
        slices: usize,
        /// The largest number supported.
        max: usize,
    },
    /// The window in nanoseconds is not a whole multiple of the slice count,
    /// so slices could not all have the same length.
    UnevenSlices {
        /// The window asked for.
        window: Duration,
        /// Slices asked for.
        slices: usize,
    },
    /// The window is longer than `u64::MAX` nanoseconds (584 years).
    WindowTooLong {
        /// The window asked for.
        window: Duration,
    },
    /// A multi-level structure was given no levels.
    NoLevels,
    /// Levels of a multi-level structure are not in strictly increasing
    /// window order.
    LevelsNotIncreasing {
        /// Index of the offending level.
        level: usize,
    },
    /// A level's slice length is not a whole multiple of the previous
    /// level's slice length.
    LevelSliceMismatch {
        /// Index of the offending level.
        level: usize,
    },
    /// A [`HotKeySketch`](crate::HotKeySketch) was given less memory than
    /// its stated rate of adds needs
    /// ([`HotKeySketch::memory_for`](crate::HotKeySketch::memory_for)):
    /// keys that reach the threshold would go untracked.
    SketchMemory {
        /// The memory given, in bytes.
        memory: usize,
        /// The least memory the rate needs, in bytes.
        needed: usize,
    },
    /// A [`HotKeySketch`](crate::HotKeySketch)'s slice receives more adds at
    /// its stated rate than a doorkeeper shard can keep apart at its
    /// admission level, at any memory: more slices, or a higher threshold or
    /// admission level, make a slice's adds fit.
    SketchRate {
        /// The adds of one slice at the stated rate.
        adds_per_slice: u64,
        /// The most a slice may receive at this admission level.
        most: u64,
    },
    /// A parameter is outside its valid range (the message says which).
    Invalid(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroWindow => write!(f, "the window must be longer than zero"),
            ConfigError::ZeroSlices => write!(f, "a window needs at least one slice"),
            ConfigError::TooManySlices { slices, max } => {
                write!(f, "{slices} slices asked for; at most {max} are supported")
            }
            ConfigError::UnevenSlices { window, slices } => write!(
                f,
                "a window of {window:?} ({} ns) cannot be cut into {slices} slices of equal whole nanoseconds",
                window.as_nanos()
            ),
            ConfigError::WindowTooLong { window } => {
                write!(f, "a window of {window:?} is longer than u64::MAX nanoseconds")
            }
            ConfigError::NoLevels => write!(f, "at least one level is required"),
            ConfigError::LevelsNotIncreasing { level } => write!(
                f,
                "level {level}'s window is not longer than level {}'s",
                level.saturating_sub(1)
            ),
            ConfigError::LevelSliceMismatch { level } => write!(
                f,
                "level {level}'s slice length is not a whole multiple of level {}'s",
                level.saturating_sub(1)
            ),
            ConfigError::SketchMemory { memory, needed } => write!(
                f,
                "a hot-key sketch of {memory} bytes cannot hold every key that can reach the \
                 threshold at the stated rate: it needs at least {needed} bytes"
            ),
            ConfigError::SketchRate { adds_per_slice, most } => write!(
                f,
                "a slice of {adds_per_slice} adds is more than a hot-key sketch's doorkeeper \
                 keeps apart at its admission level (at most {most}): use more slices, or a \
                 higher threshold or admission level"
            ),
            ConfigError::Invalid(what) => write!(f, "invalid configuration: {what}"),
        }
    }
}

impl std::error::Error for ConfigError {}
