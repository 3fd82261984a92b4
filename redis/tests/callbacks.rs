//! The hot-crossing callback is user code: it may panic and it may use the
//! node (add, read, flush, even drop the last handle), from an explicit
//! flush and from the background flusher, against a real redis-server.
//! Nothing held is lost and no lock is held while it runs.

mod support;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use stripecount_redis::{ClusterWindows, HotCallback};
use support::{flush_ok, wait_until, RedisServer};

type Seen = Arc<Mutex<Vec<(String, u64)>>>;

fn node(
    url: &str,
    ns: &str,
    every: Option<Duration>,
    f: HotCallback<String>,
) -> ClusterWindows<String> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(every)
        .hot_threshold(10)
        .on_hot_crossing(move |k: &String, s| f(k, s))
        .build()
        .unwrap()
}

/// A callback that records every crossing and panics on the key `boom`.
fn recording_and_panicking_on_boom() -> (Seen, HotCallback<String>) {
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    let f: HotCallback<String> = Arc::new(move |k: &String, sum| {
        s.lock().unwrap().push((k.clone(), sum));
        assert_ne!(k, "boom", "the callback panics on boom");
    });
    (seen, f)
}

fn keys(seen: &Seen) -> HashSet<String> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(k, _)| k.clone())
        .collect()
}

/// Runs `f` on a thread of its own and fails (instead of hanging) if it
/// has not returned within a minute: a deadlock is a test failure.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("returned within a minute (a lock held while the callback ran?)")
}

#[test]
fn a_panic_in_the_callback_reaches_flush_after_every_crossing_is_delivered() {
    let redis = RedisServer::start();
    let (seen, f) = recording_and_panicking_on_boom();
    let n = node(&redis.url(), "cb_flush", None, f);
    for k in ["a", "boom", "b"] {
        n.add(k, 10);
    }
    let r = catch_unwind(AssertUnwindSafe(|| n.flush()));
    assert!(r.is_err(), "the callback's panic is resumed in flush");
    assert_eq!(n.stats().callback_panics, 1);
    assert_eq!(n.stats().hot_crossings, 3);
    // Every crossing was delivered, the panicking one included, once.
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(keys(&seen), ["a", "boom", "b"].map(String::from).into());
    // Nothing held was lost: the counts were filed before the callback.
    let h = n.health();
    assert_eq!((h.pending_counts, h.staged_keys), (0, 0), "{h:?}");
    for k in ["a", "boom", "b"] {
        assert_eq!(n.fresh_sum(k).unwrap(), 10, "{k}");
    }
    // The node goes on: no lock was left poisoned or held.
    n.add("a", 5);
    n.add("c", 10);
    let r = flush_ok(&n);
    assert_eq!(r.crossings, vec![("c".to_string(), 10)]);
    assert_eq!(n.fresh_sum("a").unwrap(), 15);
    assert_eq!(seen.lock().unwrap().len(), 4);
}

#[test]
fn the_background_flusher_counts_a_panicking_callback_and_goes_on() {
    let redis = RedisServer::start();
    let (seen, f) = recording_and_panicking_on_boom();
    let n = node(&redis.url(), "cb_bg", Some(Duration::from_millis(5)), f);
    n.add("boom", 10);
    wait_until(60, "the flusher to deliver boom", || {
        n.stats().callback_panics == 1
    });
    // The flusher thread survived its callback's panic: it delivers the
    // next crossing too.
    n.add("later", 10);
    wait_until(60, "the flusher to deliver later", || {
        keys(&seen).contains("later")
    });
    assert_eq!(n.stats().callback_panics, 1);
    assert_eq!(n.fresh_sum("boom").unwrap(), 10);
    assert_eq!(n.fresh_sum("later").unwrap(), 10);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// A callback that uses the node it belongs to: adds, an exact read and a
/// flush, each recorded.
fn reentrant(me: &Arc<OnceLock<Weak<ClusterWindows<String>>>>) -> (Seen, HotCallback<String>) {
    let seen: Seen = Arc::default();
    let (s, me) = (Arc::clone(&seen), Arc::clone(me));
    let f: HotCallback<String> = Arc::new(move |k: &String, sum| {
        let Some(n) = me.get().and_then(Weak::upgrade) else {
            return;
        };
        n.add(&format!("{k}-seen"), 1);
        let exact = n.fresh_sum(k).expect("an exact read from the callback");
        n.flush().expect("a flush from the callback");
        s.lock().unwrap().push((k.clone(), exact.min(sum)));
    });
    (seen, f)
}

#[test]
fn the_callback_may_add_read_and_flush_from_an_explicit_flush() {
    let redis = RedisServer::start();
    let me = Arc::new(OnceLock::new());
    let (seen, f) = reentrant(&me);
    let n = Arc::new(node(&redis.url(), "cb_reenter", None, f));
    me.set(Arc::downgrade(&n)).unwrap();
    n.add("k", 10);
    let n2 = Arc::clone(&n);
    let r = within_a_minute(move || n2.flush().map(|r| r.crossings));
    assert_eq!(r.unwrap(), vec![("k".to_string(), 10)]);
    assert_eq!(*seen.lock().unwrap(), vec![("k".to_string(), 10)]);
    // The callback's own flush sent its add.
    assert_eq!(n.fresh_sum("k-seen").unwrap(), 1);
    assert_eq!(n.stats().callback_panics, 0);
}

#[test]
fn the_callback_may_add_read_and_flush_from_the_background_flusher() {
    let redis = RedisServer::start();
    let me = Arc::new(OnceLock::new());
    let (seen, f) = reentrant(&me);
    let n = Arc::new(node(
        &redis.url(),
        "cb_reenter_bg",
        Some(Duration::from_millis(5)),
        f,
    ));
    me.set(Arc::downgrade(&n)).unwrap();
    n.add("k", 10);
    wait_until(60, "the flusher to deliver k", || {
        !seen.lock().unwrap().is_empty()
    });
    assert_eq!(*seen.lock().unwrap(), vec![("k".to_string(), 10)]);
    wait_until(60, "the callback's add to reach Redis", || {
        n.fresh_sum("k-seen").unwrap() == 1
    });
    assert_eq!(n.stats().callback_panics, 0);
}

#[test]
fn the_callback_may_drop_the_last_handle_on_the_flusher_thread() {
    let redis = RedisServer::start();
    type Keeper = Arc<Mutex<Option<ClusterWindows<String>>>>;
    let keeper: Keeper = Arc::default();
    let dropped = Arc::new(Mutex::new(None));
    let (k2, d2) = (Arc::clone(&keeper), Arc::clone(&dropped));
    let f: HotCallback<String> = Arc::new(move |_: &String, _| {
        // The node's only handle, dropped on its own flusher thread: the
        // flusher is told to stop, not joined from itself.
        let n = k2.lock().unwrap().take();
        let r = catch_unwind(AssertUnwindSafe(|| drop(n)));
        *d2.lock().unwrap() = Some(r.is_ok());
    });
    let n = node(&redis.url(), "cb_drop", Some(Duration::from_millis(5)), f);
    *keeper.lock().unwrap() = Some(n);
    keeper
        .lock()
        .unwrap()
        .as_ref()
        .expect("the node")
        .add("k", 10);
    wait_until(60, "the callback to drop the node", || {
        dropped.lock().unwrap().is_some()
    });
    assert_eq!(
        *dropped.lock().unwrap(),
        Some(true),
        "the drop did not panic"
    );
}
