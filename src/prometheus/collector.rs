//! [`ScrapeCollector`]: the registered structures, checked when they join
//! and read once each when Prometheus scrapes (see the module docs of
//! [`crate::prometheus`] for what is written).

use super::source::{
    Family, HotKeySketchSource, KeyedLimiterSource, MultiSource, Sample, SlidingSource, Source,
    Value,
};
use crate::key::{Key, KeyHasher};
use crate::{Clock, ConfigError, HotKeySketch, KeyedLimiter, MultiWindow, SlidingWindow};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, PoisonError, RwLock};

/// A prometheus-client [`Collector`] that reads windows' sums and rates,
/// and keyed limiters' figures, at scrape time. See the [module docs](crate::prometheus) for the names,
/// types and labels it writes.
///
/// ```
/// use prometheus_client::registry::Registry;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use stripecount::prometheus::ScrapeCollector;
/// use stripecount::MultiWindow;
///
/// const MIN: Duration = Duration::from_secs(60);
/// let logins = Arc::new(MultiWindow::new(&[(MIN, 60), (60 * MIN, 60), (24 * 60 * MIN, 24)])?);
/// let collector = Arc::new(ScrapeCollector::new());
/// let mut registry = Registry::default();
/// registry.register_collector(Box::new(Arc::clone(&collector)));
/// // Structures can join after registration: exported as logins_window and
/// // logins_per_second, each with window="1m", "1h" and "1d".
/// collector.multi_window("logins", "Logins", &[], Arc::clone(&logins))?;
/// logins.add(1);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct ScrapeCollector {
    entries: RwLock<Vec<Entry>>,
}

/// One registered structure.
struct Entry {
    name: String,
    help: String,
    labels: Vec<(String, String)>,
    source: Box<dyn Source>,
}

impl ScrapeCollector {
    /// An empty collector.
    pub fn new() -> Self {
        ScrapeCollector {
            entries: RwLock::new(Vec::new()),
        }
    }

    /// Exports `window`'s sum and rate over its window as `<name>_window`
    /// and `<name>_per_second`, with `labels` and `window="<its window>"`.
    ///
    /// Errors ([`ConfigError::Invalid`]), and nothing is registered: a name
    /// or label name Prometheus would refuse, a label named twice or named
    /// `window`, a help text with a control character, `\` or `"`, a name
    /// already registered with another help text or with the same labels,
    /// or a family name another kind of structure writes.
    pub fn sliding_window<C: Clock>(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        window: Arc<SlidingWindow<C>>,
    ) -> Result<(), ConfigError> {
        self.insert(name, help, labels, Box::new(SlidingSource::new(window)))
    }

    /// Exports `window`'s sum and rate over each of its levels' windows, as
    /// [`sliding_window`](Self::sliding_window) does for one (same errors).
    pub fn multi_window<C: Clock>(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        window: Arc<MultiWindow<C>>,
    ) -> Result<(), ConfigError> {
        self.insert(name, help, labels, Box::new(MultiSource::new(window)))
    }

    /// Exports `limiter`'s own figures, with `labels`: `<name>_keys` (a
    /// gauge: keys held), `<name>_refused_total` (a counter: requests
    /// refused, [`KeyedLimiter::refusals`]) and `<name>_untracked_total` (a
    /// counter: decisions on keys it could not hold,
    /// [`KeyedLimiter::untracked_decisions`]). Errors as
    /// [`sliding_window`](Self::sliding_window), except that a label may be
    /// named `window` (the limiter writes no label of its own).
    ///
    /// ```
    /// use prometheus_client::{encoding::text::encode, registry::Registry};
    /// use std::sync::Arc;
    /// use stripecount::{prometheus::ScrapeCollector, KeyedLimiter, Quota};
    ///
    /// let lim = Arc::new(KeyedLimiter::<String>::new(Quota::per_minute(1))?);
    /// let collector = ScrapeCollector::new();
    /// collector.keyed_limiter("api_limiter", "Per-client API limit", &[], Arc::clone(&lim))?;
    /// let mut registry = Registry::default();
    /// registry.register_collector(Box::new(collector));
    /// assert!(lim.try_acquire("alice", 1) && !lim.try_acquire("alice", 1));
    /// let mut text = String::new();
    /// encode(&mut text, &registry).unwrap();
    /// assert!(text.contains("api_limiter_keys 1\n"));
    /// assert!(text.contains("api_limiter_refused_total 1\n"));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn keyed_limiter<K, C, S>(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        limiter: Arc<KeyedLimiter<K, C, S>>,
    ) -> Result<(), ConfigError>
    where
        K: Key,
        C: Clock,
        S: BuildHasher + Send + Sync + 'static,
    {
        let source = KeyedLimiterSource::new(limiter);
        self.insert(name, help, labels, Box::new(source))
    }

    /// Exports `sketch`'s own figures, with `labels`: `<name>_filtered_total`
    /// (a counter: adds its doorkeeper kept back,
    /// [`HotKeySketch::filtered_adds`]) and `<name>_untracked_total` (a
    /// counter: admitted adds not tracked because their slice was full,
    /// [`HotKeySketch::untracked_adds`]: a sketch with too little memory for
    /// its stream, whose keys at the threshold may go unreported; alert on
    /// its rate). Errors as [`keyed_limiter`](Self::keyed_limiter).
    ///
    /// ```
    /// use prometheus_client::{encoding::text::encode, registry::Registry};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use stripecount::{prometheus::ScrapeCollector, HotKeySketch};
    ///
    /// let hot = Arc::new(HotKeySketch::<u64>::new(Duration::from_secs(10), 10, 1_000, 1 << 20)?);
    /// let collector = ScrapeCollector::new();
    /// collector.hot_key_sketch("cache_hot", "Hot cache keys", &[], Arc::clone(&hot))?;
    /// let mut registry = Registry::default();
    /// registry.register_collector(Box::new(collector));
    /// hot.add(&7, 1); // below the admission level: kept back
    /// let mut text = String::new();
    /// encode(&mut text, &registry).unwrap();
    /// assert!(text.contains("cache_hot_filtered_total 1\n"));
    /// assert!(text.contains("cache_hot_untracked_total 0\n"));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn hot_key_sketch<K, C, S>(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        sketch: Arc<HotKeySketch<K, C, S>>,
    ) -> Result<(), ConfigError>
    where
        K: Key,
        C: Clock,
        S: KeyHasher,
    {
        let source = HotKeySketchSource::new(sketch);
        self.insert(name, help, labels, Box::new(source))
    }

    fn insert(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        source: Box<dyn Source>,
    ) -> Result<(), ConfigError> {
        check_name(name)?;
        check_help(help)?;
        let mut labels: Vec<(String, String)> = (labels.iter())
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        for (i, (key, _)) in labels.iter().enumerate() {
            check_label_name(key)?;
            if source.own_labels().contains(&key.as_str()) {
                return Err(ConfigError::Invalid(
                    "a label name is one the collector writes itself (`window`)",
                ));
            }
            if labels[..i].iter().any(|(k, _)| k == key) {
                return Err(ConfigError::Invalid("a label name is given twice"));
            }
        }
        labels.sort();
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        for e in entries.iter() {
            // Entries may share a family (same full name) only as series of
            // one metric: same name and kind, same help, other labels.
            for (f, g) in shared_families(e, name, source.families()) {
                // (A family of another kind of structure under the same
                // name says something else: a limiter's `_untracked` is
                // not a sketch's.)
                if e.name != name || f.kind.as_str() != g.kind.as_str() || f.help != g.help {
                    return Err(ConfigError::Invalid(
                        "a metric family name is already written by another kind of structure",
                    ));
                }
                if e.help != help {
                    return Err(ConfigError::Invalid(
                        "a metric name is already used with another help text",
                    ));
                }
                if e.labels == labels {
                    return Err(ConfigError::Invalid(
                        "a metric name is already used with the same labels",
                    ));
                }
            }
        }
        entries.push(Entry {
            name: name.to_owned(),
            help: help.to_owned(),
            labels,
            source,
        });
        Ok(())
    }
}

impl Default for ScrapeCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ScrapeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let mut list = f.debug_list();
        for e in entries.iter() {
            list.entry(&(&e.name, &e.labels));
        }
        list.finish()
    }
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        // One reading per structure, before anything is written.
        let readings: Vec<Vec<Sample<'_>>> = (entries.iter())
            .map(|e| {
                let mut out = Vec::new();
                e.source.read(&mut out);
                out
            })
            .collect();
        // Each family once, in order of first registration, with the series
        // of every entry that writes it.
        let mut written: Vec<String> = Vec::new();
        for (i, head) in entries.iter().enumerate() {
            for family in head.source.families() {
                let name = format!("{}{}", head.name, family.suffix);
                if written.contains(&name) {
                    continue;
                }
                let help = format!("{}, {}", head.help, family.help);
                let mut metric = encoder.encode_descriptor(&name, &help, None, family.kind)?;
                for (e, reading) in entries.iter().zip(&readings).skip(i) {
                    let Some(f) = e.family_index(&name) else {
                        continue;
                    };
                    for s in reading.iter().filter(|s| s.family == f) {
                        encode_sample(&mut metric, &e.labels, s, family.kind)?;
                    }
                }
                written.push(name);
            }
        }
        Ok(())
    }
}

impl Entry {
    /// The index of this entry's family whose full name is `full`.
    fn family_index(&self, full: &str) -> Option<usize> {
        (self.source.families().iter())
            .position(|f| full.strip_prefix(self.name.as_str()) == Some(f.suffix))
    }
}

/// Writes one sample with the entry's labels and the source's own.
fn encode_sample(
    metric: &mut MetricEncoder<'_>,
    labels: &[(String, String)],
    sample: &Sample<'_>,
    kind: MetricType,
) -> fmt::Result {
    let mut all: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (&**k, &**v)).collect();
    all.extend(sample.label);
    if all.is_empty() {
        encode_value(metric, &sample.value, kind)
    } else {
        encode_value(&mut metric.encode_family(&all)?, &sample.value, kind)
    }
}

fn encode_value(metric: &mut MetricEncoder<'_>, value: &Value, kind: MetricType) -> fmt::Result {
    match (kind, value) {
        (MetricType::Counter, Value::Count(v)) => {
            metric.encode_counter::<NoLabelSet, _, u64>(v, None)
        }
        (MetricType::Counter, Value::Real(v)) => {
            metric.encode_counter::<NoLabelSet, _, u64>(v, None)
        }
        (_, Value::Count(v)) => metric.encode_gauge(v),
        (_, Value::Real(v)) => metric.encode_gauge(v),
    }
}

/// The pairs of `e`'s families and the new entry's that have one full name.
fn shared_families(
    e: &Entry,
    name: &str,
    families: &'static [Family],
) -> Vec<(&'static Family, &'static Family)> {
    let mut shared = Vec::new();
    for g in e.source.families() {
        for f in families {
            if format!("{}{}", e.name, g.suffix) == format!("{name}{}", f.suffix) {
                shared.push((g, f));
            }
        }
    }
    shared
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`, the Prometheus metric name syntax.
fn check_name(name: &str) -> Result<(), ConfigError> {
    let ok = name.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    if name.is_empty() || !ok {
        return Err(ConfigError::Invalid(
            "a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*",
        ));
    }
    Ok(())
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved).
fn check_label_name(name: &str) -> Result<(), ConfigError> {
    let ok = name
        .chars()
        .enumerate()
        .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()));
    if name.is_empty() || !ok || name.starts_with("__") {
        return Err(ConfigError::Invalid(
            "a label name must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __",
        ));
    }
    Ok(())
}

/// prometheus-client writes help texts unescaped: refuse what would need it.
fn check_help(help: &str) -> Result<(), ConfigError> {
    if help
        .chars()
        .any(|c| c.is_control() || c == '\\' || c == '"')
    {
        return Err(ConfigError::Invalid(
            "a help text must not hold control characters, `\\` or `\"`",
        ));
    }
    Ok(())
}
