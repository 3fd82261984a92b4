//! Walks over the per-key map (`src/map/walk.rs`): a walk visits the keys
//! every shard held at one instant, its start, each once, and no other,
//! while other threads insert keys and move shards to bigger tables.
//!
//! Invariants checked:
//! - a key held throughout is visited exactly once, also when its shard
//!   moves to a new table between the walk's mark and its visit (the key
//!   is found again in the new table);
//! - what a walk visits is what the map held at one instant: a thread that
//!   inserts a key into shard 0 and then one into shard 1 is never seen by
//!   a walk with the second key and without the first. (A walk that reads
//!   each shard when it reaches it, the design the marks replaced, sees
//!   the shard-1 key and misses the shard-0 one when both inserts land
//!   between its two visits: `expect_failure`.)
//!
//! Under loom the map has two shards and key `k` lives in shard `k % 2`
//! (`src/map/model.rs`); a shard's first table has room for 7 used slots.
//!
//! Mutations of the real code each model was checked against (each listed
//! model fails):
//! - `mark_all` marks each shard under its own lock, one after the other
//!   (no single instant): (a);
//! - `for_each_batch` reads the marked table whether or not the shard
//!   moved (no look-up again): (b) (a moved key is read in the table it
//!   left);
//! - `read_found` reads the value found without checking that its slot is
//!   still in the current table: (c) (a key that moved again between its
//!   lookup and the lock is read in the table it left).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_map::ModelMap;
use stripecount_loom_tests::{expect_failure, model};

/// Key 0 held before; a writer inserts 2 (shard 0), then 1 (shard 1); a
/// walk races it. Returns what the walk (`walk` or `walk_unmarked`)
/// visited.
fn race_two_inserts(unmarked: bool) {
    let m = Arc::new(ModelMap::new());
    {
        let g = m.pin();
        assert!(m.insert(0, &g));
    }
    let writer = {
        let m = m.clone();
        thread::spawn(move || {
            let g = m.pin();
            assert!(m.insert(2, &g));
            assert!(m.insert(1, &g));
        })
    };
    let walker = {
        let m = m.clone();
        thread::spawn(move || {
            if unmarked {
                m.walk_unmarked()
            } else {
                m.walk()
            }
        })
    };
    writer.join().unwrap();
    let mut seen = walker.join().unwrap();
    seen.sort_unstable();
    assert!(seen.contains(&0), "a key held throughout: {seen:?}");
    let mut dedup = seen.clone();
    dedup.dedup();
    assert_eq!(dedup, seen, "a key visited twice");
    assert!(
        !seen.contains(&1) || seen.contains(&2),
        "the walk saw key 1 without key 2, inserted before it: {seen:?}"
    );
}

/// (a) A walk racing two inserts into different shards sees the map at
/// one instant.
#[test]
fn a_walk_sees_the_keys_of_one_instant() {
    model(|| race_two_inserts(false));
}

/// The walk without marks does not.
#[test]
fn a_walk_without_marks_mixes_instants() {
    expect_failure("walk_unmarked", || race_two_inserts(true));
}

/// (b) Shard 0 full (7 keys, 0, 2, ..., 12): a writer's insert of 14 moves
/// them to a new table, then it inserts 1 (shard 1). A walk racing it
/// visits each of the 7 keys once (from whichever table holds it when the
/// walk reads it), and sees 1 only with 14.
#[test]
fn a_walk_finds_keys_that_moved_after_its_start() {
    model(|| {
        let m = Arc::new(ModelMap::new());
        {
            let g = m.pin();
            for k in (0..14).step_by(2) {
                assert!(m.insert(k, &g));
            }
        }
        let writer = {
            let m = m.clone();
            thread::spawn(move || {
                {
                    let g = m.pin();
                    assert!(m.insert(14, &g), "moves shard 0");
                    assert!(m.insert(1, &g));
                }
                m.collect();
            })
        };
        let walker = {
            let m = m.clone();
            thread::spawn(move || m.walk())
        };
        writer.join().unwrap();
        let mut seen = walker.join().unwrap();
        seen.sort_unstable();
        let held: Vec<u32> = (0..14).step_by(2).collect();
        let extra: Vec<u32> = seen.iter().copied().filter(|k| !held.contains(k)).collect();
        assert_eq!(
            seen.iter()
                .filter(|k| held.contains(k))
                .copied()
                .collect::<Vec<_>>(),
            held,
            "each key held throughout, once: {seen:?}"
        );
        assert!(
            extra.is_empty() || extra == [14] || extra == [1, 14],
            "only keys of one instant: {seen:?}"
        );
    });
}

/// (c) Shard 0 moved to a new table after a walk's mark (by the walking
/// thread itself, so that the walk looks its keys up again), and again by
/// another thread racing those lookups: a key that moves between its lookup
/// and the lock is looked up once more; each held key is read once, in its
/// live state.
#[test]
fn a_walk_follows_a_key_that_moves_twice() {
    model(|| {
        let m = Arc::new(ModelMap::new());
        {
            let g = m.pin();
            assert!(m.insert(0, &g));
            assert!(m.insert(2, &g));
        }
        let mover = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin();
                m.rebuild(0, &g);
            })
        };
        let walker = {
            let m = m.clone();
            thread::spawn(move || {
                m.walk_with(|| {
                    let g = m.pin();
                    m.rebuild(0, &g);
                })
            })
        };
        mover.join().unwrap();
        let mut seen = walker.join().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, [0, 2]);
    });
}
