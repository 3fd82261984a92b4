//! Sources: what each kind of structure registered with a
//! [`ScrapeCollector`](super::ScrapeCollector) exports, and how one reading
//! of it is taken.
//!
//! A source declares a fixed list of [`Family`]s (written as
//! `<name><suffix>`, with a help text appended to the caller's and a
//! Prometheus type) and the label names it adds itself; each scrape calls
//! [`Source::read`] once and gets every sample of every family, so all of a
//! structure's figures come from one instant. A new kind of structure is
//! one more `Source` here and one registration method on the collector;
//! the collector's grouping, checks and encoding do not change.
//!
//! A keyed limiter writes `<name>_keys` (gauge: keys held), `<name>_refused`
//! and `<name>_untracked` (counters, written with the `_total` suffix:
//! refused requests, decisions on keys the `max_keys` bound kept out), no
//! label of its own. A hot-key sketch writes `<name>_filtered` and
//! `<name>_untracked` (counters: adds its doorkeeper kept back, admitted
//! adds a full slice did not track), no label of its own.

use crate::clock::duration_nanos;
use crate::key::Key;
use crate::key::KeyHasher;
use crate::{Clock, HotKeySketch, KeyedLimiter, MultiWindow, SlidingWindow};
use prometheus_client::metrics::MetricType;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

/// What one registered structure exports.
pub(super) trait Source: Send + Sync + 'static {
    /// The families written; the same list for every source of a kind.
    fn families(&self) -> &'static [Family];
    /// The label names this source adds to its samples itself (callers may
    /// not use them).
    fn own_labels(&self) -> &'static [&'static str];
    /// One reading of the structure at one instant: its samples.
    fn read<'a>(&'a self, out: &mut Vec<Sample<'a>>);
}

/// A metric family a source writes: `<name><suffix>`.
pub(super) struct Family {
    pub(super) suffix: &'static str,
    /// Appended to the caller's help text (after ", ").
    pub(super) help: &'static str,
    pub(super) kind: MetricType,
}

/// One series: the index of its family in [`Source::families`], the label
/// the source adds (if any), and its value.
pub(super) struct Sample<'a> {
    pub(super) family: usize,
    pub(super) label: Option<(&'static str, &'a str)>,
    pub(super) value: Value,
}

/// A sample's value: written as an integer or a float.
pub(super) enum Value {
    Count(u64),
    Real(f64),
}

/// Both window kinds write these, so they may share a name.
const WINDOW_FAMILIES: &[Family] = &[
    Family {
        suffix: "_window",
        help: "counted over the last `window`.",
        kind: MetricType::Gauge,
    },
    Family {
        suffix: "_per_second",
        help: "per second over the last `window`.",
        kind: MetricType::Gauge,
    },
];
const WINDOW_LABELS: &[&str] = &["window"];

/// A window's sum and rate samples for one span.
fn window_samples<'a>(out: &mut Vec<Sample<'a>>, label: &'a str, span: Duration, sum: u64) {
    let label = Some(("window", label));
    out.push(Sample {
        family: 0,
        label,
        value: Value::Count(sum),
    });
    out.push(Sample {
        family: 1,
        label,
        value: Value::Real(sum as f64 / span.as_secs_f64()),
    });
}

/// A [`SlidingWindow`]: one series per family, for its window.
pub(super) struct SlidingSource<C: Clock> {
    window: Arc<SlidingWindow<C>>,
    label: String,
}

impl<C: Clock> SlidingSource<C> {
    pub(super) fn new(window: Arc<SlidingWindow<C>>) -> Self {
        let label = window_label(window.window());
        SlidingSource { window, label }
    }
}

impl<C: Clock> Source for SlidingSource<C> {
    fn families(&self) -> &'static [Family] {
        WINDOW_FAMILIES
    }
    fn own_labels(&self) -> &'static [&'static str] {
        WINDOW_LABELS
    }
    fn read<'a>(&'a self, out: &mut Vec<Sample<'a>>) {
        let w = &self.window;
        let sum = w.sum_at(w.clock().now());
        window_samples(out, &self.label, w.window(), sum);
    }
}

/// A [`MultiWindow`]: one series per family for each level's window, all
/// read at one clock reading.
pub(super) struct MultiSource<C: Clock> {
    window: Arc<MultiWindow<C>>,
    /// Each level's window and its label, finest first.
    spans: Vec<(Duration, String)>,
}

impl<C: Clock> MultiSource<C> {
    pub(super) fn new(window: Arc<MultiWindow<C>>) -> Self {
        let spans = (0..window.levels())
            .filter_map(|i| window.level(i))
            .map(|(span, _)| (span, window_label(span)))
            .collect();
        MultiSource { window, spans }
    }
}

impl<C: Clock> Source for MultiSource<C> {
    fn families(&self) -> &'static [Family] {
        WINDOW_FAMILIES
    }
    fn own_labels(&self) -> &'static [&'static str] {
        WINDOW_LABELS
    }
    fn read<'a>(&'a self, out: &mut Vec<Sample<'a>>) {
        let now = self.window.clock().now();
        for (span, label) in &self.spans {
            window_samples(out, label, *span, self.window.sum_over_at(now, *span));
        }
    }
}

/// A [`KeyedLimiter`]'s own figures.
const KEYED_LIMITER_FAMILIES: &[Family] = &[
    Family {
        suffix: "_keys",
        help: "keys held.",
        kind: MetricType::Gauge,
    },
    Family {
        suffix: "_refused",
        help: "requests refused.",
        kind: MetricType::Counter,
    },
    Family {
        suffix: "_untracked",
        help: "decisions on keys the limiter could not hold.",
        kind: MetricType::Counter,
    },
];

/// A [`KeyedLimiter`]: keys held ([`KeyedLimiter::len`]), refusals
/// ([`KeyedLimiter::refusals`]) and untracked decisions
/// ([`KeyedLimiter::untracked_decisions`]), one series each.
pub(super) struct KeyedLimiterSource<K: 'static, C: Clock, S> {
    limiter: Arc<KeyedLimiter<K, C, S>>,
}

impl<K: Key, C: Clock, S> KeyedLimiterSource<K, C, S> {
    pub(super) fn new(limiter: Arc<KeyedLimiter<K, C, S>>) -> Self {
        KeyedLimiterSource { limiter }
    }
}

impl<K, C, S> Source for KeyedLimiterSource<K, C, S>
where
    K: Key,
    C: Clock,
    S: BuildHasher + Send + Sync + 'static,
{
    fn families(&self) -> &'static [Family] {
        KEYED_LIMITER_FAMILIES
    }
    fn own_labels(&self) -> &'static [&'static str] {
        &[]
    }
    fn read<'a>(&'a self, out: &mut Vec<Sample<'a>>) {
        let l = &self.limiter;
        let values = [l.len() as u64, l.refusals(), l.untracked_decisions()];
        for (family, v) in values.into_iter().enumerate() {
            out.push(Sample {
                family,
                label: None,
                value: Value::Count(v),
            });
        }
    }
}

/// A [`HotKeySketch`]'s own figures.
const HOT_KEY_SKETCH_FAMILIES: &[Family] = &[
    Family {
        suffix: "_filtered",
        help: "adds the doorkeeper kept back (below the admission level).",
        kind: MetricType::Counter,
    },
    Family {
        suffix: "_untracked",
        help: "admitted adds not tracked because their slice was full (too little memory for the stream).",
        kind: MetricType::Counter,
    },
];

/// A [`HotKeySketch`]: adds kept back ([`HotKeySketch::filtered_adds`])
/// and adds not tracked ([`HotKeySketch::untracked_adds`]), one series
/// each.
pub(super) struct HotKeySketchSource<K: 'static, C: Clock, S> {
    sketch: Arc<HotKeySketch<K, C, S>>,
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeySketchSource<K, C, S> {
    pub(super) fn new(sketch: Arc<HotKeySketch<K, C, S>>) -> Self {
        HotKeySketchSource { sketch }
    }
}

impl<K: Key, C: Clock, S: KeyHasher> Source for HotKeySketchSource<K, C, S> {
    fn families(&self) -> &'static [Family] {
        HOT_KEY_SKETCH_FAMILIES
    }
    fn own_labels(&self) -> &'static [&'static str] {
        &[]
    }
    fn read<'a>(&'a self, out: &mut Vec<Sample<'a>>) {
        let d = &self.sketch;
        let values = [d.filtered_adds(), d.untracked_adds()];
        for (family, v) in values.into_iter().enumerate() {
            out.push(Sample {
                family,
                label: None,
                value: Value::Count(v),
            });
        }
    }
}

/// A window's `window` label: its length in the largest unit that divides
/// it (`"1d"`, `"1h"`, `"90s"`, `"250ms"`, ...).
fn window_label(d: Duration) -> String {
    const UNITS: [(u64, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = duration_nanos(d);
    // The last unit divides every length.
    let (unit, suffix) = (UNITS.into_iter())
        .find(|&(unit, _)| nanos % unit == 0)
        .unwrap_or((1, "ns"));
    format!("{}{suffix}", nanos / unit)
}
