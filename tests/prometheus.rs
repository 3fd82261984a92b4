//! Prometheus export (feature `prometheus`): registries holding our
//! counters and a `ScrapeCollector` are encoded with prometheus-client's
//! own text encoder and every line is checked, values included; random add
//! sequences are checked against a reference; bad names are refused. The
//! per-key structures' families are in `prometheus_keyed.rs`.

mod prometheus_text;

use prometheus_client::metrics::counter::{Atomic, Counter};
use prometheus_client::registry::Registry;
use prometheus_text::{lines, text, ts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::prometheus::ScrapeCollector;
use stripecount::{ConfigError, MultiWindow, SlidingWindow, StripedCounter};

const SEC: u64 = 1_000_000_000;
const MIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

static_assertions::assert_impl_all!(ScrapeCollector: prometheus_client::collector::Collector);

fn sliding(
    clock: &ManualClock,
    window: Duration,
    slices: usize,
) -> Arc<SlidingWindow<ManualClock>> {
    Arc::new(
        SlidingWindow::builder(window, slices)
            .clock(clock.clone())
            .build()
            .unwrap(),
    )
}

fn day_levels(clock: &ManualClock) -> Arc<MultiWindow<ManualClock>> {
    Arc::new(
        MultiWindow::builder(&[(MIN, 60), (HOUR, 60), (DAY, 24)])
            .clock(clock.clone())
            .build()
            .unwrap(),
    )
}

#[test]
fn striped_counter_registers_as_a_counter_store() {
    let mut registry = Registry::default();
    let jobs = Counter::<u64, StripedCounter>::default();
    registry.register("jobs", "Jobs done", jobs.clone());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let jobs = jobs.clone();
            thread::spawn(move || {
                for i in 0..20_000u64 {
                    if i % 2 == 0 {
                        jobs.inc();
                    } else {
                        jobs.inc_by(t + 1);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Per thread: 10,000 incs of 1 and 10,000 of t + 1.
    let expected: u64 = (0..4u64).map(|t| 10_000 + 10_000 * (t + 1)).sum();
    assert_eq!(jobs.get(), expected);
    assert_eq!(jobs.inner().sum(), expected);
    assert_eq!(
        text(&registry),
        lines(&[
            "# HELP jobs Jobs done.",
            "# TYPE jobs counter",
            &format!("jobs_total {expected}"),
            "# EOF",
        ])
    );
    // Documented: no previous value is returned (it would cost a full read).
    assert_eq!(jobs.inner().inc(), 0);
    assert_eq!(jobs.inner().inc_by(5), 0);
    assert_eq!(Atomic::<u64>::get(jobs.inner()), expected + 6);
}

/// Sliding and multi-level windows sharing a name, another name, labels:
/// every line of the exposition, at two scrape times.
#[test]
fn windows_export_sums_and_rates_read_at_scrape_time() {
    let clock = ManualClock::new();
    let login = sliding(&clock, MIN, 60);
    let search = day_levels(&clock);
    let errors = sliding(&clock, Duration::from_secs(10), 10);
    let collector = Arc::new(ScrapeCollector::new());
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Arc::clone(&collector)));
    let requests = "API requests";
    collector
        .sliding_window(
            "api_requests",
            requests,
            &[("route", "/login")],
            login.clone(),
        )
        .unwrap();
    collector
        .multi_window(
            "api_requests",
            requests,
            &[("route", "/search")],
            search.clone(),
        )
        .unwrap();
    collector
        .sliding_window("api_errors", "API errors", &[], errors.clone())
        .unwrap();

    clock.set(ts(0));
    search.add(36_000);
    login.add(5);
    clock.set(ts(7200 * SEC));
    search.add(7170);
    clock.set(ts(8990 * SEC));
    errors.add(1); // 10 s old at the scrape: outside the window
    clock.set(ts(8991 * SEC));
    errors.add(4);
    clock.set(ts(9000 * SEC));
    search.add(30);
    login.add(30);

    // 1 min: 30 (0.5/s); 1 h: 7170 + 30 (2/s); 1 d: 36,000 + 7,200 (0.5/s).
    assert_eq!(
        text(&registry),
        lines(&[
            "# HELP api_requests_window API requests, counted over the last `window`.",
            "# TYPE api_requests_window gauge",
            "api_requests_window{route=\"/login\",window=\"1m\"} 30",
            "api_requests_window{route=\"/search\",window=\"1m\"} 30",
            "api_requests_window{route=\"/search\",window=\"1h\"} 7200",
            "api_requests_window{route=\"/search\",window=\"1d\"} 43200",
            "# HELP api_requests_per_second API requests, per second over the last `window`.",
            "# TYPE api_requests_per_second gauge",
            "api_requests_per_second{route=\"/login\",window=\"1m\"} 0.5",
            "api_requests_per_second{route=\"/search\",window=\"1m\"} 0.5",
            "api_requests_per_second{route=\"/search\",window=\"1h\"} 2.0",
            "api_requests_per_second{route=\"/search\",window=\"1d\"} 0.5",
            "# HELP api_errors_window API errors, counted over the last `window`.",
            "# TYPE api_errors_window gauge",
            "api_errors_window{window=\"10s\"} 4",
            "# HELP api_errors_per_second API errors, per second over the last `window`.",
            "# TYPE api_errors_per_second gauge",
            "api_errors_per_second{window=\"10s\"} 0.4",
            "# EOF",
        ])
    );

    // A minute later, at the next scrape: the minute and the errors are
    // empty, the hour still holds 7170 + 30 (the 7200 s add is 31 min old).
    clock.set(ts(9060 * SEC));
    let out = text(&registry);
    for line in [
        "api_requests_window{route=\"/login\",window=\"1m\"} 0",
        "api_requests_window{route=\"/search\",window=\"1m\"} 0",
        "api_requests_window{route=\"/search\",window=\"1h\"} 7200",
        "api_requests_window{route=\"/search\",window=\"1d\"} 43200",
        "api_requests_per_second{route=\"/login\",window=\"1m\"} 0.0",
        "api_requests_per_second{route=\"/search\",window=\"1h\"} 2.0",
        "api_errors_window{window=\"10s\"} 0",
        "api_errors_per_second{window=\"10s\"} 0.0",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
    assert_eq!(out.lines().count(), 19);
}

/// A registry's prefix and constant labels apply to the collector's
/// families; labels are written sorted, then `window`; label values are
/// escaped; windows are labelled in the largest whole unit.
#[test]
fn prefix_const_labels_escaping_and_window_labels() {
    let clock = ManualClock::new();
    let mut registry = Registry::default();
    let sub = registry
        .sub_registry_with_prefix("svc")
        .sub_registry_with_label(("instance".into(), "a".into()));
    let collector = ScrapeCollector::new();
    let w = sliding(&clock, Duration::from_millis(250), 10);
    let labels = [("zone", "eu"), ("query", "say \"hi\"\n")];
    collector
        .sliding_window("q", "Queries", &labels, w.clone())
        .unwrap();
    collector
        .sliding_window(
            "r",
            "Other",
            &[],
            sliding(&clock, Duration::from_secs(90), 9),
        )
        .unwrap();
    collector
        .sliding_window("s", "Other", &[], sliding(&clock, 2 * HOUR, 2))
        .unwrap();
    sub.register_collector(Box::new(collector));
    w.add(5);
    let out = text(&registry);
    let expected_q =
        "svc_q_window{instance=\"a\",query=\"say \\\"hi\\\"\\n\",zone=\"eu\",window=\"250ms\"} 5";
    for line in [
        "# HELP svc_q_window Queries, counted over the last `window`.",
        expected_q,
        "svc_q_per_second{instance=\"a\",query=\"say \\\"hi\\\"\\n\",zone=\"eu\",window=\"250ms\"} 20.0",
        "svc_r_window{instance=\"a\",window=\"90s\"} 0",
        "svc_s_window{instance=\"a\",window=\"2h\"} 0",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
}

/// What the collector writes equals the spec restated on the list of adds,
/// for random add sequences and scrape times.
#[test]
fn random_adds_match_a_reference() {
    let levels = [(Duration::from_secs(1), 10), (MIN, 60), (HOUR, 60)];
    for seed in 0..30 {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = ManualClock::new();
        let one = sliding(&clock, Duration::from_secs(30), 30);
        let multi = Arc::new(
            MultiWindow::builder(&levels)
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        let collector = ScrapeCollector::new();
        collector
            .sliding_window("one", "One", &[], one.clone())
            .unwrap();
        collector
            .multi_window("multi", "Multi", &[], multi.clone())
            .unwrap();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector));
        let mut adds: Vec<(u64, u64)> = Vec::new();
        let mut now = 0u64;
        for step in 0..400 {
            now += rng.random_range(0..3 * SEC);
            clock.set(ts(now));
            let n = rng.random_range(1..1000);
            one.add(n);
            multi.add(n);
            adds.push((now, n));
            if step % 40 != 39 {
                continue;
            }
            let out = text(&registry);
            let values: HashMap<&str, &str> = out
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.rsplit_once(' '))
                .collect();
            let in_window = |len: u64, slices: u64| {
                let slice = len / slices;
                let end = now / slice;
                (adds.iter())
                    .filter(|&&(t, _)| end - t / slice < slices)
                    .map(|&(_, n)| n)
                    .sum::<u64>()
            };
            let spans = [
                ("one", "30s", 30, 30),
                ("multi", "1s", 1, 10),
                ("multi", "1m", 60, 60),
                ("multi", "1h", 3600, 60),
            ];
            for (name, label, secs, slices) in spans {
                let sum = in_window(secs * SEC, slices);
                let key = format!("{name}_window{{window=\"{label}\"}}");
                assert_eq!(values[key.as_str()], sum.to_string(), "seed {seed}, {key}");
                let key = format!("{name}_per_second{{window=\"{label}\"}}");
                let rate: f64 = values[key.as_str()].parse().unwrap();
                assert_eq!(rate, sum as f64 / secs as f64, "seed {seed}, {key}");
            }
        }
    }
}

#[test]
fn bad_names_labels_and_help_are_refused() {
    let clock = ManualClock::new();
    let w = sliding(&clock, MIN, 6);
    let c = ScrapeCollector::new();
    let refused = |r: Result<(), ConfigError>| matches!(r, Err(ConfigError::Invalid(_)));
    for name in ["", "1st", "a-b", "a b", "é"] {
        assert!(
            refused(c.sliding_window(name, "h", &[], w.clone())),
            "{name:?}"
        );
    }
    for label in ["", "1a", "a-b", "__reserved", "window"] {
        assert!(
            refused(c.sliding_window("m", "h", &[(label, "v")], w.clone())),
            "{label:?}"
        );
    }
    assert!(refused(c.sliding_window(
        "m",
        "h",
        &[("a", "1"), ("a", "2")],
        w.clone()
    )));
    for help in ["two\nlines", "a \"quote\"", "back\\slash", "tab\there"] {
        assert!(
            refused(c.sliding_window("m", help, &[], w.clone())),
            "{help:?}"
        );
    }
    // Nothing refused was kept.
    let mut registry = Registry::default();
    let c = Arc::new(c);
    registry.register_collector(Box::new(Arc::clone(&c)));
    assert_eq!(text(&registry), "# EOF\n");

    // Accepted: valid names, ':' in metric names, a digit after the first.
    c.sliding_window("ns:m_1", "h", &[("a", "1"), ("b2", "x")], w.clone())
        .unwrap();
    // One name, many series: same help, other labels (order does not count).
    c.multi_window("ns:m_1", "h", &[("a", "2")], day_levels(&clock))
        .unwrap();
    assert!(refused(c.sliding_window(
        "ns:m_1",
        "other help",
        &[("a", "3")],
        w.clone()
    )));
    assert!(refused(c.sliding_window(
        "ns:m_1",
        "h",
        &[("b2", "x"), ("a", "1")],
        w.clone()
    )));
    assert!(refused(c.multi_window(
        "ns:m_1",
        "h",
        &[("a", "2")],
        day_levels(&clock)
    )));
    assert_eq!(
        text(&registry)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count(),
        8
    );
}
