//! The per-key map with the real collector behind its guards
//! (`src/map/model.rs`, `src/map/grow.rs`, `src/map/sweep.rs`,
//! `src/reclaim/`): a lock-free lookup never reads a table after it was
//! freed, whichever change of structure retired it (an insert's move to a
//! bigger table, a sweep that removes keys and rebuilds) and whichever
//! thread frees it (a collect, or another insert's `free_one`).
//!
//! Invariants checked:
//! - a table is freed only once no guard that could have loaded it is
//!   alive (the table's free takes its control words exclusively, and
//!   every key and slot value holds a loom cell that lookups read and the
//!   free writes: loom reports a free not ordered after a lookup's read;
//!   `src/map/model.rs`);
//! - a key present throughout a move is found by a lookup racing it;
//! - a removed key's slot stays readable by a lookup that found it until
//!   its table is freed;
//! - a thread's own insert (whose `free_one` frees a ready table) does not
//!   free a table its enclosing guard reached.
//!
//! Under loom the map has two shards, key `k` lives in shard `k % 2`, and
//! the collector collects on every retirement (`COLLECT_AT` is 1). A
//! shard's first table has one group (8 slots, room for 7 used); each
//! model fills it with one or two live keys and tombstones, so that the
//! next insert moves only those keys.
//!
//! Mutations of the real code each model was checked against; (a), (b)
//! and (c) are the three models below, in order, and each listed model
//! fails:
//! - `grow.rs` frees the old table at once (`drop(Box::from_raw(old))`)
//!   instead of `defer_free`: (a), (b), (c);
//! - `grow.rs` retires the old table right after storing the new
//!   `current`, before moving its keys and unlinking it: (a), (b), (c);
//! - `grow.rs` retires the old table after the move but before storing
//!   `old = null` (still reachable through `old`): (a), (b);
//! - `table/mod.rs`: `remove` drops the key as it makes the slot `TOMB`
//!   (a slot reused while lookups may compare its key): (b);
//! - `limbo.rs` makes an object ready at `r <= m` instead of `r < m`:
//!   (a), (b), (c);
//! - under loom, `Guard::pin` pins nothing: (a), (b), (c);
//! - `epoch.rs`: the pin reads `epoch` with `Relaxed`, the unpin stores
//!   with `Relaxed`, or a retirement bumps `epoch` with `Relaxed`: (a),
//!   (b), (c);
//! - `barrier.rs` (loom): the pin is a plain store (no light half), or the
//!   scan a plain load (no heavy half): (a), (b), (c).
//!
//! A free that loom orders before a lookup's loads, not after, makes the
//! lookup read freed memory: loom reports it while the memory still holds
//! the cells, and otherwise the lookup misreads (a key present throughout
//! is missed, a canary reads freed); either way the model fails.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_map::ModelMap;
use stripecount_loom_tests::model;

/// Fills the shard of `first` (its keys `first`, `first + 2`, ...) to a
/// one-group table of 7 used slots, the first `live` keys live and the
/// others removed (tombstones): the next insert into the shard moves the
/// live keys to a new table and retires this one.
fn full_shard(m: &ModelMap, first: u32, live: usize) {
    let g = m.pin();
    let keys: Vec<u32> = (0..7).map(|i| first + 2 * i).collect();
    for &k in &keys {
        assert!(m.insert(k, &g));
    }
    for &k in &keys[live..] {
        assert!(m.remove(k));
    }
}

/// (a) An insert moves shard 0 to a bigger table and retires the old one;
/// its thread then collects. A lookup of the moved key races all of it:
/// it finds the key (in either table) and reads it, and the old table is
/// freed only once no guard that reached it is alive.
#[test]
fn an_insert_moving_a_shard_never_frees_a_table_a_lookup_holds() {
    model(|| {
        let m = Arc::new(ModelMap::new());
        full_shard(&m, 2, 1);
        let writer = {
            let m = m.clone();
            thread::spawn(move || {
                {
                    let g = m.pin();
                    assert!(m.insert(16, &g), "a new key");
                }
                m.collect();
            })
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin();
                let v = m.get(2, &g).expect("a key present throughout");
                v.read();
                // A key removed before: a miss probes both tables while
                // the move has both linked.
                assert!(m.get(14, &g).is_none(), "a removed key");
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
        let g = m.pin();
        assert!(m.get(2, &g).is_some() && m.get(16, &g).is_some());
    });
}

/// (b) A sweep removes an idle key (its slot turns `TOMB`) and, because
/// another key of the shard is closed (`Value::must_move`), rebuilds the
/// shard under the same lock: the new table holds only the closed key,
/// and the old one, with the removed key's slot, is retired; the sweeping
/// thread then collects. A lookup of the removed key races it: it finds
/// the key or not, and a slot it found stays readable while its guard is.
#[test]
fn a_key_swept_out_stays_readable_until_its_table_is_freed() {
    model(|| {
        let m = Arc::new(ModelMap::new());
        full_shard(&m, 2, 2);
        m.close(2);
        let sweeper = {
            let m = m.clone();
            thread::spawn(move || {
                {
                    let g = m.pin();
                    assert_eq!(m.evict_idle(&g), 1, "key 4 is idle");
                }
                m.collect();
            })
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin();
                if let Some(v) = m.get(4, &g) {
                    v.read();
                }
            })
        };
        sweeper.join().unwrap();
        reader.join().unwrap();
        let g = m.pin();
        assert!(m.get(2, &g).is_some() && m.get(4, &g).is_none());
    });
}

/// (c) The collector's own path, no explicit collect: a writer's insert
/// moves shard 0 (retiring its table `T`), and its next insert moves
/// shard 1, whose retirement collects and may find `T` ready. A second
/// thread, holding a guard across a lookup of a shard-0 key and an insert
/// (whose `free_one` frees a ready table), reads the value it found
/// before and after that insert. A third thread looks the key up and
/// reads it. `T` is freed (by the second thread's `free_one`, or when the
/// map is dropped) only once no guard that reached it is alive.
#[test]
fn a_table_freed_by_another_inserts_free_one_was_out_of_every_guards_reach() {
    model(|| {
        let m = Arc::new(ModelMap::new());
        full_shard(&m, 2, 1);
        full_shard(&m, 3, 1);
        let writer = {
            let m = m.clone();
            thread::spawn(move || {
                for k in [16, 17] {
                    let g = m.pin();
                    assert!(m.insert(k, &g), "a new key");
                }
            })
        };
        let freer = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin();
                let v = m.get(2, &g).expect("a key present throughout");
                v.read();
                assert!(!m.insert(2, &g), "present");
                v.read();
            })
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin();
                m.get(2, &g).expect("a key present throughout").read();
            })
        };
        writer.join().unwrap();
        freer.join().unwrap();
        reader.join().unwrap();
    });
}
