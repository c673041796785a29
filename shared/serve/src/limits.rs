//! [`ConnLimits`]: what one connection may hold of the server.

use std::time::Duration;

/// Per-connection limits of the server.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// From accept (or from the first byte of a later HTTP/1.1 request)
    /// until the request head is complete, TLS handshake included; slower
    /// connections are closed.
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request in progress is closed after this.
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers); larger ones get `431`.
    /// hyper also caps an HTTP/1.1 head at 100 header lines (`431` beyond).
    pub max_header_bytes: usize,
    /// A response write that makes no progress for this long (the client
    /// stopped reading) closes the connection.
    pub send_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
            send_timeout: Duration::from_secs(30),
        }
    }
}
