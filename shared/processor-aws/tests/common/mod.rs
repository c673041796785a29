//! What the processor function tests share: a processor with the three
//! kinds of effect (an outbox append to another stream, an external effect
//! recorded by a test sink, a background task handed to SQS), the sinks,
//! and helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{CreateRequest, StreamService};
use ds_processor::{Contract, EffectError, Effects, Journal, OutgoingEvent, ProcessCall, Processor};
use ds_processor_aws::{Deployment, Task, TaskHandler, TaskHandlers, TaskQueue, Wiring};
use ds_processor_host::{ProcessorRegistry, Spec, StreamJournal};
use ds_protocol::headers::Lifetime;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

/// The stream pattern the relay runs on, and where it relays to.
pub const ORDERS: &str = "orders/*";
pub const RELAYED: &str = "relayed";
pub const AUDIT: &str = "audit";

/// A test sink standing for an external system that dedupes by key: the
/// first application of a key counts, later ones are recorded as attempts.
#[derive(Default)]
pub struct Sink {
    applied: Mutex<BTreeMap<String, String>>,
    attempts: AtomicUsize,
    /// Runs after an application; a hook that never resolves is a crash
    /// right after the effect. Taken when it fires (once).
    hook: Mutex<Option<(String, Hook)>>,
}

pub type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

impl Sink {
    pub async fn apply(&self, key: &str, label: &str) -> Result<(), EffectError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.applied.lock().expect("sink").entry(key.to_owned()).or_insert_with(|| label.to_owned());
        let hook = {
            let mut hook = self.hook.lock().expect("hook");
            match hook.as_ref() {
                Some((on, _)) if on == label => hook.take().map(|(_, h)| h),
                _ => None,
            }
        };
        if let Some(hook) = hook {
            hook().await;
        }
        Ok(())
    }

    /// Runs `hook` right after the first application labelled `label`.
    pub fn after(&self, label: &str, hook: Hook) {
        *self.hook.lock().expect("hook") = Some((label.to_owned(), hook));
    }

    /// Labels applied (once per key), sorted.
    pub fn labels(&self) -> Vec<String> {
        let mut labels: Vec<String> = self.applied.lock().expect("sink").values().cloned().collect();
        labels.sort();
        labels
    }

    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

/// A hook that signals `tx` and never returns: the process dies here.
pub fn crash(tx: tokio::sync::oneshot::Sender<()>) -> Hook {
    Box::new(move || {
        Box::pin(async move {
            let _ = tx.send(());
            futures::future::pending::<()>().await;
        })
    })
}

/// A hook that waits for `rx` (another instance going first).
pub fn wait_for(rx: tokio::sync::oneshot::Receiver<()>) -> Hook {
    Box::new(move || {
        Box::pin(async move {
            let _ = rx.await;
        })
    })
}

#[derive(Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum OrderEvent {
    #[serde(rename = "order/placed")]
    Placed { id: String },
}

/// Relays each `order/placed` to the `relayed` stream (blocking outbox
/// append), tells the notify sink (blocking), and hands an audit task to
/// the queue (background). State: the number of orders.
pub struct Relay {
    contract: Contract,
    service: StreamService,
    notify: Arc<Sink>,
    queue: Arc<dyn TaskQueue>,
}

impl Processor for Relay {
    type State = u64;
    type Event = OrderEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> u64 {
        0
    }

    fn reduce(&self, n: u64, _event: &ds_processor::Envelope<OrderEvent>) -> u64 {
        n + 1
    }

    fn process_event(&self, call: ProcessCall<'_, OrderEvent, u64>, effects: &mut Effects) {
        let Some(event) = call.event else { return };
        let OrderEvent::Placed { id } = &event.event;
        let outbox = StreamJournal::new(self.service.clone(), RELAYED);
        let (key, body) =
            (call.delivery.idempotency_key("relay"), OutgoingEvent::new("order/relayed", json!({ "id": id })));
        effects.block_processor_while(move || {
            let (outbox, key, data) = (outbox.clone(), key.clone(), body.encode());
            async move {
                let inc = outbox.incarnation().await.map_err(|e| EffectError::new(e.to_string()))?;
                outbox.append(&inc, data, &key).await.map(|_| ()).map_err(|e| EffectError::new(e.to_string()))
            }
        });
        let (notify, key, label) = (Arc::clone(&self.notify), call.delivery.idempotency_key("notify"), id.clone());
        effects.block_processor_while(move || {
            let (notify, key, label) = (Arc::clone(&notify), key.clone(), label.clone());
            async move { notify.apply(&key, &label).await }
        });
        let (queue, service) = (Arc::clone(&self.queue), self.service.clone());
        let (key, id) = (call.delivery.idempotency_key("audit"), id.clone());
        effects.run_in_background(async move {
            // The completion record lives with the audit stream.
            let audit = StreamJournal::new(service, AUDIT);
            let inc = audit.incarnation().await.map_err(|e| EffectError::new(e.to_string()))?;
            let task = Task {
                handler: "audit".into(),
                idempotency_key: key,
                path: AUDIT.into(),
                incarnation: inc.as_str().to_owned(),
                payload: json!({ "id": id }),
            };
            queue.enqueue(&task).await
        });
    }
}

/// Runs audit tasks into a sink.
pub struct AuditHandler(pub Arc<Sink>);

#[async_trait]
impl TaskHandler for AuditHandler {
    async fn run(&self, task: &Task) -> Result<(), EffectError> {
        let id = task.payload["id"].as_str().unwrap_or_default();
        self.0.apply(&task.idempotency_key, id).await
    }
}

/// The sinks one deployment writes to (shared by every instance: they are
/// the outside world).
#[derive(Default, Clone)]
pub struct World {
    pub notify: Arc<Sink>,
    pub audit: Arc<Sink>,
}

impl World {
    /// The deployment: the relay on `orders/*`, the audit task handler.
    /// `queue` wraps the real task queue (a test may make it crash).
    pub fn deployment(&self, wiring: &Wiring, queue: Option<Arc<dyn TaskQueue>>) -> Deployment {
        let (service, notify) = (wiring.service.clone(), Arc::clone(&self.notify));
        let queue = queue.unwrap_or_else(|| Arc::clone(&wiring.queue));
        let mut registry = ProcessorRegistry::new();
        registry
            .register(
                ORDERS,
                Arc::new(Spec::new(move || Relay {
                    contract: Contract::for_events::<OrderEvent>("relay", "1").expect("contract"),
                    service: service.clone(),
                    notify: Arc::clone(&notify),
                    queue: Arc::clone(&queue),
                })),
            )
            .expect("register");
        let mut tasks = TaskHandlers::new();
        tasks.register("audit", Arc::new(AuditHandler(Arc::clone(&self.audit))));
        Deployment { registry, tasks }
    }
}

/// A task queue that hands the first task over, then dies (signals `tx`).
pub struct CrashAfterEnqueue {
    pub inner: Arc<dyn TaskQueue>,
    pub crash: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

#[async_trait]
impl TaskQueue for CrashAfterEnqueue {
    async fn enqueue(&self, task: &Task) -> Result<(), EffectError> {
        self.inner.enqueue(task).await?;
        let crash = self.crash.lock().expect("crash").take();
        if let Some(tx) = crash {
            let _ = tx.send(());
            futures::future::pending::<()>().await;
        }
        Ok(())
    }
}

pub fn json_stream(path: &str) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    }
}

pub fn order(id: &str) -> String {
    json!({ "type": "order/placed", "payload": { "id": id } }).to_string()
}

/// The wall clock ([`ds_core::Clock::system`]) in the runner's units.
pub fn wall_ms() -> u64 {
    u64::try_from(ds_core::Clock::system().now_ms()).expect("after 1970")
}

/// A deadline a minute away (a Lambda timeout of 60 s).
pub fn deadline() -> u64 {
    wall_ms() + 60_000
}

/// The `type`s of the JSON entries of `path`, in order.
pub async fn entry_types(service: &StreamService, path: &str) -> Vec<String> {
    let inc = service.head(path).await.expect("head").incarnation;
    let page = service.read_journal(path, &inc, 0, 1 << 20).await.expect("read");
    page.entries
        .iter()
        .map(|(_, data)| {
            let v: serde_json::Value = serde_json::from_slice(data).expect("json entry");
            v["type"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

/// The relay's acknowledged position on `path`, from its progress record.
pub async fn acknowledged(service: &StreamService, path: &str) -> u64 {
    let inc = ds_processor::StreamIncarnation::new(service.head(path).await.expect("head").incarnation.to_string());
    let store = ds_processor_host::RecordProgressStore::new(service.clone(), path, "relay");
    let stored = ds_processor::ProgressStore::read(&store, &inc).await.expect("progress");
    stored.map_or(0, |p| p.progress.acknowledged_through())
}

/// Appends one JSON message to `path` (as a client would).
pub async fn append(service: &StreamService, path: &str, message: &str) {
    let req = ds_core::AppendRequest {
        path: path.into(),
        content_type: Some("application/json".into()),
        body: Bytes::from(message.to_owned()),
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    };
    service.append(req).await.expect("append");
}

/// The sort keys of every item of `path`'s partition.
pub async fn partition_keys(env: &ds_lambda_pump::ProcessorEnv, path: &str) -> Vec<String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let out = env
        .clients()
        .ddb
        .query()
        .table_name(&env.cfg.table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(ds_store_aws::schema::stream_pk(path)))
        .send()
        .await
        .expect("query");
    out.items().iter().filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned()).collect()
}

/// Keys of the objects under `prefix` in the test's bucket.
pub async fn objects(env: &ds_lambda_pump::ProcessorEnv, prefix: &str) -> Vec<String> {
    let out = env.clients().s3.list_objects_v2().bucket(&env.cfg.bucket).prefix(prefix).send().await.expect("list");
    out.contents().iter().filter_map(|o| o.key().map(str::to_owned)).collect()
}

/// The function's metric figures, recorded (`ds_processor_aws::lag::PlaneMetrics`).
#[derive(Default)]
pub struct RecordedMetrics {
    pub lags: Mutex<Vec<(String, u64, u64)>>,
    pub failures: Mutex<Vec<(&'static str, u64)>>,
}

impl ds_processor_aws::lag::PlaneMetrics for RecordedMetrics {
    fn processor_lag(&self, slug: &str, lag: u64, streams: u64) {
        self.lags.lock().expect("lags").push((slug.to_owned(), lag, streams));
    }

    fn failures(&self, what: ds_processor_aws::lag::FailureKind, count: u64) {
        self.failures.lock().expect("failures").push((what.metric(), count));
    }
}

impl RecordedMetrics {
    /// The last lag recorded for `slug`.
    pub fn last_lag(&self, slug: &str) -> Option<u64> {
        self.lags.lock().expect("lags").iter().rev().find(|(s, _, _)| s == slug).map(|(_, lag, _)| *lag)
    }

    /// Failures recorded of metric `name`, summed.
    pub fn failed(&self, name: &str) -> u64 {
        self.failures.lock().expect("failures").iter().filter(|(n, _)| *n == name).map(|(_, c)| c).sum()
    }
}
