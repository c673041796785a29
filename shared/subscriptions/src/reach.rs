//! A subscription's reach: every stream it can ever name to its workers
//! (their names and tail offsets go into wake events, webhook bodies, its
//! `GET` and `claim` answers) and the stream it appends wake events to.
//! Pure; the caller's grants are asked through a [`Guard`].
//!
//! A pattern can name only streams under its literal prefix (the segments
//! before its first wildcard), so `read` covering that prefix covers
//! everything the pattern will ever match, including streams created later.
//! The same rule for every request that widens or reveals the reach — create,
//! adding explicit streams, reading, claiming — means a subscription shows no
//! one a name or an offset that person could not `HEAD` themselves.

use crate::config::Config;
use crate::error::{SubResult, SubscriptionError};

/// The literal start of a pattern: every stream it matches begins with it.
pub fn literal_prefix(pattern: &str) -> String {
    let mut literal = Vec::new();
    for segment in pattern.split('/') {
        match segment {
            "*" => return literal.iter().map(|s| format!("{s}/")).collect(),
            "**" => return literal.join("/"),
            s => literal.push(s),
        }
    }
    pattern.to_owned()
}

/// What a caller needs on a stream path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Names and tail offsets of streams under the path are disclosed.
    Read,
    /// The server appends to the stream at the path on the caller's behalf.
    Write,
}

impl Need {
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Read => "read",
            Need::Write => "write",
        }
    }
}

/// One stream path (or path prefix) a subscription reaches, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    pub path: String,
    pub need: Need,
    /// For the refusal message: `the literal prefix of pattern "a/*"`.
    pub why: String,
}

/// Everything a subscription configuration reaches: the literal prefix of
/// its pattern and each explicit stream (`read`), its wake stream (`write`).
pub fn of_config(config: &Config) -> Vec<Reached> {
    let mut out = Vec::with_capacity(config.streams.len() + 2);
    if let Some(pattern) = &config.pattern {
        out.push(Reached {
            path: literal_prefix(pattern),
            need: Need::Read,
            why: format!("the literal prefix of pattern {pattern:?}: every stream it can match is below it"),
        });
    }
    out.extend(explicit(&config.streams));
    if let Some(wake) = &config.wake_stream {
        out.push(Reached { path: wake.clone(), need: Need::Write, why: "the wake stream".into() });
    }
    out
}

/// What the `read` part of a configuration reaches (what `GET` and `claim`
/// reveal; the wake stream is the application's own stream).
pub fn disclosed(config: &Config) -> Vec<Reached> {
    of_config(config).into_iter().filter(|r| r.need == Need::Read).collect()
}

/// Explicit streams, each `read`.
pub fn explicit(streams: &[String]) -> impl Iterator<Item = Reached> + '_ {
    streams.iter().map(|s| Reached { path: s.clone(), need: Need::Read, why: "an explicit stream".into() })
}

/// The caller of a control request, as far as reach goes: whether its grants
/// allow `need` on `path` (for a prefix: on every path below it). Without
/// access control there is no caller to bound ([`Open`]).
pub trait Guard: Send + Sync {
    fn allows(&self, path: &str, need: Need) -> bool;
}

/// Access control off: everyone reaches everything.
pub struct Open;

impl Guard for Open {
    fn allows(&self, _: &str, _: Need) -> bool {
        true
    }
}

/// `Ok` if `guard` allows every item of `reach`; else the refusal naming the
/// first missing grant (`403`), before anything is stored or sent.
pub fn check(guard: &dyn Guard, reach: impl IntoIterator<Item = Reached>) -> SubResult<()> {
    for r in reach {
        if !guard.allows(&r.path, r.need) {
            return Err(SubscriptionError::Forbidden(format!(
                "the token does not grant {} on {:?} ({}); a subscription reaches only streams its caller may {}",
                r.need.as_str(),
                r.path,
                r.why,
                r.need.as_str()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::parse;

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_prefix("events/*"), "events/");
        assert_eq!(literal_prefix("events/**"), "events");
        assert_eq!(literal_prefix("a/b/*/c"), "a/b/");
        assert_eq!(literal_prefix("*"), "");
        assert_eq!(literal_prefix("**/x"), "");
        assert_eq!(literal_prefix("a/b"), "a/b");
    }

    fn config(body: &str) -> Config {
        parse(body.as_bytes(), |_| Ok(())).unwrap()
    }

    /// Grants as `(prefix, need)`, matched segment-wise like `ds_auth`'s.
    struct Prefixes(Vec<(&'static str, Need)>);

    impl Guard for Prefixes {
        fn allows(&self, path: &str, need: Need) -> bool {
            self.0.iter().any(|(p, n)| {
                *n == need
                    && (p.is_empty()
                        || path == *p
                        || path.strip_prefix(p).is_some_and(|rest| p.ends_with('/') || rest.starts_with('/')))
            })
        }
    }

    #[test]
    fn reach_of_a_configuration() {
        let c = config(r#"{"type":"pull-wake","pattern":"mine/*","streams":["x/1"],"wake_stream":"victim/log"}"#);
        let r = of_config(&c);
        let paths: Vec<(&str, Need)> = r.iter().map(|r| (r.path.as_str(), r.need)).collect();
        assert_eq!(paths, vec![("mine/", Need::Read), ("x/1", Need::Read), ("victim/log", Need::Write)]);
        assert_eq!(disclosed(&c).len(), 2);
    }

    #[test]
    fn the_first_missing_grant_is_named() {
        let c = config(r#"{"type":"pull-wake","pattern":"mine/*","wake_stream":"victim/log"}"#);
        let mine = Prefixes(vec![("mine/", Need::Read), ("mine/", Need::Write)]);
        match check(&mine, of_config(&c)) {
            Err(SubscriptionError::Forbidden(m)) => {
                assert!(m.contains("write on \"victim/log\" (the wake stream)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let secret = config(r#"{"type":"pull-wake","pattern":"secret/**","wake_stream":"mine/wakes"}"#);
        match check(&mine, of_config(&secret)) {
            Err(SubscriptionError::Forbidden(m)) => assert!(m.contains("read on \"secret\""), "{m}"),
            other => panic!("{other:?}"),
        }
        let ok = config(r#"{"type":"pull-wake","pattern":"mine/*","wake_stream":"mine/wakes"}"#);
        assert!(check(&mine, of_config(&ok)).is_ok());
        assert!(check(&Open, of_config(&secret)).is_ok());
    }

    #[test]
    fn a_pattern_needs_read_on_everything_it_can_match() {
        let guard = Prefixes(vec![("logs/", Need::Read)]);
        let allowed = |pattern: &str| {
            let c =
                config(&format!(r#"{{"type":"webhook","pattern":"{pattern}","webhook":{{"url":"https://x.test"}}}}"#));
            check(&guard, disclosed(&c)).is_ok()
        };
        assert!(allowed("logs/*"));
        assert!(allowed("logs/a/**"));
        assert!(allowed("logs/*/errors"));
        // `logs/**` also matches `logs` itself, which `logs/` does not cover.
        assert!(!allowed("logs/**"));
        assert!(!allowed("*"));
        assert!(!allowed("**/logs"));
        assert!(!allowed("logsx/*"));
        assert!(!allowed("log/*"));
    }
}
