//! The router's logs: its own test binary, because the subscriber it
//! installs is per thread, and `tracing` caches whether a call site is
//! enabled globally: a test running beside it on another thread, with no
//! subscriber, could register the span's call site as disabled first.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ds_core::{ServiceConfig, StreamService};
use tower::ServiceExt;

/// A log line sink for a test's own subscriber.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn every_request_has_a_span_and_server_errors_are_logged_in_it() {
    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("ds_http=debug")
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // No live-reader slots: a long-poll is refused with 503, a server error.
    let (sub, _due) = ds_store_memory::memory_substrate();
    let service = StreamService::new(sub, ServiceConfig::default());
    let http = ds_http::HttpConfig { max_live_readers: 0, ..ds_http::HttpConfig::default() };
    let router = ds_http::router(service, http);
    let call = |method: &str, uri: &str| {
        let req = Request::builder().method(method).uri(uri).header("content-type", "text/plain");
        router.clone().oneshot(req.body(Body::empty()).unwrap())
    };

    assert_eq!(call("PUT", "/v1/stream/logged").await.unwrap().status(), StatusCode::CREATED);
    let refused = call("GET", "/v1/stream/logged?offset=-1&live=long-poll").await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let failed: Vec<&str> = text.lines().filter(|l| l.contains("response failed")).collect();
    assert_eq!(failed.len(), 1, "one server error, one error line: {text}");
    assert!(failed[0].contains("ERROR"), "{}", failed[0]);
    assert!(failed[0].contains("status=503"), "{}", failed[0]);
    assert!(
        failed[0].contains("request{otel.name=GET /v1/stream/{path}")
            && failed[0].contains("http.request.method=GET")
            && failed[0].contains(r#"url.path="/v1/stream/logged" url.query="offset=-1&live=long-poll""#),
        "logged inside the request's span: {}",
        failed[0]
    );
    assert!(!text.lines().any(|l| l.contains("PUT") && l.contains("response failed")), "a 201 is no failure");
}
