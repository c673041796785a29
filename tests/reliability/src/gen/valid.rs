//! Well-formed protocol traffic on a worker's streams: creates, appends
//! (plain, with `Stream-Seq`, with producers), closes, reads of every kind,
//! forks and deletes. Each must be answered without a 5xx.

use proptest::prelude::*;

use super::{Body, Case, Names, Req};

const TYPES: &[&str] =
    &["application/octet-stream", "application/json", "text/plain", "application/json; charset=utf-8"];

/// An offset token at `pos`.
pub fn offset(pos: u64) -> String {
    format!("{:016}_{pos:016}", 0)
}

fn content_type() -> impl Strategy<Value = &'static str> {
    prop::sample::select(TYPES)
}

/// The content type of one of the streams created before the run.
fn type_of(name: &str) -> Option<&'static str> {
    match name {
        "oct" | "closed" => Some("application/octet-stream"),
        "json" => Some("application/json"),
        "text" => Some("text/plain"),
        _ => None,
    }
}

/// A body for `ct`: JSON values for JSON streams, bytes otherwise.
fn body_for(ct: &'static str) -> SBoxedStrategy<Vec<u8>> {
    if ct.starts_with("application/json") {
        prop_oneof![
            Just(b"{\"k\":1}".to_vec()),
            Just(b"[1,2,3]".to_vec()),
            Just(b"\"s\"".to_vec()),
            "[a-z]{0,20}".prop_map(|s| format!("{{\"v\":\"{s}\"}}").into_bytes()),
            (0u32..1000).prop_map(|n| format!("[{n},{{\"n\":{n}}}]").into_bytes()),
        ]
        .sboxed()
    } else {
        prop::collection::vec(any::<u8>(), 0..300).sboxed()
    }
}

fn create(names: Names) -> impl Strategy<Value = Case> {
    (names.any_name(), content_type(), any::<bool>(), 0u8..4, any::<bool>()).prop_flat_map(
        move |(name, ct, with_body, life, closed)| {
            let names = names.clone();
            body_for(ct).prop_map(move |body| {
                let mut req = Req::new("PUT", names.target(&name)).header("content-type", ct);
                req = match life {
                    1 => req.header("stream-ttl", "3600"),
                    2 => req.header("stream-ttl", "1"),
                    3 => req.header("stream-expires-at", "2099-01-01T00:00:00Z"),
                    _ => req,
                };
                if closed {
                    req = req.header("stream-closed", "true");
                }
                let body = if with_body { Body::Sized(body) } else { Body::None };
                req.body(body).case("valid create")
            })
        },
    )
}

fn append(names: Names) -> impl Strategy<Value = Case> {
    let producer = prop::option::of((0u8..3, 0u64..3, 0u64..12));
    let seq = prop::option::of(prop::sample::select(vec!["a", "b", "m", "z", "00001", "00002"]));
    let matching = prop::bool::weighted(0.8);
    (names.any_name(), content_type(), matching, producer, seq, prop::bool::weighted(0.05), any::<bool>())
        .prop_flat_map(move |(name, ct, matching, producer, seq, close, chunked)| {
            let names = names.clone();
            // Mostly the stream's own type, so most appends get through.
            let ct = type_of(&name).filter(|_| matching).unwrap_or(ct);
            body_for(ct).prop_map(move |body| {
                let mut req = Req::new("POST", names.target(&name)).header("content-type", ct);
                if let Some((id, epoch, n)) = producer {
                    req = req
                        .header("producer-id", format!("p{id}"))
                        .header("producer-epoch", epoch.to_string())
                        .header("producer-seq", n.to_string());
                }
                if let Some(seq) = seq {
                    req = req.header("stream-seq", seq);
                }
                if close {
                    req = req.header("stream-closed", "true");
                }
                let body = if chunked && body.len() > 2 {
                    let (a, b) = body.split_at(body.len() / 2);
                    Body::Chunked(vec![a.to_vec(), b.to_vec()])
                } else {
                    Body::Sized(body)
                };
                req.body(body).case("valid append")
            })
        })
}

fn read(names: Names) -> impl Strategy<Value = Case> {
    let offset = prop_oneof![
        Just(None),
        Just(Some("-1".to_owned())),
        Just(Some("now".to_owned())),
        (0u64..40).prop_map(|p| Some(offset(p))),
    ];
    let live = prop::sample::select(vec![None, None, Some("long-poll"), Some("sse")]);
    let cursor = prop::option::of("[0-9]{1,12}");
    let inm = prop::option::of(Just("\"x\"".to_owned()));
    (names.any_name(), offset, live, cursor, inm).prop_map(move |(name, offset, live, cursor, inm)| {
        let mut query = Vec::new();
        if let Some(o) = offset {
            query.push(format!("offset={o}"));
        }
        if let Some(l) = live {
            query.push(format!("live={l}"));
        }
        if let Some(c) = cursor {
            query.push(format!("cursor={c}"));
        }
        let mut req = Req::new("GET", format!("{}?{}", names.target(&name), query.join("&")));
        if let Some(inm) = inm {
            req = req.header("if-none-match", inm);
        }
        req.case("valid read")
    })
}

fn other(names: Names) -> impl Strategy<Value = Case> {
    (names.any_name(), names.any_name(), 0u8..4, 0u64..30).prop_map(move |(name, source, op, pos)| match op {
        0 => Req::new("HEAD", names.target(&name)).case("valid head"),
        1 => Req::new("DELETE", names.target(&name)).case("valid delete"),
        2 => Req::new("PUT", names.target(&format!("{name}-fork")))
            .header("stream-forked-from", names.target(&source))
            .header("stream-fork-offset", offset(pos))
            .case("valid fork"),
        _ => Req::new("OPTIONS", names.target(&name))
            .header("origin", "http://127.0.0.1")
            .header("access-control-request-method", "POST")
            .case("valid preflight"),
    })
}

/// Any well-formed request.
pub fn request(names: Names) -> SBoxedStrategy<Case> {
    prop_oneof![
        2 => create(names.clone()),
        5 => append(names.clone()),
        4 => read(names.clone()),
        2 => other(names),
    ]
    .sboxed()
}
