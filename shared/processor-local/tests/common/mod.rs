//! A server in-process: the ds-http router over a substrate whose hub rings
//! a [`LocalHost`] running the built-in processors of a TOML configuration.
//! Requests go through the real router (tower `oneshot`).
#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ds_core::{ServiceConfig, StreamService, Substrate};
use ds_processor_local::{HostConfig, LocalHost};
use ds_processors_builtin::Catalog;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

pub struct App {
    pub router: axum::Router,
    pub service: StreamService,
    pub host: LocalHost,
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Starts the host over `substrate` with the processors of `config`.
pub async fn app_with(substrate: Substrate, config: &str, ops: ds_http::Operations) -> App {
    let host = LocalHost::new(HostConfig { lag_log_interval: None, ..HostConfig::default() });
    let service = StreamService::new(host.tap(substrate), ServiceConfig::default());
    let (_, registry) = Catalog::builtin().load(config, &service).await.expect("valid config");
    host.start(service.clone(), registry).await.expect("start");
    let ops = ds_http::Operations { processors: Some(host.operator()), store_name: "test", ..ops };
    let router = ds_http::router_with(service.clone(), ds_http::HttpConfig::default(), ops);
    App { router, service, host }
}

pub async fn app(substrate: Substrate, config: &str) -> App {
    app_with(substrate, config, ds_http::Operations::default()).await
}

impl App {
    pub async fn call(&self, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self.router.clone().oneshot(req.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        Resp { status: parts.status, headers: parts.headers, body }
    }

    pub async fn create_json(&self, path: &str) {
        let r = self.call("PUT", &format!("/v1/stream/{path}"), &[("content-type", "application/json")], "").await;
        assert!(r.status.is_success(), "PUT {path}: {}", r.status);
    }

    pub async fn append(&self, path: &str, events: &[Value]) {
        let body = Value::Array(events.to_vec()).to_string();
        let r = self.call("POST", &format!("/v1/stream/{path}"), &[("content-type", "application/json")], &body).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "POST {path}: {}", String::from_utf8_lossy(&r.body));
    }

    /// Every message of a JSON stream.
    pub async fn messages(&self, path: &str) -> Vec<Value> {
        let r = self.call("GET", &format!("/v1/stream/{path}?offset=-1"), &[], "").await;
        assert_eq!(r.status, StatusCode::OK, "GET {path}");
        r.json().as_array().cloned().unwrap()
    }

    pub async fn list(&self) -> Vec<Value> {
        let r = self.call("GET", "/v1/processors", &[], "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
        r.json()["processors"].as_array().cloned().unwrap()
    }

    pub async fn show(&self, slug: &str, stream: &str) -> Value {
        let r = self.call("GET", &format!("/v1/processors/{slug}/streams/{stream}"), &[], "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
        r.json()
    }

    pub async fn control(&self, slug: &str, action: &str, stream: &str, body: Value) -> Resp {
        self.call(
            "POST",
            &format!("/v1/processors/{slug}/{action}/{stream}"),
            &[("content-type", "application/json")],
            &body.to_string(),
        )
        .await
    }

    /// Waits until every processor on every stream reports lag 0 and at
    /// least `streams` (stream, processor) pairs are listed.
    pub async fn settle(&self, pairs: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let list = self.list().await;
            if list.len() >= pairs && list.iter().all(|p| p["lag"] == json!(0)) {
                return list;
            }
            assert!(Instant::now() < deadline, "processors did not catch up: {list:#?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub fn order(id: u64, status: &str) -> Value {
    json!({ "type": "order/placed", "payload": { "id": id, "status": status } })
}

pub const CONFIG: &str = r#"
[[processor]]
kind = "outbox"
slug = "order-feed"
streams = "orders/*"
target = "feed"
create_target = true
consumes = ["order/placed"]
template = { type = "feed/order", payload = { id = "$/payload/id", from = "$/stream" } }

[[processor]]
kind = "counter"
slug = "by-status"
streams = "orders/*"
consumes = ["order/placed"]
group_by = "/payload/status"
"#;
