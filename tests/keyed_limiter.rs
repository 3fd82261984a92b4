//! Tests of the per-key limiter, one thread: every key against its own
//! direct limiter (the reference: per key the semantics are exactly
//! `RateLimiter`'s / `MultiLimiter`'s) over thousands of seeded
//! random requests, with quotas changing; refusals of new keys, string
//! keys, quota changes, reads, idle keys, table moves and every
//! configuration error. Threads are in `keyed_limiter_threads.rs`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::limiter::{FloodPolicy, KeyedLimiterBuilder};
use stripecount::{
    ConfigError, Decision, Denied, KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp,
};

static_assertions::assert_impl_all!(KeyedLimiter<String>: std::fmt::Debug, Send, Sync);
static_assertions::assert_impl_all!(FloodPolicy: std::fmt::Debug, Copy, Eq, Default);

const MS: u64 = 1_000_000;

/// The time `ns` nanoseconds after the origin.
const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// The quota of a level: `limit` per `window` in `slices` slices.
fn quota(&(limit, window, slices): &(u64, Duration, usize)) -> Quota {
    Quota::per(limit, window).slices(slices)
}

/// The quotas of `levels`, in order.
fn quotas(levels: &[(u64, Duration, usize)]) -> Vec<Quota> {
    levels.iter().map(quota).collect()
}

/// The builder of a limiter of one quota (`limit` per `window` in
/// `slices` slices) on a `ManualClock`.
fn builder<K: stripecount::keyed::Key>(
    limit: u64,
    window: Duration,
    slices: usize,
) -> KeyedLimiterBuilder<K, ManualClock> {
    KeyedLimiter::builder(quota(&(limit, window, slices))).clock(ManualClock::new())
}

/// A test's size (seeds, steps, keys): `full` natively, `miri` under Miri,
/// which interprets a test thousands of times slower. A test asserts the
/// same things at either size.
const fn sized<T: Copy>(full: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

/// A key's reference: its own direct limiter, given the key's limits
/// before every call.
enum Reference {
    One(RateLimiter<ManualClock>),
    Multi(MultiLimiter<ManualClock>),
}

impl Reference {
    fn new(levels: &[(u64, Duration, usize)]) -> Reference {
        let c = ManualClock::new();
        if levels.len() == 1 {
            Reference::One(
                RateLimiter::builder(quota(&levels[0]))
                    .clock(c)
                    .build()
                    .unwrap(),
            )
        } else {
            Reference::Multi(
                MultiLimiter::builder(quotas(levels))
                    .clock(c)
                    .build()
                    .unwrap(),
            )
        }
    }

    fn set(&self, limits: &[u64]) {
        match self {
            Reference::One(l) => l.set_limit(limits[0]),
            Reference::Multi(l) => {
                for (i, &v) in limits.iter().enumerate() {
                    l.set_limit_of(i, v);
                }
            }
        }
    }

    fn decision(&self, now: u64, n: u64) -> Decision {
        match self {
            Reference::One(l) => l.decide_at(ts(now), n),
            Reference::Multi(l) => l.decide_at(ts(now), n),
        }
    }

    fn acquire(&self, now: u64, n: u64) -> bool {
        match self {
            Reference::One(l) => l.try_acquire_at(ts(now), n),
            Reference::Multi(l) => l.try_acquire_at(ts(now), n),
        }
    }

    fn peek(&self, now: u64, n: u64) -> Decision {
        match self {
            Reference::One(l) => l.peek_at(ts(now), n),
            Reference::Multi(l) => l.peek_at(ts(now), n),
        }
    }

    fn available(&self, now: u64) -> u64 {
        match self {
            Reference::One(l) => l.available_at(ts(now)),
            Reference::Multi(l) => l.available_at(ts(now)),
        }
    }
}

/// Runs `steps` random operations on a keyed limiter of `levels` and on
/// one reference per key, asserting identical answers. `monotone`: time
/// never goes back (then eviction is on, and invisible); otherwise times
/// jump back at random and eviction is off.
fn against_references(seed: u64, levels: &[(u64, Duration, usize)], monotone: bool, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let lim: KeyedLimiter<u32, ManualClock> = KeyedLimiter::builder(quotas(levels))
        .clock(ManualClock::new())
        .auto_evict(monotone)
        .build()
        .unwrap();
    let k = levels.len();
    let slice = levels
        .iter()
        .map(|l| l.1.as_nanos() as u64 / l.2 as u64)
        .min()
        .unwrap();
    let mut defaults: Vec<u64> = levels.iter().map(|l| l.0).collect();
    let mut overrides: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut refs: HashMap<u32, Reference> = HashMap::new();
    let mut now = 0u64;
    let mut refused = 0u64;
    for step in 0..steps {
        let key = rng.random_range(0..12u32);
        let limits = overrides.get(&key).unwrap_or(&defaults).clone();
        let r = refs.entry(key).or_insert_with(|| Reference::new(levels));
        r.set(&limits);
        now += rng.random_range(0..slice);
        let t = if !monotone && rng.random_bool(0.2) {
            now.saturating_sub(rng.random_range(0..slice * 8))
        } else {
            now
        };
        let max = limits.iter().copied().max().unwrap_or(0);
        let n = rng.random_range(0..=max + 1);
        let ctx = || format!("seed {seed} step {step}: key {key} at {t} n {n} limits {limits:?}");
        match rng.random_range(0..100) {
            0..=39 => {
                let d = r.decision(t, n);
                refused += u64::from(!d.is_granted());
                assert_eq!(lim.decide_at(&key, ts(t), n), d, "{}", ctx());
            }
            40..=69 => {
                let granted = r.acquire(t, n);
                refused += u64::from(!granted);
                assert_eq!(lim.try_acquire_at(&key, ts(t), n), granted, "{}", ctx());
            }
            70..=79 => assert_eq!(lim.peek_at(&key, ts(t), n), r.peek(t, n), "{}", ctx()),
            80..=84 => assert_eq!(lim.available_at(&key, ts(t)), r.available(t), "{}", ctx()),
            85..=88 => assert_eq!(
                lim.retry_after_at(&key, ts(t), n),
                r.peek(t, n).retry_after(),
                "{}",
                ctx()
            ),
            89..=92 => {
                let i = rng.random_range(0..k);
                defaults[i] = rng.random_range(0..=levels[i].0 + 2);
                assert!(lim.set_limit_of(i, defaults[i]));
            }
            93..=96 => {
                let mine: Vec<u64> = levels
                    .iter()
                    .map(|l| rng.random_range(0..=l.0 * 2))
                    .collect();
                lim.set_key_limits(&key, &mine).unwrap();
                overrides.insert(key, mine);
            }
            97 => assert_eq!(lim.clear_key_limits(&key), overrides.remove(&key).is_some()),
            _ if monotone => {
                lim.evict_idle_at(ts(now));
            }
            _ => {}
        }
        assert_eq!(
            lim.limits_for(&key),
            *overrides.get(&key).unwrap_or(&defaults)
        );
        assert_eq!(lim.key_overrides(), overrides.len());
        // Every refused request counted, reads not.
        assert_eq!(lim.refusals(), refused, "seed {seed} step {step}");
    }
}

#[test]
fn one_limit_matches_a_sliding_limiter_per_key() {
    for seed in 0..sized(20, 1) {
        let levels = [(6, Duration::from_millis(4), 4)];
        against_references(seed, &levels, false, sized(3000, 10));
    }
}

#[test]
fn a_fixed_window_per_key_matches_too() {
    for seed in 100..sized(110, 101) {
        let steps = sized(2000, 10);
        against_references(seed, &[(3, Duration::from_millis(2), 1)], false, steps);
    }
}

#[test]
fn several_limits_match_a_multi_limiter_per_key() {
    for seed in 200..sized(215, 201) {
        let levels = [
            (4, Duration::from_millis(2), 2),
            (9, Duration::from_millis(12), 3),
        ];
        against_references(seed, &levels, false, sized(3000, 10));
    }
}

#[test]
fn eviction_is_invisible_while_time_moves_forward() {
    for seed in 300..sized(315, 301) {
        let steps = sized(3000, 5);
        against_references(seed, &[(5, Duration::from_millis(3), 3)], true, steps);
        let levels = [
            (3, Duration::from_millis(1), 1),
            (7, Duration::from_millis(6), 3),
        ];
        against_references(seed + 1000, &levels, true, steps);
    }
}

#[test]
fn a_refused_new_key_says_too_many_keys() {
    let lim = builder(5, Duration::from_secs(1), 1)
        .max_keys(1)
        .build()
        .unwrap();
    assert!(lim.try_acquire(&"a", 1));
    let d = lim.decide(&"b", 1);
    assert_eq!(
        (d.denied(), d.limit(), d.remaining(), d.retry_after()),
        (Some(Denied::TooManyKeys), 5, 0, None)
    );
    // A read of a key that cannot be held answers for an empty window.
    assert!(lim.peek(&"b", 5).is_granted());
    assert!(lim.try_acquire(&"a", 4));
    assert_eq!(lim.untracked_decisions(), 1);
}

#[test]
fn string_keys_take_str_and_time_never_runs_backwards_for_a_key() {
    let lim: KeyedLimiter<String, _> = builder(2, Duration::from_millis(2), 2).build().unwrap();
    assert!(lim.try_acquire_at("k", ts(5 * MS), 2));
    // Stamped earlier: judged at the key's newest slice, which is full.
    assert_eq!(
        lim.decide_at("k", ts(0), 1).denied(),
        Some(Denied::Exhausted)
    );
    assert!(lim.try_acquire_at(&"j".to_string(), ts(0), 2)); // another key's time is its own
    assert!(lim.try_acquire_at("k", ts(7 * MS), 2));
}

#[test]
fn quotas_change_without_resetting_windows() {
    let lim = builder(4, Duration::from_millis(2), 2).build().unwrap();
    assert!(lim.try_acquire_at(&1u8, ts(0), 4));
    lim.set_key_limit(&1, 8).unwrap();
    assert!(lim.try_acquire_at(&1, ts(0), 4)); // raised: 4 more fit
    lim.set_key_limit(&1, 2).unwrap();
    assert!(!lim.try_acquire_at(&1, ts(MS), 1)); // lowered below the 8 held
    assert!(lim.clear_key_limits(&1));
    assert!(!lim.try_acquire_at(&1, ts(MS), 1)); // the default 4 is also full
    assert!(lim.try_acquire_at(&1, ts(2 * MS), 4)); // the first slice expired
    assert_eq!(
        lim.set_key_limits(&1, &[1, 2]),
        Err(ConfigError::Invalid(
            "a key's limits need one value per limit of the limiter"
        ))
    );
    let two = KeyedLimiter::<u8>::builder(quotas(&[
        (1, Duration::from_millis(1), 1),
        (2, Duration::from_millis(4), 4),
    ]))
    .clock(ManualClock::new())
    .build()
    .unwrap();
    assert!(two.set_key_limit(&1, 3).is_err());
    assert!(two.set_key_limits(&1, &[3, 3]).is_ok());
    assert!(two.try_acquire_at(&1, ts(0), 3));
    assert_eq!(two.limits_for(&1), vec![3, 3]);
}

#[test]
fn the_automatic_sweep_removes_idle_keys_within_one_more_window() {
    // 1 s in 10 slices: the sweep visits all shards in about 10 epochs.
    let slice = 100 * MS;
    let lim = builder(100, Duration::from_secs(1), 10).build().unwrap();
    // Far from time 0, where a sweep step scheduled too late would show.
    let e0 = 10_000u64;
    const KEYS: u64 = sized(10_000, 20);
    for k in 0..KEYS {
        assert!(lim.try_acquire_at(&k, ts(e0 * slice), 1));
    }
    // One busy key, one request a slice; the others go idle after e0's
    // slice leaves the window, at e0 + 10.
    let busy = u64::MAX;
    for e in e0 + 1..=e0 + 21 {
        assert!(lim.try_acquire_at(&busy, ts(e * slice + 7), 1));
        if e < e0 + 10 {
            assert_eq!(
                lim.len(),
                KEYS as usize + 1,
                "epoch {e}: a key was evicted inside its window"
            );
        }
    }
    assert_eq!(lim.len(), 1, "idle keys left after two windows");
}

/// Not under Miri: two windows of requests a millisecond apart (2,000, and
/// a length read after most) are what it checks, and they would take Miri
/// several minutes.
#[cfg(not(miri))]
#[test]
fn the_sweep_paced_a_shard_a_step_still_removes_idle_keys() {
    // 1 s in 10 slices: a sweep step is 100 ms / 13 and sweeps one shard.
    // A request every millisecond meets each step once, so the sweep runs
    // a shard at a time (not 13 at the start of each slice), and still
    // leaves the keys of their window and removes them within two windows.
    let lim = builder(10_000, Duration::from_secs(1), 10).build().unwrap();
    let t0 = 1_000_000 * MS;
    for k in 0..10_000u64 {
        assert!(lim.try_acquire_at(&k, ts(t0), 1));
    }
    let busy = u64::MAX;
    for ms in 1..=2_000u64 {
        assert!(lim.try_acquire_at(&busy, ts(t0 + ms * MS), 1));
        if ms < 900 {
            assert_eq!(lim.len(), 10_001, "at {ms} ms: a key evicted in its window");
        }
    }
    assert_eq!(lim.len(), 1, "idle keys left after two windows");
}

/// Automatic eviction turned off, then on again, in the builder: the last
/// setting holds, and the limiter sweeps.
#[test]
fn auto_evict_set_twice_in_the_builder_keeps_the_last() {
    let slice = 100 * MS;
    let lim = builder(100, Duration::from_secs(1), 10)
        .auto_evict(false)
        .auto_evict(true)
        .build()
        .unwrap();
    assert!(lim.try_acquire_at(&1u64, ts(0), 1));
    for e in 1..=21u64 {
        assert!(lim.try_acquire_at(&2u64, ts(e * slice), 1));
    }
    assert_eq!(lim.len(), 1, "key 1, idle for two windows, is still held");
}

#[test]
fn reads_hold_no_key_and_idle_keys_go() {
    let lim = builder(3, Duration::from_millis(2), 2)
        .auto_evict(false)
        .build()
        .unwrap();
    assert_eq!(lim.available_at(&9u32, ts(0)), 3);
    assert_eq!(lim.retry_after_at(&9, ts(0), 4), None);
    assert!(lim.peek_at(&9, ts(0), 3).is_granted());
    assert!(lim.decide_at(&9, ts(0), 0).is_granted());
    assert!(!lim.try_acquire_at(&9, ts(0), 4));
    assert!(lim.is_empty());
    assert!(lim.try_acquire_at(&9, ts(0), 1));
    assert!(lim.try_acquire_at(&8, ts(MS), 1));
    assert_eq!(lim.evict_idle_at(ts(2 * MS)), 1); // 9's slice left the window
    assert_eq!(lim.len(), 1);
    assert_eq!(lim.available_at(&9, ts(2 * MS)), 3);
    assert_eq!(lim.evict_idle_at(ts(3 * MS)), 1);
    assert!(lim.is_empty());
}

#[test]
fn every_configuration_error() {
    let c = ManualClock::new;
    let s = Duration::from_secs(1);
    let single = |w: Duration, slices: usize| {
        KeyedLimiter::<u64>::builder(Quota::per(1, w).slices(slices))
            .clock(c())
            .build()
            .map(|_| ())
            .unwrap_err()
    };
    assert_eq!(single(Duration::ZERO, 1), ConfigError::ZeroWindow);
    assert_eq!(single(s, 0), ConfigError::ZeroSlices);
    assert_eq!(
        single(Duration::from_nanos(10), 3),
        ConfigError::UnevenSlices {
            window: Duration::from_nanos(10),
            slices: 3
        }
    );
    assert!(matches!(
        single(s, stripecount::window::MAX_SLICES + 1),
        ConfigError::TooManySlices { .. }
    ));
    let long = Duration::from_secs(u64::MAX);
    assert_eq!(single(long, 1), ConfigError::WindowTooLong { window: long });
    assert!(KeyedLimiter::<u64>::new(Quota::per(1, Duration::ZERO).slices(1)).is_err());
    let multi = |l: &[(u64, Duration, usize)]| {
        KeyedLimiter::<u64>::builder(quotas(l))
            .clock(c())
            .build()
            .map(|_| ())
            .unwrap_err()
    };
    assert_eq!(multi(&[]), ConfigError::NoLevels);
    assert!(matches!(multi(&[(1, s, 1); 9]), ConfigError::Invalid(_)));
    assert_eq!(
        multi(&[(1, s, 10), (1, Duration::from_millis(1150), 1)]),
        ConfigError::LevelSliceMismatch { level: 1 }
    );
    assert_eq!(multi(&[(1, s, 1), (1, s, 0)]), ConfigError::ZeroSlices);
    assert!(KeyedLimiter::<u64>::new(quotas(&[])).is_err());
}

#[test]
fn keys_moved_to_bigger_tables_keep_their_windows() {
    // 20k keys force every shard to rebuild several times (100 under
    // Miri: none); each key's first grant must survive the moves.
    const KEYS: u32 = sized(20_000, 100);
    let lim = builder(2, Duration::from_secs(1), 1).build().unwrap();
    for k in 0..KEYS {
        assert!(lim.try_acquire(&k, 2));
    }
    assert_eq!(lim.len(), KEYS as usize);
    for k in 0..KEYS {
        assert!(!lim.try_acquire(&k, 1), "key {k} lost its grant in a move");
    }
}
