//! Which browser origins may read responses (CORS).

use axum::http::HeaderValue;

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
    pub(crate) fn allow_origin(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        match self {
            Self::AnyOrigin => {
                const ANY: HeaderValue = HeaderValue::from_static("*");
                Some(ANY)
            }
            Self::Origins(list) => origin.filter(|o| list.contains(o)).cloned(),
        }
    }

    /// Whether the answer depends on `Origin` (caches must key on it).
    pub(crate) fn varies(&self) -> bool {
        matches!(self, Self::Origins(_))
    }
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
        assert_eq!(c.allow_origin(Some(&a)), Some(a.clone()));
        assert_eq!(c.allow_origin(Some(&HeaderValue::from_static("https://evil.example"))), None);
        assert_eq!(c.allow_origin(None), None);
        assert_eq!(Cors::parse("").unwrap(), Cors::Origins(Vec::new()));
        assert!(Cors::parse("a.example").is_err());
        assert!(Cors::parse("https://a.example/").is_err());
    }
}
