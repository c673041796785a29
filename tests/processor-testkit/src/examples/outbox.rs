//! An outbox: every queued message is delivered to an HTTP-like sink as the
//! event's blocking work, under the delivery's idempotency key.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::harness::EffectSink;
use ds_processor::{Contract, Effects, Envelope, ProcessCall, Processor};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum OutboxEvent {
    #[serde(rename = "outbox/message-queued")]
    MessageQueued { id: String, body: Value },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxState {
    pub queued: u64,
}

pub struct Outbox {
    contract: Contract,
    sink: Arc<dyn EffectSink>,
}

impl Outbox {
    pub fn new(sink: Arc<dyn EffectSink>) -> Self {
        Self {
            contract: Contract::for_events::<OutboxEvent>("outbox", "1")
                .expect("OutboxEvent is an enum tagged by `type`"),
            sink,
        }
    }
}

impl Processor for Outbox {
    type State = OutboxState;
    type Event = OutboxEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> OutboxState {
        OutboxState::default()
    }

    fn reduce(&self, state: OutboxState, _event: &Envelope<OutboxEvent>) -> OutboxState {
        OutboxState { queued: state.queued + 1 }
    }

    fn process_event(&self, call: ProcessCall<'_, OutboxEvent, OutboxState>, effects: &mut Effects) {
        // The eventless caught-up call has nothing to send.
        let Some(envelope) = call.event else { return };
        let OutboxEvent::MessageQueued { id, body } = &envelope.event;
        let key = call.delivery.idempotency_key(&format!("outbox/{id}"));
        let request = json!({ "label": format!("outbox:{id}"), "body": body });
        let sink = Arc::clone(&self.sink);
        // Re-invoked on every retry; the same key makes retries harmless.
        effects.block_processor_while(move || {
            let sink = Arc::clone(&sink);
            let key = key.clone();
            let request = request.clone();
            async move { sink.post(&key, request).await }
        });
    }
}
