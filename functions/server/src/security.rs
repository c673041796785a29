//! `serve` flags for access control, TLS and CORS, and what they build.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use ds_auth::{AuthSettings, Authenticator, Budgets, Rate};
use ds_http::Cors;

#[derive(clap::Args, Debug)]
pub struct SecurityArgs {
    /// Static API tokens: a JSON file of token digests and grants (see docs/access-control.md).
    #[arg(long, env = "DS_AUTH_TOKENS_FILE")]
    pub auth_tokens_file: Option<PathBuf>,
    /// HS256 JWTs: a file holding the shared secret (at least 32 bytes).
    #[arg(long, env = "DS_JWT_HS256_SECRET_FILE")]
    pub jwt_hs256_secret_file: Option<PathBuf>,
    /// RS256/ES256/EdDSA JWTs: a PEM public key file (RSA, P-256 or Ed25519).
    #[arg(long, env = "DS_JWT_PUBLIC_KEY_FILE")]
    pub jwt_public_key_file: Option<PathBuf>,
    /// RS256/ES256/EdDSA JWTs: an https:// JWKS URL (fetched, cached, SSRF-checked).
    #[arg(long, env = "DS_JWKS_URL")]
    pub jwks_url: Option<String>,
    /// Extra CA certificate (PEM) trusted for the JWKS URL.
    #[arg(long, env = "DS_JWKS_CA_FILE")]
    pub jwks_ca_file: Option<PathBuf>,
    /// Allow a JWKS URL on loopback (development and tests only).
    #[arg(long, env = "DS_JWKS_ALLOW_LOOPBACK")]
    pub jwks_allow_loopback: bool,
    /// How often the JWKS is refetched.
    #[arg(long, env = "DS_JWKS_REFRESH", default_value = "10m", value_parser = ds_config::parse_duration)]
    pub jwks_refresh: Duration,
    /// The `iss` every JWT must carry.
    #[arg(long, env = "DS_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// The `aud` every JWT must carry.
    #[arg(long, env = "DS_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Clock-skew allowance for `exp` and `nbf`.
    #[arg(long, env = "DS_JWT_LEEWAY", default_value = "30s", value_parser = ds_config::parse_duration)]
    pub jwt_leeway: Duration,
    /// Serve a non-loopback address without access control.
    #[arg(long, env = "DS_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// TLS certificate chain (PEM); with --tls-key, serves HTTPS (HTTP/1.1 and HTTP/2).
    #[arg(long, env = "DS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "DS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Browser origins allowed to read responses: `*`, or a comma-separated
    /// list. Default: `*` without access control, none with it.
    #[arg(long, env = "DS_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Every credential's request budget (needs access control): N/s, N/min
    /// or N/h, optionally :BURST (e.g. 100/s, 6000/min:500); past it, 429 with
    /// Retry-After.
    #[arg(long, env = "DS_RATE_LIMIT", value_parser = Rate::parse)]
    pub rate_limit: Option<Rate>,
    /// A credential's own budget: NAME=RATE or NAME=off, NAME being the
    /// token's name or the JWT's sub (repeatable; env: comma-separated).
    #[arg(long, env = "DS_RATE_LIMIT_FOR", value_delimiter = ',', value_parser = Budgets::parse_named)]
    pub rate_limit_for: Vec<(String, Option<Rate>)>,
}

/// Access control as configured: who is let in, and how often.
pub struct Access {
    pub auth: Option<Arc<Authenticator>>,
    pub budgets: Option<Arc<Budgets>>,
}

impl Access {
    /// Fetches the JWKS once, so a wrong URL shows up in the start-up log.
    pub async fn prefetch(&self) {
        let Some(auth) = &self.auth else { return };
        match auth.prefetch_keys().await {
            Some(Ok(n)) => tracing::info!(keys = n, "JWKS fetched"),
            Some(Err(e)) => tracing::warn!(error = %e, "JWKS not fetched yet; JWTs fail until it is"),
            None => {}
        }
    }
}

fn read(path: &Option<PathBuf>, what: &str) -> anyhow::Result<Option<Vec<u8>>> {
    path.as_ref().map(|p| std::fs::read(p).with_context(|| format!("reading the {what} {}", p.display()))).transpose()
}

impl SecurityArgs {
    /// The authenticator (`None`: access control off) and the request
    /// budgets, from the flags and the files they name. Opens nothing else
    /// and connects nowhere ([`Self::prefetch`] fetches a JWKS).
    pub fn access(&self) -> anyhow::Result<Access> {
        let tokens_json = read(&self.auth_tokens_file, "token file")?
            .map(|b| String::from_utf8(b).context("the token file is not UTF-8"))
            .transpose()?;
        let secret = read(&self.jwt_hs256_secret_file, "HS256 secret file")?.map(|s| s.trim_ascii_end().to_vec());
        let settings = AuthSettings {
            tokens_json,
            jwt_hs256_secret: secret,
            jwt_public_key_pem: read(&self.jwt_public_key_file, "JWT public key")?,
            jwks_url: self.jwks_url.clone(),
            jwks_ca_pem: read(&self.jwks_ca_file, "JWKS CA file")?,
            jwks_allow_loopback: self.jwks_allow_loopback,
            jwks_refresh: self.jwks_refresh,
            jwt_issuer: self.jwt_issuer.clone(),
            jwt_audience: self.jwt_audience.clone(),
            jwt_leeway: self.jwt_leeway,
            rate_limit: self.rate_limit,
            rate_limit_for: self.rate_limit_for.clone(),
        };
        let budgets = settings.budgets().context("--rate-limit")?.map(Arc::new);
        let auth = settings.build().context("access control")?.map(Arc::new);
        Ok(Access { auth, budgets })
    }

    /// Refuse a non-loopback bind without access control, unless told to.
    pub fn check_bind(&self, bind: SocketAddr, access_control: bool) -> anyhow::Result<()> {
        if access_control || bind.ip().is_loopback() {
            return Ok(());
        }
        if !self.insecure_no_auth {
            bail!(
                "refusing to serve {bind} without access control: configure --auth-tokens-file or a JWT key \
                 (--jwt-hs256-secret-file, --jwt-public-key-file, --jwks-url), or pass --insecure-no-auth"
            );
        }
        tracing::warn!(
            "serving {bind} WITHOUT access control (--insecure-no-auth): anyone who can reach it can read, \
             write and delete every stream"
        );
        Ok(())
    }

    pub fn cors(&self, access_control: bool) -> anyhow::Result<Cors> {
        match (&self.cors_origins, access_control) {
            (Some(list), _) => Cors::parse(list).map_err(anyhow::Error::msg),
            (None, false) => Ok(Cors::AnyOrigin),
            (None, true) => Ok(Cors::Origins(Vec::new())),
        }
    }

    /// The certificate and key PEM, when TLS is configured.
    pub fn tls(&self) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
        match (read(&self.tls_cert, "TLS certificate")?, read(&self.tls_key, "TLS key")?) {
            (Some(cert), Some(key)) => Ok(Some((cert, key))),
            _ => Ok(None),
        }
    }
}
