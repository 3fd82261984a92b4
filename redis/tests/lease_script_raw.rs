//! The lease script called directly, with requests this test writes
//! argument by argument: what one request leases of each key (a new key, a
//! key with room, a key with none, a slice that left the window), what it
//! stores and where (the buckets of `src/lease/layout.rs`), its replay,
//! and that a malformed request is refused before any write. The
//! node-level tests (`lease*.rs`) cannot send a malformed request nor
//! plant a key's slices.

mod support;

use redis::Value;
use support::RedisServer;

/// Slices of 10 minutes; a run that meets a slice edge is redone.
const SLICE_MS: u64 = 600_000;
const SLICES: u64 = 4;
const LIMIT: u64 = 100;
/// Slices a generation: half the slices judged, rounded up.
const G: u64 = SLICES.div_ceil(2);

/// The needs and wants as the node writes them: little-endian doubles.
fn asks(pairs: &[(u64, u64)]) -> Vec<u8> {
    pairs
        .iter()
        .flat_map(|&(need, want)| [need as f64, want as f64])
        .flat_map(f64::to_le_bytes)
        .collect()
}

fn epoch(conn: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    (s * 1000 + us / 1000) / SLICE_MS
}

/// Request `seq` of node "n" leasing `keys` with `packed` asks (`m` as
/// said, for the malformed cases) and the `returns` (key, slice, permits).
fn run(
    conn: &mut redis::Connection,
    seq: u64,
    keys: &[&str],
    m: i64,
    packed: &[u8],
    returns: &[(&str, u64, u64)],
) -> redis::RedisResult<Value> {
    let fixed = [
        seq.to_string(),
        SLICES.to_string(),
        SLICE_MS.to_string(),
        LIMIT.to_string(),
        (SLICES * SLICE_MS + SLICE_MS + 300_000).to_string(),
    ];
    invoke(conn, &fixed, keys, m, packed, returns)
}

/// [`run`] with its first five arguments (sequence, slices judged, slice
/// length, limit, record lifetime) as given.
fn invoke(
    conn: &mut redis::Connection,
    fixed: &[String; 5],
    keys: &[&str],
    m: i64,
    packed: &[u8],
    returns: &[(&str, u64, u64)],
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(include_str!("../src/lease/lease.lua"));
    let mut inv = script.prepare_invoke();
    inv.key("raw:ln:n").key("raw:lcfg").key("raw:lg");
    for r in 0..4 {
        inv.key(format!("raw:lb:{r}"));
    }
    for a in fixed {
        inv.arg(a);
    }
    inv.arg(format!("{SLICES}:{SLICE_MS}:{LIMIT}:b"))
        .arg(m)
        .arg(packed);
    for k in keys {
        inv.arg(*k);
    }
    for (k, e, n) in returns {
        inv.arg(*k).arg(*e).arg(*n);
    }
    inv.invoke(conn)
}

/// The generation each bucket slot holds (-1: none), as `raw:lg` keeps it.
fn gens(conn: &mut redis::Connection) -> [f64; 4] {
    let g: Option<Vec<u8>> = redis::cmd("GET").arg("raw:lg").query(conn).unwrap();
    match g {
        Some(b) => {
            std::array::from_fn(|r| f64::from_le_bytes(b[8 * r..8 * r + 8].try_into().unwrap()))
        }
        None => [-1.0; 4],
    }
}

/// Plants `key`'s ring `slices` (slice, permits) where the script keeps it:
/// in the slot of its newest slice's generation, given to that generation
/// (a bucket given a generation has the marker and that generation's
/// expiry, as the script's first write of a slot leaves it).
fn plant(conn: &mut redis::Connection, key: &str, slices: &[(u64, u64)]) {
    let newest = slices.iter().map(|s| s.0).max().unwrap();
    let g = newest / G;
    let ring: Vec<u8> = slices
        .iter()
        .flat_map(|&(e, n)| [e as f64, n as f64])
        .flat_map(f64::to_le_bytes)
        .collect();
    let _: () = redis::cmd("HSET")
        .arg(format!("raw:lb:{}", g % 4))
        .arg(key)
        .arg(ring)
        .query(conn)
        .unwrap();
    let mut gs = gens(conn);
    if gs[(g % 4) as usize] != g as f64 {
        let bucket = format!("raw:lb:{}", g % 4);
        let _: () = redis::cmd("HSET")
            .arg(&bucket)
            .arg(b"\xff")
            .arg("-".repeat(72))
            .query(conn)
            .unwrap();
        let _: () = redis::cmd("PEXPIREAT")
            .arg(&bucket)
            .arg(expiry(g))
            .query(conn)
            .unwrap();
    }
    gs[(g % 4) as usize] = g as f64;
    let b: Vec<u8> = gs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let _: () = redis::cmd("SET").arg("raw:lg").arg(b).query(conn).unwrap();
}

/// The slot whose bucket holds `key`'s ring (at most one does).
fn slot_of(conn: &mut redis::Connection, key: &str) -> Option<u64> {
    let held: Vec<u64> = (0..4)
        .filter(|r| {
            redis::cmd("HEXISTS")
                .arg(format!("raw:lb:{r}"))
                .arg(key)
                .query::<bool>(conn)
                .unwrap()
        })
        .collect();
    assert!(held.len() <= 1, "{key} in slots {held:?}");
    held.first().copied()
}

/// A reply as numbers, each key's grant and retry time in its place: the
/// header (replayed, slice, us left, server seconds and microseconds),
/// then per key `granted, retry` (-1: none). On the wire the grants are
/// one string of little-endian doubles and a retry comes as the key's
/// index and its time, after them, only for a refused key that has one.
fn ints(v: &Value) -> Vec<i64> {
    let Value::Array(a) = v else {
        panic!("not an array: {v:?}")
    };
    let num = |x: &Value| match x {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
        other => panic!("not a number: {other:?}"),
    };
    let mut out: Vec<i64> = a[..5].iter().map(num).collect();
    let Value::BulkString(grants) = &a[5] else {
        panic!("the grants are not a string: {:?}", a[5])
    };
    assert_eq!(grants.len() % 8, 0, "{grants:?}");
    for g in grants.chunks_exact(8) {
        let g = f64::from_le_bytes(g.try_into().unwrap());
        assert_eq!(g.fract(), 0.0);
        out.extend([g as i64, -1]);
    }
    let pairs = &a[6..];
    assert_eq!(pairs.len() % 2, 0, "{pairs:?}");
    for p in pairs.chunks_exact(2) {
        let (i, retry) = (num(&p[0]) as usize, num(&p[1]));
        assert!(i >= 1 && 5 + 2 * i <= out.len(), "retry of key {i}");
        assert_eq!(out[5 + 2 * (i - 1)], 0, "a retry for a granted key");
        assert!(retry > 0);
        out[5 + 2 * (i - 1) + 1] = retry;
    }
    out
}

/// `key`'s ring: its (slice, permits), in slice order.
fn fields(conn: &mut redis::Connection, key: &str) -> Vec<(u64, u64)> {
    let Some(r) = slot_of(conn, key) else {
        return Vec::new();
    };
    let ring: Vec<u8> = redis::cmd("HGET")
        .arg(format!("raw:lb:{r}"))
        .arg(key)
        .query(conn)
        .unwrap();
    assert_eq!(ring.len() % 16, 0, "{key}: {ring:?}");
    let d = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap()) as u64;
    let mut f: Vec<(u64, u64)> = ring
        .chunks_exact(16)
        .map(|p| (d(&p[..8]), d(&p[8..])))
        .collect();
    f.sort_unstable();
    f
}

/// When slot `r`'s bucket expires (Unix ms).
fn expires(conn: &mut redis::Connection, r: u64) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(format!("raw:lb:{r}"))
        .query(conn)
        .unwrap()
}

/// When a bucket of generation `g` expires: a generation after the newest
/// slice it can hold left the window.
fn expiry(g: u64) -> i64 {
    (((g + 2) * G - 1 + SLICES) * SLICE_MS) as i64
}

#[test]
fn one_request_leases_each_key_by_its_room_and_replays_the_same() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    loop {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let e = epoch(&mut conn);
        let g = e / G;
        // "full": 90 leased in this slice; "old": 100 in a slice that left
        // the window (dropped) and 10 three slices ago; "new": nothing;
        // "full2": 100 in the last two slices; "dead": in a generation
        // older than the window, whose bucket goes.
        plant(&mut conn, "full", &[(e, 90)]);
        plant(&mut conn, "old", &[(e - SLICES, 100), (e - 3, 10)]);
        plant(&mut conn, "full2", &[(e - 2, 60), (e - 1, 40)]);
        plant(&mut conn, "dead", &[((g - 3) * G, 7)]);
        let keys = ["new", "full", "old", "full2"];
        let packed = asks(&[(1, 8), (20, 20), (3, 500), (1, 1)]);
        let reply = ints(&run(&mut conn, 1, &keys, 4, &packed, &[]).unwrap());
        if epoch(&mut conn) != e {
            continue; // a slice edge fell inside the run
        }
        assert_eq!(reply[..2], [0, e as i64]);
        let left = reply[2];
        assert!(left > 0 && left <= (SLICE_MS * 1000) as i64, "{left}");
        // new: 8 of 100 (want, below half the room); full: 20 do not fit
        // in 10, refused until its slice leaves the window (SLICES slices
        // on), which is `left` plus SLICES - 1 whole slices; old: the 100
        // left the window, 90 of room, 45 (half) granted; full2: no room,
        // refused until its oldest slice (e - 2) leaves.
        let slice_us = (SLICE_MS * 1000) as i64;
        assert_eq!(
            reply[5..],
            [
                8,
                -1,
                0,
                left + (SLICES as i64 - 1) * slice_us,
                45,
                -1,
                0,
                left + slice_us
            ]
        );
        assert_eq!(fields(&mut conn, "new"), [(e, 8)]);
        assert_eq!(fields(&mut conn, "full"), [(e, 90)]);
        // The slice that left the window is dropped from the ring, which
        // moves to this generation's slot.
        assert_eq!(fields(&mut conn, "old"), [(e - 3, 10), (e, 45)]);
        for k in ["new", "full", "old"] {
            assert_eq!(slot_of(&mut conn, k), Some(g % 4), "{k}");
        }
        assert_eq!(fields(&mut conn, "full2"), [(e - 2, 60), (e - 1, 40)]);
        // The dead generation's bucket is deleted and its slot freed.
        assert_eq!(slot_of(&mut conn, "dead"), None);
        assert_eq!(gens(&mut conn)[((g + 1) % 4) as usize], -1.0);
        assert_eq!(gens(&mut conn)[(g % 4) as usize], g as f64);
        assert_eq!(expires(&mut conn, g % 4), expiry(g));
        // The same request again: the stored answer, nothing changed.
        let again = ints(&run(&mut conn, 1, &keys, 4, &packed, &[]).unwrap());
        assert_eq!(again[..2], [1, e as i64]);
        assert_eq!(again[5..], [8, -1, 0, -1, 45, -1, 0, -1]);
        assert_eq!(fields(&mut conn, "new"), [(e, 8)]);
        assert_eq!(fields(&mut conn, "old"), [(e - 3, 10), (e, 45)]);
        // The next request returns 5 of "new" and leases nothing.
        let r = ints(&run(&mut conn, 2, &[], 0, &[], &[("new", e, 5)]).unwrap());
        assert_eq!(r.len(), 5);
        assert_eq!(fields(&mut conn, "new"), [(e, 3)]);
        // A return of everything a ring holds deletes its field.
        let r = ints(&run(&mut conn, 3, &[], 0, &[], &[("full", e, 90)]).unwrap());
        assert_eq!(r.len(), 5);
        assert_eq!(slot_of(&mut conn, "full"), None);
        // Leased again: "new" in the slice it has; "older", planted in the
        // last slice of the previous generation, gets this slice too and
        // moves to this generation's slot.
        plant(&mut conn, "older", &[(g * G - 1, 5)]);
        let two = asks(&[(1, 1), (2, 2)]);
        let r = ints(&run(&mut conn, 4, &["new", "older"], 2, &two, &[]).unwrap());
        if epoch(&mut conn) != e {
            continue;
        }
        assert_eq!(r[5..], [1, -1, 2, -1]);
        assert_eq!(fields(&mut conn, "new"), [(e, 4)]);
        assert_eq!(fields(&mut conn, "older"), [(g * G - 1, 5), (e, 2)]);
        assert_eq!(slot_of(&mut conn, "older"), Some(g % 4));
        assert_eq!(expires(&mut conn, g % 4), expiry(g));
        return;
    }
}

#[test]
fn a_malformed_request_is_refused_before_any_write() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let two = asks(&[(1, 1), (1, 1)]);
    let cases: [(&str, i64, Vec<u8>); 4] = [
        ("asks for one key of two", 2, two[..16].to_vec()),
        ("asks for three keys of two", 2, asks(&[(1, 1); 3])),
        ("ragged asks", 2, two[..31].to_vec()),
        ("a negative count", -1, two.clone()),
    ];
    for (what, m, packed) in cases {
        let err = run(&mut conn, 1, &["a", "b"], m, &packed, &[]).unwrap_err();
        assert!(err.to_string().contains("SARGS"), "{what}: {err}");
        let keys: Vec<String> = redis::cmd("KEYS").arg("raw:*").query(&mut conn).unwrap();
        assert!(keys.is_empty(), "{what}: wrote {keys:?}");
    }
    // The same keys, well formed: applied, in a bucket the script gives
    // its marker (a hash table, not a listpack) and its generation's
    // expiry.
    let r = ints(&run(&mut conn, 1, &["a", "b"], 2, &two, &[]).unwrap());
    assert_eq!(r[5..], [1, -1, 1, -1]);
    let g = r[1] as u64 / G;
    assert_eq!(slot_of(&mut conn, "a"), Some(g % 4));
    assert_eq!(gens(&mut conn)[(g % 4) as usize], g as f64);
    let enc: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(format!("raw:lb:{}", g % 4))
        .query(&mut conn)
        .unwrap();
    assert_eq!(enc, "hashtable");
    // The marker's field is one no key's field can be (layout.rs).
    let marker: bool = redis::cmd("HEXISTS")
        .arg(format!("raw:lb:{}", g % 4))
        .arg(b"\xff")
        .query(&mut conn)
        .unwrap();
    assert!(marker);
    assert_eq!(expires(&mut conn, g % 4), expiry(g));
    // The config lasts as long as the newest bucket.
    let cfg_at: i64 = redis::cmd("PEXPIRETIME")
        .arg("raw:lcfg")
        .query(&mut conn)
        .unwrap();
    assert_eq!(cfg_at, expiry(g));
}

#[test]
fn a_request_with_a_setting_not_a_number_is_refused_before_any_write() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let e = epoch(&mut conn);
    let ok = [
        "1".to_owned(),
        SLICES.to_string(),
        SLICE_MS.to_string(),
        LIMIT.to_string(),
        (SLICES * SLICE_MS + SLICE_MS + 300_000).to_string(),
    ];
    // A key to return to (a write before the leases, were the request
    // applied) and one to lease.
    plant(&mut conn, "back", &[(e, 10)]);
    let planted = {
        let mut k: Vec<String> = redis::cmd("KEYS").arg("raw:*").query(&mut conn).unwrap();
        k.sort();
        k
    };
    let names = [
        "sequence",
        "slices",
        "slice length",
        "limit",
        "record lifetime",
    ];
    for (i, what) in names.iter().enumerate() {
        let mut fixed = ok.clone();
        fixed[i] = "x".to_owned();
        let err = invoke(
            &mut conn,
            &fixed,
            &["a"],
            1,
            &asks(&[(1, 1)]),
            &[("back", e, 4)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("SARGS"), "{what}: {err}");
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("raw:*").query(&mut conn).unwrap();
        keys.sort();
        assert_eq!(keys, planted, "{what}: wrote");
        assert_eq!(fields(&mut conn, "back"), [(e, 10)], "{what}: returned");
    }
    // Well formed: applied (unless a slice edge fell in between: then the
    // return is of a slice still in the window, applied as well).
    let r = ints(
        &invoke(
            &mut conn,
            &ok,
            &["a"],
            1,
            &asks(&[(1, 1)]),
            &[("back", e, 4)],
        )
        .unwrap(),
    );
    assert_eq!(r[5..], [1, -1]);
    assert_eq!(fields(&mut conn, "back"), [(e, 6)]);
}

/// A ring written by a server whose clock was ahead (a generation past
/// this server's next) still counts: its key is refused, with the time
/// its slice leaves the window, and its bucket keeps that generation.
#[test]
fn a_ring_ahead_of_the_servers_clock_still_counts() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    loop {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let e = epoch(&mut conn);
        let g = e / G;
        let ahead = (g + 2) * G;
        plant(&mut conn, "ahead", &[(ahead, LIMIT)]);
        let packed = asks(&[(1, 1), (1, 1)]);
        let r = ints(&run(&mut conn, 1, &["ahead", "new"], 2, &packed, &[]).unwrap());
        if epoch(&mut conn) != e {
            continue;
        }
        let left = r[2];
        let slice_us = (SLICE_MS * 1000) as i64;
        let retry = left + ((ahead - e) as i64 + SLICES as i64 - 1) * slice_us;
        assert_eq!(r[5..], [0, retry, 1, -1]);
        assert_eq!(fields(&mut conn, "ahead"), [(ahead, LIMIT)]);
        assert_eq!(slot_of(&mut conn, "ahead"), Some((g + 2) % 4));
        assert_eq!(gens(&mut conn)[((g + 2) % 4) as usize], (g + 2) as f64);
        assert_eq!(fields(&mut conn, "new"), [(e, 1)]);
        return;
    }
}
