//! Which browser origins may read responses (CORS).

use axum::http::{HeaderValue, Method};

/// The allowed origins. Any origin (`*`) is the default without access
/// control; with access control a host should list its web origins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Cors {
    #[default]
    AnyOrigin,
    /// Only these exact origins (`https://app.example.com`); empty: none.
    Origins(Vec<HeaderValue>),
}

impl Cors {
    /// `*` → any origin; otherwise comma-separated origins (empty: none).
    pub fn parse(list: &str) -> Result<Self, String> {
        if list.trim() == "*" {
            return Ok(Self::AnyOrigin);
        }
        let mut origins = Vec::new();
        for o in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let ok = (o.starts_with("https://") || o.starts_with("http://")) && !o.ends_with('/') && o != "*";
            if !ok {
                return Err(format!(
                    "CORS origin {o:?} must look like https://app.example.com (scheme and host, no path)"
                ));
            }
            origins
                .push(HeaderValue::from_str(o).map_err(|_| format!("CORS origin {o:?} is not a valid header value"))?);
        }
        Ok(Self::Origins(origins))
    }

    /// The `Access-Control-Allow-Origin` value for a request's `Origin`.
    pub(crate) fn allow_origin(&self, origin: Option<&[u8]>) -> Option<HeaderValue> {
        match self {
            Self::AnyOrigin => {
                const ANY: HeaderValue = HeaderValue::from_static("*");
                Some(ANY)
            }
            Self::Origins(list) => origin.and_then(|o| list.iter().find(|allowed| allowed.as_bytes() == o)).cloned(),
        }
    }

    /// Whether the answer depends on `Origin` (caches must key on it).
    pub(crate) fn varies(&self) -> bool {
        matches!(self, Self::Origins(_))
    }

    /// The CORS headers a response to `method` with this `Origin` carries.
    ///
    /// The exposed-headers list (~370 bytes, three times a 100-byte append's
    /// payload) is only read by a browser, and a browser's cross-origin
    /// request always carries `Origin`; so a write answered to a client that
    /// sent none goes without it. Reads keep it always: a shared cache may
    /// store a read fetched without `Origin` and serve it to a browser, and
    /// under `*` nothing tells the cache to key on `Origin`.
    /// `origin`: the request's `Origin` value as it arrived.
    pub(crate) fn answer(&self, method: &Method, origin: Option<&[u8]>) -> CorsAnswer {
        let allow_origin = self.allow_origin(origin);
        let cacheable = method == Method::GET || method == Method::HEAD;
        let expose = allow_origin.is_some() && (origin.is_some() || cacheable);
        CorsAnswer { allow_origin, expose, vary: self.varies() }
    }
}

/// What [`Cors::answer`] decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CorsAnswer {
    /// `Access-Control-Allow-Origin`, if the origin may read the response.
    pub allow_origin: Option<HeaderValue>,
    /// Whether to list the protocol's headers in `Access-Control-Expose-Headers`.
    pub expose: bool,
    /// Whether to add `Vary: Origin`.
    pub vary: bool,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn origins() {
        assert_eq!(Cors::parse("*").unwrap(), Cors::AnyOrigin);
        let c = Cors::parse("https://a.example, http://localhost:3000").unwrap();
        let a = HeaderValue::from_static("https://a.example");
        assert_eq!(c.allow_origin(Some(a.as_bytes())), Some(a.clone()));
        assert_eq!(c.allow_origin(Some(b"https://evil.example")), None);
        assert_eq!(c.allow_origin(None), None);
        assert_eq!(Cors::parse("").unwrap(), Cors::Origins(Vec::new()));
        assert!(Cors::parse("a.example").is_err());
        assert!(Cors::parse("https://a.example/").is_err());
    }

    #[test]
    fn writes_without_an_origin_go_without_the_exposed_headers_list() {
        let origin = HeaderValue::from_static("https://a.example");
        let origin = origin.as_bytes();
        let any = Cors::AnyOrigin;
        let star = Some(HeaderValue::from_static("*"));
        for m in [Method::POST, Method::PUT, Method::DELETE] {
            let a = any.answer(&m, None);
            assert_eq!((a.allow_origin.clone(), a.expose, a.vary), (star.clone(), false, false), "{m}");
            assert!(any.answer(&m, Some(origin)).expose, "{m} from a browser");
        }
        for m in [Method::GET, Method::HEAD] {
            assert!(any.answer(&m, None).expose, "{m}: a cache may serve it to a browser");
        }
        let listed = Cors::parse("https://a.example").unwrap();
        let a = listed.answer(&Method::GET, Some(origin));
        assert_eq!(
            (a.allow_origin, a.expose, a.vary),
            (Some(HeaderValue::from_static("https://a.example")), true, true)
        );
        let other = listed.answer(&Method::GET, Some(b"https://b.example"));
        assert_eq!((other.allow_origin, other.expose, other.vary), (None, false, true));
    }
}
