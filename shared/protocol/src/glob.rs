//! Stream path patterns (subscriptions §6, processor registrations): `/`
//! separated segments where `*` matches exactly one segment and `**` matches
//! zero or more; any other segment matches itself. `*` inside a segment
//! (`a*b`) is not a wildcard the protocol defines, so it is refused.

use crate::ProtocolError;

/// One segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// `*`
    One,
    /// `**`
    Any,
}

/// A parsed stream path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    parts: Vec<Part>,
}

impl Glob {
    /// Parse `pattern` (e.g. `orders/*`, `tenants/**/events`).
    pub fn parse(pattern: &str) -> Result<Self, ProtocolError> {
        let bad = |why: &str| ProtocolError::InvalidPath(format!("pattern {pattern:?}: {why}"));
        if pattern.is_empty() {
            return Err(bad("empty"));
        }
        let mut parts = Vec::new();
        for segment in pattern.split('/') {
            parts.push(match segment {
                "" => return Err(bad("empty segment")),
                "*" => Part::One,
                "**" => Part::Any,
                s if s.contains('*') => return Err(bad("'*' must be a whole segment ('*' or '**')")),
                "." | ".." => return Err(bad("'.' and '..' segments are not allowed")),
                s => Part::Literal(s.to_owned()),
            });
        }
        Ok(Self { source: pattern.to_owned(), parts })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The literal start of the pattern: every path it matches begins with
    /// it (the segments before the first wildcard, with the `/` after them
    /// for a `*`, without it for a `**`, which may match no segment; the
    /// whole pattern when it has no wildcard). A listing by this prefix
    /// finds every stream the pattern can match.
    pub fn literal_prefix(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => {
                    if !out.is_empty() {
                        out.push('/');
                    }
                    out.push_str(s);
                }
                Part::One => {
                    if !out.is_empty() {
                        out.push('/');
                    }
                    return out;
                }
                Part::Any => return out,
            }
        }
        out
    }

    /// Whether the stream path `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let segments: Vec<&str> = path.split('/').collect();
        matches_from(&self.parts, &segments)
    }
}

impl std::fmt::Display for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

/// Iterative match with one backtrack point per `**` (linear in practice,
/// never exponential: a later `**` supersedes the earlier backtrack point).
fn matches_from(parts: &[Part], segments: &[&str]) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < segments.len() {
        match parts.get(p) {
            Some(Part::Any) => {
                star = Some((p, s));
                p += 1;
            }
            Some(Part::One) => {
                p += 1;
                s += 1;
            }
            Some(Part::Literal(l)) if l == segments[s] => {
                p += 1;
                s += 1;
            }
            _ => match star {
                // Let the last `**` swallow one more segment and retry.
                Some((sp, ss)) => {
                    p = sp + 1;
                    s = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    parts[p..].iter().all(|part| *part == Part::Any)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Glob::parse(pattern).expect("valid pattern").matches(path)
    }

    #[test]
    fn one_star_is_one_segment_two_stars_any_number() {
        assert!(m("orders/*", "orders/42"));
        assert!(!m("orders/*", "orders"));
        assert!(!m("orders/*", "orders/42/items"));
        assert!(m("orders/**", "orders"));
        assert!(m("orders/**", "orders/42/items"));
        assert!(m("**", "anything/at/all"));
        assert!(m("a/**/z", "a/z"));
        assert!(m("a/**/z", "a/b/c/z"));
        assert!(!m("a/**/z", "a/b/c/y"));
        assert!(m("*/events", "tenant-1/events"));
        assert!(!m("*/events", "tenant-1/x/events"));
        assert!(m("exact/path", "exact/path"));
        assert!(!m("exact/path", "exact/paths"));
        assert!(m("a/**/b/**/c", "a/x/b/y/z/c"));
        assert!(!m("a/**/b/**/c", "a/x/c"));
    }

    #[test]
    fn every_match_starts_with_the_literal_prefix() {
        let prefix = |p: &str| Glob::parse(p).expect("valid pattern").literal_prefix();
        assert_eq!(prefix("orders/*"), "orders/");
        assert_eq!(prefix("orders/**"), "orders");
        assert_eq!(prefix("a/b/*/c"), "a/b/");
        assert_eq!(prefix("*/events"), "");
        assert_eq!(prefix("**"), "");
        assert_eq!(prefix("exact/path"), "exact/path");
        for (pattern, path) in [("orders/*", "orders/42"), ("orders/**", "orders"), ("a/**/z", "a/z"), ("x/y", "x/y")] {
            assert!(m(pattern, path) && path.starts_with(&prefix(pattern)), "{pattern} {path}");
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["", "a//b", "/a", "a/", "a*", "a/b*c/d", "../x", "a/./b"] {
            assert!(Glob::parse(bad).is_err(), "{bad:?}");
        }
    }
}
