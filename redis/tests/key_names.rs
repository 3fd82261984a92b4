//! Any bytes name a key: a key's field in its bucket is its name, but for
//! names that start with byte `0xff`, which get one more in front (every
//! bucket holds a marker field `\xff`). Keys that differ only there are
//! counted apart, read back exactly, and reported hot under their own
//! names.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::buckets::fields;
use support::{flush_ok, RedisServer};

const NAMES: [&[u8]; 7] = [
    b"",
    b"\xff",
    b"\xff\xff",
    b"\xff\xff\xff",
    b"\xffa",
    b"a\xff",
    b"a",
];

type Crossings = Arc<Mutex<Vec<(Vec<u8>, u64)>>>;

fn node(redis: &RedisServer, crossings: &Crossings) -> ClusterWindows<Vec<u8>> {
    let c = Arc::clone(crossings);
    ClusterWindows::builder(&redis.url(), "names", Duration::from_secs(600), 10)
        .flush_interval(None)
        .hot_threshold(10)
        .on_hot_crossing(move |k: &Vec<u8>, s| c.lock().unwrap().push((k.clone(), s)))
        .build()
        .unwrap()
}

#[test]
fn names_starting_with_0xff_are_kept_apart_from_the_marker_and_each_other() {
    let redis = RedisServer::start();
    let crossings = Crossings::default();
    let (a, b) = (node(&redis, &crossings), node(&redis, &crossings));
    // Key i gets i + 1 from each node (keys 4 to 6 cross 10 with b's
    // first flush), then 10 more from b (the others cross with its
    // second).
    for (i, k) in NAMES.iter().enumerate() {
        assert!(a.add(&k.to_vec(), i as u64 + 1));
        assert!(b.add(&k.to_vec(), i as u64 + 1));
    }
    flush_ok(&a);
    flush_ok(&b);
    for k in NAMES {
        assert!(b.add(&k.to_vec(), 10));
    }
    flush_ok(&b);
    let mut conn = redis.conn();
    assert_eq!(fields(&mut conn, "names:b:*"), NAMES.len() as u64);
    let reader = node(&redis, &Crossings::default());
    for (i, k) in NAMES.iter().enumerate() {
        let want = 2 * (i as u64 + 1) + 10;
        assert_eq!(reader.fresh_sum(&k.to_vec()).unwrap(), want, "{k:?}");
        assert_eq!(b.sum(&k.to_vec()), want, "{k:?}");
    }
    // Each crossed once, reported under its own name.
    let mut got = crossings.lock().unwrap().clone();
    got.sort();
    let mut want: Vec<(Vec<u8>, u64)> = NAMES
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let first = 2 * (i as u64 + 1);
            (k.to_vec(), if first >= 10 { first } else { first + 10 })
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    // A node reading the hot set sees every one by its name.
    reader.flush().unwrap();
    let mut hot = reader.cluster_hot_keys();
    hot.sort();
    let mut names: Vec<Vec<u8>> = NAMES.iter().map(|k| k.to_vec()).collect();
    names.sort();
    assert_eq!(hot, names);
}
