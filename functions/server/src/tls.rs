//! HTTPS for the local server: rustls (aws-lc-rs, the process's one crypto
//! provider), ALPN `h2` and `http/1.1`. The handshake runs inside
//! `ds_serve::serve_with`, so the connection limits (the handshake counts
//! toward the header-read timeout) hold for HTTPS as for plain HTTP.

use std::io;
use std::sync::Arc;

use anyhow::Context;
use ds_serve::Protocol;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<rustls::ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("reading the TLS certificate chain")?;
    anyhow::ensure!(!certs.is_empty(), "the TLS certificate file holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("reading the TLS private key")?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the TLS certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS handshake of every accepted connection.
pub struct Tls(TlsAcceptor);

impl Tls {
    pub fn new(config: rustls::ServerConfig) -> Self {
        Self(TlsAcceptor::from(Arc::new(config)))
    }
}

impl ds_serve::Handshake for Tls {
    type Io = TlsStream<TcpStream>;

    async fn handshake(&self, tcp: TcpStream) -> io::Result<(Self::Io, Protocol)> {
        let stream = self.0.accept(tcp).await?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok((stream, if h2 { Protocol::Http2 } else { Protocol::Http1 }))
    }
}
