//! The pace of the automatic sweep of idle keys: how long a sweep step is
//! and how much of the map it sweeps. The sweep itself is the map's
//! (`src/map/sweep.rs`); requests meet it through `sweep_due`
//! (`acquire.rs`).
//!
//! # Why a step is small
//! The sweep runs on the request that opens a step, under one shard's
//! lock. Sweeping an epoch's `ceil(SHARDS / S)` shards at its first
//! request stalled that request 3.4-6.2 ms on a 1M-key map; one shard a
//! step, 0.47-0.53 ms; a sixteenth of a shard a step (a *part*: a run of
//! its table's groups), what this file sets (BENCHMARKS.md, per-key
//! limits: the sweep spread over the epoch).
//!
//! # Invariant
//! A window holds enough steps to sweep every part of every shard: steps
//! per epoch x parts per step >= `ceil(SHARDS x PARTS / S)`, `S` the
//! longest window in finest slices (a unit test checks it over several
//! configurations).

use crate::limiter::config::Config;
use crate::map::SHARDS;

/// The parts a shard's table is swept in. One under loom: a model's
/// tables are a group or two, and each part is a lock taken.
pub(super) const PARTS: usize = if cfg!(loom) { 1 } else { 16 };

/// How the automatic sweep is paced: `units` parts at each step of
/// `nanos`, so that the whole map is swept about once per longest window.
/// A step is one part when the slices are long enough (any slice of at
/// least `SHARDS x PARTS` ns): the work is spread over the epoch.
pub(super) struct SweepPace {
    /// Parts swept at each step.
    pub(super) units: usize,
    /// A step's length (ns), at least 1.
    pub(super) nanos: u64,
}

impl SweepPace {
    pub(super) fn of(cfg: &Config) -> SweepPace {
        let longest = cfg
            .levels()
            .iter()
            .map(|lv| lv.ratio.saturating_mul(lv.slices))
            .max()
            .unwrap_or(1);
        // Parts an epoch, as many steps an epoch (at most one per ns).
        let per_epoch = ((SHARDS * PARTS) as u64).div_ceil(longest.max(1)).max(1);
        let slice = cfg.slice_nanos().max(1);
        let steps = per_epoch.min(slice);
        SweepPace {
            units: per_epoch.div_ceil(steps) as usize,
            nanos: slice / steps,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pace(window: Duration, slices: usize) -> (usize, u64) {
        let cfg = Config::single(1, window, slices).unwrap();
        let p = SweepPace::of(&cfg);
        (p.units, p.nanos)
    }

    #[test]
    fn a_sweep_step_is_one_part_when_slices_allow() {
        // With 128 shards: 2048 parts, 205 a 100 ms slice: 205 steps of
        // 0.49 ms, one each.
        let all = (SHARDS * PARTS) as u64;
        let tenth = all.div_ceil(10);
        assert_eq!(pace(Duration::from_secs(1), 10), (1, 100_000_000 / tenth));
        // One slice: every part in a window, one step each.
        assert_eq!(pace(Duration::from_secs(1), 1), (1, 1_000_000_000 / all));
        // Slices of 1 ns: one step an epoch, sweeping a window's share.
        assert_eq!(pace(Duration::from_nanos(2), 2), (SHARDS * PARTS / 2, 1));
        // Slices of 10 ns, 2048 parts an epoch: 10 steps of 1 ns, 205 each.
        assert_eq!(pace(Duration::from_nanos(10), 1), (tenth as usize, 1));
    }

    #[test]
    fn a_window_of_steps_sweeps_every_part() {
        for (w, s) in [
            (1_000_000_000u64, 10usize),
            (7, 7),
            (3_600_000_000_000, 60),
            (10, 1),
            (86_400_000_000_000, 24),
        ] {
            let cfg = Config::single(1, Duration::from_nanos(w), s).unwrap();
            let p = SweepPace::of(&cfg);
            let steps = w / p.nanos;
            assert!(
                steps * p.units as u64 >= (SHARDS * PARTS) as u64,
                "{w} ns / {s}"
            );
        }
    }
}
