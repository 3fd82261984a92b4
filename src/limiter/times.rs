//! A decision's times ([`Times`]): when a refused request would first fit if
//! nothing else were granted, and when its window empties. They are the two
//! answers of a decision that need more than the word its verdict was
//! decided on, so a decision computes them only when it must.
//!
//! # What a refusal keeps, and why its answer is the one true at the refusal
//! A single-limit state refuses on one value: the state word of epoch `E`,
//! whose `used` is the window total (`grant.rs`). Its times follow from
//! `used`, the request's units and budget, and the recorded counts of
//! `E`'s window, which are final while the state holds `E` (rolls write the
//! history only while the state is sealed, `roll.rs`). So they are a
//! function of values that exist at the refusal:
//! - **No history yet, or the counts inline** (`history.rs`): the counts
//!   are one word, the `block` word read after the refusal's state word
//!   (still `E`'s: a null word never returns, an inline word is tagged with
//!   its epoch; otherwise a roll began and the request is decided again).
//!   The decision keeps that word, `E`, `used`, the units that must leave
//!   the window before the request fits, the request's time and the grid
//!   (slice length, slices, field width): seven words, written by the
//!   refusal, and no reference to the state ([`Times::window`]). The times
//!   are computed from them when read (a [`LevelView`], the same arithmetic
//!   as a snapshot's), so they are the refusal's, however long after it
//!   they are asked for, and a caller that never asks (a refusal counted,
//!   or a 429 without `Retry-After`) pays nothing for them.
//! - **A block**: the counts are up to `S - 1` ring words; a decision could
//!   keep them only by reading them, which is what finding the times costs.
//!   So the refusal walks the ring words of `E`'s window (from the oldest,
//!   stopping once it has what the times need: `view.rs`, `LevelView::walk`),
//!   read while the state still holds `E` (checked after the walk; else the
//!   request is decided again), and keeps the two epochs it found
//!   ([`Times::epochs`]); a direct limiter's thread reuses its last walk of
//!   the same window (`memo.rs`).
//!
//! Deciding again is sound because a refusal takes nothing: the request is
//! then decided at a later instant, exactly as if it had arrived then.
//! Everything else (grants, peeks, several limits, a request above its
//! limit) is computed when decided: a grant's reset from its own CAS's
//! values, the others from a consistent snapshot (`snapshot.rs`).
//!
//! In every case a decision keeps epochs, not durations: the durations
//! (from the request's time to the epoch's start) are computed when read.
//!
//! # Layout
//! Seven plain words, whichever the kind, so that a decision is written once
//! where its caller wants it and moves as words (a refusal that returned an
//! enum of mixed-width fields spent more on moving it than on deciding).

use super::config::{Config, Level};
use super::history::History;
use super::inline::Inline;
use super::view::{LevelView, Walk};
use std::time::Duration;

/// A decision's retry and reset times, computed or to compute (module
/// docs): the words' meaning depends on [`shape`](Times::shape)'s kind.
#[derive(Clone, Copy)]
pub(crate) struct Times {
    /// Known: the retry time in nanoseconds (none: see `shape`). Window and
    /// epochs: the request's time, in nanoseconds.
    a: u64,
    /// Known: the reset time in nanoseconds. Window and epochs: the slice
    /// length.
    b: u64,
    /// Window and epochs: the epoch `E` the refusal was decided at (the
    /// epoch of the request's time, or the state's newer one).
    epoch: u64,
    /// Window: the window total at `E`, in units. Epochs: the retry epoch.
    c: u64,
    /// Window: the units that must leave the window before the request
    /// fits (`used + units - budget`, at least 1). Epochs: the reset epoch.
    d: u64,
    /// Window: the `block` word of `E`, an inline history, or 0 for none.
    history: u64,
    /// `slices << 32 | width << 8 | NO_RETRY | kind`.
    shape: u64,
}

/// [`Times::shape`]'s kind: known durations.
const KNOWN: u64 = 0;
/// [`Times::shape`]'s kind: a window to compute from.
const WINDOW: u64 = 1;
/// [`Times::shape`]'s kind: the two epochs.
const EPOCHS: u64 = 2;
const KIND: u64 = 3;
/// [`Times::shape`]: known times with no retry time.
const NO_RETRY: u64 = 4;

/// From `now` to the start of finest epoch `at`, in nanoseconds, or zero for
/// an epoch not after `j` (a request stamped before the state's newest
/// epoch is judged there).
#[inline]
pub(crate) fn nanos_after(at: u64, j: u64, slice_nanos: u64, now: u64) -> u64 {
    if at > j {
        at.saturating_mul(slice_nanos).saturating_sub(now)
    } else {
        0
    }
}

impl Times {
    /// Known times: `retry` nanoseconds (`None`: never, or unknown) and
    /// `reset` nanoseconds.
    #[inline]
    pub(crate) fn known(retry: Option<u64>, reset: u64) -> Times {
        Times {
            a: retry.unwrap_or(0),
            b: reset,
            epoch: 0,
            c: 0,
            d: 0,
            history: 0,
            shape: if retry.is_some() {
                KNOWN
            } else {
                KNOWN | NO_RETRY
            },
        }
    }

    /// The times of a single-limit refusal at `now`, decided at epoch `e`,
    /// that fits from epoch `retry`, in a window empty from epoch `reset`.
    #[inline]
    pub(crate) fn epochs(cfg: &Config, now: u64, e: u64, retry: u64, reset: u64) -> Times {
        Times {
            a: now,
            b: cfg.slice_nanos(),
            epoch: e,
            c: retry,
            d: reset,
            history: 0,
            shape: EPOCHS,
        }
    }

    /// The window of a single-limit refusal at `now`, decided at epoch `e`
    /// on `used`, of a request that fits once `need` units have left the
    /// window, whose `block` word is the inline history `inline` (`None`:
    /// no history).
    #[inline]
    pub(crate) fn window(
        cfg: &Config,
        now: u64,
        e: u64,
        used: u64,
        need: u64,
        inline: Option<Inline>,
    ) -> Times {
        debug_assert!(cfg.len() == 1 && need >= 1 && need <= used);
        let slices = cfg.level(0).slices;
        Times {
            a: now,
            b: cfg.slice_nanos(),
            epoch: e,
            c: used,
            d: need,
            history: inline.map_or(0, Inline::bits),
            // At most `MAX_SLICES + 1` slices, widths up to 47 bits.
            shape: slices << 32 | u64::from(cfg.inline_width()) << 8 | WINDOW,
        }
    }

    /// The retry time (see [`Decision::retry_after`](super::Decision::retry_after)).
    pub(crate) fn retry(&self) -> Option<Duration> {
        match self.shape & KIND {
            KNOWN => (self.shape & NO_RETRY == 0).then(|| Duration::from_nanos(self.a)),
            EPOCHS => Some(self.after(self.c)),
            _ => Some(self.after(self.window_retry())),
        }
    }

    /// The reset time (see [`Decision::reset_after`](super::Decision::reset_after)).
    pub(crate) fn reset(&self) -> Duration {
        match self.shape & KIND {
            KNOWN => Duration::from_nanos(self.b),
            EPOCHS => self.after(self.d),
            _ => self.after(self.window_epochs().1),
        }
    }

    /// A window's two epochs: its one level, as a snapshot would see it at
    /// `E` (inline or empty: no ring slot to find), walked.
    fn window_epochs(&self) -> (u64, u64) {
        let (walk, head) = self.window_walk(true);
        walk.epochs(self.epoch, self.shape >> 32, head)
    }

    /// A window's retry epoch: [`window_epochs`](Self::window_epochs)'
    /// first, without the head. Not inlined, so that the other kinds' reads
    /// stay small.
    #[inline(never)]
    fn window_retry(&self) -> u64 {
        self.window_walk(false)
            .0
            .retry_epoch(self.epoch, self.shape >> 32)
    }

    /// A window's walk, and its current slice's count (`used` less the
    /// recorded counts) if `head`: only the reset needs that, and the sum
    /// of an inline word's fields is a fifth of the cost of a retry time.
    /// Without it, 0 stands for the recorded total: a walk over an inline
    /// or empty history reads fields, never the total (`LevelView::walk`).
    #[inline]
    fn window_walk(&self, head: bool) -> (Walk, u64) {
        let (used, need) = (self.c, self.d);
        let width = (self.shape >> 8) as u8 as u32;
        let (history, recorded) = match self.history {
            0 => (History::Empty, 0),
            bits => {
                let w = Inline::from_bits(bits);
                (History::Inline(w), if head { w.sum(width) } else { 0 })
            }
        };
        let lv = Level {
            ratio: 1,
            slices: self.shape >> 32,
            base: 0,
            ring: 0,
        };
        let head = used.saturating_sub(recorded);
        let view = LevelView::new(lv, width, self.epoch, head, Some(used), history);
        (view.walk(need, recorded, |_| 0), head)
    }

    /// From the request's time to the start of epoch `at`.
    fn after(&self, at: u64) -> Duration {
        Duration::from_nanos(nanos_after(at, self.epoch, self.b, self.a))
    }
}
