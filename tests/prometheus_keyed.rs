//! Prometheus export (feature `prometheus`) of the per-key structures:
//! keyed limiters' keys held, refusals and untracked decisions, counted
//! from several threads; a hot-key sketch's kept-back and untracked adds.
//! Encoded with prometheus-client's own text encoder, every line checked.

mod prometheus_text;

use prometheus_client::registry::Registry;
use prometheus_text::{lines, text, ts};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::limiter::FloodPolicy;
use stripecount::prometheus::ScrapeCollector;
use stripecount::{ConfigError, KeyedLimiter, Quota};

const MIN: Duration = Duration::from_secs(60);

/// Two keyed limiters under one name (labels apart) and a third under
/// another: keys held, refusals (every reason) and untracked decisions,
/// exactly, after requests from several threads; reads do not count.
#[test]
fn keyed_limiters_export_keys_refusals_and_untracked() {
    let clock = ManualClock::new();
    let sec = Duration::from_secs(1);
    // 3 per second per key; at most 4 keys, refusing the rest.
    let api = Arc::new(
        KeyedLimiter::<u64>::builder(Quota::per(3, sec).slices(1))
            .clock(clock.clone())
            .max_keys(4)
            .build()
            .unwrap(),
    );
    // 1 per second and 2 per minute per key; untracked keys admitted.
    let login = Arc::new(
        KeyedLimiter::<String>::builder([
            Quota::per(1, sec).slices(1),
            Quota::per(2, MIN).slices(60),
        ])
        .clock(clock.clone())
        .max_keys(1)
        .flood_policy(FloodPolicy::AdmitUntracked)
        .build()
        .unwrap(),
    );
    let idle = Arc::new(
        KeyedLimiter::<u64>::builder(Quota::per(1, sec).slices(1))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let collector = Arc::new(ScrapeCollector::new());
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Arc::clone(&collector)));
    let help = "Per-client limits";
    collector
        .keyed_limiter("limiter", help, &[("route", "/api")], api.clone())
        .unwrap();
    collector
        .keyed_limiter("limiter", help, &[("route", "/login")], login.clone())
        .unwrap();
    // A limiter writes no label of its own: `window` is free.
    collector
        .keyed_limiter("idle", "Idle", &[("window", "w")], idle.clone())
        .unwrap();

    // 4 threads, each 100 requests on key t (3 granted, 97 refused), then,
    // once every thread's key is held, 10 on keys 4 + t (the map holds 4
    // keys, none idle: all refused).
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let api = Arc::clone(&api);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let granted = (0..100).filter(|_| api.try_acquire(&t, 1)).count();
                barrier.wait();
                let extra = (0..10).filter(|_| api.try_acquire(&(4 + t), 1)).count();
                assert_eq!(api.available(&t), 0); // a read: neither counted nor held
                (granted, extra)
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), (3, 0));
    }
    // ExceedsLimit is a refusal too; a peek is not a request.
    assert!(!api.decide(&0, 4).is_granted());
    assert!(!api.peek(&1, 1).is_granted());
    // login: "a" twice (1 refused), "b" untracked (admitted), "a" for 2 at
    // once (more than its 1-per-second limit).
    assert!(login.try_acquire("a", 1));
    assert!(!login.try_acquire("a", 1));
    assert!(login.try_acquire("b", 1));
    assert!(!login.try_acquire("a", 2));
    assert_eq!(
        text(&registry),
        lines(&[
            "# HELP limiter_keys Per-client limits, keys held.",
            "# TYPE limiter_keys gauge",
            "limiter_keys{route=\"/api\"} 4",
            "limiter_keys{route=\"/login\"} 1",
            "# HELP limiter_refused Per-client limits, requests refused.",
            "# TYPE limiter_refused counter",
            "limiter_refused_total{route=\"/api\"} 429",
            "limiter_refused_total{route=\"/login\"} 2",
            "# HELP limiter_untracked Per-client limits, decisions on keys the limiter could not hold.",
            "# TYPE limiter_untracked counter",
            "limiter_untracked_total{route=\"/api\"} 40",
            "limiter_untracked_total{route=\"/login\"} 1",
            "# HELP idle_keys Idle, keys held.",
            "# TYPE idle_keys gauge",
            "idle_keys{window=\"w\"} 0",
            "# HELP idle_refused Idle, requests refused.",
            "# TYPE idle_refused counter",
            "idle_refused_total{window=\"w\"} 0",
            "# HELP idle_untracked Idle, decisions on keys the limiter could not hold.",
            "# TYPE idle_untracked counter",
            "idle_untracked_total{window=\"w\"} 0",
            "# EOF",
        ])
    );

    // Two windows on, the idle keys are evicted by the next request's
    // sweep; counters only grow.
    clock.advance(2 * sec);
    assert!(api.try_acquire(&9, 1));
    assert_eq!(api.evict_idle_at(ts(2_000_000_000)), 0); // the sweep already did it
    let out = text(&registry);
    for line in [
        "limiter_keys{route=\"/api\"} 1",
        "limiter_refused_total{route=\"/api\"} 429",
        "limiter_untracked_total{route=\"/api\"} 40",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
    // A label set already registered under the name is refused.
    let again = collector.keyed_limiter("limiter", help, &[("route", "/api")], api.clone());
    assert!(matches!(again, Err(ConfigError::Invalid(_))));
}

/// A hot-key sketch with too little memory for its stream: its adds kept
/// back and its untracked adds, exactly, against its own counters and a
/// count of the stream; a keyed limiter's `_untracked` family beside it is
/// refused.
#[test]
fn hot_key_sketches_export_filtered_and_untracked_adds() {
    let slice = Duration::from_millis(100);
    // Level 2 (threshold 40 in 10 slices: h = 4), and 35 keys a slice
    // (40,000 bytes less an 8 KiB doorkeeper and the 12 maps' fixed parts,
    // 644 bytes a key).
    let sketch = Arc::new(
        stripecount::HotKeySketch::<u64, _>::builder(10 * slice, 10, 40)
            .clock(ManualClock::new())
            .memory(40_000)
            .build()
            .unwrap(),
    );
    assert_eq!((sketch.admission_level(), sketch.max_keys()), (2, 35));
    let collector = ScrapeCollector::new();
    collector
        .hot_key_sketch(
            "hot",
            "Hot keys",
            &[("cache", "objects")],
            Arc::clone(&sketch),
        )
        .unwrap();
    // The family names of a keyed limiter under the same name collide.
    let lim = Arc::new(KeyedLimiter::<u64>::new(Quota::per_second(1)).unwrap());
    assert!(matches!(
        collector.keyed_limiter("hot", "Hot keys", &[], lim),
        Err(ConfigError::Invalid(_))
    ));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    // 100 keys, 3 adds each, one slice: at least the last two of each are
    // admitted (level 2), 35 keys are held, the admitted adds of the
    // others are untracked. Every add is in exactly one of the three.
    for k in 0..100u64 {
        for _ in 0..3 {
            sketch.add_at(&k, ts(0), 1);
        }
    }
    let (filtered, untracked) = (sketch.filtered_adds(), sketch.untracked_adds());
    let tracked: u64 = (0..100u64).map(|k| sketch.sum_at(&k, ts(0))).sum();
    assert_eq!(filtered + untracked + tracked, 300);
    assert!(untracked >= 2 * 65, "{untracked}");
    assert_eq!(
        text(&registry),
        lines(&[
            "# HELP hot_filtered Hot keys, adds the doorkeeper kept back (below the admission level).",
            "# TYPE hot_filtered counter",
            &format!("hot_filtered_total{{cache=\"objects\"}} {filtered}"),
            "# HELP hot_untracked Hot keys, admitted adds not tracked because their slice was full (too little memory for the stream).",
            "# TYPE hot_untracked counter",
            &format!("hot_untracked_total{{cache=\"objects\"}} {untracked}"),
            "# EOF",
        ])
    );
}
