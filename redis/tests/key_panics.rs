//! The key type's own code (`RedisKey::write_key`, `Clone`) runs inside a
//! flush and may panic: the other keys' counts still reach Redis exactly
//! once, the dropped ones are counted, the background flusher goes on and
//! a `flush()` resumes the panic after every group was flushed. Against a
//! real redis-server; the sums are read back by a second node.

mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::flaky::{Ctl, Flaky};
use support::{flush_ok, wait_until, RedisServer};

fn node(url: &str, ns: &str, every: Option<Duration>, batch: usize) -> ClusterWindows<Flaky> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(every)
        .max_batch_keys(batch)
        .build()
        .unwrap()
}

/// A second node of the namespace, to read Redis's sums.
fn reader(url: &str, ns: &str) -> ClusterWindows<u64> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(None)
        .build()
        .unwrap()
}

fn sums(r: &ClusterWindows<u64>, ids: std::ops::Range<u64>) -> Vec<u64> {
    ids.map(|k| r.fresh_sum(&k).unwrap()).collect()
}

#[test]
fn the_background_flusher_drops_and_counts_a_key_whose_write_key_panics_and_goes_on() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    ctl.bad_name.store(7, Ordering::SeqCst);
    let n = node(&redis.url(), "kp_bg", Some(Duration::from_millis(5)), 1024);
    for id in 0..50 {
        n.add(&Flaky::new(id, &ctl), 3);
    }
    wait_until(60, "the other keys flushed", || {
        n.stats().counts_flushed == 49 * 3
    });
    wait_until(60, "the key's count dropped", || {
        n.stats().dropped_panicked == 3
    });
    assert!(n.stats().key_panics >= 1);
    // The flusher goes on.
    for id in 0..50 {
        n.add(&Flaky::new(id, &ctl), 2);
    }
    wait_until(60, "the next adds flushed", || {
        n.stats().counts_flushed == 49 * 5
    });
    wait_until(60, "the key's counts dropped", || {
        n.stats().dropped_panicked == 5
    });
    let r = reader(&redis.url(), "kp_bg");
    let want: Vec<u64> = (0..50).map(|id| if id == 7 { 0 } else { 5 }).collect();
    assert_eq!(sums(&r, 0..50), want);
}

#[test]
fn flush_resumes_a_write_key_panic_after_flushing_the_other_keys() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    let n = node(&redis.url(), "kp_flush", None, 1024);
    for id in 0..20 {
        n.add(&Flaky::new(id, &ctl), 1);
    }
    ctl.bad_name.store(3, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| n.flush()));
    assert!(r.is_err(), "the key's panic is resumed in flush");
    let st = n.stats();
    assert_eq!(
        (st.counts_flushed, st.dropped_panicked, st.key_panics),
        (19, 1, 1)
    );
    let h = n.health();
    assert_eq!((h.pending_counts, h.staged_keys), (0, 0), "{h:?}");
    // The key's code works again: its new counts are flushed.
    ctl.bad_name.store(u64::MAX, Ordering::SeqCst);
    n.add(&Flaky::new(3, &ctl), 4);
    flush_ok(&n);
    let rd = reader(&redis.url(), "kp_flush");
    let want: Vec<u64> = (0..20).map(|id| if id == 3 { 4 } else { 1 }).collect();
    assert_eq!(sums(&rd, 0..20), want);
}

/// A single instance, 6 new keys in batches of 2: the flush clones each
/// key once to stage it (6) and, when its batch's reply is filed, once to
/// cache its ring (a new key). The 7th clone is the first cache insert of
/// batch 1, while batch 2 is already sent: the panic leaves a reply unread
/// on the connection.
#[test]
fn a_panic_while_a_reply_is_filed_leaves_every_batch_applied_once() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    let n = node(&redis.url(), "kp_file", None, 2);
    for id in 0..6 {
        n.add(&Flaky::new(id, &ctl), id + 1);
    }
    ctl.panic_at.store(7, Ordering::SeqCst);
    ctl.armed.store(true, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| n.flush()));
    ctl.armed.store(false, Ordering::SeqCst);
    assert!(r.is_err(), "the clone's panic is resumed in flush");
    let st = n.stats();
    assert_eq!((st.key_panics, st.batches_applied), (1, 1), "{st:?}");
    // The next flush goes on from there: the batch sent before the panic
    // is resent on a new connection and applied once.
    let rep = n.flush().expect("the next flush reads its own replies");
    assert_eq!(rep.batches, 2, "batches of the next flush");
    let st = n.stats();
    assert_eq!((st.counts_flushed, st.dropped_panicked), (21, 0), "{st:?}");
    let h = n.health();
    assert_eq!((h.pending_counts, h.staged_keys), (0, 0), "{h:?}");
    let rd = reader(&redis.url(), "kp_file");
    assert_eq!(sums(&rd, 0..6), vec![1, 2, 3, 4, 5, 6]);
}
