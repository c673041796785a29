//! Fork lifetime inheritance (§4.2 table).

use crate::headers::Lifetime;

/// The lifetime a fork gets from the source's lifetime and the request's.
/// An explicit request always wins; with none, the fork inherits the source's
/// TTL value (its own sliding window) or the source's absolute expiry.
pub fn fork_lifetime(source: Lifetime, requested: Lifetime) -> Lifetime {
    if requested.ttl_secs.is_some() || requested.expires_at_ms.is_some() {
        requested
    } else {
        source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Lifetime = Lifetime { ttl_secs: None, expires_at_ms: None };
    const TTL: Lifetime = Lifetime { ttl_secs: Some(60), expires_at_ms: None };
    const TTL2: Lifetime = Lifetime { ttl_secs: Some(5), expires_at_ms: None };
    const AT: Lifetime = Lifetime { ttl_secs: None, expires_at_ms: Some(1_000) };
    const AT2: Lifetime = Lifetime { ttl_secs: None, expires_at_ms: Some(9_000) };

    #[test]
    fn the_nine_rows() {
        assert_eq!(fork_lifetime(NONE, NONE), NONE);
        assert_eq!(fork_lifetime(NONE, TTL), TTL);
        assert_eq!(fork_lifetime(NONE, AT), AT);
        assert_eq!(fork_lifetime(TTL, NONE), TTL);
        assert_eq!(fork_lifetime(TTL, TTL2), TTL2);
        assert_eq!(fork_lifetime(TTL, AT), AT);
        assert_eq!(fork_lifetime(AT, NONE), AT);
        assert_eq!(fork_lifetime(AT, TTL), TTL);
        assert_eq!(fork_lifetime(AT, AT2), AT2);
    }
}
