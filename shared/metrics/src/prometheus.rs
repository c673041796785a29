//! Prometheus text exposition through the `metrics` facade: one process-wide
//! recorder, so store crates record their figures with the `metrics` macros
//! and need no handle passed down.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use crate::{Exchange, Metrics};
use metrics::{Counter, Histogram};

use crate::registry::Registry;

/// Seconds: 100 µs to 60 s (SSE and long-poll heads wait for data).
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Commits per durable transaction: powers of two up to the writer's cap.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// Sets gauges that are read rather than counted, just before a scrape.
pub type ScrapeHook = Box<dyn Fn() + Send + Sync>;

pub struct PrometheusMetrics {
    registry: Arc<Registry>,
    hooks: Vec<ScrapeHook>,
    /// Hashed with foldhash, not SipHash: the keys are our own route labels
    /// and status codes, never a client's bytes, so there is no flooding
    /// to resist, and SipHash was 0.9% of a 100 B append's instructions.
    series: RwLock<HashMap<(&'static str, u16), Series, foldhash::fast::RandomState>>,
}

/// The handles an exchange of one route and status reports to, resolved
/// once: through the macros, each report built its label set and looked it
/// up in the recorder's registry again (four times per request). Routes are
/// static labels and statuses few, so the map stays small.
struct Series {
    requests: Counter,
    duration: Histogram,
    /// Registered on the first non-zero count, as the macros did (a route
    /// that never carries a body shows no byte series).
    bytes_in: OnceLock<Counter>,
    bytes_out: OnceLock<Counter>,
}

impl Series {
    fn new(route: &'static str, status: u16) -> Self {
        Self {
            requests: metrics::counter!("ds_http_requests_total", "route" => route, "status" => status_label(status)),
            duration: metrics::histogram!("ds_http_request_duration_seconds", "route" => route),
            bytes_in: OnceLock::new(),
            bytes_out: OnceLock::new(),
        }
    }

    fn report(&self, e: &Exchange) {
        self.requests.increment(1);
        self.duration.record(e.latency.as_secs_f64());
        let route = e.route;
        if e.bytes_in > 0 {
            let counter = || metrics::counter!("ds_http_request_bytes_total", "route" => route);
            self.bytes_in.get_or_init(counter).increment(e.bytes_in);
        }
        if e.bytes_out > 0 {
            let counter = || metrics::counter!("ds_http_response_bytes_total", "route" => route);
            self.bytes_out.get_or_init(counter).increment(e.bytes_out);
        }
    }
}

impl PrometheusMetrics {
    /// Installs the process-wide recorder (once per process: a second call
    /// fails).
    pub fn install(hooks: Vec<ScrapeHook>) -> Result<Arc<Self>, String> {
        let registry = Arc::new(Registry::new(buckets_for));
        metrics::set_global_recorder(Arc::clone(&registry)).map_err(|e| e.to_string())?;
        describe();
        Ok(Arc::new(Self { registry, hooks, series: RwLock::default() }))
    }
}

/// Latency buckets for every `*_seconds` histogram, commit batch sizes for
/// the batch histogram; anything else gets the latency buckets too.
fn buckets_for(name: &str) -> &'static [f64] {
    if name == "ds_store_commit_batch_size" {
        BATCH_BUCKETS
    } else {
        LATENCY_BUCKETS
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!("ds_http_requests_total", "HTTP exchanges finished, by route and status");
    describe_histogram!("ds_http_request_duration_seconds", Unit::Seconds, "Time to the response head, by route");
    describe_counter!("ds_http_request_bytes_total", Unit::Bytes, "Request body bytes read, by route");
    describe_counter!("ds_http_response_bytes_total", Unit::Bytes, "Response body bytes sent, by route");
    describe_gauge!("ds_live_readers", "Open live reads (long-poll, SSE)");
    describe_gauge!("ds_stream_contexts", "Streams with in-process state (in use now)");
    describe_histogram!("ds_store_commit_batch_size", "Commits per durable transaction (group commit)");
    describe_histogram!("ds_store_fsync_seconds", Unit::Seconds, "Durable batch commit time: log append and fdatasync");
    describe_histogram!(
        "ds_store_checkpoint_seconds",
        Unit::Seconds,
        "Checkpoint time: the overlay written into the tables, fsync included"
    );
    describe_counter!(
        "ds_store_read_cache_hits_total",
        "Catch-up reads of the local store served (at least in part) from its cache of recent catch-up reads"
    );
    describe_gauge!("ds_processor_streams", "Streams a hosted processor runs on, by processor");
    describe_gauge!(
        "ds_processor_max_lag",
        "Largest lag (tail offset minus acknowledged cursor) over a processor's streams"
    );
}

/// Status codes as static labels (no allocation per request).
fn status_label(status: u16) -> metrics::SharedString {
    const KNOWN: [(u16, &str); 16] = [
        (200, "200"),
        (201, "201"),
        (204, "204"),
        (304, "304"),
        (400, "400"),
        (401, "401"),
        (403, "403"),
        (404, "404"),
        (405, "405"),
        (409, "409"),
        (410, "410"),
        (413, "413"),
        (429, "429"),
        (500, "500"),
        (501, "501"),
        (503, "503"),
    ];
    match KNOWN.iter().find(|(c, _)| *c == status) {
        Some((_, s)) => metrics::SharedString::const_str(s),
        None => metrics::SharedString::from(status.to_string()),
    }
}

impl Metrics for PrometheusMetrics {
    fn exchange(&self, e: &Exchange) {
        let key = (e.route, e.status);
        if let Some(s) = self.series.read().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return s.report(e);
        }
        let mut map = self.series.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(key).or_insert_with(|| Series::new(e.route, e.status)).report(e);
    }
    fn live_readers(&self, mode: &'static str, delta: i64) {
        metrics::gauge!("ds_live_readers", "mode" => mode).increment(delta as f64);
    }

    fn render(&self) -> Option<String> {
        for hook in &self.hooks {
            hook();
        }
        Some(self.registry.render())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> prometheus_parse::Scrape {
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
    }

    fn value(scrape: &prometheus_parse::Scrape, name: &str, label: (&str, &str)) -> Option<f64> {
        scrape.samples.iter().find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1)).map(|s| {
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            }
        })
    }

    #[test]
    fn exchanges_become_parseable_counters_histograms_and_gauges() {
        let m = PrometheusMetrics::install(vec![Box::new(|| metrics::gauge!("ds_stream_contexts").set(7.0))]).unwrap();
        let e = |status, bytes_in| Exchange {
            route: "stream_append",
            method: http::Method::POST,
            status,
            latency: Duration::from_millis(3),
            bytes_in,
            bytes_out: 0,
        };
        m.exchange(&e(204, 100));
        m.exchange(&e(204, 50));
        m.exchange(&e(401, 0));
        m.live_readers("sse", 1);
        m.live_readers("sse", 1);
        m.live_readers("sse", -1);
        metrics::histogram!("ds_store_commit_batch_size").record(3.0);
        let scrape = parse(&m.render().unwrap());
        let requests: Vec<_> = scrape.samples.iter().filter(|s| s.metric == "ds_http_requests_total").collect();
        let by_status = |st: &str| {
            requests.iter().find(|s| s.labels.get("status") == Some(st)).map(|s| match s.value {
                prometheus_parse::Value::Counter(v) => v,
                _ => f64::NAN,
            })
        };
        assert_eq!(by_status("204"), Some(2.0));
        assert_eq!(by_status("401"), Some(1.0));
        assert_eq!(value(&scrape, "ds_http_request_bytes_total", ("route", "stream_append")), Some(150.0));
        assert_eq!(value(&scrape, "ds_live_readers", ("mode", "sse")), Some(1.0));
        assert!(scrape.samples.iter().any(|s| s.metric == "ds_stream_contexts"));
        let latency = scrape.samples.iter().find(|s| s.metric == "ds_http_request_duration_seconds").unwrap();
        match &latency.value {
            prometheus_parse::Value::Histogram(buckets) => {
                let le_5ms = buckets.iter().find(|b| (b.less_than - 0.005).abs() < 1e-9).unwrap();
                assert_eq!(le_5ms.count, 3.0, "three 3 ms exchanges fall under 5 ms");
            }
            other => panic!("not a histogram: {other:?}"),
        }
        assert!(scrape.samples.iter().any(|s| s.metric == "ds_store_commit_batch_size"));
    }
}
