//! Function URL request events (fixtures, payload format 2.0) through the
//! real handler: event → `lambda_http` request → `handler` → ds-http router
//! → AWS substrate on the emulator.

mod common;

use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use tower::ServiceExt;

async fn invoke(router: &axum::Router, event_json: &str) -> (http::StatusCode, http::HeaderMap, bytes::Bytes) {
    let event: LambdaRequest = serde_json::from_str(event_json).expect("a Function URL event");
    let req: lambda_http::Request = event.into();
    let resp = lambda_http_fn::handler(router.clone()).oneshot(req).await.expect("infallible");
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_url_events_through_the_handler() {
    if !common::emulator("function_url_events_through_the_handler") {
        return;
    }
    let router = lambda_http_fn::router(common::service().await, lambda_http_fn::http_config_from_env().expect("cfg"));
    let path = format!("lambda/events/{}", uuid_like());

    let (status, headers, _) = invoke(&router, &common::fixture("put_create.json", &path)).await;
    assert_eq!(status, http::StatusCode::CREATED);
    assert_eq!(headers.get("content-type").map(|v| v.to_str().unwrap_or("")), Some("text/plain"));
    assert!(headers.contains_key("stream-next-offset"));

    // Base64 body (binary-safe Function URL encoding) and a Stream-Seq header.
    let (status, headers, _) = invoke(&router, &common::fixture("post_append_base64.json", &path)).await;
    assert_eq!(status, http::StatusCode::NO_CONTENT);
    let tail = headers.get("stream-next-offset").expect("next offset").to_str().expect("ascii").to_owned();

    let (status, headers, body) = invoke(&router, &common::fixture("get_catch_up.json", &path)).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(&body[..], b"hello  world");
    assert_eq!(headers.get("stream-next-offset").and_then(|v| v.to_str().ok()), Some(tail.as_str()));
    assert_eq!(headers.get("stream-up-to-date").and_then(|v| v.to_str().ok()), Some("true"));

    // The same append again: Stream-Seq 0001 is no longer greater → 409.
    let (status, _, _) = invoke(&router, &common::fixture("post_append_base64.json", &path)).await;
    assert_eq!(status, http::StatusCode::CONFLICT);

    let (status, _, body) = invoke(&router, &common::fixture("head_missing.json", &path)).await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
    assert!(body.is_empty());
}

fn uuid_like() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}-{}", t.as_nanos(), std::process::id())
}
