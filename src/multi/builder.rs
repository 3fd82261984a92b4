//! [`MultiWindowBuilder`]: a [`MultiWindow`]'s configuration (its levels
//! and its clock), validated by [`build`](MultiWindowBuilder::build).

use super::window::MultiWindow;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::fmt;
use std::time::Duration;

/// Builds a [`MultiWindow`] on a clock of the caller's choice; made by
/// [`MultiWindow::builder`]. The levels are checked by
/// [`build`](Self::build), with the errors of [`MultiWindow::new`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::MultiWindow;
/// use std::time::Duration;
///
/// const MIN: Duration = Duration::from_secs(60);
/// let w = MultiWindow::builder(&[(MIN, 60), (60 * MIN, 60)])
///     .clock(ManualClock::new())
///     .build()?;
/// w.add(1);
/// assert_eq!(w.sum_over(60 * MIN), 1);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// # Other clocks
/// [`MultiWindow::builder`](crate::MultiWindow::builder) makes a builder on the monotonic clock and
/// [`clock`](MultiWindowBuilder::clock) changes its clock (and type). For a type named with another
/// clock (`MultiWindow::<ManualClock>`), or code generic over the clock, start from
/// [`MultiWindow::builder_with_clock`](crate::MultiWindow::builder_with_clock): `builder` itself is
/// defined on the default-clock type only.
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Clone)]
pub struct MultiWindowBuilder<C: Clock = MonotonicClock> {
    levels: Vec<(Duration, usize)>,
    clock: C,
}

impl MultiWindowBuilder {
    /// The builder of levels of `(window, slices)`, finest first, on the
    /// monotonic clock.
    pub(super) fn new(levels: &[(Duration, usize)]) -> Self {
        MultiWindowBuilder {
            levels: levels.to_vec(),
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> MultiWindowBuilder<C> {
    /// The clock the structure reads in its methods without `_at` (the
    /// monotonic clock unless given).
    pub fn clock<C2: Clock>(self, clock: C2) -> MultiWindowBuilder<C2> {
        MultiWindowBuilder {
            levels: self.levels,
            clock,
        }
    }

    /// The structure. Errors as [`MultiWindow::new`].
    pub fn build(self) -> Result<MultiWindow<C>, ConfigError> {
        MultiWindow::from_parts(&self.levels, self.clock)
    }
}

impl<C: Clock> fmt::Debug for MultiWindowBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiWindowBuilder")
            .field("levels", &self.levels)
            .finish_non_exhaustive()
    }
}
