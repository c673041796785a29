//! The port: what the HTTP surface reports and where. The surface (`ds-http`)
//! calls a [`Metrics`]; the sinks of this crate ([`crate::prometheus`],
//! [`crate::emf`]) implement it, and a host picks one.

use std::time::Duration;

use http::Method;

/// One finished request/response exchange.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// What kind of request: `stream_append`, `stream_read`, `stream_sse`,
    /// `health`, `metrics`, … (never a stream path: bounded cardinality).
    pub route: &'static str,
    pub method: Method,
    pub status: u16,
    /// Time until the response head was ready (for SSE and long-poll this
    /// includes the wait for data).
    pub latency: Duration,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Where the HTTP layer reports what it serves.
pub trait Metrics: Send + Sync + 'static {
    /// Called once per exchange, when the response body has been sent (or
    /// the client went away).
    fn exchange(&self, exchange: &Exchange);
    /// A live reader (`long-poll` or `sse`) opened (`+1`) or closed (`-1`).
    fn live_readers(&self, mode: &'static str, delta: i64);
    /// The text served at `/metrics`, if this host serves one.
    fn render(&self) -> Option<String> {
        None
    }
}
