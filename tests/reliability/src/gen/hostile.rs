//! Hostile input: malformed request lines, traversal and bad encodings in
//! paths, huge / repeated / conflicting / invalid headers, request smuggling
//! and broken body framing, and clients that stop mid-request.

use proptest::prelude::*;

use super::{chunked, After, Body, Case, Names, Req};

/// Garbage in the request line: methods, targets, versions, separators.
pub fn request_line() -> SBoxedStrategy<Case> {
    let method = prop_oneof![
        prop::sample::select(vec!["GET", "get", "PUT", "POST", "G E T", "FOO", "", "CONNECT", "TRACE", "PRI"])
            .prop_map(|m| m.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 1..12),
        (1usize..200).prop_map(|n| b"P".repeat(n)),
    ];
    let target = prop_oneof![
        Just(b"/v1/stream/fz/x".to_vec()),
        Just(b"*".to_vec()),
        Just(b"http://127.0.0.1/v1/stream/fz/x".to_vec()),
        Just(b"v1/stream/fz/x".to_vec()),
        Just(b"/v1/stream/fz/x y".to_vec()),
        Just(b"".to_vec()),
        prop::collection::vec(any::<u8>(), 1..40),
        (60_000usize..70_000).prop_map(|n| [b"/v1/stream/".as_slice(), &b"a".repeat(n)].concat()),
    ];
    let version = prop::sample::select(vec!["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", "http/1.1", "", "HTTP/9"]);
    let sep = prop::sample::select(vec![" ", "  ", "\t"]);
    let eol = prop::sample::select(vec!["\r\n", "\n", "\r"]);
    (method, target, version, sep, eol)
        .prop_map(|(method, target, version, sep, eol)| {
            let mut bytes = method;
            bytes.extend_from_slice(sep.as_bytes());
            bytes.extend_from_slice(&target);
            bytes.extend_from_slice(sep.as_bytes());
            bytes.extend_from_slice(version.as_bytes());
            bytes.extend_from_slice(eol.as_bytes());
            bytes.extend_from_slice(b"host: 127.0.0.1");
            bytes.extend_from_slice(eol.as_bytes());
            bytes.extend_from_slice(eol.as_bytes());
            let head = bytes.starts_with(b"HEAD ");
            // Some of these are incomplete heads (a lone \r never ends the
            // head): the server must close them at its header timeout.
            Case {
                kind: "request line",
                bytes,
                after: After::Read,
                head,
                must_answer: false,
                must_close: false,
                traversal: false,
                reserved: false,
            }
        })
        .sboxed()
}

const SEGMENTS: &[&str] = &[
    "..",
    ".",
    "%2e%2e",
    "%2E%2E",
    ".%2e",
    "%2e.",
    "%252e%252e",
    "..%2f",
    "%2f..",
    "..%2F..",
    "..\\",
    "%5c..",
    "a%ff",
    "%c3%28",
    "%e2%82",
    "%",
    "%g1",
    "%2",
    "%00",
    "%0a",
    "a\x01b",
    "fz",
    "ok",
    "",
    "%2F",
    "__ds",
    "a b",
    "\u{e9}",
    "%C0%AE%C0%AE",
    "%uff0e%uff0e",
];

/// Whether `target` has a `..` segment once percent-decoded (once).
pub fn is_traversal(target: &[u8]) -> bool {
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    let decoded = percent_decode_lossy(path);
    decoded.split(|b| *b == b'/' || *b == b'\\').any(|seg| seg == b"..")
}

fn percent_decode_lossy(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let hex = s.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (s[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Traversal attempts and bad encodings in stream paths, with every method.
pub fn path() -> SBoxedStrategy<Case> {
    let segs = prop::collection::vec(prop::sample::select(SEGMENTS), 1..6);
    let method = prop::sample::select(vec!["GET", "PUT", "POST", "HEAD", "DELETE"]);
    let long = prop::option::weighted(0.05, 900usize..3000);
    (segs, method, long)
        .prop_map(|(segs, method, long)| {
            let mut target = format!("/v1/stream/{}", segs.join("/"));
            if let Some(n) = long {
                target.push_str(&"x".repeat(n));
            }
            let mut req = Req::new(method, target.clone());
            if method == "PUT" || method == "POST" {
                req = req.header("content-type", "text/plain").body(Body::Sized(b"x".to_vec()));
            }
            let mut case = req.hostile("path");
            case.traversal = is_traversal(target.as_bytes());
            case.reserved = segs[0] == "__ds";
            case
        })
        .sboxed()
}

/// Huge, repeated, conflicting and invalid headers on otherwise valid requests.
pub fn headers(names: Names) -> SBoxedStrategy<Case> {
    let pick = (names.any_name(), 0u8..12, 1usize..400, any::<u8>());
    (pick, prop::collection::vec(any::<u8>(), 1..16))
        .prop_map(move |((name, kind, n, byte), junk)| {
            let base = Req::new("POST", names.target(&name))
                .header("content-type", "application/octet-stream")
                .body(Body::Sized(b"hdr".to_vec()));
            let req = match kind {
                0 => base.header("x-big", "v".repeat(n * 250)), // up to 100 KB: 431 past the limit
                1 => (0..n).fold(base, |r, i| r.header(&format!("x-h{i}"), "1")), // > 100 lines: 431
                2 => base
                    .header("producer-id", "a")
                    .header("producer-id", "b")
                    .header("producer-epoch", "0")
                    .header("producer-seq", "0"),
                3 => base.header("content-type", "text/plain"),
                4 => base.header("stream-seq", "a").header("stream-seq", "b"),
                5 => base.header("x-obs", vec![b'a', 0x80 | byte, b'z']),
                6 => base.header("x-nul", vec![b'a', 0, b'z']),
                7 => base.header("bad name", "1"),
                8 => base.header("x-fold", "a\r\n folded"),
                9 => {
                    let mut r = base;
                    r.headers.retain(|(h, _)| h != b"host");
                    r
                }
                10 => base.header("content-type", junk),
                _ => base.header("stream-closed", "true").header("stream-closed", "false"),
            };
            req.hostile("headers")
        })
        .sboxed()
}

/// Request smuggling and broken body framing.
pub fn framing(names: Names) -> SBoxedStrategy<Case> {
    let pick = (names.any_name(), 0u8..12, prop::collection::vec(any::<u8>(), 1..64), any::<bool>());
    pick.prop_map(move |(name, kind, body, te_first)| {
        let target = names.target(&name);
        let post = || Req::new("POST", target.clone()).header("content-type", "application/octet-stream");
        let smuggled = format!("GET {}?offset=-1 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", names.target("oct"));
        match kind {
            0 => {
                // CL and TE: by TE the body is the chunked part; by CL it
                // also swallows the smuggled request that follows.
                let chunks = chunked(std::slice::from_ref(&body));
                let cl = (chunks.len() + smuggled.len()).to_string();
                let req = if te_first {
                    post().header("transfer-encoding", "chunked").header("content-length", cl)
                } else {
                    post().header("content-length", cl).header("transfer-encoding", "chunked")
                };
                let raw = [chunks, smuggled.into_bytes()].concat();
                let mut case = req.body(Body::Raw(raw)).hostile("smuggling CL+TE");
                case.must_close = true;
                case
            }
            1 => post()
                .header("transfer-encoding", "chunked, chunked")
                .body(Body::Raw(chunked(&[body])))
                .hostile("framing"),
            2 => post().header("transfer-encoding", "gzip").body(Body::Raw(body)).hostile("framing"),
            3 => {
                let mut req = post().header("transfer-encoding", "chunked").body(Body::Raw(chunked(&[body])));
                req.version = "HTTP/1.0";
                req.hostile("framing")
            }
            4 => post()
                .header("content-length", "3")
                .header("content-length", "4")
                .body(Body::Raw(b"abcd".to_vec()))
                .hostile("framing"),
            5 => post().header("content-length", "-1").hostile("framing"),
            6 => post().header("content-length", "99999999999999999999").hostile("framing"),
            7 => post().header("content-length", "+3").body(Body::Raw(b"abc".to_vec())).hostile("framing"),
            8 => post()
                .header("transfer-encoding", "chunked")
                .body(Body::Raw(b"zz\r\nabc\r\n0\r\n\r\n".to_vec()))
                .hostile("framing"),
            9 => post()
                .header("transfer-encoding", "chunked")
                .body(Body::Raw(b"ffffffffffffffffffff\r\nabc\r\n".to_vec()))
                .hostile("framing"),
            10 => post().header("expect", "100-continue").body(Body::Sized(body)).case("expect 100-continue"),
            _ => {
                let mut raw = chunked(&[body]);
                raw.truncate(raw.len() - 5); // no last chunk
                let mut case = post().header("transfer-encoding", "chunked").body(Body::Raw(raw)).hostile("framing");
                case.after = After::HalfClose;
                case
            }
        }
    })
    .sboxed()
}

/// Clients that stop mid-request and keep the connection open: a head
/// without its end, a body shorter than its `Content-Length`, a chunked
/// body without its last chunk. The server must answer (408) or close.
pub fn stalled(names: Names) -> SBoxedStrategy<Case> {
    (names.any_name(), 0u8..4)
        .prop_map(move |(name, kind)| {
            let target = names.target(&name);
            let bytes = match kind {
                0 => format!("GET {target}?offset=-1 HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: 1").into_bytes(),
                1 => format!("POST {target} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100\r\n\r\nonly-this")
                    .into_bytes(),
                2 => format!(
                    "POST {target} HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcde\r\n"
                )
                .into_bytes(),
                _ => Vec::new(), // connect and say nothing
            };
            Case {
                kind: "stalled client",
                bytes,
                after: After::Stall,
                head: false,
                must_answer: false,
                must_close: false,
                traversal: false,
                reserved: false,
            }
        })
        .sboxed()
}
