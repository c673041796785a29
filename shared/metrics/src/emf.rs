//! CloudWatch Embedded Metric Format: one JSON line per exchange on stdout,
//! which Lambda ships to CloudWatch Logs and CloudWatch turns into metrics
//! (`Requests`, `Latency`, `BytesIn`, `BytesOut` by `route` and `status`, in
//! the configured namespace) without any API call from the function.
//! Live readers are not a separate figure here: each Lambda instance serves
//! one request at a time, so the `stream_sse`/`stream_long_poll` requests
//! and Lambda's own concurrency metrics already count them.

use std::io::Write;
use std::sync::Mutex;

use crate::{Exchange, Metrics};
use ds_clock::Clock;
use serde_json::{json, Value};

pub struct EmfMetrics {
    namespace: String,
    out: Mutex<Box<dyn Write + Send>>,
    clock: Clock,
}

impl EmfMetrics {
    /// Lines go to stdout (Lambda's log stream).
    pub fn stdout(namespace: impl Into<String>) -> Self {
        Self::to_writer(namespace, Box::new(std::io::stdout()))
    }

    pub fn to_writer(namespace: impl Into<String>, out: Box<dyn Write + Send>) -> Self {
        Self { namespace: namespace.into(), out: Mutex::new(out), clock: Clock::system() }
    }

    /// Timestamps lines by `clock` instead of the system's.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// One EMF document: `fields` (the dimensions' and the metrics'
    /// values) under the `_aws` block declaring `metrics` (name, unit) by
    /// `dimensions` in this namespace, timestamped now.
    fn document(&self, dimensions: Value, metrics: &[(&str, &str)], fields: Value) -> String {
        let metrics: Vec<Value> = metrics.iter().map(|(name, unit)| json!({"Name": name, "Unit": unit})).collect();
        let mut doc = json!({
            "_aws": {
                "Timestamp": self.clock.now_ms(),
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": dimensions,
                    "Metrics": metrics,
                }],
            },
        });
        if let (Some(doc), Value::Object(fields)) = (doc.as_object_mut(), fields) {
            doc.extend(fields);
        }
        doc.to_string()
    }

    /// The EMF document for one exchange.
    pub fn line(&self, e: &Exchange) -> String {
        self.document(
            json!([["route"], ["route", "status"]]),
            &[("Requests", "Count"), ("Latency", "Milliseconds"), ("BytesIn", "Bytes"), ("BytesOut", "Bytes")],
            json!({
                "route": e.route,
                "status": e.status.to_string(),
                "method": e.method.as_str(),
                "Requests": 1,
                "Latency": e.latency.as_secs_f64() * 1e3,
                "BytesIn": e.bytes_in,
                "BytesOut": e.bytes_out,
            }),
        )
    }
}

/// A processor's lag as the host measured it (for [`EmfMetrics::processor_lag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessorLag<'a> {
    /// The processor's slug: the only dimension. Stream paths are not
    /// dimensions: every distinct value is a billed custom metric.
    pub processor: &'a str,
    /// Tail offset minus the acknowledged cursor, after the host's turn.
    pub lag: u64,
    /// Streams the figure covers.
    pub streams: u64,
}

impl EmfMetrics {
    /// The EMF document for a processor's lag: metrics `ProcessorLag`
    /// (Count) and `ProcessorStreams` by `processor`, and without a
    /// dimension (what one alarm watches for every processor).
    pub fn processor_lag_line(&self, lag: &ProcessorLag<'_>) -> String {
        self.document(
            json!([["processor"], []]),
            &[("ProcessorLag", "Count"), ("ProcessorStreams", "Count")],
            json!({
                "processor": lag.processor,
                "ProcessorLag": lag.lag,
                "ProcessorStreams": lag.streams,
            }),
        )
    }

    /// Writes [`Self::processor_lag_line`] to the log.
    pub fn processor_lag(&self, lag: &ProcessorLag<'_>) {
        self.write_line(&self.processor_lag_line(lag));
    }

    /// The EMF document of a count without dimensions (e.g.
    /// `RevivalFailures`).
    pub fn count_line(&self, metric: &str, count: u64) -> String {
        self.document(json!([[]]), &[(metric, "Count")], json!({ metric: count }))
    }

    /// Writes [`Self::count_line`] to the log.
    pub fn count(&self, metric: &str, count: u64) {
        self.write_line(&self.count_line(metric, count));
    }

    fn write_line(&self, line: &str) {
        let mut out = self.out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl Metrics for EmfMetrics {
    fn exchange(&self, e: &Exchange) {
        self.write_line(&self.line(e));
    }

    fn live_readers(&self, _mode: &'static str, _delta: i64) {}
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_valid_emf_document_per_exchange() {
        let buf = Buf::default();
        let m = EmfMetrics::to_writer("DurableStreams", Box::new(buf.clone()));
        let e = Exchange {
            route: "stream_read",
            method: http::Method::GET,
            status: 200,
            latency: Duration::from_micros(2500),
            bytes_in: 0,
            bytes_out: 1234,
        };
        m.exchange(&e);
        m.exchange(&Exchange { status: 403, ..e });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        let doc = &lines[0];
        let spec = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(spec["Namespace"], "DurableStreams");
        // Every declared metric is a top-level number and every dimension a
        // top-level string: what CloudWatch requires of an EMF document.
        for m in spec["Metrics"].as_array().unwrap() {
            assert!(doc[m["Name"].as_str().unwrap()].is_number(), "{m}");
        }
        for set in spec["Dimensions"].as_array().unwrap() {
            for d in set.as_array().unwrap() {
                assert!(doc[d.as_str().unwrap()].is_string(), "{d}");
            }
        }
        assert!(doc["_aws"]["Timestamp"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(doc["Latency"], 2.5);
        assert_eq!(doc["BytesOut"], 1234);
        assert_eq!(lines[1]["status"], "403");
    }

    #[test]
    fn processor_lag_is_a_valid_emf_document_by_processor() {
        let buf = Buf::default();
        let m = EmfMetrics::to_writer("DurableStreams", Box::new(buf.clone()));
        m.processor_lag(&ProcessorLag { processor: "outbox", lag: 42, streams: 3 });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let doc: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        let spec = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(spec["Dimensions"], serde_json::json!([["processor"], []]), "by processor, and over all of them");
        for m in spec["Metrics"].as_array().unwrap() {
            assert!(doc[m["Name"].as_str().unwrap()].is_number(), "{m}");
        }
        assert_eq!((doc["processor"].as_str(), doc["ProcessorLag"].as_u64()), (Some("outbox"), Some(42)));
    }

    #[test]
    fn a_count_is_a_valid_emf_document_without_dimensions() {
        let buf = Buf::default();
        let m = EmfMetrics::to_writer("DurableStreams", Box::new(buf.clone()))
            .with_clock(ds_clock::Clock::manual(1_700_000_000_123));
        m.count("RevivalFailures", 3);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let doc: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        let spec = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(spec["Namespace"], "DurableStreams");
        assert_eq!(spec["Dimensions"], serde_json::json!([[]]));
        assert_eq!(spec["Metrics"], serde_json::json!([{"Name": "RevivalFailures", "Unit": "Count"}]));
        assert_eq!(doc["RevivalFailures"], 3);
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_123_i64, "timestamped by the clock it was given");
    }
}
