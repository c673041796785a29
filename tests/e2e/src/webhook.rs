//! A webhook receiver on 127.0.0.1 for subscription tests: records every
//! delivery (arrival time, `Webhook-Signature`, raw body) and answers with a
//! status and body the test sets.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::Notify;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub at: Instant,
    pub signature: Option<String>,
    pub body: Bytes,
}

impl Delivery {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Delivery>>,
    reply: Mutex<(u16, String)>,
    arrived: Notify,
}

/// The receiver; stops serving when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> (StatusCode, String) {
    let signature = headers.get("webhook-signature").and_then(|v| v.to_str().ok()).map(str::to_owned);
    shared.received.lock().expect("lock").push(Delivery { at: Instant::now(), signature, body });
    shared.arrived.notify_waiters();
    let (status, body) = shared.reply.lock().expect("lock").clone();
    (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
}

impl Receiver {
    /// Listen on 127.0.0.1 (`port` 0: any free port); answers 200 `{}`.
    pub async fn start(port: u16) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.context("binding the receiver")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { reply: Mutex::new((200, "{}".into())), ..Shared::default() });
        let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, url: format!("http://{addr}/hook"), shared, task })
    }

    /// Answer later deliveries with `status` and `body`.
    pub fn reply(&self, status: u16, body: &str) {
        *self.shared.reply.lock().expect("lock") = (status, body.to_owned());
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.received.lock().expect("lock").clone()
    }

    /// Wait until at least `n` deliveries arrived; all of them.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<Delivery>> {
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = self.shared.arrived.notified();
            let got = self.deliveries();
            if got.len() >= n {
                return Ok(got);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("{} of {n} webhook deliveries within {timeout:?}", got.len());
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), arrived).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
