//! Prometheus export through [`prometheus-client`](https://docs.rs/prometheus-client)
//! (feature `prometheus`).
//!
//! - [`StripedCounter`] implements prometheus-client's counter store,
//!   [`counter::Atomic<u64>`](prometheus_client::metrics::counter::Atomic),
//!   so `Counter<u64, StripedCounter>` registers like any counter and its
//!   `inc` is a striped add.
//! - [`ScrapeCollector`] exposes windows' sums and rates, and a
//!   [`KeyedLimiter`](crate::KeyedLimiter)'s keys held, refusals and
//!   untracked decisions, and a [`HotKeySketch`](crate::HotKeySketch)'s
//!   filtered and untracked adds, read when Prometheus scrapes (nothing is copied
//!   on the hot path).
//!
//! # Serving it
//! prometheus-client writes the OpenMetrics text format (the body ends in
//! `# EOF`). Serve it with the OpenMetrics content type, [`CONTENT_TYPE`]:
//! served as the classic `text/plain; version=0.0.4`, Prometheus parses the
//! body with the classic parser, which reads the counters' `_total`
//! families as untyped. `examples/prometheus_server.rs` serves a scrape
//! endpoint (`cargo run --example prometheus_server --features prometheus`).
//!
//! ```
//! use prometheus_client::encoding::text::encode;
//! use prometheus_client::metrics::counter::Counter;
//! use prometheus_client::registry::Registry;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use stripecount::prometheus::ScrapeCollector;
//! use stripecount::clock::ManualClock;
//! use stripecount::{SlidingWindow, StripedCounter};
//!
//! let mut registry = Registry::default();
//! let jobs = Counter::<u64, StripedCounter>::default();
//! registry.register("jobs", "Jobs done", jobs.clone());
//!
//! // A manual clock keeps the window still while the test reads it.
//! let window = SlidingWindow::builder(Duration::from_secs(60), 60).clock(ManualClock::new());
//! let errors = Arc::new(window.build()?);
//! let collector = ScrapeCollector::new();
//! collector.sliding_window("errors", "Errors seen", &[("service", "api")], Arc::clone(&errors))?;
//! registry.register_collector(Box::new(collector));
//!
//! jobs.inc_by(3);
//! errors.add(30);
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert_eq!(
//!     text,
//!     concat!(
//!         "# HELP jobs Jobs done.\n",
//!         "# TYPE jobs counter\n",
//!         "jobs_total 3\n",
//!         "# HELP errors_window Errors seen, counted over the last `window`.\n",
//!         "# TYPE errors_window gauge\n",
//!         "errors_window{service=\"api\",window=\"1m\"} 30\n",
//!         "# HELP errors_per_second Errors seen, per second over the last `window`.\n",
//!         "# TYPE errors_per_second gauge\n",
//!         "errors_per_second{service=\"api\",window=\"1m\"} 0.5\n",
//!         "# EOF\n",
//!     )
//! );
//! # Ok::<(), stripecount::ConfigError>(())
//! ```
//!
//! # What a window exports
//! A structure registered under `name` writes two gauge families, one
//! series per window it answers, labelled `window` (`"10s"`, `"1m"`,
//! `"1h"`, `"1d"`: the largest whole unit) after the caller's labels
//! (sorted by name):
//! - `<name>_window`: the count over the last `window` (a gauge: it falls as
//!   old slices leave the window);
//! - `<name>_per_second`: that count divided by the window's seconds.
//!
//! A [`SlidingWindow`](crate::SlidingWindow) answers its window; a
//! [`MultiWindow`](crate::MultiWindow) answers each of its levels' windows
//! (levels of 1 minute, 1 hour and 1 day give `"1m"`, `"1h"` and `"1d"`).
//! Several structures may share a `name` (say, one per route) if they have
//! the same help text and different label sets; their series are written
//! under one family.
//!
//! # What a keyed limiter exports
//! A [`KeyedLimiter`](crate::KeyedLimiter) registered under `name` writes,
//! with the caller's labels only:
//! - `<name>_keys`: a gauge, the keys it holds now
//!   ([`len`](crate::KeyedLimiter::len));
//! - `<name>_refused_total`: a counter, the requests it refused for any
//!   reason ([`refusals`](crate::KeyedLimiter::refusals));
//! - `<name>_untracked_total`: a counter, its decisions on keys it could not
//!   hold ([`untracked_decisions`](crate::KeyedLimiter::untracked_decisions)):
//!   a key flood against `max_keys`.
//!
//! # What a hot-key sketch exports
//! A [`HotKeySketch`](crate::HotKeySketch) registered under `name` writes,
//! with the caller's labels only:
//! - `<name>_filtered_total`: a counter, the adds its doorkeeper kept back
//!   ([`filtered_adds`](crate::HotKeySketch::filtered_adds));
//! - `<name>_untracked_total`: a counter, the admitted adds not tracked
//!   because their slice was full
//!   ([`untracked_adds`](crate::HotKeySketch::untracked_adds)): the sketch
//!   has too little memory for its stream
//!   ([`memory_for`](crate::HotKeySketch::memory_for)), and keys at the
//!   threshold may go unreported. It should stay at 0.
//!
//! # Invariants
//! - A scrape reads each structure once, at one clock reading: its series
//!   (every window of a `MultiWindow`, a sum and its rate) are from the same
//!   instant. Reads are the structures' own sums; adds never see the
//!   collector.
//! - The collector's output is valid by construction: names, labels and
//!   help texts are checked when a structure is registered
//!   ([`ConfigError::Invalid`](crate::ConfigError::Invalid) says what was
//!   wrong), and no two of its structures write the same series or family.
//!   (Names of the registry's other metrics are the caller's to keep
//!   apart.)
//! - The collector's list is behind a lock taken by registrations and
//!   scrapes only. Methods take `&self`: keep an `Arc<ScrapeCollector>`,
//!   register a clone (`Box::new(Arc::clone(&c))`) and add structures later.
//!
//! # Adding a kind of structure
//! Every registered structure is a *source* (`src/prometheus/source.rs`):
//! a fixed list of families (suffix, help, type), the label names it adds
//! itself, and one reading that yields all its samples. A new kind is one
//! more `Source` and one registration method on [`ScrapeCollector`] (the
//! keyed limiter's was added that way); grouping, checks and encoding stay
//! as they are.
//!
//! # `inc` returns 0
//! prometheus-client's `Atomic::inc`/`inc_by` return the previous value.
//! A striped counter has no single previous value, and reading every cell
//! on each increment would cost what striping saves, so they return 0. Use
//! `get()` (a [`StripedCounter::sum`]) to read the total.

mod collector;
mod source;

pub use collector::ScrapeCollector;

/// The content type of a scrape body written by prometheus-client's
/// `encode`: OpenMetrics text 1.0.0. Send it as the response's
/// `Content-Type`, so that Prometheus parses the body as OpenMetrics and
/// keeps the counters' types (see the module docs).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

use crate::StripedCounter;
use prometheus_client::metrics::counter::Atomic;

impl Atomic<u64> for StripedCounter {
    /// Adds one; returns 0, not the previous total (see the module docs).
    #[inline]
    fn inc(&self) -> u64 {
        self.add(1);
        0
    }

    /// Adds `v`; returns 0, not the previous total (see the module docs).
    #[inline]
    fn inc_by(&self, v: u64) -> u64 {
        self.add(v);
        0
    }

    /// The total ([`StripedCounter::sum`]).
    fn get(&self) -> u64 {
        self.sum()
    }
}
