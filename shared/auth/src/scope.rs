//! Scopes: which operations a credential may perform under which stream path
//! prefixes. Pure rules, no I/O.

use serde::{Deserialize, Serialize};

/// An operation class. Independent of each other: `admin` does not imply
/// `write`, and `write` does not imply `read` (a producer may only append).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// GET (catch-up, long-poll, SSE), HEAD; reading subscriptions; `/metrics`.
    Read,
    /// POST (append, close), PUT (create); pull-wake `claim`.
    Write,
    /// DELETE; creating a fork; managing subscriptions.
    Admin,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Admin => "admin",
        }
    }
}

/// One entry of a `streams` claim: `{"prefix": "chat/", "ops": ["read"]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// A stream path prefix, matched segment-wise: `chat` covers `chat` and
    /// `chat/…` but not `chatter`; `chat/` covers only paths below `chat/`;
    /// the empty prefix covers every path (including the reserved `__ds/…`).
    pub prefix: String,
    pub ops: Vec<Op>,
}

/// Everything a credential is allowed to do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grants(pub Vec<Grant>);

impl Grants {
    /// Whether some grant covers `op` on `path` (a decoded stream path
    /// without a leading `/`).
    pub fn allows(&self, path: &str, op: Op) -> bool {
        self.0.iter().any(|g| g.ops.contains(&op) && prefix_covers(&g.prefix, path))
    }
}

fn prefix_covers(prefix: &str, path: &str) -> bool {
    if prefix.is_empty() || path == prefix {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grants(json: &str) -> Grants {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let g = grants(r#"[{"prefix":"chat","ops":["read"]},{"prefix":"logs/","ops":["write"]}]"#);
        assert!(g.allows("chat", Op::Read));
        assert!(g.allows("chat/room-1", Op::Read));
        assert!(!g.allows("chatter", Op::Read));
        assert!(!g.allows("chat/room-1", Op::Write));
        assert!(g.allows("logs/a/b", Op::Write));
        assert!(!g.allows("logs", Op::Write), "logs/ covers only paths below logs/");
        assert!(!g.allows("logsx", Op::Write));
        assert!(!g.allows("other", Op::Read));
    }

    #[test]
    fn ops_are_independent_and_empty_prefix_covers_all() {
        let g = grants(r#"[{"prefix":"","ops":["admin"]}]"#);
        assert!(g.allows("any/path", Op::Admin));
        assert!(g.allows("__ds/subscriptions/x", Op::Admin));
        assert!(!g.allows("any/path", Op::Read));
        assert!(!Grants::default().allows("a", Op::Read));
    }

    #[test]
    fn unknown_ops_and_fields_are_rejected() {
        assert!(serde_json::from_str::<Grants>(r#"[{"prefix":"","ops":["delete"]}]"#).is_err());
        assert!(serde_json::from_str::<Grants>(r#"[{"prefix":"","ops":[],"extra":1}]"#).is_err());
    }
}
