//! The guarded HTTPS client (hyper-util's client with a rustls connector).

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::sync::OnceCell;
use url::{Host, Url};

use crate::address::{check_ip, Forbidden};

/// How the client may reach out.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// Allow 127.0.0.0/8 and ::1 (development and tests only).
    pub allow_loopback: bool,
    /// With `allow_loopback`, also allow plain `http://` to `localhost` and
    /// loopback literals (the protocol's development exception for
    /// webhooks); the address connected to must then be loopback too.
    pub allow_http_loopback: bool,
    /// PEM certificates trusted in addition to the system's roots (a private
    /// or test certificate authority).
    pub extra_roots_pem: Option<Vec<u8>>,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Largest response body accepted.
    pub max_body_bytes: usize,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            allow_loopback: false,
            allow_http_loopback: false,
            extra_roots_pem: None,
            timeout: Duration::from_secs(10),
            max_body_bytes: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    #[error("not a valid URL: {0}")]
    BadUrl(String),
    #[error(
        "only https:// URLs without user info are allowed (http:// only to localhost or 127.0.0.0/8 in development)"
    )]
    NotHttps,
    #[error("{host} is {reason}; refused before connecting")]
    Forbidden { host: String, reason: Forbidden },
    #[error("the connection went to {addr}, which is {reason}")]
    ForbiddenPeer { addr: SocketAddr, reason: Forbidden },
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("request failed: {0}")]
    Request(String),
    #[error("the server answered {0}")]
    Status(u16),
    #[error("the response body exceeds {0} bytes")]
    TooLarge(usize),
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector<GuardedResolver>>;
type HttpClient = Client<Connector, Full<Bytes>>;

/// An HTTPS client that only connects to allowed addresses.
///
/// The connector is built on the first request: loading the system's root
/// certificates (hundreds of files) took about 40% of the server's CPU time
/// from process start to its first answer, and most processes never make an
/// outgoing request. That load runs on the blocking pool, once. The
/// configuration, extra roots included, is checked in [`EgressClient::new`].
#[derive(Clone)]
pub struct EgressClient {
    http: Arc<OnceCell<HttpClient>>,
    extra_roots: Arc<[CertificateDer<'static>]>,
    cfg: Arc<EgressConfig>,
}

impl EgressClient {
    pub fn new(cfg: EgressConfig) -> Result<Self, EgressError> {
        let extra_roots: Arc<[_]> = match cfg.extra_roots_pem.as_deref() {
            Some(pem) => parse_extra_roots(pem)?.into(),
            None => Arc::new([]),
        };
        // The same build as on first use, without the system's roots.
        tls_config(rustls::RootCertStore::empty(), &extra_roots)?;
        Ok(Self { http: Arc::new(OnceCell::new()), extra_roots, cfg: Arc::new(cfg) })
    }

    async fn http(&self) -> Result<&HttpClient, EgressError> {
        self.http
            .get_or_try_init(|| async {
                let native = tokio::task::spawn_blocking(rustls_native_certs::load_native_certs)
                    .await
                    .map_err(|e| EgressError::Tls(format!("loading the system's root certificates: {e}")))?;
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(native.certs);
                let tls = tls_config(roots, &self.extra_roots)?;
                let cfg = &self.cfg;
                let mut tcp = HttpConnector::new_with_resolver(GuardedResolver { allow_loopback: cfg.allow_loopback });
                tcp.enforce_http(false);
                tcp.set_connect_timeout(Some(cfg.timeout));
                let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
                // Plain http is refused by `check_url` unless it goes to loopback.
                let builder = if cfg.allow_http_loopback { builder.https_or_http() } else { builder.https_only() };
                let https = builder.enable_http1().wrap_connector(tcp);
                // No proxy and no redirects: the legacy client does neither.
                Ok(Client::builder(TokioExecutor::new()).build(https))
            })
            .await
    }

    /// Checks a URL against the rules that need no DNS: `https` (or `http`
    /// to loopback when allowed), a host, no user info, and an address
    /// literal outside the forbidden ranges.
    pub fn check_url(&self, url: &str) -> Result<Url, EgressError> {
        check_url_for(url, self.cfg.allow_loopback, self.cfg.allow_http_loopback)
    }

    /// `GET url` with an `Accept` header; the body of a 2xx answer.
    pub async fn get(&self, url: &str, accept: &str) -> Result<Bytes, EgressError> {
        let req = |url: &Url| {
            http::Request::get(url.as_str()).header(http::header::ACCEPT, accept).body(Full::new(Bytes::new()))
        };
        let (status, body) = self.send(url, req).await?;
        if !(200..300).contains(&status) {
            return Err(EgressError::Status(status));
        }
        Ok(body)
    }

    /// `POST url` with `headers` and `body`; the status and (bounded) body
    /// of whatever the server answered, 2xx or not.
    pub async fn post(&self, url: &str, headers: &[(&str, &str)], body: Bytes) -> Result<(u16, Bytes), EgressError> {
        let req = |url: &Url| {
            let mut req = http::Request::post(url.as_str());
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            req.body(Full::new(body.clone()))
        };
        self.send(url, req).await
    }

    async fn send(
        &self,
        url: &str,
        build: impl FnOnce(&Url) -> Result<http::Request<Full<Bytes>>, http::Error>,
    ) -> Result<(u16, Bytes), EgressError> {
        tokio::time::timeout(self.cfg.timeout, self.send_inner(url, build))
            .await
            .map_err(|_| EgressError::Request(format!("no answer within {:?}", self.cfg.timeout)))?
    }

    async fn send_inner(
        &self,
        url: &str,
        build: impl FnOnce(&Url) -> Result<http::Request<Full<Bytes>>, http::Error>,
    ) -> Result<(u16, Bytes), EgressError> {
        let url = self.check_url(url)?;
        let req = build(&url).map_err(|e| EgressError::BadUrl(e.to_string()))?;
        let resp = self.http().await?.request(req).await.map_err(request_error)?;
        let peer = resp.extensions().get::<HttpInfo>().map(HttpInfo::remote_addr);
        let peer = peer.ok_or_else(|| EgressError::Request("no peer address".into()))?;
        check_ip(peer.ip(), self.cfg.allow_loopback)
            .map_err(|reason| EgressError::ForbiddenPeer { addr: peer, reason })?;
        if url.scheme() == "http" && !peer.ip().is_loopback() {
            return Err(EgressError::ForbiddenPeer { addr: peer, reason: Forbidden::Special });
        }
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), self.cfg.max_body_bytes).collect().await;
        let body = body.map(|b| b.to_bytes()).map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                EgressError::TooLarge(self.cfg.max_body_bytes)
            } else {
                EgressError::Request(e.to_string())
            }
        })?;
        Ok((status, body))
    }
}

/// [`EgressClient::check_url`] for `https://` only.
pub fn check_url(url: &str, allow_loopback: bool) -> Result<Url, EgressError> {
    check_url_for(url, allow_loopback, false)
}

/// [`EgressClient::check_url`]: `allow_http_loopback` (effective only with
/// `allow_loopback`) admits `http://localhost` and `http://` loopback
/// literals.
pub fn check_url_for(url: &str, allow_loopback: bool, allow_http_loopback: bool) -> Result<Url, EgressError> {
    let parsed = Url::parse(url).map_err(|e| EgressError::BadUrl(e.to_string()))?;
    let web = matches!(parsed.scheme(), "https" | "http");
    if !web || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(EgressError::NotHttps);
    }
    let literal: Option<std::net::IpAddr> = match parsed.host() {
        None => return Err(EgressError::BadUrl("no host".into())),
        Some(Host::Domain(_)) => None,
        Some(Host::Ipv4(v4)) => Some(v4.into()),
        Some(Host::Ipv6(v6)) => Some(v6.into()),
    };
    match parsed.scheme() {
        "https" => {}
        "http" if allow_loopback && allow_http_loopback => {
            let loopback_name = matches!(parsed.host(), Some(Host::Domain(d)) if d.eq_ignore_ascii_case("localhost"));
            if !loopback_name && !literal.is_some_and(|ip| ip.is_loopback()) {
                return Err(EgressError::NotHttps);
            }
        }
        _ => return Err(EgressError::NotHttps),
    }
    if let Some(ip) = literal {
        check_ip(ip, allow_loopback).map_err(|reason| EgressError::Forbidden { host: ip.to_string(), reason })?;
    }
    Ok(parsed)
}

/// A request error, with a refused resolution reported as such.
fn request_error(e: hyper_util::client::legacy::Error) -> EgressError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<Refused>() {
            return EgressError::Forbidden { host: refused.host.clone(), reason: refused.reason };
        }
        source = s.source();
    }
    let mut chain = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        chain.push_str(&format!(": {s}"));
        source = s.source();
    }
    EgressError::Request(chain)
}

/// The certificates of `pem`: at least one, each well-formed.
fn parse_extra_roots(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, EgressError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| EgressError::Tls(format!("extra CA: {e}")))?;
    if certs.is_empty() {
        return Err(EgressError::Tls("extra CA: no certificate in the PEM data".into()));
    }
    Ok(certs)
}

/// Rustls with `roots` plus the extra ones and the same crypto provider as
/// the rest of the process.
fn tls_config(
    mut roots: rustls::RootCertStore,
    extra: &[CertificateDer<'static>],
) -> Result<rustls::ClientConfig, EgressError> {
    for cert in extra {
        roots.add(cert.clone()).map_err(|e| EgressError::Tls(format!("extra CA: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EgressError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A name that resolved to a forbidden address.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to {reason}")]
struct Refused {
    host: String,
    reason: Forbidden,
}

/// Resolves with the system resolver and refuses a name if ANY of its
/// addresses is forbidden; only checked addresses reach the connector.
#[derive(Clone)]
struct GuardedResolver {
    allow_loopback: bool,
}

type Resolving =
    Pin<Box<dyn Future<Output = Result<std::vec::IntoIter<SocketAddr>, Box<dyn StdError + Send + Sync>>> + Send>>;

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = Box<dyn StdError + Send + Sync>;
    type Future = Resolving;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let allow_loopback = self.allow_loopback;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                if let Err(reason) = check_ip(addr.ip(), allow_loopback) {
                    return Err(Box::new(Refused { host, reason }) as Box<dyn StdError + Send + Sync>);
                }
            }
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn extra_roots_are_checked_at_construction_and_system_roots_loaded_on_first_use() {
        let with =
            |pem: &[u8]| EgressClient::new(EgressConfig { extra_roots_pem: Some(pem.to_vec()), ..Default::default() });
        assert!(matches!(with(b"not pem"), Err(EgressError::Tls(m)) if m.contains("no certificate")));
        let not_der = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(with(not_der), Err(EgressError::Tls(m)) if m.contains("extra CA")));
        let client = EgressClient::new(EgressConfig::default()).unwrap();
        assert!(client.http.get().is_none(), "nothing built before the first request");
        client.http().await.unwrap();
        assert!(client.http.get().is_some(), "built once, on first use");
    }

    #[test]
    fn urls_need_https_a_host_and_an_allowed_literal() {
        assert!(check_url("https://idp.example.com/.well-known/jwks.json", false).is_ok());
        assert!(matches!(check_url("http://idp.example.com/jwks", false), Err(EgressError::NotHttps)));
        assert!(matches!(check_url("https://user:pw@idp.example.com/", false), Err(EgressError::NotHttps)));
        assert!(matches!(check_url("file:///etc/passwd", false), Err(EgressError::NotHttps)));
        assert!(matches!(check_url("not a url", false), Err(EgressError::BadUrl(_))));
        for (url, why) in [
            ("https://10.0.0.1/jwks", Forbidden::Private),
            ("https://169.254.169.254/latest/meta-data/", Forbidden::LinkLocal),
            ("https://[fd00::1]/", Forbidden::Private),
            ("https://127.0.0.1:8443/", Forbidden::Loopback),
            ("https://[::ffff:192.168.0.1]/", Forbidden::Private),
            ("https://0x7f000001/", Forbidden::Loopback), // the URL parser normalises hex literals
        ] {
            match check_url(url, false) {
                Err(EgressError::Forbidden { reason, .. }) => assert_eq!(reason, why, "{url}"),
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(check_url("https://127.0.0.1:8443/", true).is_ok());
        assert!(check_url("https://10.0.0.1/", true).is_err());
    }

    #[test]
    fn plain_http_only_to_loopback_and_only_when_allowed() {
        assert!(matches!(check_url("http://127.0.0.1:9/hook", true), Err(EgressError::NotHttps)));
        assert!(matches!(check_url_for("http://127.0.0.1:9/hook", false, true), Err(EgressError::NotHttps)));
        assert!(check_url_for("http://127.0.0.1:9/hook", true, true).is_ok());
        assert!(check_url_for("http://127.0.0.7/hook", true, true).is_ok());
        assert!(check_url_for("http://localhost:9/hook", true, true).is_ok());
        assert!(check_url_for("http://[::1]:9/hook", true, true).is_ok());
        for url in ["http://example.com/hook", "http://10.0.0.1/hook", "http://169.254.169.254/"] {
            assert!(check_url_for(url, true, true).is_err(), "{url}");
        }
    }
}
