//! [`ProcessorFunction`]: everything the processor Lambda does, by event.
//!
//! | event | what happens |
//! | --- | --- |
//! | DynamoDB Stream batch | chunk inserts ring their stream's doorbell: records of one stream coalesce into one catch-up of its processors; TTL removals are finished ([`crate::upkeep`]); seals and sweeps run when due. Answers `ReportBatchItemFailures` naming the first record of each stream that failed, so one bad stream does not hold the others. |
//! | DynamoDB Stream batch, subscriptions | record changes of subscriptions and doorbells go to the subscription plane ([`crate::subscriptions`]), after the processors |
//! | SQS batch | background tasks run ([`crate::tasks`]), subscriptions' timer messages are looked at; failed messages are reported. |
//! | revival schedule | the revival event is appended (once per arming) and the stream's processors catch up. |
//!
//! A record this function cannot read is **parked**: sent, with the reason,
//! to the parked-records queue (the event source's on-failure destination),
//! logged as an error, and the batch goes on; a retry could never read it,
//! so failing the batch would only hold the shard.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use ds_core::{StreamService, REGISTRY_PATH};
use ds_processor::{JournalError, Recovery, RecoveryError};
use ds_processor_host::{AlarmScheduler, ProcessorRegistry, StreamRecovery};
use ds_store_aws::AwsSubstrate;
use futures::future::BoxFuture;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::host::{HostConfig, Processors};
use crate::lag::{FailureKind, PlaneMetrics};
use crate::lifecycle::LifecycleEvents;
use crate::queue::{SendError, SqsQueue};
use crate::record::{sequence_number_of, Meaning, StreamEvent, StreamKey, StreamRecord};
use crate::revival::RevivalInput;
use crate::subscriptions::{StreamTail, SubscriptionDue, SubscriptionPlane};
use crate::tasks::{SqsEvent, TaskHandlers, TaskQueue, TaskRunner};
use crate::upkeep::{Upkeep, UpkeepPolicy};

/// Streams of one batch whose processors run at the same time.
const STREAMS_AT_ONCE: usize = 16;

/// A record that could not be read, as parked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParkedRecord {
    pub reason: String,
    /// The record as delivered (JSON text).
    pub record: String,
}

/// Where unreadable records are kept.
#[async_trait]
pub trait RecordParking: Send + Sync {
    async fn park(&self, parked: &ParkedRecord) -> Result<(), SendError>;
}

/// [`RecordParking`] on an SQS queue: one message per record.
#[async_trait]
impl RecordParking for SqsQueue {
    async fn park(&self, parked: &ParkedRecord) -> Result<(), SendError> {
        // Two strings: encoding cannot fail.
        self.send(serde_json::to_string(parked).unwrap_or_default(), 0).await
    }
}

/// What a deployment runs: its processors (by stream pattern) and the
/// handlers of their background tasks.
#[derive(Default)]
pub struct Deployment {
    pub registry: ProcessorRegistry,
    pub tasks: TaskHandlers,
}

/// What processors of a deployment may hold on to when they are built.
#[derive(Clone)]
pub struct Wiring {
    pub service: StreamService,
    /// Where their background work goes ([`crate::tasks`]).
    pub queue: Arc<dyn TaskQueue>,
}

/// The parts a [`ProcessorFunction`] is made of.
pub struct FunctionParts {
    pub aws: AwsSubstrate,
    pub service: StreamService,
    pub alarms: Arc<dyn AlarmScheduler>,
    pub parking: Arc<dyn RecordParking>,
    pub deployment: Deployment,
    pub host: HostConfig,
    pub upkeep: UpkeepPolicy,
    /// Subscriptions run here (`None`: not by this function).
    pub subscriptions: Option<SubscriptionPlane>,
}

/// An event the function does not know.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FunctionError {
    #[error("unrecognised event: {0}")]
    UnknownEvent(String),
    #[error("revival of {slug} on {path} failed: {why}")]
    Revival { path: String, slug: String, why: String },
}

/// The events the function is invoked with.
#[derive(Debug)]
pub enum Invocation {
    Stream(StreamEvent),
    Tasks(SqsEvent),
    Revival(RevivalInput),
}

impl Invocation {
    /// Tells the event sources apart (`eventSource` of the first record, or
    /// the revival input's `kind`).
    pub fn classify(payload: Value) -> Result<Self, FunctionError> {
        let source = payload.pointer("/Records/0/eventSource").and_then(Value::as_str).map(str::to_owned);
        let unknown = |e: serde_json::Error| FunctionError::UnknownEvent(e.to_string());
        match source.as_deref() {
            Some("aws:dynamodb") => serde_json::from_value(payload).map(Self::Stream).map_err(unknown),
            Some("aws:sqs") => serde_json::from_value(payload).map(Self::Tasks).map_err(unknown),
            Some(other) => Err(FunctionError::UnknownEvent(format!("records from {other}"))),
            None if payload.get("kind").is_some() => {
                serde_json::from_value(payload).map(Self::Revival).map_err(unknown)
            }
            None => Err(FunctionError::UnknownEvent("no Records and no revival kind".into())),
        }
    }
}

/// The processor function (see module docs).
pub struct ProcessorFunction {
    aws: AwsSubstrate,
    service: StreamService,
    alarms: Arc<dyn AlarmScheduler>,
    processors: Processors,
    upkeep: Upkeep,
    tasks: TaskRunner,
    parking: Arc<dyn RecordParking>,
    subscriptions: Option<SubscriptionPlane>,
    metrics: Option<Arc<dyn PlaneMetrics>>,
    lifecycle: Option<LifecycleEvents>,
}

/// The doorbells of one stream within a batch.
struct Bell {
    first_sequence: String,
    incarnation: String,
    chunks: u32,
    /// The newest tail the batch's chunks reached.
    end: u64,
}

/// The invocation's deadline as Unix milliseconds. Lambda sends exactly
/// that; cargo lambda's runtime emulator (1.9) sends the function's timeout
/// in milliseconds instead (`Lambda-Runtime-Deadline-Ms: 600000`), which read
/// as a date lies in 1970 and stopped every catch-up at once. A value more
/// than a day before `now_ms` cannot be a deadline, so it is taken as the
/// time left.
pub fn invocation_deadline(raw_ms: u64, now_ms: u64) -> u64 {
    const DAY_MS: u64 = 86_400_000;
    if raw_ms < now_ms.saturating_sub(DAY_MS) {
        now_ms.saturating_add(raw_ms)
    } else {
        raw_ms
    }
}

impl ProcessorFunction {
    pub fn new(parts: FunctionParts) -> Self {
        let FunctionParts { aws, service, alarms, parking, deployment, host, upkeep, subscriptions } = parts;
        Self {
            processors: Processors::new(service.clone(), deployment.registry, Arc::clone(&alarms), host),
            upkeep: Upkeep::new(aws.clone(), service.clone(), upkeep),
            tasks: TaskRunner::new(service.clone(), deployment.tasks),
            aws,
            service,
            alarms,
            parking,
            subscriptions,
            metrics: None,
            lifecycle: None,
        }
    }

    /// Sends each create, close and delete to EventBridge (see
    /// [`crate::lifecycle`]).
    #[must_use]
    pub fn with_lifecycle(mut self, lifecycle: LifecycleEvents) -> Self {
        self.lifecycle = Some(lifecycle);
        self
    }

    /// Reports lag and failures to `metrics` after every invocation (see
    /// [`crate::lag`]).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn PlaneMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn processors(&self) -> &Processors {
        &self.processors
    }

    /// This instance's substrate (its own clients and caches).
    pub fn substrate(&self) -> &AwsSubstrate {
        &self.aws
    }

    /// One invocation; the answer is the event source's batch response.
    /// Boxed: the future nests every layer of the host, too deep a type for
    /// the Lambda runtime's own futures to hold unboxed.
    pub fn handle(&self, payload: Value, deadline_ms: u64) -> BoxFuture<'_, Result<Value, FunctionError>> {
        let now = u64::try_from(self.service.clock().now_ms()).unwrap_or(0);
        Box::pin(self.dispatch(payload, invocation_deadline(deadline_ms, now)))
    }

    async fn dispatch(&self, payload: Value, deadline_ms: u64) -> Result<Value, FunctionError> {
        let answer = match Invocation::classify(payload)? {
            Invocation::Stream(event) => Ok(to_json(&self.handle_stream(&event, deadline_ms).await)),
            Invocation::Tasks(event) => Ok(to_json(&self.handle_sqs(event).await)),
            Invocation::Revival(input) => {
                let revived = self.handle_revival(&input, deadline_ms).await;
                if revived.is_err() {
                    self.report_failures(FailureKind::Revival, 1);
                }
                revived.map(|()| serde_json::json!({ "revived": input.slug, "path": input.path }))
            }
        };
        if let Some(metrics) = &self.metrics {
            for (slug, lag, streams) in self.processors.take_lags() {
                metrics.processor_lag(&slug, lag, streams);
            }
        }
        answer
    }

    fn report_failures(&self, what: FailureKind, count: usize) {
        if let (Some(metrics), true) = (&self.metrics, count > 0) {
            metrics.failures(what, u64::try_from(count).unwrap_or(u64::MAX));
        }
    }

    /// A DynamoDB Stream batch (see module docs).
    pub async fn handle_stream(&self, event: &StreamEvent, deadline_ms: u64) -> DynamoDbEventResponse {
        let mut failed: Vec<String> = Vec::new();
        let mut order: Vec<String> = Vec::new();
        let mut bells: HashMap<String, Bell> = HashMap::new();
        // Subscriptions whose record changed, with the first such record.
        let mut subscriptions: BTreeMap<String, String> = BTreeMap::new();
        // The registry's chunk inserts, one per lifecycle change, in order.
        let mut changes: Vec<(String, String, u64)> = Vec::new();
        for raw in &event.records {
            let record = match StreamRecord::parse(raw) {
                Ok(record) => record,
                Err(e) => {
                    self.park(raw, &e.to_string(), &mut failed).await;
                    continue;
                }
            };
            let seq = record.sequence_number().to_owned();
            match record.meaning() {
                Err(e) => self.park(raw, &e.to_string(), &mut failed).await,
                Ok(Meaning::Ignored { why }) => tracing::debug!(%seq, why, "record ignored"),
                Ok(Meaning::TtlRemoved { meta }) => {
                    if let Err(e) = self.upkeep.ttl_removed(&meta).await {
                        tracing::error!(%seq, error = %e, "finishing a TTL removal failed");
                        failed.push(seq);
                    }
                }
                Ok(Meaning::Doorbell { stream, incarnation, end }) => {
                    let Some(path) = self.resolve(stream, &seq, &mut failed).await else { continue };
                    if self.lifecycle.is_some() && path == REGISTRY_PATH {
                        changes.push((seq.clone(), incarnation.clone(), end));
                    }
                    let bell = bells.entry(path.clone()).or_insert_with(|| {
                        order.push(path);
                        Bell { first_sequence: seq, incarnation: incarnation.clone(), chunks: 0, end: 0 }
                    });
                    if bell.incarnation != incarnation {
                        (bell.incarnation, bell.end) = (incarnation, 0);
                    }
                    bell.chunks += 1;
                    bell.end = bell.end.max(end);
                }
                Ok(Meaning::RecordChanged { stream: StreamKey::Path(path), incarnation, key }) => {
                    match ds_subscriptions::subscription_of_record(&path, &incarnation, &key) {
                        Some(id) => {
                            subscriptions.entry(id.to_owned()).or_insert(seq);
                        }
                        None => tracing::debug!(%seq, path, key, "a record change that is not a subscription's"),
                    }
                }
                Ok(Meaning::RecordChanged { stream: StreamKey::HashedPartition(_), .. }) => {
                    tracing::debug!(%seq, "a record change of a long path: no subscription lives there");
                }
            }
        }
        // Streams are independent (each has its own progress records and
        // journal), so a batch's streams catch up side by side: the
        // invocation takes as long as its slowest stream, not their sum.
        let mut streams = Vec::with_capacity(order.len());
        for path in order {
            let Some(bell) = bells.get(&path) else { continue };
            let (incarnation, chunks, first) = (bell.incarnation.clone(), bell.chunks, bell.first_sequence.clone());
            streams.push(async move {
                let woken = self.processors.wake(&path, Some(&incarnation), deadline_ms).await;
                self.upkeep.chunks_inserted(&path, chunks).await;
                let errors = woken.err()?;
                for e in &errors {
                    tracing::error!(path, error = %e, "processing the stream failed; its records will be retried");
                }
                Some(first)
            });
        }
        let woken: Vec<Option<String>> = futures::stream::iter(streams).buffered(STREAMS_AT_ONCE).collect().await;
        failed.extend(woken.into_iter().flatten());
        // After the processors: a slow webhook must not hold them up.
        if let Some(plane) = &self.subscriptions {
            let tails: BTreeMap<String, StreamTail> = bells
                .iter()
                .map(|(path, b)| (path.clone(), StreamTail { incarnation: b.incarnation.clone(), tail: b.end }))
                .collect();
            self.run_subscriptions(plane, &subscriptions, &tails, &bells, &mut failed).await;
        }
        if let Some(lifecycle) = &self.lifecycle {
            if let Some(seq) = send_lifecycle(lifecycle, &changes).await {
                failed.push(seq);
            }
        }
        let mut response = DynamoDbEventResponse::default();
        let mut seen = std::collections::HashSet::new();
        failed.retain(|seq| seen.insert(seq.clone()));
        for seq in failed {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(seq);
            response.batch_item_failures.push(failure);
        }
        response
    }

    /// The batch's subscription work (see [`crate::subscriptions`]): a
    /// failure marks the first record of what failed, so it comes again.
    async fn run_subscriptions(
        &self,
        plane: &SubscriptionPlane,
        changed: &BTreeMap<String, String>,
        tails: &BTreeMap<String, StreamTail>,
        bells: &HashMap<String, Bell>,
        failed: &mut Vec<String>,
    ) {
        let ids: Vec<String> = changed.keys().cloned().collect();
        for (id, e) in plane.records_changed(&ids).await {
            tracing::error!(subscription = %id, error = %e, "a subscription's change failed; its record will be retried");
            failed.extend(changed.get(&id).cloned());
        }
        for (path, e) in plane.streams_changed(tails).await {
            tracing::error!(path, error = %e, "waking subscriptions failed; the stream's records will be retried");
            failed.extend(bells.get(&path).map(|b| b.first_sequence.clone()));
        }
    }

    /// An SQS batch: subscriptions' timer messages go to the subscription
    /// plane, the rest are background tasks.
    async fn handle_sqs(&self, event: SqsEvent) -> aws_lambda_events::streams::SqsEventResponse {
        let (due, tasks): (Vec<_>, Vec<_>) = match &self.subscriptions {
            Some(_) => event.records.into_iter().partition(|m| SubscriptionDue::parse(&m.body).is_some()),
            None => (Vec::new(), event.records),
        };
        let mut response = self.tasks.handle(&SqsEvent { records: tasks }).await;
        self.report_failures(FailureKind::Task, response.batch_item_failures.len());
        let Some(plane) = &self.subscriptions else { return response };
        // Concurrently: a slow webhook receiver holds only its own message.
        let looks = due.iter().filter_map(|message| {
            let due = SubscriptionDue::parse(&message.body)?;
            Some(async move { (message, due.id.clone(), plane.due(&due).await) })
        });
        for (message, id, looked) in futures::future::join_all(looks).await {
            if let Err(e) = looked {
                tracing::error!(subscription = %id, error = %e, "a subscription's time failed; its message comes again");
                let mut failure = aws_lambda_events::streams::SqsBatchItemFailure::default();
                failure.item_identifier = Some(message.message_id.clone());
                response.batch_item_failures.push(failure);
            }
        }
        response
    }

    /// The path of a doorbell's stream; `None` if it is gone or the lookup
    /// failed (then the record is marked failed).
    async fn resolve(&self, stream: StreamKey, seq: &str, failed: &mut Vec<String>) -> Option<String> {
        match stream {
            StreamKey::Path(path) => Some(path),
            StreamKey::HashedPartition(pk) => match self.aws.path_of_partition(&pk).await {
                Ok(Some(path)) => Some(path),
                Ok(None) => {
                    tracing::info!(%pk, "doorbell of a stream that is gone: nothing to process");
                    None
                }
                Err(e) => {
                    tracing::error!(%pk, error = %e, "looking up a stream's path failed");
                    failed.push(seq.to_owned());
                    None
                }
            },
        }
    }

    async fn park(&self, raw: &RawValue, reason: &str, failed: &mut Vec<String>) {
        tracing::error!(reason, record = raw.get(), "unreadable stream record: parking it");
        let parked = ParkedRecord { reason: reason.to_owned(), record: raw.get().to_owned() };
        if let Err(e) = self.parking.park(&parked).await {
            // Not kept anywhere yet: the event source must deliver it again.
            tracing::error!(error = %e, "parking the record failed");
            if let Some(seq) = sequence_number_of(raw) {
                failed.push(seq);
            }
        }
    }

    /// A revival schedule fired: append its revival event to the stream life
    /// it was armed for, then catch the stream's processors up.
    pub async fn handle_revival(&self, input: &RevivalInput, deadline_ms: u64) -> Result<(), FunctionError> {
        let failure = |why: String| FunctionError::Revival { path: input.path.clone(), slug: input.slug.clone(), why };
        let recovery = StreamRecovery::new(self.service.clone(), &input.path, Arc::clone(&self.alarms));
        match recovery.handle_alarm(&input.alarm()).await {
            Ok(outcome) => tracing::info!(path = %input.path, slug = %input.slug, ?outcome, "revival appended"),
            Err(RecoveryError::Journal(JournalError::IncarnationChanged { .. } | JournalError::StreamNotFound)) => {
                tracing::info!(path = %input.path, slug = %input.slug, "revival of a stream life that is over: nothing owed");
                return Ok(());
            }
            Err(e) => return Err(failure(e.to_string())),
        }
        self.processors
            .wake(&input.path, Some(&input.incarnation), deadline_ms)
            .await
            .map_err(|errors| failure(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
    }
}

/// Sends the events of the registry changes `(record, incarnation, end)`;
/// the record of the first change not sent, if any (it and everything after
/// it come again).
async fn send_lifecycle(lifecycle: &LifecycleEvents, changes: &[(String, String, u64)]) -> Option<String> {
    let mut events = Vec::with_capacity(changes.len());
    let mut of_event = Vec::with_capacity(changes.len());
    let mut unread = None;
    for (seq, incarnation, end) in changes {
        match lifecycle.event_at(incarnation, *end).await {
            Ok(Some(event)) => {
                events.push(event);
                of_event.push(seq);
            }
            Ok(None) => tracing::debug!(%seq, end, "a registry chunk that is no lifecycle change"),
            Err(e) => {
                tracing::error!(%seq, error = %e, "reading a lifecycle change failed; its record will be retried");
                unread = Some(seq.clone());
                break;
            }
        }
    }
    match lifecycle.send(&events).await {
        Ok(()) => unread,
        Err((sent, e)) => {
            tracing::error!(error = %e, sent, bus = lifecycle.bus(), "sending lifecycle events failed; their records will be retried");
            of_event.get(sent).map(|seq| (*seq).clone()).or(unread)
        }
    }
}

fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod deadline_tests {
    use super::invocation_deadline;

    #[test]
    fn an_epoch_deadline_is_kept_and_a_timeout_is_taken_as_time_left() {
        let now = 1_796_122_357_150;
        assert_eq!(invocation_deadline(now + 60_000, now), now + 60_000);
        assert_eq!(invocation_deadline(now - 10, now), now - 10, "a deadline just past stays past");
        assert_eq!(invocation_deadline(600_000, now), now + 600_000, "cargo lambda's 600000");
    }
}
