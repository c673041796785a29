//! [`Registry`]: the recorder behind the `metrics` macros on the local
//! server, rendered as Prometheus text (exposition format 0.0.4).
//!
//! Counters and gauges are single atomics and histograms fixed buckets of
//! atomics, so recording costs a few atomic adds and needs no background
//! work: nothing queues between scrapes, however long nobody scrapes.
//!
//! Why not `metrics-exporter-prometheus`: its recorder reads time through
//! `quanta`, whose first clock calibrates the TSC in a busy loop when the
//! recorder is built. On the 2-core bench VM that held the server's start
//! for about 1 ms in the median of 60 starts and up to quanta's 200 ms cap
//! (p90 3.7 ms), all of it before the first request could be served; it
//! also queued histogram samples until a scrape, which needed an upkeep
//! thread to keep an unscraped server's memory bounded. The exposition we
//! need (counters, gauges, histograms with set buckets) is small enough to
//! own.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// The histogram buckets of a metric, by name.
pub type BucketRule = fn(&str) -> &'static [f64];

/// Every series recorded in this process, by kind, and the descriptions
/// given for their names.
pub struct Registry {
    counters: Series<AtomicU64>,
    gauges: Series<AtomicU64>,
    histograms: Series<Buckets>,
    help: RwLock<BTreeMap<String, SharedString>>,
    buckets_for: BucketRule,
}

/// One kind's series, sorted by key (name first), so that rendering groups
/// a name's series together without sorting.
struct Series<T>(RwLock<BTreeMap<Key, Arc<T>>>);

impl<T> Series<T> {
    /// The series of `key`, made by `new` on its first registration. The
    /// macros register on every use, so the common case is a read lock.
    fn get_or_insert(&self, key: &Key, new: impl FnOnce() -> T) -> Arc<T> {
        if let Some(s) = self.0.read().unwrap_or_else(PoisonError::into_inner).get(key) {
            return Arc::clone(s);
        }
        let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(key.clone()).or_insert_with(|| Arc::new(new())))
    }

    fn snapshot(&self) -> Vec<(Key, Arc<T>)> {
        let map = self.0.read().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect()
    }
}

impl<T> Default for Series<T> {
    fn default() -> Self {
        Self(RwLock::default())
    }
}

/// A histogram: a count per bucket (not cumulative; cumulated when
/// rendered), the count above the last bound, and the sum as `f64` bits.
struct Buckets {
    bounds: &'static [f64],
    counts: Box<[AtomicU64]>,
    above: AtomicU64,
    sum: AtomicU64,
}

impl Buckets {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            above: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        if value.is_nan() {
            // No bucket holds it, and it would turn the sum into NaN for good.
            return;
        }
        // The first bound ≥ value: buckets are `le` (less than or equal).
        let i = self.bounds.partition_point(|b| *b < value);
        match self.counts.get(i) {
            Some(c) => c.fetch_add(1, Ordering::Relaxed),
            None => self.above.fetch_add(1, Ordering::Relaxed),
        };
        let mut cur = self.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + value).to_bits();
            match self.sum.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
    }
}

impl Registry {
    pub fn new(buckets_for: BucketRule) -> Self {
        Self {
            counters: Series::default(),
            gauges: Series::default(),
            histograms: Series::default(),
            help: RwLock::default(),
            buckets_for,
        }
    }

    fn describe(&self, name: KeyName, description: SharedString) {
        self.help.write().unwrap_or_else(PoisonError::into_inner).insert(name.as_str().to_owned(), description);
    }

    /// The Prometheus text of every series, a name's `# HELP` (if described)
    /// and `# TYPE` lines before its samples.
    pub fn render(&self) -> String {
        let help = self.help.read().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let head = |out: &mut String, name: &str, kind: &str| {
            if let Some(text) = help.get(name) {
                let _ = writeln!(out, "# HELP {name} {}", escape(text, false));
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
        };
        let mut last = String::new();
        for (key, value) in self.counters.snapshot() {
            if key.name() != last {
                head(&mut out, key.name(), "counter");
                last = key.name().to_owned();
            }
            sample(&mut out, key.name(), "", &key, None, &value.load(Ordering::Relaxed).to_string());
        }
        for (key, value) in self.gauges.snapshot() {
            if key.name() != last {
                head(&mut out, key.name(), "gauge");
                last = key.name().to_owned();
            }
            sample(&mut out, key.name(), "", &key, None, &number(f64::from_bits(value.load(Ordering::Relaxed))));
        }
        for (key, h) in self.histograms.snapshot() {
            if key.name() != last {
                head(&mut out, key.name(), "histogram");
                last = key.name().to_owned();
            }
            let name = key.name();
            let mut cumulative = 0u64;
            for (bound, count) in h.bounds.iter().zip(h.counts.iter()) {
                cumulative += count.load(Ordering::Relaxed);
                sample(&mut out, name, "_bucket", &key, Some(&number(*bound)), &cumulative.to_string());
            }
            // `+Inf` and `_count` from the same loads, so they always agree.
            cumulative += h.above.load(Ordering::Relaxed);
            sample(&mut out, name, "_bucket", &key, Some("+Inf"), &cumulative.to_string());
            sample(&mut out, name, "_sum", &key, None, &number(f64::from_bits(h.sum.load(Ordering::Relaxed))));
            sample(&mut out, name, "_count", &key, None, &cumulative.to_string());
        }
        out
    }
}

/// `name{labels,le} value` on one line.
fn sample(out: &mut String, name: &str, suffix: &str, key: &Key, le: Option<&str>, value: &str) {
    out.push_str(name);
    out.push_str(suffix);
    let labels = key.labels().map(|l| (l.key(), l.value())).chain(le.map(|le| ("le", le)));
    for (i, (k, v)) in labels.enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        let _ = write!(out, "{k}=\"{}\"", escape(v, true));
    }
    if key.labels().len() > 0 || le.is_some() {
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// Backslash and line feed escaped (help text); double quotes too in label
/// values.
fn escape(s: &str, quotes: bool) -> std::borrow::Cow<'_, str> {
    let plain = !s.contains(['\\', '\n']) && (!quotes || !s.contains('"'));
    if plain {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.into()
}

/// A sample value or bound: Prometheus spells infinities `+Inf`/`-Inf`.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

impl Recorder for Registry {
    fn describe_counter(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }
    fn describe_gauge(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }
    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.counters.get_or_insert(key, || AtomicU64::new(0)))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.gauges.get_or_insert(key, || AtomicU64::new(0f64.to_bits())))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.histograms.get_or_insert(key, || Buckets::new((self.buckets_for)(key.name()))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const BOUNDS: &[f64] = &[0.5, 1.0, 2.0];

    fn registry() -> Registry {
        Registry::new(|_| BOUNDS)
    }

    #[test]
    fn histograms_render_cumulative_le_buckets_with_sum_and_count() {
        let r = registry();
        metrics::with_local_recorder(&r, || {
            let h = metrics::histogram!("lat_seconds", "route" => "read");
            for v in [0.25, 0.5, 0.75, 2.0, 9.0, f64::NAN] {
                h.record(v);
            }
        });
        let text = r.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "# TYPE lat_seconds histogram",
                "lat_seconds_bucket{route=\"read\",le=\"0.5\"} 2",
                "lat_seconds_bucket{route=\"read\",le=\"1\"} 3",
                "lat_seconds_bucket{route=\"read\",le=\"2\"} 4",
                "lat_seconds_bucket{route=\"read\",le=\"+Inf\"} 5",
                "lat_seconds_sum{route=\"read\"} 12.5",
                "lat_seconds_count{route=\"read\"} 5",
            ],
            "a value equal to a bound falls in that bound's bucket; NaN is not recorded"
        );
    }

    #[test]
    fn series_group_under_one_help_and_type_and_label_values_are_escaped() {
        let r = registry();
        metrics::with_local_recorder(&r, || {
            metrics::describe_counter!("hits_total", "Hits\\misses,\nper route");
            metrics::counter!("hits_total", "route" => "b").increment(2);
            metrics::counter!("hits_total", "route" => "a\"q\\\n").increment(1);
            metrics::counter!("hits_total", "route" => "b").increment(3);
            metrics::gauge!("open").set(2.5);
            metrics::gauge!("open").decrement(0.5);
            metrics::gauge!("inf").set(f64::INFINITY);
        });
        let text = r.render();
        assert_eq!(
            text,
            "# HELP hits_total Hits\\\\misses,\\nper route\n# TYPE hits_total counter\n\
             hits_total{route=\"a\\\"q\\\\\\n\"} 1\nhits_total{route=\"b\"} 5\n\
             # TYPE inf gauge\ninf +Inf\n# TYPE open gauge\nopen 2\n"
        );
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
        assert_eq!(scrape.samples.len(), 4, "every line parses as a sample: {text}");
    }

    #[test]
    fn handles_registered_twice_share_one_series() {
        let r = registry();
        let (a, b) = metrics::with_local_recorder(&r, || (metrics::counter!("n_total"), metrics::counter!("n_total")));
        a.increment(1);
        b.increment(1);
        assert_eq!(r.render(), "# TYPE n_total counter\nn_total 2\n");
    }
}
