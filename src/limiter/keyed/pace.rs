//! The pace of the automatic sweep of idle keys: how many shards a sweep
//! step takes, and how long a step is. The sweep itself is the map's
//! (`src/keyed/map/sweep.rs`); requests meet it through `sweep_due`
//! (`acquire.rs`).
//!
//! # Invariant
//! A window holds enough steps to sweep every shard: `steps per epoch x
//! shards per step >= ceil(SHARDS / S)`, `S` the longest window in finest
//! slices (a unit test checks it over several configurations).

use crate::keyed::map::SHARDS;
use crate::limiter::config::Config;

/// How the automatic sweep of idle keys is paced (`src/keyed/map/sweep.rs`):
/// `shards` at each step of `nanos`, so that the whole map is swept about
/// once per longest window. A step sweeps one shard when the slices are
/// long enough (any slice of at least `SHARDS` ns): the work is spread
/// over the epoch instead of done at its start. Sweeping the
/// `ceil(SHARDS / S)` shards of an epoch at once stalled the request that
/// opened it for 3.4-6.2 ms on a 1M-key map (BENCHMARKS.md, issue 11,
/// ninth session).
pub(super) struct SweepPace {
    /// Shards swept at each step.
    pub(super) shards: usize,
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
        // Shards an epoch, as many steps an epoch (at most one per ns).
        let per_epoch = (SHARDS as u64).div_ceil(longest.max(1)).max(1);
        let slice = cfg.slice_nanos().max(1);
        let steps = per_epoch.min(slice);
        SweepPace {
            shards: per_epoch.div_ceil(steps) as usize,
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
        (p.shards, p.nanos)
    }

    #[test]
    fn a_sweep_step_is_one_shard_when_slices_allow() {
        // 13 shards a 100 ms slice: 13 steps of 7.69 ms, a shard each.
        assert_eq!(pace(Duration::from_secs(1), 10), (1, 100_000_000 / 13));
        // One slice: every shard in a window, one step each.
        let (shards, nanos) = pace(Duration::from_secs(1), 1);
        assert_eq!((shards, nanos), (1, 1_000_000_000 / SHARDS as u64));
        // Slices of 1 ns: one step an epoch, sweeping a window's share.
        assert_eq!(pace(Duration::from_nanos(2), 2), (SHARDS / 2, 1));
        // Slices of 10 ns, 128 shards an epoch: 10 steps of 1 ns, 13 each.
        assert_eq!(pace(Duration::from_nanos(10), 1), (13, 1));
    }

    #[test]
    fn a_window_of_steps_sweeps_every_shard() {
        for (w, s) in [
            (1_000_000_000u64, 10usize),
            (7, 7),
            (3_600_000_000_000, 60),
            (10, 1),
        ] {
            let cfg = Config::single(1, Duration::from_nanos(w), s).unwrap();
            let p = SweepPace::of(&cfg);
            let steps = w / p.nanos;
            assert!(steps * p.shards as u64 >= SHARDS as u64, "{w} ns / {s}");
        }
    }
}
