//! `/health`: which store serves, and whether it takes writes.
//!
//! The probe submits an empty commit (for the local store that is a write
//! transaction begun by its writer thread: the writer is alive and the
//! database takes writes) and reads a reserved key (the store answers).
//! The AWS store sends nothing for an empty commit, so there `writable`
//! means the table answers; write permission is not probed, to keep health
//! checks free of writes. Results are reused for [`PROBE_EVERY`] so a busy
//! load balancer cannot turn health checks into load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_core::{Commit, StreamStore};
use tokio::sync::Mutex;

pub const PROBE_EVERY: Duration = Duration::from_secs(2);

pub(crate) struct Health {
    store_name: &'static str,
    store: Arc<dyn StreamStore>,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Health {
    pub fn new(store_name: &'static str, store: Arc<dyn StreamStore>) -> Self {
        Self { store_name, store, last: Mutex::new(None) }
    }

    async fn probe(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref() {
            if at.elapsed() < PROBE_EVERY {
                return result.clone();
            }
        }
        let result = async {
            self.store.commit(Commit::new()).await.map_err(|e| e.to_string())?;
            self.store
                .read_meta(&ds_core::StreamHandle::detached("__ds/health"))
                .await
                .map_err(|e| e.to_string())
                .map(|_| ())
        }
        .await;
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

pub(crate) async fn health(State(health): State<Arc<Health>>) -> Response {
    let result = health.probe().await;
    let (status, body) = match &result {
        Ok(()) => (StatusCode::OK, serde_json::json!({"status": "ok", "store": health.store_name, "writable": true})),
        Err(e) => {
            tracing::warn!(error = %e, "health probe failed");
            let body = serde_json::json!({"status": "degraded", "store": health.store_name, "writable": false});
            (StatusCode::SERVICE_UNAVAILABLE, body)
        }
    };
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
