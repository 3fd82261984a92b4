//! `metrics::counter!` backed by a `StripedCounter` against the facade's
//! default store, an `AtomicU64` (what `metrics-util`'s `AtomicStorage` and
//! the exporters built on it hand out), at 1 and 2 threads sharing one
//! counter. Needs `--features metrics`.
//!
//! Two ways services count through the facade:
//! - `counter!(name).increment(1)` on every event: each call asks the
//!   global recorder for the handle (a name match here, a map lookup in a
//!   real exporter) and clones, then drops, its `Arc`;
//! - a handle taken once from `counter!(name)` and kept, `increment(1)` on
//!   every event: only the store's add and a dynamic call.
//!
//! and, to see what the facade itself costs, each store's `CounterFn`
//! called directly on the concrete type (static dispatch, inlined).
//!
//! The recorder hands out one shared store per name, as an exporter's
//! registry does. Threads are the shared pool of `benches/common.rs`.
//!
//! Run: `cargo bench --features metrics --bench metrics`

mod common;

use common::{bench_threads, config};
use criterion::{criterion_group, criterion_main, Criterion};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Once};
use stripecount::StripedCounter;
use stripecount_baselines::harness::Pool;

/// Hands out the one store of each benchmarked name.
struct OneStorePerName {
    striped: Arc<StripedCounter>,
    atomic: Arc<AtomicU64>,
}

impl Recorder for OneStorePerName {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match key.name() {
            "striped" => Counter::from_arc(Arc::clone(&self.striped)),
            "atomic" => Counter::from_arc(Arc::clone(&self.atomic)),
            _ => Counter::noop(),
        }
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn install_recorder() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let recorder = OneStorePerName {
            striped: Arc::new(StripedCounter::new()),
            atomic: Arc::new(AtomicU64::new(0)),
        };
        metrics::set_global_recorder(recorder).expect("the only recorder of this bench");
    });
}

fn facade(c: &mut Criterion) {
    install_recorder();
    let mut g = c.benchmark_group("metrics_counter");
    for threads in [1, 2] {
        let pool = Pool::new(threads);
        bench_threads(
            &mut g,
            &pool,
            "counter!.increment StripedCounter",
            Arc::new(()),
            |_, _, _| metrics::counter!("striped").increment(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "counter!.increment AtomicU64",
            Arc::new(()),
            |_, _, _| metrics::counter!("atomic").increment(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "handle.increment StripedCounter",
            Arc::new(metrics::counter!("striped")),
            |h, _, _| h.increment(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "handle.increment AtomicU64",
            Arc::new(metrics::counter!("atomic")),
            |h, _, _| h.increment(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "direct StripedCounter",
            Arc::new(StripedCounter::new()),
            |s, _, _| CounterFn::increment(s, black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "direct AtomicU64",
            Arc::new(AtomicU64::new(0)),
            |s, _, _| CounterFn::increment(s, black_box(1)),
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = facade }
criterion_main!(benches);
