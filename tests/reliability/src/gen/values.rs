//! Extreme values in well-formed requests: offsets, `Stream-Seq`, producer
//! epochs and sequence numbers at and past the `u64` limits, TTL and
//! `Stream-Expires-At` extremes, fork offsets past the tail, and JSON built
//! to hurt a naive parser (deep nesting, a million empty elements).

use proptest::prelude::*;

use super::{Body, Case, Names, Req};

const INTEGERS: &[&str] = &[
    "0",
    "1",
    "9007199254740991",
    "9007199254740992",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "-1",
    "-0",
    "00",
    "01",
    "+1",
    " 1",
    "1 ",
    "1e3",
    "0x10",
    "1.0",
    "",
    "\u{661}",
];

const OFFSETS: &[&str] = &[
    "0000000000000000_18446744073709551615",
    "0000000000000000_18446744073709551616",
    "0000000000000000_9999999999999999",
    "9999999999999999_9999999999999999",
    "0000000000000000_-000000000000001",
    "0000000000000000_+000000000000001",
    "18446744073709551615",
    "-2",
    "-1-1",
    "now-1",
];

const TIMES: &[&str] = &[
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59.999999999Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "+275760-09-13T00:00:00Z",
    "2026-12-31T23:59:60Z",
    "2026-02-30T00:00:00Z",
    "2099-01-01T00:00:00+23:59",
    "2099-01-01T00:00:00-23:59",
    "2099-01-01T00:00:00.0000000000000000001Z",
    "2099-01-01",
    "18446744073709551615",
];

fn pick(values: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(values)
}

/// A header or query value at or past a numeric limit, on a valid request.
pub fn extremes(names: Names) -> SBoxedStrategy<Case> {
    let inputs = (names.any_name(), 0u8..9, pick(INTEGERS), pick(INTEGERS), pick(OFFSETS), pick(TIMES), 0usize..3000);
    inputs
        .prop_map(move |(name, kind, a, b, offset, time, len)| {
            let target = names.target(&name);
            let post = || {
                Req::new("POST", target.clone())
                    .header("content-type", "application/octet-stream")
                    .body(Body::Sized(b"x".to_vec()))
            };
            let put = |name: String| Req::new("PUT", names.target(&name)).header("content-type", "text/plain");
            let req = match kind {
                0 => Req::new("GET", format!("{target}?offset={offset}")),
                1 => Req::new("GET", format!("{target}?offset={offset}&live=long-poll")),
                2 => post().header("producer-id", "px").header("producer-epoch", a).header("producer-seq", b),
                3 => post().header("stream-seq", "z".repeat(len)),
                4 => put(format!("ttl-{name}")).header("stream-ttl", a),
                5 => put(format!("exp-{name}")).header("stream-expires-at", time),
                6 => put(format!("fork-{name}"))
                    .header("stream-forked-from", names.target("oct"))
                    .header("stream-fork-offset", offset),
                7 => put(format!("fork-{name}"))
                    .header("stream-forked-from", names.target("json"))
                    .header("stream-fork-offset", super::valid::offset(0))
                    .header("stream-fork-sub-offset", a),
                _ => Req::new("GET", format!("{target}?offset=-1&live=sse&cursor={a}")),
            };
            req.case("extreme value")
        })
        .sboxed()
}

/// JSON bodies for the worker's JSON stream.
pub fn json(names: Names) -> SBoxedStrategy<Case> {
    let depth = prop_oneof![100usize..200, 1000usize..5000, Just(100_000usize)];
    // A million-element array is 3 MB: rare (2 in 100 JSON cases).
    (0u8..100, depth)
        .prop_map(move |(kind, depth)| {
            let body = match kind % 10 {
                _ if kind == 0 => million("[]"),
                _ if kind == 1 => million("{}"),
                0 | 1 => format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes(),
                2 => format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes(),
                3 => "[".repeat(depth).into_bytes(), // never closed
                4 => format!("[{}]", "9".repeat(depth)).into_bytes(),
                5 => b"[1e999999, -0, 1E-999999]".to_vec(),
                6 => b"{\"a\":1,\"a\":2}".to_vec(),
                7 => b"[\"\\ud800\", \"\xff\"]".to_vec(),
                8 => b"[[],{},[[]],\"\"]".to_vec(),
                _ => b"\xef\xbb\xbf[1]".to_vec(),
            };
            let kind_name = if kind < 2 { "json million" } else { "json" };
            Req::new("POST", names.target("json"))
                .header("content-type", "application/json")
                .body(Body::Sized(body))
                .case(kind_name)
        })
        .sboxed()
}

/// A JSON array of a million copies of `element`.
fn million(element: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1_000_000 * (element.len() + 1) + 1);
    out.push(b'[');
    for i in 0..1_000_000 {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(element.as_bytes());
    }
    out.push(b']');
    out
}
