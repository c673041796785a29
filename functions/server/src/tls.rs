//! HTTPS for the local server: rustls (aws-lc-rs, the process's one crypto
//! provider), ALPN `h2` and `http/1.1`, served by axum-server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long in-flight requests get to finish after shutdown begins.
const GRACE: Duration = Duration::from_secs(30);

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

pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    config: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let handle = axum_server::Handle::new();
    let on_signal = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        on_signal.graceful_shutdown(Some(GRACE));
    });
    let listener = listener.into_std()?;
    axum_server::from_tcp_rustls(listener, RustlsConfig::from_config(Arc::new(config)))?
        .handle(handle)
        .serve(router.into_make_service())
        .await?;
    Ok(())
}
