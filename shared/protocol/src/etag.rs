//! ETags for catch-up reads: `"{stream id}:{start}:{end}"`, plus `:c` once the
//! stream is closed so a cached 304 can never hide the closure signal.

/// Strong ETag (quoted) for a read of positions `[start, end)`.
pub fn read_etag(stream_id: &str, start: u64, end: u64, closed: bool) -> String {
    let suffix = if closed { ":c" } else { "" };
    format!("\"{stream_id}:{start}:{end}{suffix}\"")
}

/// Whether an `If-None-Match` header value matches `etag` (list or `*`;
/// weak comparison, as RFC 9110 requires for If-None-Match).
pub fn if_none_match(header: &str, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let want = strip(etag);
    header.split(',').any(|t| {
        let t = t.trim();
        t == "*" || strip(t) == want
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closure_changes_etag() {
        assert_ne!(read_etag("s", 0, 5, false), read_etag("s", 0, 5, true));
        let e = read_etag("s", 0, 5, false);
        assert!(if_none_match(&e, &e));
        assert!(if_none_match(&format!("\"x\", W/{e}"), &e));
        assert!(!if_none_match("\"other\"", &e));
    }
}
