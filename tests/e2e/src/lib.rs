//! End-to-end test support for the `durable-streams` server binary.
//!
//! - [`server`]: locate (or build once) the binary, run it on a free
//!   127.0.0.1 port with a temp data dir, wait until it answers, stop it with
//!   `SIGKILL` or `SIGTERM`, and always kill it on drop.
//! - [`raw`]: a tiny HTTP/1.1 client that sends a request target verbatim
//!   (reqwest normalises `..` and `%2e%2e` away, which would hide traversal
//!   attempts from the server).
//! - [`record`]: self-delimiting, checksummed batch records for the crash
//!   test, and a parser that detects torn, foreign or corrupted bytes.
//! - [`checks`]: expected statuses, all failures reported together.
//! - [`webhook`]: a webhook receiver on 127.0.0.1 for subscription tests.
//! - [`emulator`]: a private AWS emulator (fault rules are per emulator).
//! - [`tmpfs`]: a size-limited tmpfs, the full disk a test can make.
//! - [`access`], [`walk`]: tokens for every access case, and the walk over
//!   the server's route table, for the local server and the Lambda handler.
//! - [`read_all`] and friends: protocol helpers shared by the tests.

pub mod access;
pub mod checks;
pub mod emulator;
pub mod raw;
pub mod reach;
pub mod record;
pub mod server;
pub mod tmpfs;
pub mod walk;
pub mod webhook;

use std::time::Duration;

use anyhow::{bail, Context};
pub use checks::Checks;
pub use emulator::Emulator;
pub use server::{Server, ServerOpts, Store};

/// A reqwest client for 127.0.0.1 only: never a proxy, bounded timeouts.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("building the reqwest client")
}

/// A response header as text, if present and valid.
pub fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// The whole stream content: `GET ?offset=-1`, then follow
/// `Stream-Next-Offset` until `Stream-Up-To-Date: true`. Returns the bytes
/// and the final next offset.
pub async fn read_all(client: &reqwest::Client, url: &str) -> anyhow::Result<(Vec<u8>, String)> {
    let mut offset = "-1".to_owned();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let resp = client.get(format!("{url}?offset={offset}")).send().await.context("GET")?;
        let status = resp.status().as_u16();
        let next = header(&resp, "stream-next-offset");
        let up_to_date = header(&resp, "stream-up-to-date").as_deref() == Some("true");
        let body = resp.bytes().await.context("reading the GET body")?;
        if status != 200 {
            bail!("GET {url}?offset={offset}: status {status}, body {:?}", String::from_utf8_lossy(&body));
        }
        let Some(next) = next else { bail!("GET {url}?offset={offset}: no Stream-Next-Offset") };
        if body.is_empty() && !up_to_date {
            bail!("GET {url}?offset={offset}: empty body but not up to date (would loop forever)");
        }
        out.extend_from_slice(&body);
        offset = next;
        if up_to_date {
            return Ok((out, offset));
        }
    }
    bail!("GET {url}: never reached Stream-Up-To-Date")
}

/// An HTTPS client for 127.0.0.1 trusting only a test CA, offering the
/// given ALPN protocols (`h2`, `http/1.1`).
#[derive(Clone)]
pub struct TlsClient {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Full<bytes::Bytes>,
    >,
}

/// An HTTPS answer.
pub struct TlsResponse {
    pub status: u16,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
}

impl TlsClient {
    pub fn new(ca_pem: &str, alpn: &[&[u8]]) -> anyhow::Result<Self> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // The connector sets ALPN itself from the enabled versions.
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only();
        let https = match (alpn.contains(&&b"h2"[..]), alpn.contains(&&b"http/1.1"[..])) {
            (true, true) => builder.enable_all_versions().build(),
            (true, false) => builder.enable_http2().build(),
            _ => builder.enable_http1().build(),
        };
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(https);
        Ok(Self { client })
    }

    /// Send a request and read the whole answer (10 s at most).
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> anyhow::Result<TlsResponse> {
        use http_body_util::BodyExt;
        let mut req = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
        let resp = tokio::time::timeout(Duration::from_secs(10), self.client.request(req)).await??;
        let (parts, body) = resp.into_parts();
        let body = tokio::time::timeout(Duration::from_secs(10), body.collect()).await??.to_bytes();
        Ok(TlsResponse { status: parts.status.as_u16(), version: parts.version, headers: parts.headers, body })
    }
}
