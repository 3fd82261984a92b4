//! `redis_flush_script`: the flush script alone, the current one
//! (`src/flush.lua`) against the one it replaced (`flush_baseline.lua`, a
//! copy kept for this comparison), in the same run, on the same server,
//! with the same requests: N keys with one (key, slice) delta each, in
//! batches of 1024 keys, flushed again at every iteration (Redis updates
//! existing rings: the steady state, where the script's fast path runs).
//! The baseline keeps a ring a Redis string with an expiry of its own and
//! writes each with a command; the current one keeps them in bucket
//! hashes (`src/bucket.rs`), a few commands a bucket.
//! `ring1`: every ring holds one slice; `ring5`: five (the deltas go to the
//! newest); `_hot`: hot detection on, with a threshold no key reaches.
//! Each batch is one `EVALSHA` round trip and its reply read,
//! with no node around it (no take, no encoding, no cache). After each
//! point, the bench prints the script's time per key-delta in Redis's
//! `INFO commandstats`.

use super::support::buckets::{bucket, sub_bucket, SLOTS, SUB_BUCKETS};
use criterion::{Criterion, Throughput};
use std::time::{Duration, Instant};

const BASELINE: &str = include_str!("flush_baseline.lua");
const CURRENT: &str = include_str!("../../src/flush.lua");
const BATCH: u64 = 1024;
const SLICES: u64 = 10;
const SLICE_MS: u64 = 60_000;

/// A script, the namespace it flushes to and its hot threshold (0: off).
struct Target<'a> {
    sha: &'a str,
    ns: &'a str,
    thr: u64,
    /// The baseline's layout (one Redis key a ring).
    baseline: bool,
}

/// The `EVALSHA` of batch `seq` of keys `keys`, one delta each into epoch `e`.
fn batch(to: &Target, seq: u64, keys: std::ops::Range<u64>, e: u64) -> redis::Cmd {
    let mut blob = Vec::new();
    for _ in keys.clone() {
        for w in [1, e, 1] {
            blob.extend_from_slice(&(w as f64).to_le_bytes());
        }
    }
    let ttl = SLICES * SLICE_MS + SLICE_MS + 300_000;
    let ns = to.ns;
    let mut c = redis::cmd("EVALSHA");
    c.arg(to.sha);
    let fixed = ["n:bench", "cfg", "hot", "hotv", "hotver"];
    if to.baseline {
        // One key a ring: the keys are the script's keys.
        c.arg(5 + keys.end - keys.start);
        for k in fixed {
            c.arg(format!("{ns}:{k}"));
        }
        for k in keys {
            c.arg(format!("{ns}:w:{k}"));
        }
        c.arg(seq).arg(SLICES).arg(SLICE_MS).arg(to.thr).arg(ttl);
        c.arg(blob).arg(format!("{SLICES}:{SLICE_MS}"));
        c.arg(ns.len() + 3).arg("1");
    } else {
        // Rings in bucket hashes: the names go by sub-bucket.
        let mut names: Vec<Vec<u8>> = keys.map(|k| k.to_string().into_bytes()).collect();
        names.sort_by_key(|n| sub_bucket(n));
        let mut counts = [0u64; SUB_BUCKETS];
        for n in &names {
            counts[sub_bucket(n)] += 1;
        }
        c.arg(6 + SLOTS * SUB_BUCKETS);
        for k in fixed {
            c.arg(format!("{ns}:{k}"));
        }
        c.arg(format!("{ns}:bg"));
        for r in 0..SLOTS {
            for m in 0..SUB_BUCKETS {
                c.arg(bucket(ns, r, m));
            }
        }
        c.arg(seq).arg(SLICES).arg(SLICE_MS).arg(to.thr).arg(ttl);
        c.arg(blob)
            .arg(format!("{SLICES}:{SLICE_MS}:b{SUB_BUCKETS}"));
        let cb: Vec<u8> = counts
            .iter()
            .flat_map(|&c| (c as f64).to_le_bytes())
            .collect();
        c.arg(cb);
        for n in names {
            c.arg(n);
        }
    }
    c
}

/// Flushes keys `0..n` in batches, one delta each into epoch `e`.
fn flush_all(conn: &mut redis::Connection, to: &Target, seq: &mut u64, n: u64, e: u64) -> Duration {
    let cmds: Vec<redis::Cmd> = (0..n)
        .step_by(BATCH as usize)
        .map(|s| {
            *seq += 1;
            batch(to, *seq, s..(s + BATCH).min(n), e)
        })
        .collect();
    let t = Instant::now();
    for cmd in &cmds {
        let v: redis::Value = cmd.query(conn).expect("a flush");
        assert!(matches!(v, redis::Value::Array(_)), "{v:?}");
    }
    t.elapsed()
}

pub fn script(c: &mut Criterion, redis: &super::support::RedisServer) {
    let mut g = c.benchmark_group("redis_flush_script");
    g.sample_size(10);
    let mut conn = redis.conn();
    let time: Vec<String> = redis::cmd("TIME").query(&mut conn).expect("TIME");
    let now_ms = time[0].parse::<u64>().unwrap() * 1000;
    // The slice now, then the slices before it (a minute each: a run
    // stays within the newest, but for a point run across its edge).
    let cur = now_ms / SLICE_MS;
    for n in [1_000u64, 20_000] {
        for (ring, thr) in [(1u64, 0u64), (5, 0), (1, 1 << 52)] {
            for (name, src) in [("baseline", BASELINE), ("current", CURRENT)] {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(src)
                    .query(&mut conn)
                    .expect("SCRIPT LOAD");
                let hot = if thr > 0 { "_hot" } else { "" };
                let ns = format!("script_{name}_{n}_{ring}{hot}");
                let to = Target {
                    sha: &sha,
                    ns: &ns,
                    thr,
                    baseline: name == "baseline",
                };
                let mut seq = 0u64;
                // The rings, `ring` slices each, the newest now.
                for back in (0..ring).rev() {
                    flush_all(&mut conn, &to, &mut seq, n, cur - back);
                }
                redis::cmd("CONFIG")
                    .arg("RESETSTAT")
                    .exec(&mut conn)
                    .expect("CONFIG RESETSTAT");
                let mut key_deltas = 0;
                g.throughput(Throughput::Elements(n));
                let id = format!("key_deltas_{n}_ring{ring}{hot}_{name}");
                g.bench_function(&id, |b| {
                    b.iter_custom(|iters| {
                        key_deltas += iters * n;
                        (0..iters)
                            .map(|_| flush_all(&mut conn, &to, &mut seq, n, cur + 1_000_000))
                            .sum()
                    })
                });
                let usec = super::evalsha_usec(&mut conn);
                if key_deltas > 0 {
                    println!(
                        "redis_flush_script/{id}: Redis time {:.3} us per key-delta (evalsha {usec} us / {key_deltas} key-deltas)",
                        usec as f64 / key_deltas as f64
                    );
                }
            }
        }
    }
    g.finish();
}
