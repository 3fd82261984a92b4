//! Walks over the per-key structures (`take_all`, `top`, `hot_keys`, and
//! `HotKeySketch`'s) visit what the structure held when they started, and
//! only that: not the keys their own callback adds (the walk would feed
//! itself and never end), not the keys the key type's own code adds while
//! the walk hashes it, not the keys other threads add meanwhile. Each
//! test checks exactly what was visited.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, KeyedWindows, Timestamp};

mod keyed_support;
use keyed_support::sized;

/// The windows of the walk's report: 4 slices of 1000 ns.
fn windows() -> KeyedWindows<u64, ManualClock> {
    KeyedWindows::builder(Duration::from_nanos(4000), 4)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// A callback that adds 200 new keys on each call: the walk takes the 10
/// keys held when it started, once each, and ends; the 2,000 keys the
/// callback added are all there for the next take. (The callback stops
/// adding after 50 calls, so that a walk that visits its adds fails the
/// assertion instead of growing without end, as it did: 10 keys became
/// millions of calls and gigabytes.)
#[test]
fn take_all_ends_when_its_callback_adds_keys() {
    let w = windows();
    for k in 0..10u64 {
        assert!(w.add_at(&k, Timestamp::ZERO, 1));
    }
    let mut next = 1000u64;
    let mut calls = 0;
    let mut seen = BTreeMap::new();
    w.take_all(|&k, start, c| {
        assert!(seen.insert(k, (start, c)).is_none(), "{k} visited twice");
        calls += 1;
        if calls <= 50 {
            for _ in 0..200 {
                assert!(w.add_at(&next, Timestamp::ZERO, 1));
                next += 1;
            }
        }
    });
    let want: BTreeMap<u64, (Timestamp, u64)> =
        (0..10).map(|k| (k, (Timestamp::ZERO, 1))).collect();
    assert_eq!(seen, want);
    assert_eq!(next, 1000 + 10 * 200);
    let mut later = BTreeSet::new();
    w.take_all(|&k, start, c| {
        assert_eq!((start, c), (Timestamp::ZERO, 1));
        assert!(later.insert(k));
    });
    assert_eq!(later, (1000..next).collect());
    assert!(w.top(1).is_empty());
}

/// Adds of the callback to slices that were not held when the walk
/// started (new slice maps) are not taken by it either, nor are adds to
/// keys it already took.
#[test]
fn take_all_leaves_new_slices_for_the_next_take() {
    let w = windows();
    for k in 0..100u64 {
        assert!(w.add_at(&k, Timestamp::from_nanos(1000), k + 1));
    }
    let mut seen = BTreeMap::new();
    w.take_all(|&k, start, c| {
        assert!(seen.insert(k, (start.as_nanos(), c)).is_none());
        // The key again (taken already), in this slice and in two new
        // ones, and a new key.
        for t in [1000, 2000, 3000] {
            assert!(w.add_at(&k, Timestamp::from_nanos(t), 1));
        }
        assert!(w.add_at(&(k + 1000), Timestamp::from_nanos(2000), 1));
    });
    let want: BTreeMap<u64, (u64, u64)> = (0..100).map(|k| (k, (1000, k + 1))).collect();
    assert_eq!(seen, want);
    let mut later = BTreeMap::new();
    w.take_all(|&k, start, c| {
        assert!(later.insert((k, start.as_nanos()), c).is_none());
    });
    let mut want = BTreeMap::new();
    for k in 0..100u64 {
        for t in [1000, 2000, 3000] {
            want.insert((k, t), 1);
        }
        want.insert((k + 1000, 2000), 1);
    }
    assert_eq!(later, want);
}

/// Keys another thread adds while the walk runs (here: while its first
/// callback waits for them) are not visited, in whichever shard they land.
#[test]
fn take_all_leaves_keys_other_threads_add_meanwhile() {
    let w = windows();
    let n = sized(500u64, 50);
    for k in 0..n {
        assert!(w.add_at(&k, Timestamp::ZERO, 2));
    }
    let mut seen = BTreeMap::new();
    thread::scope(|s| {
        let (go, started) = mpsc::channel::<()>();
        let (done, added) = mpsc::channel::<()>();
        let w = &w;
        s.spawn(move || {
            started.recv().unwrap();
            for k in 10_000..10_000 + n {
                assert!(w.add_at(&k, Timestamp::ZERO, 1));
            }
            done.send(()).unwrap();
        });
        let mut first = true;
        w.take_all(|&k, start, c| {
            if first {
                first = false;
                go.send(()).unwrap();
                added.recv().unwrap();
            }
            assert!(seen.insert(k, (start, c)).is_none());
        });
    });
    let want: BTreeMap<u64, (Timestamp, u64)> = (0..n).map(|k| (k, (Timestamp::ZERO, 2))).collect();
    assert_eq!(seen, want);
    let mut later = BTreeSet::new();
    w.take_all(|&k, _, c| {
        assert_eq!(c, 1);
        later.insert(k);
    });
    assert_eq!(later, (10_000..10_000 + n).collect());
}

thread_local! {
    /// What a [`Hooked`] key's `Hash` calls, while set (the walks' tests).
    static HOOK: RefCell<Option<Rc<dyn Fn()>>> = const { RefCell::new(None) };
}

/// A key whose `Hash` runs the thread's [`HOOK`] (unset while it runs, so
/// the hook's own adds hash plainly): the key type's code, which a walk
/// runs under no lock, adding keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Hooked(u64);

impl Hash for Hooked {
    fn hash<H: Hasher>(&self, state: &mut H) {
        if let Some(hook) = HOOK.with(|h| h.borrow_mut().take()) {
            hook();
            HOOK.with(|h| *h.borrow_mut() = Some(hook));
        }
        self.0.hash(state);
    }
}

/// Runs `f` with `hook` called by every [`Hooked`] hash on this thread.
fn hooked<R>(hook: Rc<dyn Fn()>, f: impl FnOnce() -> R) -> R {
    HOOK.with(|h| *h.borrow_mut() = Some(hook));
    let r = f();
    HOOK.with(|h| *h.borrow_mut() = None);
    r
}

/// A hook that calls `add` on each of 20 new keys (numbered from `base`
/// on), on each of its first `calls` calls (so that a walk that visits the
/// hook's keys ends, and fails the assertions).
fn adder(base: u64, add: impl Fn(Hooked) + 'static, calls: u64) -> Rc<dyn Fn()> {
    let made = Cell::new(base);
    Rc::new(move || {
        let c = made.get();
        if c < base + calls * 20 {
            for k in c..c + 20 {
                add(Hooked(k));
            }
            made.set(c + 20);
        }
    })
}

/// `top` hashes every key it reads (its sums are a map of keys) under no
/// lock: keys the key's `Hash` adds meanwhile are not among its results.
#[test]
fn top_leaves_out_keys_added_while_it_runs() {
    let w: Arc<KeyedWindows<Hooked, ManualClock>> = Arc::new(
        KeyedWindows::builder(Duration::from_nanos(4000), 4)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    for k in 0..50u64 {
        assert!(w.add_at(&Hooked(k), Timestamp::from_nanos(1000 * (k % 3)), k + 1));
    }
    let adds = Arc::clone(&w);
    let hook = adder(
        1000,
        move |k| assert!(adds.add_at(&k, Timestamp::from_nanos(2500), 1_000)),
        100,
    );
    let top = hooked(hook, || w.top_at(Timestamp::from_nanos(3000), usize::MAX));
    let want: Vec<(Hooked, u64)> = (0..50u64).rev().map(|k| (Hooked(k), k + 1)).collect();
    assert_eq!(top, want);
    // The hook's adds are held: 20 keys a call.
    let all = w.top_at(Timestamp::from_nanos(3000), usize::MAX);
    assert!(all.len() > 50 && all.iter().filter(|x| x.1 == 1_000).count() == all.len() - 50);
}

/// `hot_keys` likewise: keys made hot while it runs are not reported by
/// it (they are by the next call).
#[test]
fn hot_keys_leave_out_keys_added_while_they_run() {
    let d: Arc<HotKeyDetector<Hooked, ManualClock>> = Arc::new(
        HotKeyDetector::builder(Duration::from_nanos(4000), 4, 10)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    for k in 0..40u64 {
        // Keys 0..20 hot (10 or more), the others not.
        let n = if k < 20 { 10 + k } else { 5 };
        d.add_at(&Hooked(k), Timestamp::ZERO, n);
    }
    let adds = Arc::clone(&d);
    let hook = adder(
        1000,
        move |k| {
            adds.add_at(&k, Timestamp::ZERO, 50);
        },
        100,
    );
    let mut hot = hooked(hook, || d.hot_keys_at(Timestamp::ZERO));
    hot.sort();
    assert_eq!(hot, (0..20).map(Hooked).collect::<Vec<_>>());
    assert!(d.hot_keys_at(Timestamp::ZERO).len() > 20);
}

/// `HotKeySketch`'s reads walk its exact detector: the same.
#[test]
fn the_sketchs_reads_leave_out_keys_added_while_they_run() {
    let d: Arc<HotKeySketch<Hooked, ManualClock>> = Arc::new(
        HotKeySketch::builder(Duration::from_nanos(4000), 4, 40)
            .memory(1 << 20)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    // Past the doorkeeper: every add of a second slice is admitted once
    // the key reached the level in the first.
    for k in 0..30u64 {
        d.add_at(&Hooked(k), Timestamp::ZERO, 1_000);
        d.add_at(&Hooked(k), Timestamp::from_nanos(1000), 100);
    }
    let mut before = d.top_at(Timestamp::from_nanos(1000), usize::MAX);
    before.sort(); // ties in unspecified order
    assert_eq!(before.len(), 30);
    let adds = Arc::clone(&d);
    let hook = adder(
        1000,
        move |k| {
            adds.add_at(&k, Timestamp::ZERO, 1_000);
            adds.add_at(&k, Timestamp::from_nanos(1000), 1_000);
        },
        100,
    );
    let mut top = hooked(hook, || d.top_at(Timestamp::from_nanos(1000), usize::MAX));
    top.sort();
    assert_eq!(top, before);
    let mut hot_before = d.hot_keys_at(Timestamp::from_nanos(1000));
    hot_before.sort();
    assert!(hot_before.len() > 30, "the first hook's keys are hot");
    let adds = Arc::clone(&d);
    let hook = adder(
        100_000,
        move |k| {
            adds.add_at(&k, Timestamp::ZERO, 1_000);
            adds.add_at(&k, Timestamp::from_nanos(1000), 1_000);
        },
        100,
    );
    let mut hot = hooked(hook, || d.hot_keys_at(Timestamp::from_nanos(1000)));
    hot.sort();
    assert_eq!(hot, hot_before);
    assert!(d.hot_keys_at(Timestamp::from_nanos(1000)).len() > hot_before.len());
}

/// Random cases: keys in random slices; a callback that adds to keys
/// taken already, to keys not reached yet, to new keys and to new slices;
/// another thread adding new keys all along. Each walk visits every key
/// and slice held when it started once, never one its callback created,
/// and no count is lost or taken twice.
#[test]
fn walks_in_random_cases_visit_what_was_held_once_and_lose_nothing() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    for seed in 0..sized(40u64, 3) {
        let mut rng = StdRng::seed_from_u64(seed);
        let w = windows();
        let mut added = 0u64;
        let mut held = BTreeSet::new();
        // The other thread's keys are numbered apart from the callback's.
        for _ in 0..rng.random_range(1..sized(400, 40)) {
            let (k, t) = (
                rng.random_range(0..300u64),
                1000 * rng.random_range(0..4u64),
            );
            let n = rng.random_range(1..5);
            assert!(w.add_at(&k, Timestamp::from_nanos(t), n));
            added += n;
            held.insert((k, t));
        }
        // Entries stay in their slice's map once created (taken to zero).
        let mut ever = held.clone();
        let stop = AtomicBool::new(false);
        let other = AtomicU64::new(0);
        let mut taken = 0u64;
        thread::scope(|s| {
            let (w, stop, other) = (&w, &stop, &other);
            s.spawn(move || {
                let mut k = 1_000_000u64 + seed * 100_000;
                let end = k + sized(5_000, 200);
                while !stop.load(Ordering::Relaxed) && k < end {
                    assert!(w.add_at(&k, Timestamp::from_nanos(3000), 1));
                    other.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
            });
            for _ in 0..3 {
                let mut seen = BTreeSet::new();
                let mut created = BTreeSet::new();
                let mut next = BTreeSet::new();
                w.take_all(|&k, start, c| {
                    let at = (k, start.as_nanos());
                    assert!(seen.insert(at), "{at:?} visited twice");
                    assert!(!created.contains(&at), "{at:?}: created by the callback");
                    assert!(c > 0);
                    taken += c;
                    for _ in 0..rng.random_range(0..4) {
                        let k2 = match rng.random_range(0..3) {
                            // (Not the other thread's keys, whose entries
                            // the test does not track.)
                            0 if k < 1_000_000 => k,
                            1 => rng.random_range(0..300u64),
                            _ => rng.random_range(500_000..600_000u64),
                        };
                        let t2 = 1000 * rng.random_range(0..4u64);
                        // An entry never held is created now (not visited
                        // by this walk); one visited already keeps the add
                        // for the next walk.
                        if ever.insert((k2, t2)) {
                            created.insert((k2, t2));
                        }
                        if created.contains(&(k2, t2)) || seen.contains(&(k2, t2)) {
                            next.insert((k2, t2));
                        }
                        assert!(w.add_at(&k2, Timestamp::from_nanos(t2), 1));
                        added += 1;
                    }
                });
                assert!(
                    held.is_subset(&seen),
                    "a key held at the start was not visited"
                );
                held = next;
            }
            stop.store(true, Ordering::Relaxed);
        });
        w.take_all(|_, _, c| taken += c);
        assert_eq!(taken, added + other.load(Ordering::Relaxed), "seed {seed}");
    }
}
