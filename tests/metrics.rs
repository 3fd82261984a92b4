//! `StripedCounter` behind the `metrics` facade (feature `metrics`): a real
//! recorder hands out our counters, the facade's macros count from several
//! threads, and the totals are exact. `absolute` raises and never lowers or
//! overshoots, also when raises race.

use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder};
use metrics::{SharedString, Unit};
use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use stripecount::StripedCounter;

static_assertions::assert_impl_all!(StripedCounter: CounterFn, Send, Sync);
// A striped counter is not a gauge (see src/metrics.rs).
static_assertions::assert_not_impl_any!(StripedCounter: metrics::GaugeFn);

/// A recorder that hands out one shared `StripedCounter` per key, as an
/// exporter's registry would hand out its `AtomicU64`s.
#[derive(Default)]
struct StripedRecorder {
    counters: Mutex<HashMap<Key, Arc<StripedCounter>>>,
}

impl StripedRecorder {
    fn counter(&self, key: &Key) -> Arc<StripedCounter> {
        let mut map = self.counters.lock().unwrap();
        Arc::clone(map.entry(key.clone()).or_default())
    }

    fn total(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let labels: Vec<metrics::Label> = (labels.iter())
            .map(|&(k, v)| metrics::Label::new(k.to_owned(), v.to_owned()))
            .collect();
        let key = Key::from_parts(name.to_owned(), labels);
        self.counters
            .lock()
            .unwrap()
            .get(&key)
            .map_or(0, |c| c.sum())
    }
}

impl Recorder for StripedRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.counter(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

const THREADS: usize = 4;
const PER_THREAD: u64 = 50_000;

/// Runs `f(thread)` on `THREADS` threads released together.
fn on_threads(f: impl Fn(usize) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, start) = (Arc::clone(&f), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                f(t)
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn from_arc_counts_every_increment_from_several_threads() {
    let requests = Arc::new(StripedCounter::with_max_stripes(4));
    let handle = Counter::from_arc(Arc::clone(&requests));
    on_threads(move |t| {
        for i in 0..PER_THREAD {
            handle.increment(1 + (i + t as u64) % 3);
        }
    });
    let expected: u64 = (0..THREADS as u64)
        .map(|t| (0..PER_THREAD).map(|i| 1 + (i + t) % 3).sum::<u64>())
        .sum();
    assert_eq!(requests.sum(), expected);
}

#[test]
fn facade_macros_with_a_local_recorder_count_exactly_per_key() {
    let recorder = Arc::new(StripedRecorder::default());
    let rec = Arc::clone(&recorder);
    on_threads(move |t| {
        metrics::with_local_recorder(&*rec, || {
            for i in 0..PER_THREAD {
                metrics::counter!("requests", "route" => "/login").increment(1);
                if i % 2 == 0 {
                    metrics::counter!("requests", "route" => "/search").increment(1);
                }
                // A dynamic label and amount, as real code has.
                let route = if t % 2 == 0 { "/even" } else { "/odd" };
                metrics::counter!("bytes", "route" => route).increment(i % 100);
            }
        })
    });
    let bytes_per_thread: u64 = (0..PER_THREAD).map(|i| i % 100).sum();
    let n = THREADS as u64;
    assert_eq!(
        recorder.total("requests", &[("route", "/login")]),
        n * PER_THREAD
    );
    assert_eq!(
        recorder.total("requests", &[("route", "/search")]),
        n * PER_THREAD / 2
    );
    assert_eq!(
        recorder.total("bytes", &[("route", "/even")]),
        (n / 2) * bytes_per_thread
    );
    assert_eq!(
        recorder.total("bytes", &[("route", "/odd")]),
        (n / 2) * bytes_per_thread
    );
    assert_eq!(recorder.counters.lock().unwrap().len(), 4);
}

/// The only test of this binary that installs the global recorder (it can
/// be installed once per process).
#[test]
fn facade_macros_with_the_global_recorder_count_exactly() {
    let recorder: &'static StripedRecorder = Box::leak(Box::default());
    metrics::set_global_recorder(recorder).expect("no other test installs a global recorder");
    on_threads(|_| {
        // Registered once per thread, as hot code caches its handle.
        let jobs = metrics::counter!("jobs_done");
        for _ in 0..PER_THREAD {
            jobs.increment(1);
            metrics::counter!("jobs_seen").increment(2);
        }
    });
    let n = THREADS as u64;
    assert_eq!(recorder.total("jobs_done", &[]), n * PER_THREAD);
    assert_eq!(recorder.total("jobs_seen", &[]), 2 * n * PER_THREAD);
}

#[test]
fn absolute_raises_to_at_least_and_never_lowers() {
    let c = Arc::new(StripedCounter::new());
    let handle = Counter::from_arc(Arc::clone(&c));
    handle.absolute(10);
    assert_eq!(c.sum(), 10);
    handle.absolute(7); // an older reading: no change
    assert_eq!(c.sum(), 10);
    handle.absolute(10);
    assert_eq!(c.sum(), 10);
    handle.increment(5);
    handle.absolute(12); // already above
    assert_eq!(c.sum(), 15);
    handle.absolute(20);
    assert_eq!(c.sum(), 20);
    handle.absolute(u64::MAX);
    assert_eq!(c.sum(), u64::MAX);
    handle.increment(1); // saturates
    assert_eq!(c.sum(), u64::MAX);
}

/// Callers mirroring one external counter deliver its readings out of
/// order, from several threads: the total ends at the largest reading, and
/// never passes it (two raises adding the same difference would).
#[test]
fn racing_absolutes_end_at_the_largest_reading_exactly() {
    for round in 0..20u64 {
        let c = Arc::new(StripedCounter::with_max_stripes(4));
        let handle = Counter::from_arc(Arc::clone(&c));
        let steps = 5_000u64;
        let seen = Arc::clone(&c);
        on_threads(move |t| {
            for i in 0..steps {
                // Interleaved readings: thread t reports i * THREADS + t.
                let v = i * THREADS as u64 + t as u64 + round;
                handle.absolute(v);
                let now = seen.sum();
                assert!(now >= v, "after absolute({v}) the total is {now}");
                assert!(
                    now < steps * THREADS as u64 + round,
                    "the total {now} passed every reading"
                );
            }
        });
        assert_eq!(c.sum(), steps * THREADS as u64 - 1 + round);
    }
}
