//! Webhook URL rules (§6.2, §12.8), checked when a subscription is created,
//! before anything is stored or any connection is tried: `https://` only
//! (plain `http://` to `localhost`/127.0.0.0/8 only with the development
//! opt-in); no address literal in a forbidden range (loopback without the
//! opt-in, RFC 1918, link-local including 169.254.169.254, CGNAT, IPv6
//! unique-local, link-local and loopback, special purpose); a host name must
//! resolve, and to allowed addresses only. Delivery checks again, on the
//! address actually connected to (`ds_egress`), so a name re-pointed later
//! gains nothing.

use std::time::Duration;

use ds_egress::{check_ip, check_url_for, EgressError};
use url::Host;

use crate::error::SubscriptionError;

/// How long the resolution of a webhook host may take at creation.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// The rules a server applies to webhook URLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct UrlPolicy {
    /// Development and tests only: allow `http://localhost`, `http://127.0.0.x`
    /// and loopback addresses (off by default).
    pub allow_loopback: bool,
}

fn rejected(e: impl std::fmt::Display) -> SubscriptionError {
    SubscriptionError::WebhookUrlRejected(e.to_string())
}

impl UrlPolicy {
    /// The rules that need no DNS.
    pub fn check_syntax(&self, url: &str) -> Result<url::Url, SubscriptionError> {
        check_url_for(url, self.allow_loopback, self.allow_loopback).map_err(|e| match e {
            EgressError::NotHttps if !self.allow_loopback => rejected(
                "only https:// webhook URLs are allowed (http://localhost is a development option of the server)",
            ),
            other => rejected(other),
        })
    }

    /// Every rule, resolving a host name.
    pub async fn check(&self, url: &str) -> Result<(), SubscriptionError> {
        let parsed = self.check_syntax(url)?;
        let Some(Host::Domain(name)) = parsed.host() else { return Ok(()) };
        let port = parsed.port_or_known_default().unwrap_or(443);
        let lookup = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, port))).await;
        let addrs: Vec<_> = match lookup {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => return Err(rejected(format!("{name} does not resolve: {e}"))),
            Err(_) => return Err(rejected(format!("{name} did not resolve within {RESOLVE_TIMEOUT:?}"))),
        };
        if addrs.is_empty() {
            return Err(rejected(format!("{name} resolves to no address")));
        }
        for addr in addrs {
            check_ip(addr.ip(), self.allow_loopback).map_err(|why| rejected(format!("{name} resolves to {why}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refused(policy: UrlPolicy, url: &str) -> bool {
        matches!(policy.check_syntax(url), Err(SubscriptionError::WebhookUrlRejected(_)))
    }

    #[test]
    fn every_internal_class_is_refused_before_any_connection() {
        let strict = UrlPolicy::default();
        let dev = UrlPolicy { allow_loopback: true };
        for url in [
            "http://10.0.0.1/hook",
            "https://10.0.0.1/hook",
            "https://172.16.0.1/",
            "https://192.168.1.10/",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/",
            "https://[fd00::1]/",
            "https://[fe80::1]/",
            "https://[::ffff:10.0.0.1]/",
            "https://0.0.0.0/",
            "ftp://example.com/",
            "https://user:pw@example.com/",
            "not a url",
        ] {
            assert!(refused(strict, url), "{url}");
            assert!(refused(dev, url), "{url} (development mode)");
        }
        for url in ["http://127.0.0.1:9/hook", "https://127.0.0.1/", "https://[::1]/", "http://localhost/"] {
            assert!(refused(strict, url), "{url}: loopback needs the opt-in");
            assert!(!refused(dev, url), "{url}: allowed with the opt-in");
        }
        assert!(refused(dev, "http://example.com/hook"), "plain http only to loopback");
        assert!(!refused(strict, "https://hooks.example.com/x"));
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_need_the_opt_in() {
        let strict = UrlPolicy::default();
        assert!(matches!(strict.check("https://localhost:9/h").await, Err(SubscriptionError::WebhookUrlRejected(_))));
        assert!(UrlPolicy { allow_loopback: true }.check("https://localhost:9/h").await.is_ok());
        let nx = strict.check("https://does-not-exist.invalid/h").await;
        assert!(matches!(nx, Err(SubscriptionError::WebhookUrlRejected(_))), "{nx:?}");
    }
}
