//! The outbox: every consumed event, transformed by a [`Template`], is
//! appended to a target stream exactly once.
//!
//! The append is the event's blocking work, keyed by the delivery's
//! idempotency key (from the slug, the source position, the cursor revision
//! and the source stream's incarnation): the target stream records the key
//! in the append's own commit, so a retry after a crash between the append
//! and the progress commit finds the key and writes nothing. A failing
//! append (the target deleted or closed) holds the processor at that event
//! and retries with backoff; the lag shows it, and `skip-through` moves past.
//!
//! Options: `target` (the stream appended to; it must exist and be a JSON
//! stream unless `create_target = true`), `consumes` (event types, default
//! every domain event), `template` (default `"$"`: the whole input document).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use ds_core::{AppendRequest, CreateRequest, ServiceError, StreamService};
use ds_processor::{
    Contract, EffectError, Effects, Envelope, ProcessCall, Processor, RunnerConfig, RunnerError, ANY_EVENT,
};
use ds_processor_host::{HostedRunner, ProcessorSpec};
use ds_protocol::glob::Glob;
use ds_protocol::headers::{is_json, Lifetime};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{ConfigError, ProcessorDef};
use crate::template::{event_document, Template};

/// Options of one outbox (see module docs).
#[derive(Debug, Clone)]
pub struct OutboxSettings {
    pub target: String,
    pub consumes: Vec<String>,
    pub template: Template,
}

/// What the outbox folds: how many events it forwarded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxState {
    pub forwarded: u64,
}

/// The outbox processor on one stream.
pub struct Outbox {
    contract: Contract,
    settings: Arc<OutboxSettings>,
    service: StreamService,
    /// The source stream, when the host said which it is.
    stream: Option<String>,
}

impl Outbox {
    pub fn new(slug: &str, settings: Arc<OutboxSettings>, service: StreamService, stream: Option<String>) -> Self {
        let contract = Contract::new(slug, "outbox-1", settings.consumes.iter().cloned());
        Self { contract, settings, service, stream }
    }
}

impl Processor for Outbox {
    type State = OutboxState;
    type Event = Value;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> OutboxState {
        OutboxState::default()
    }

    fn reduce(&self, state: OutboxState, _event: &Envelope<Value>) -> OutboxState {
        OutboxState { forwarded: state.forwarded + 1 }
    }

    fn process_event(&self, call: ProcessCall<'_, Value, OutboxState>, effects: &mut Effects) {
        let Some(envelope) = call.event else { return };
        let input = event_document(&envelope.event, &envelope.metadata, self.stream.as_deref(), envelope.position);
        let message = self.settings.template.render(&input);
        let mut body = BytesMut::new();
        body.put_u8(b'[');
        body.put_slice(message.to_string().as_bytes());
        body.put_u8(b']');
        let request = AppendRequest {
            path: self.settings.target.clone().into(),
            content_type: Some("application/json".into()),
            body: body.freeze(),
            close: false,
            seq: None,
            producer: None,
            dedupe_key: Some(call.delivery.idempotency_key(&format!("outbox/{}", self.contract.slug))),
            incarnation: None,
            // The step's span: the target stream's readers continue its trace.
            expect_tail: None,
            trace_context: ds_telemetry::current_traceparent(),
        };
        let service = self.service.clone();
        effects.block_processor_while(move || {
            let (service, request) = (service.clone(), request.clone());
            async move {
                let target = request.path.clone();
                service
                    .append(request)
                    .await
                    .map(|_| ())
                    .map_err(|e| EffectError::new(format!("appending to {target:?}: {e}")))
            }
        });
    }
}

/// Opens outboxes, telling each its source stream.
pub struct OutboxSpec {
    slug: String,
    settings: Arc<OutboxSettings>,
    service: StreamService,
}

impl OutboxSpec {
    fn open_for(
        &self,
        stream: Option<String>,
        adapters: ds_processor::Adapters,
        config: RunnerConfig,
    ) -> OpenFuture<'_> {
        let outbox = Outbox::new(&self.slug, Arc::clone(&self.settings), self.service.clone(), stream);
        Box::pin(async move {
            let runner = ds_processor::Runner::open(outbox, adapters, config).await?;
            Ok(Arc::new(runner) as Arc<dyn HostedRunner>)
        })
    }
}

type OpenFuture<'a> = BoxFuture<'a, Result<Arc<dyn HostedRunner>, RunnerError>>;

impl ProcessorSpec for OutboxSpec {
    fn slug(&self) -> &str {
        &self.slug
    }

    fn open(&self, adapters: ds_processor::Adapters, config: RunnerConfig) -> OpenFuture<'_> {
        self.open_for(None, adapters, config)
    }

    fn open_on<'a>(&'a self, stream: &str, adapters: ds_processor::Adapters, config: RunnerConfig) -> OpenFuture<'a> {
        self.open_for(Some(stream.to_owned()), adapters, config)
    }
}

/// Builds an outbox from its configuration, checking (and with
/// `create_target`, creating) the target stream.
pub async fn build(mut def: ProcessorDef, service: &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
    let target = def.options.required_string("target")?;
    let create_target = def.options.bool("create_target")?.unwrap_or(false);
    let consumes = def.options.strings("consumes")?.unwrap_or_else(|| vec![ANY_EVENT.to_owned()]);
    let template = match def.options.json("template")? {
        None => Template::identity(),
        Some(t) => Template::parse(&t).map_err(|m| def.options.invalid("template", m))?,
    };
    if consumes.is_empty() {
        return Err(def.options.invalid("consumes", "an empty list: the outbox would forward nothing"));
    }
    ds_protocol::path::validate(&target).map_err(|e| def.options.invalid("target", e.to_string()))?;
    if Glob::parse(&def.streams).is_ok_and(|g| g.matches(&target)) {
        return Err(def.options.invalid(
            "target",
            format!("{target:?} matches the outbox's own streams {:?}: it would forward its own output", def.streams),
        ));
    }
    def.options.finish(&["target", "create_target", "consumes", "template"])?;
    check_target(&def, service, &target, create_target).await?;
    let settings = Arc::new(OutboxSettings { target, consumes, template });
    Ok(Arc::new(OutboxSpec { slug: def.slug.clone(), settings, service: service.clone() }))
}

async fn check_target(
    def: &ProcessorDef,
    service: &StreamService,
    target: &str,
    create: bool,
) -> Result<(), ConfigError> {
    let meta = match service.head(target).await {
        Ok(meta) => meta,
        Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) if create => {
            let request = CreateRequest {
                path: target.to_owned(),
                content_type: Some("application/json".into()),
                lifetime: Lifetime::default(),
                closed: false,
                body: Bytes::new(),
                fork: None,
            };
            let created = service.create(request).await.map_err(|e| store_error(def, &e))?;
            tracing::info!(slug = %def.slug, target, created = created.created, "outbox target stream created");
            created.meta
        }
        Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
            return Err(def.error(
                "target",
                format!("stream {target:?} does not exist (create it as an application/json stream, or set create_target = true)"),
            ))
        }
        Err(e) => return Err(store_error(def, &e)),
    };
    if !is_json(&meta.content_type) {
        return Err(def
            .error("target", format!("stream {target:?} is {:?}, not an application/json stream", meta.content_type)));
    }
    Ok(())
}

fn store_error(def: &ProcessorDef, e: &ServiceError) -> ConfigError {
    def.unchecked(e.to_string())
}
