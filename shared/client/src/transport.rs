//! The connection: one hyper client (http and https, rustls with the
//! system's roots and optionally a private CA), the stream base URL, and the
//! `Authorization` header sent on every request.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::error::{reason_of, Error, ProducerRefusal};

/// The https-or-http connector this crate's client uses; also for other
/// command-line clients of the project that talk to the same servers.
pub type Connector = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// A connector trusting the system's roots, plus the certificates of
/// `extra_ca_pem` (a private CA, as in the test setups) when given.
pub fn connector(extra_ca_pem: Option<&[u8]>) -> Result<Connector, Error> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = extra_ca_pem {
        let mut added = 0;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| Error::Invalid(format!("CA file: {e}")))?;
            roots.add(cert).map_err(|e| Error::Invalid(format!("CA file: {e}")))?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Invalid("CA file: no PEM certificate in it".into()));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build())
}

/// How to reach a server.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base: String,
    authorization: Option<String>,
    ca_pem: Option<Vec<u8>>,
    timeout: Duration,
}

impl ClientBuilder {
    /// `Authorization` header value sent as is (`Bearer …`, `Basic …`).
    pub fn authorization(mut self, value: impl Into<String>) -> Self {
        self.authorization = Some(value.into());
        self
    }

    /// Trust this CA (PEM) for https besides the system's roots.
    pub fn ca_pem(mut self, pem: Vec<u8>) -> Self {
        self.ca_pem = Some(pem);
        self
    }

    /// Longest wait for an answer's head (live reads answer at once; their
    /// bodies are not bounded by it). Default 60 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = url::Url::parse(self.base.trim_end_matches('/'))
            .map_err(|e| Error::Invalid(format!("stream URL {:?}: {e}", self.base)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::Invalid(format!("stream URL {:?}: expected http:// or https://", self.base)));
        }
        let authorization = match self.authorization {
            Some(v) => {
                let mut v = HeaderValue::from_str(v.trim()).map_err(|_| {
                    Error::Invalid("the Authorization value has characters a header cannot carry".into())
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector(self.ca_pem.as_deref())?);
        Ok(Client { http, base, authorization, timeout: self.timeout })
    }
}

/// A client of one server's streams (`{base}/{path}`).
#[derive(Clone)]
pub struct Client {
    http: hyper_util::client::legacy::Client<Connector, Full<Bytes>>,
    base: url::Url,
    authorization: Option<HeaderValue>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The Authorization value is a secret: never in a log line.
        f.debug_struct("Client").field("base", &self.base.as_str()).finish_non_exhaustive()
    }
}

impl Client {
    /// `base` is the streams' base URL, as the upstream CLI's `STREAM_URL`:
    /// `http://localhost:4437/v1/stream`.
    pub fn builder(base: impl Into<String>) -> ClientBuilder {
        ClientBuilder { base: base.into(), authorization: None, ca_pem: None, timeout: Duration::from_secs(60) }
    }

    /// The URL of the stream at `path` (`a/b/c`): each segment
    /// percent-encoded; empty, `.` and `..` segments refused.
    pub fn stream_url(&self, path: &str) -> Result<url::Url, Error> {
        let path = path.trim_start_matches('/');
        if path.is_empty() || path.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return Err(Error::Invalid(format!(
                "stream path {path:?}: expected segments like a/b, without empty, . or .."
            )));
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::Invalid("the stream URL cannot take a path".into()))?
            .extend(path.split('/'));
        Ok(url)
    }

    /// Sends one request and waits for the answer's head.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: &url::Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, Error> {
        let mut req = Request::builder().method(method.clone()).uri(url.as_str());
        if let Some(auth) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, auth.clone());
        }
        let mut req = req.body(Full::new(body)).map_err(|e| Error::Invalid(format!("{url}: {e}")))?;
        req.headers_mut().extend(headers);
        let transport = |message: String| Error::Transport { method: method.clone(), url: url.to_string(), message };
        match tokio::time::timeout(self.timeout, self.http.request(req)).await {
            Err(_) => Err(transport(format!("no answer within {} s", self.timeout.as_secs()))),
            Ok(Err(e)) => Err(transport(describe(&e))),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// [`send`](Self::send), then the whole body; a non-2xx answer is
    /// [`Error::Status`] with the reason from its body.
    pub(crate) async fn call(
        &self,
        method: Method,
        url: &url::Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        let resp = self.send(method.clone(), url, headers, body).await?;
        let (parts, body) = resp.into_parts();
        let body = tokio::time::timeout(self.timeout, body.collect())
            .await
            .map_err(|_| Error::Transport {
                method: method.clone(),
                url: url.to_string(),
                message: "the answer's body stalled".into(),
            })?
            .map_err(|e| Error::Transport { method: method.clone(), url: url.to_string(), message: describe(&e) })?
            .to_bytes();
        if !parts.status.is_success() {
            return Err(status_error(&parts, &body, method, url));
        }
        Ok((parts, body))
    }
}

pub(crate) fn status_error(parts: &http::response::Parts, body: &[u8], method: Method, url: &url::Url) -> Error {
    let num = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let producer = ProducerRefusal { current_epoch: num("producer-epoch"), expected_seq: num("producer-expected-seq") };
    let producer = (producer != ProducerRefusal::default()).then_some(producer);
    Error::Status {
        status: parts.status,
        reason: reason_of(body, parts.status),
        method,
        url: url.to_string(),
        producer,
    }
}

/// An error with its causes, on one line ("client error (Connect): tcp
/// connect error: Connection refused (os error 111)").
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A header's value as text.
pub(crate) fn header<'a>(parts: &'a http::response::Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// `true` for `Stream-Closed: true` and the like.
pub(crate) fn flag(parts: &http::response::Parts, name: &str) -> bool {
    header(parts, name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
