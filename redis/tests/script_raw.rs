//! The flush script called directly, with stored values and batches this
//! test writes byte by byte: what its steady-state path stores (only the
//! newest count rewritten, slices that left the window dropped, a ring
//! moved to the slot of its newest slice's generation), how a slot is given
//! to a new generation, and that a malformed batch is refused before any
//! write. The node-level tests (`script_paths.rs`) cannot place a slice
//! older than the window inside a live key, plant a slot's generation, nor
//! send a malformed batch.

mod support;

use redis::Value;
use support::buckets::{bucket, stored_ring, sub_bucket, MARKER, SLOTS, SUB_BUCKETS};
use support::RedisServer;

const SLICES: u64 = 10;
/// Slices of 10 minutes; a run that meets a slice edge is redone.
const SLICE_MS: u64 = 600_000;
/// An epoch far in the future: the script files it in its current slice.
const LATER: u64 = 1 << 40;

/// A key, its stored ring, its delta's epoch, its ring after the batch and
/// its expiry after (Unix ms).
struct Case {
    key: &'static str,
    ring: Vec<u64>,
    delta_at: u64,
    after: Vec<u64>,
    expiry: u64,
}

fn case(key: &'static str, ring: Vec<u64>, delta_at: u64, after: Vec<u64>, expiry: u64) -> Case {
    Case {
        key,
        ring,
        delta_at,
        after,
        expiry,
    }
}

fn pack(words: &[u64]) -> Vec<u8> {
    words
        .iter()
        .flat_map(|&w| (w as f64).to_le_bytes())
        .collect()
}

fn unpack(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|w| f64::from_le_bytes(w.try_into().unwrap()) as u64)
        .collect()
}

/// The server's current epoch.
fn epoch(conn: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    (s * 1000 + us / 1000) / SLICE_MS
}

/// Runs the flush script on `keys` (their fields, by sub-bucket) with the
/// delta `blob`, as batch 1 of a fresh node.
fn run(
    conn: &mut redis::Connection,
    ns: &str,
    keys: &[&str],
    blob: &[u8],
) -> redis::RedisResult<Value> {
    let mut counts = [0u64; SUB_BUCKETS];
    for k in keys {
        counts[sub_bucket(k.as_bytes())] += 1;
    }
    assert!(
        keys.is_sorted_by_key(|k| sub_bucket(k.as_bytes())),
        "keys by sub-bucket"
    );
    run_counted(conn, ns, keys, blob, &pack(&counts))
}

/// [`run`] with the keys of each sub-bucket as `counts` (doubles) says.
fn run_counted(
    conn: &mut redis::Connection,
    ns: &str,
    keys: &[&str],
    blob: &[u8],
    counts: &[u8],
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(include_str!("../src/flush.lua"));
    let mut inv = script.prepare_invoke();
    for k in ["n:raw", "cfg", "hot", "hotv", "hotver", "bg"] {
        inv.key(format!("{ns}:{k}"));
    }
    for r in 0..SLOTS {
        for m in 0..SUB_BUCKETS {
            inv.key(bucket(ns, r, m));
        }
    }
    inv.arg(1) // sequence
        .arg(SLICES)
        .arg(SLICE_MS)
        .arg(0) // no hot detection: the steady-state path applies
        .arg(SLICES * SLICE_MS + SLICE_MS + 300_000)
        .arg(blob)
        .arg(format!("{SLICES}:{SLICE_MS}:b{SUB_BUCKETS}"))
        .arg(counts);
    for k in keys {
        inv.arg(*k);
    }
    inv.invoke(conn)
}

/// Slices a generation.
const G: u64 = SLICES / 2;

/// When a bucket of generation `g` expires (Unix ms): a generation after
/// its newest slice left the window.
fn expiry(g: u64) -> u64 {
    ((g + 2) * G - 1 + SLICES) * SLICE_MS
}

/// Stores `ring` as key `key`'s in the slot of its newest slice's
/// generation, which `gens` (the slots' generations, written) must hold.
fn plant(conn: &mut redis::Connection, ns: &str, key: &str, ring: &[u64], gens: &[i64; SLOTS]) {
    let g = ring[ring.len() - 2] / G;
    let r = g as usize % SLOTS;
    assert_eq!(gens[r], g as i64, "{key}: the slot holds its generation");
    let b = bucket(ns, r, sub_bucket(key.as_bytes()));
    redis::cmd("HSET")
        .arg(&b)
        .arg(key)
        .arg(pack(ring))
        .arg(MARKER)
        .arg([b'-'; 72].as_slice())
        .exec(conn)
        .unwrap();
    redis::cmd("PEXPIREAT")
        .arg(&b)
        .arg(expiry(g))
        .exec(conn)
        .unwrap();
}

/// Writes the slots' generations (-1: none).
fn set_generations(conn: &mut redis::Connection, ns: &str, gens: &[i64; SLOTS]) {
    let words: Vec<u8> = gens
        .iter()
        .flat_map(|&g| (g as f64).to_le_bytes())
        .collect();
    redis::cmd("SET")
        .arg(format!("{ns}:bg"))
        .arg(words)
        .exec(conn)
        .unwrap();
}

/// The generations of slots holding a live generation at epoch `cur`:
/// the current one's and the one before.
fn live_generations(cur: u64) -> [i64; SLOTS] {
    let mut gens = [-1; SLOTS];
    for g in [cur / G - 1, cur / G] {
        gens[g as usize % SLOTS] = g as i64;
    }
    gens
}

fn stored(conn: &mut redis::Connection, ns: &str, key: &str) -> (Vec<u64>, i64) {
    let s = stored_ring(conn, ns, key).unwrap_or_else(|| panic!("{key} is not stored"));
    let at: i64 = redis::cmd("PEXPIRETIME")
        .arg(&s.bucket)
        .query(conn)
        .unwrap();
    (unpack(&s.ring), at)
}

#[test]
fn the_steady_state_write_rewrites_the_newest_count_and_drops_old_slices() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    for attempt in 0..5 {
        let ns = format!("raw{attempt}");
        let cur = epoch(&mut conn);
        let deadline = expiry(cur / G);
        let mut cases = [
            // One slice, the delta into it (24 bytes: one unpack).
            case("one", vec![0, cur, 7], LATER, vec![0, cur, 8], deadline),
            // Two slices, the delta into the newest.
            case(
                "two",
                vec![0, cur - 3, 2, cur, 7],
                cur,
                vec![0, cur - 3, 2, cur, 8],
                deadline,
            ),
            // The oldest slice left the window (floor = cur - 10): dropped
            // by this write, the expiry kept (the newest did not move).
            case(
                "old",
                vec![0, cur - 12, 5, cur - 3, 2, cur, 7],
                LATER,
                vec![0, cur - 3, 2, cur, 8],
                deadline,
            ),
            // The delta into an older slice than the newest.
            case(
                "mid",
                vec![0, cur - 3, 2, cur, 7],
                cur - 3,
                vec![0, cur - 3, 3, cur, 7],
                deadline,
            ),
            // The delta opens a new slice (of this generation or, once in
            // five, of the next).
            case(
                "new",
                vec![0, cur - 1, 4],
                cur,
                vec![0, cur - 1, 4, cur, 1],
                deadline,
            ),
            // The delta opens a slice of the next generation: the ring
            // moves to that generation's slot.
            case(
                "moved",
                vec![0, cur - G, 4],
                cur,
                vec![0, cur - G, 4, cur, 1],
                deadline,
            ),
        ];
        cases.sort_by_key(|c| sub_bucket(c.key.as_bytes()));
        let gens = live_generations(cur);
        set_generations(&mut conn, &ns, &gens);
        let keys: Vec<&str> = cases.iter().map(|c| c.key).collect();
        let mut deltas = Vec::new();
        for c in &cases {
            plant(&mut conn, &ns, c.key, &c.ring, &gens);
            deltas.extend([1, c.delta_at, 1]);
        }
        let reply = run(&mut conn, &ns, &keys, &pack(&deltas)).unwrap();
        if epoch(&mut conn) != cur {
            continue; // a slice edge passed: the expectations are off
        }
        let Value::Array(a) = reply else {
            panic!("not an array: {reply:?}")
        };
        assert_eq!(a.len(), 8);
        assert_eq!(a[7], Value::Int(-1), "no record before");
        assert_eq!(a[0], Value::Int(0), "applied, not a replay");
        assert_eq!(
            a[3],
            Value::Int(0),
            "nothing dropped: the old slice held no delta"
        );
        let Value::BulkString(rings) = &a[4] else {
            panic!("rings: {:?}", a[4])
        };
        let mut want_rings = Vec::new();
        for c in &cases {
            let got = stored(&mut conn, &ns, c.key);
            assert_eq!(got, (c.after.clone(), c.expiry as i64), "{}", c.key);
            want_rings.push((c.after.len() as u64 - 1) / 2);
            want_rings.extend(&c.after);
        }
        assert_eq!(unpack(rings), want_rings);
        // Moved: no copy left in the previous generation's slot.
        let prev = bucket(&ns, (cur / G - 1) as usize % SLOTS, sub_bucket(b"moved"));
        let left: bool = redis::cmd("HEXISTS")
            .arg(&prev)
            .arg("moved")
            .query(&mut conn)
            .unwrap();
        assert!(!left, "a copy left in {prev}");
        return;
    }
    panic!("five runs met a slice edge");
}

#[test]
fn a_malformed_batch_is_refused_before_any_write() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let e = epoch(&mut conn);
    let cases: [(&str, Vec<u8>); 5] = [
        // As long as two one-delta keys (3 doubles each) but counts 2 and 0.
        ("2 and 0", pack(&[2, e, 1, e - 1, 1, 0])),
        // As long as two one-delta keys, the second claims 3 deltas.
        ("1 and 3", pack(&[1, e, 1, 3, e, 1])),
        // Two deltas for the first key, the second key's cut short.
        ("short", pack(&[2, e, 1, e - 1, 1, 1, e])),
        // A count beyond the window's slices (two per slice at most).
        ("too many", pack(&[21, e, 1, 1, e, 1, 0])),
        // Not a whole number of doubles.
        ("ragged", pack(&[1, e, 1, 1, e, 1])[..47].to_vec()),
    ];
    let refused = |conn: &mut redis::Connection, what: &str, r: redis::RedisResult<Value>| {
        let err = r.unwrap_err();
        assert!(err.to_string().contains("SBLOB"), "{what}: {err}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("bad:*").query(conn).unwrap();
        assert!(keys.is_empty(), "{what}: wrote {keys:?}");
    };
    // "b" is in sub-bucket 5, "a" in 12.
    for (what, blob) in cases {
        let r = run(&mut conn, "bad", &["b", "a"], &blob);
        refused(&mut conn, what, r);
    }
    // Sub-bucket counts that are not the keys': more, fewer, negative, not
    // one a sub-bucket.
    let good = pack(&[1, e, 1, 1, e, 1]);
    let mut counts = vec![0u64; SUB_BUCKETS];
    counts[5] = 1;
    counts[12] = 1;
    for (what, bad) in [
        ("three", (5, 2u64)),
        ("one", (12, 0)),
        ("negative", (12, u64::MAX)),
    ] {
        let mut c = counts.clone();
        c[bad.0] = bad.1;
        let words: Vec<u8> = c
            .iter()
            .flat_map(|&n| if n == u64::MAX { -1.0f64 } else { n as f64 }.to_le_bytes())
            .collect();
        let r = run_counted(&mut conn, "bad", &["b", "a"], &good, &words);
        refused(&mut conn, what, r);
    }
    let short = pack(&counts)[..8 * (SUB_BUCKETS - 1)].to_vec();
    let r = run_counted(&mut conn, "bad", &["b", "a"], &good, &short);
    refused(&mut conn, "15 sub-buckets", r);
    // The same keys with a well-formed batch: applied.
    run(
        &mut conn,
        "bad",
        &["b", "a"],
        &pack(&[1, e, 1, 2, e - 1, 1, e, 2]),
    )
    .unwrap();
    assert_eq!(stored(&mut conn, "bad", "b").0, vec![0, e, 1]);
    assert_eq!(stored(&mut conn, "bad", "a").0, vec![0, e - 1, 1, e, 2]);
}

#[test]
fn a_slot_is_cleared_once_its_generation_is_dead_and_given_to_a_new_one() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    for attempt in 0..5 {
        let ns = format!("slots{attempt}");
        let cur = epoch(&mut conn);
        let gc = cur / G;
        // The current generation's slot holds one four back and the next
        // one's one three back (both dead: their newest slices left the
        // window before this generation began), each with a ring; the
        // previous generation's slot holds a later one (a server whose
        // clock stepped back by more than a window).
        let mut gens = [-1i64; SLOTS];
        let slot = |g: u64| g as usize % SLOTS;
        let (rc, rn, rp) = (slot(gc), slot(gc + 1), slot(gc - 1));
        gens[rc] = gc as i64 - 4;
        gens[rn] = gc as i64 - 3;
        gens[rp] = gc as i64 + 3;
        set_generations(&mut conn, &ns, &gens);
        let stale = bucket(&ns, rc, sub_bucket(b"stale"));
        let idle = bucket(&ns, rn, sub_bucket(b"idle"));
        // Written without `plant`'s expiry: the batch, not an expiry, must
        // delete them (the stale generation's is already past).
        for (b, k, g) in [(&stale, "stale", gc - 4), (&idle, "idle", gc - 3)] {
            redis::cmd("HSET")
                .arg(b)
                .arg(k)
                .arg(pack(&[0, g * G, 9]))
                .exec(&mut conn)
                .unwrap();
        }
        // "late" (sub-bucket 1): 3 into a slice of the previous
        // generation, still in the window; "fresh" (15): 1 now.
        let reply = run(
            &mut conn,
            &ns,
            &["late", "fresh"],
            &pack(&[1, cur - G, 3, 1, cur, 1]),
        )
        .unwrap();
        if epoch(&mut conn) != cur {
            continue; // a slice edge passed: the expectations are off
        }
        let Value::Array(a) = reply else {
            panic!("not an array: {reply:?}")
        };
        // No slot takes "late": its count is dropped, and reported.
        assert_eq!(a[3], Value::Int(3));
        assert!(stored_ring(&mut conn, &ns, "late").is_none());
        // Both dead slots were cleared; "fresh" took the current
        // generation's.
        let s = stored_ring(&mut conn, &ns, "fresh").expect("fresh is stored");
        assert_eq!(s.generation, gc as i64);
        assert_eq!(unpack(&s.ring), vec![0, cur, 1]);
        for b in [&stale, &idle] {
            let exists: bool = redis::cmd("EXISTS").arg(b).query(&mut conn).unwrap();
            assert!(!exists, "{b} was not deleted");
        }
        let mut want = gens;
        want[rc] = gc as i64;
        want[rn] = -1;
        assert_eq!(support::buckets::generations(&mut conn, &ns), want);
        // The slots' generations last as long as the latest one's buckets.
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(format!("{ns}:bg"))
            .query(&mut conn)
            .unwrap();
        assert_eq!(at, expiry(gc + 3) as i64);
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(&s.bucket)
            .query(&mut conn)
            .unwrap();
        assert_eq!(at, expiry(gc) as i64);
        return;
    }
    panic!("five runs met a slice edge");
}
