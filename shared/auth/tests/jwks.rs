//! JWKS: keys fetched from an HTTPS server on 127.0.0.1 (test CA made now),
//! rotation by `kid`, and the SSRF rules: a loopback JWKS URL without the
//! development allowance is refused before any connection is made.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use ds_auth::{mint, AuthError, AuthSettings, Authenticator, Grants};
use ds_testpki::{jwt_key_pair, JwtKeyAlg};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::json;

const ISS: &str = "https://issuer.test";
const AUD: &str = "durable-streams";

struct Idp {
    addr: SocketAddr,
    ca_pem: String,
    keys: Arc<Mutex<JwkSet>>,
    fetches: Arc<AtomicUsize>,
}

fn jwk(private_pem: &str, kid: &str) -> Jwk {
    let key = EncodingKey::from_ec_pem(private_pem.as_bytes()).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.into());
    jwk
}

/// An HTTPS server on 127.0.0.1 serving the key set at /jwks.json.
async fn idp() -> Idp {
    let pki = ds_testpki::generate().unwrap();
    let keys = Arc::new(Mutex::new(JwkSet { keys: Vec::new() }));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (k, f) = (keys.clone(), fetches.clone());
    let app = axum::Router::new().route(
        "/jwks.json",
        get(move || {
            f.fetch_add(1, Ordering::SeqCst);
            let body = serde_json::to_string(&*k.lock().unwrap()).unwrap();
            async move { ([("content-type", "application/jwk-set+json")], body) }
        }),
    );
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    use rustls::pki_types::pem::PemObject;
    let certs = vec![rustls::pki_types::CertificateDer::from_pem_slice(pki.cert_pem.as_bytes()).unwrap()];
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(pki.key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config));
    let server = axum_server::from_tcp_rustls(listener, tls).unwrap();
    tokio::spawn(async move { server.serve(app.into_make_service()).await });
    Idp { addr, ca_pem: pki.ca_pem, keys, fetches }
}

fn settings(url: String, ca: &str, allow_loopback: bool) -> AuthSettings {
    AuthSettings {
        jwks_url: Some(url),
        jwks_ca_pem: Some(ca.as_bytes().to_vec()),
        jwks_allow_loopback: allow_loopback,
        jwt_issuer: Some(ISS.into()),
        jwt_audience: Some(AUD.into()),
        ..AuthSettings::default()
    }
}

async fn check(auth: &Authenticator, token: &str) -> Result<(), AuthError> {
    auth.authenticate(Some(&format!("Bearer {token}"))).await.map(|_| ())
}

fn grants() -> Grants {
    serde_json::from_value(json!([{"prefix": "", "ops": ["read"]}])).unwrap()
}

#[tokio::test]
async fn keys_come_from_the_jwks_and_rotate_by_kid() {
    let idp = idp().await;
    let (k1, _) = jwt_key_pair(JwtKeyAlg::Es256).unwrap();
    idp.keys.lock().unwrap().keys.push(jwk(&k1, "k1"));
    let url = format!("https://127.0.0.1:{}/jwks.json", idp.addr.port());
    let auth = settings(url, &idp.ca_pem, true).build().unwrap().unwrap();
    assert_eq!(auth.prefetch_keys().await, Some(Ok(1)));

    let claims = mint::claims(ISS, AUD, "w", &grants(), 60);
    let t1 = mint::with_pem(Algorithm::ES256, k1.as_bytes(), Some("k1"), &claims).unwrap();
    check(&auth, &t1).await.unwrap();
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1, "a known kid needs no fetch");

    // A token signed by a key the set does not hold (yet) is refused; the
    // refetch it triggers is rate-limited, so a flood of unknown kids costs
    // the identity provider at most one request per interval.
    let (k2, _) = jwt_key_pair(JwtKeyAlg::Es256).unwrap();
    let t2 = mint::with_pem(Algorithm::ES256, k2.as_bytes(), Some("k2"), &claims).unwrap();
    idp.keys.lock().unwrap().keys.push(jwk(&k2, "k2"));
    for _ in 0..5 {
        assert!(matches!(check(&auth, &t2).await, Err(AuthError::Invalid(_))));
    }
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1, "refetches are at most one per {:?}", ds_auth::jwks::MIN_REFETCH);

    // A kid the set holds, but a signature from another key.
    let (k3, _) = jwt_key_pair(JwtKeyAlg::Es256).unwrap();
    let forged = mint::with_pem(Algorithm::ES256, k3.as_bytes(), Some("k1"), &claims).unwrap();
    assert_eq!(check(&auth, &forged).await, Err(AuthError::Invalid("bad signature".into())));
}

/// Accepts TCP connections on 127.0.0.1 and counts them.
async fn counting_listener() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((_conn, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    (addr, count)
}

#[tokio::test]
async fn internal_jwks_urls_are_refused_before_connecting() {
    let pki = ds_testpki::generate().unwrap();
    // Address literals are refused when the settings are built.
    for url in [
        "https://127.0.0.1:9/jwks.json",
        "https://10.0.0.1/jwks.json",
        "https://169.254.169.254/jwks",
        "https://[fd00::1]/k",
        "http://idp.example.com/jwks",
    ] {
        let err = settings(url.into(), &pki.ca_pem, false).build().err().unwrap();
        assert!(matches!(&err, ds_config::ConfigError::Invalid { name, .. } if name == "DS_JWKS_URL"), "{url}: {err}");
    }
    // Private ranges stay refused even with the loopback allowance.
    assert!(settings("https://192.168.1.1/jwks".into(), &pki.ca_pem, true).build().is_err());

    // A name that resolves to loopback: refused at resolution, no connection.
    let (addr, connections) = counting_listener().await;
    let url = format!("https://localhost:{}/jwks.json", addr.port());
    let auth = settings(url, &pki.ca_pem, false).build().unwrap().unwrap();
    let err = auth.prefetch_keys().await.unwrap().unwrap_err();
    assert!(err.contains("loopback") && err.contains("refused before connecting"), "{err}");
    let claims = mint::claims(ISS, AUD, "w", &grants(), 60);
    let (k, _) = jwt_key_pair(JwtKeyAlg::Es256).unwrap();
    let token = mint::with_pem(Algorithm::ES256, k.as_bytes(), Some("k"), &claims).unwrap();
    assert_eq!(check(&auth, &token).await, Err(AuthError::KeysUnavailable));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing may connect to a refused address");
}
