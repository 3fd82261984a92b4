//! The flush script called directly, with stored values and batches this
//! test writes byte by byte: what its steady-state path stores (only the
//! newest count rewritten, slices that left the window dropped, the expiry
//! kept) and that a malformed batch is refused before any write. The
//! node-level tests (`script_paths.rs`) cannot place a slice older than the
//! window inside a live key, nor send a malformed batch.

mod support;

use redis::Value;
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

/// Runs the flush script on `keys` (names after `ns:w:`) with the delta
/// `blob`, as batch 1 of a fresh node.
fn run(
    conn: &mut redis::Connection,
    ns: &str,
    keys: &[&str],
    blob: &[u8],
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(include_str!("../src/flush.lua"));
    let mut inv = script.prepare_invoke();
    for k in ["n:raw", "cfg", "hot", "hotv", "hotver"] {
        inv.key(format!("{ns}:{k}"));
    }
    for k in keys {
        inv.key(format!("{ns}:w:{k}"));
    }
    inv.arg(1) // sequence
        .arg(SLICES)
        .arg(SLICE_MS)
        .arg(0) // no hot detection: the steady-state path applies
        .arg(SLICES * SLICE_MS + SLICE_MS + 300_000)
        .arg(blob)
        .arg(format!("{SLICES}:{SLICE_MS}"))
        .arg(ns.len() + 3);
    inv.invoke(conn)
}

fn stored(conn: &mut redis::Connection, ns: &str, key: &str) -> (Vec<u64>, i64) {
    let k = format!("{ns}:w:{key}");
    let v: Vec<u8> = redis::cmd("GET").arg(&k).query(conn).unwrap();
    let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(conn).unwrap();
    (unpack(&v), at)
}

#[test]
fn the_steady_state_write_rewrites_the_newest_count_and_drops_old_slices() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    for attempt in 0..5 {
        let ns = format!("raw{attempt}");
        let cur = epoch(&mut conn);
        let deadline = (cur + SLICES) * SLICE_MS;
        let cases = [
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
            // The delta opens a new slice: the expiry moves with it.
            case(
                "new",
                vec![0, cur - 1, 4],
                cur,
                vec![0, cur - 1, 4, cur, 1],
                deadline,
            ),
        ];
        let keys: Vec<&str> = cases.iter().map(|c| c.key).collect();
        let mut deltas = Vec::new();
        for c in &cases {
            let newest = c.ring[c.ring.len() - 2];
            redis::cmd("SET")
                .arg(format!("{ns}:w:{}", c.key))
                .arg(pack(&c.ring))
                .arg("PXAT")
                .arg((newest + SLICES) * SLICE_MS)
                .exec(&mut conn)
                .unwrap();
            deltas.extend([1, c.delta_at, 1]);
        }
        let reply = run(&mut conn, &ns, &keys, &pack(&deltas)).unwrap();
        if epoch(&mut conn) != cur {
            continue; // a slice edge passed: the expectations are off
        }
        let Value::Array(a) = reply else {
            panic!("not an array: {reply:?}")
        };
        assert_eq!(a.len(), 7);
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
    for (what, blob) in cases {
        let err = run(&mut conn, "bad", &["a", "b"], &blob).unwrap_err();
        assert!(err.to_string().contains("SBLOB"), "{what}: {err}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("bad:*").query(&mut conn).unwrap();
        assert!(keys.is_empty(), "{what}: wrote {keys:?}");
    }
    // The same keys with a well-formed batch: applied.
    run(
        &mut conn,
        "bad",
        &["a", "b"],
        &pack(&[1, e, 1, 2, e - 1, 1, e, 2]),
    )
    .unwrap();
    assert_eq!(stored(&mut conn, "bad", "a").0, vec![0, e, 1]);
    assert_eq!(stored(&mut conn, "bad", "b").0, vec![0, e - 1, 1, e, 2]);
}
