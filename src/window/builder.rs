//! [`WindowBuilder`]: a [`SlidingWindow`]'s configuration (its window, its
//! slices and its clock), validated by [`build`](WindowBuilder::build).

use super::{Ring, SlidingWindow};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::fmt;
use std::time::Duration;

/// Builds a [`SlidingWindow`] on a clock of the caller's choice; made by
/// [`SlidingWindow::builder`]. The configuration is checked by
/// [`build`](Self::build), with the errors of [`SlidingWindow::new`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::SlidingWindow;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let w = SlidingWindow::builder(Duration::from_secs(1), 10)
///     .clock(clock.clone())
///     .build()?;
/// w.add(1);
/// assert_eq!(w.sum(), 1);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// # Other clocks
/// [`SlidingWindow::builder`](crate::SlidingWindow::builder) makes a builder on the monotonic clock
/// and [`clock`](WindowBuilder::clock) changes its clock (and type). For a type named with another
/// clock (`SlidingWindow::<ManualClock>`), or code generic over the clock, start from
/// [`SlidingWindow::builder_with_clock`](crate::SlidingWindow::builder_with_clock): `builder`
/// itself is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Clone)]
pub struct WindowBuilder<C: Clock = MonotonicClock> {
    window: Duration,
    slices: usize,
    clock: C,
}

impl WindowBuilder {
    /// The builder of a window of `window` in `slices` slices, on the
    /// monotonic clock.
    pub(super) fn new(window: Duration, slices: usize) -> Self {
        WindowBuilder {
            window,
            slices,
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> WindowBuilder<C> {
    /// The clock the window reads in its methods without `_at` (the
    /// monotonic clock unless given).
    pub fn clock<C2: Clock>(self, clock: C2) -> WindowBuilder<C2> {
        WindowBuilder {
            window: self.window,
            slices: self.slices,
            clock,
        }
    }

    /// The window. Errors as [`SlidingWindow::new`].
    pub fn build(self) -> Result<SlidingWindow<C>, ConfigError> {
        Ok(SlidingWindow {
            ring: Ring::new(self.window, self.slices)?,
            window: self.window,
            clock: self.clock,
        })
    }
}

impl<C: Clock> fmt::Debug for WindowBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowBuilder")
            .field("window", &self.window)
            .field("slices", &self.slices)
            .finish_non_exhaustive()
    }
}
