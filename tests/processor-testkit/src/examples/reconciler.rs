//! A reconciler: acts only under `caught_up`, on state, never per event.
//! Catching up over a long history therefore pushes only the final desired
//! state, once.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::harness::EffectSink;
use ds_processor::{Contract, Effects, Envelope, ProcessCall, Processor};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum ScaleEvent {
    #[serde(rename = "scale/set")]
    Set { replicas: u32 },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleState {
    pub replicas: u32,
}

pub struct Reconciler {
    contract: Contract,
    sink: Arc<dyn EffectSink>,
}

impl Reconciler {
    pub fn new(sink: Arc<dyn EffectSink>) -> Self {
        Self {
            contract: Contract::for_events::<ScaleEvent>("reconciler", "1")
                .expect("ScaleEvent is an enum tagged by `type`"),
            sink,
        }
    }
}

impl Processor for Reconciler {
    type State = ScaleState;
    type Event = ScaleEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> ScaleState {
        ScaleState::default()
    }

    fn reduce(&self, _state: ScaleState, event: &Envelope<ScaleEvent>) -> ScaleState {
        let ScaleEvent::Set { replicas } = event.event;
        ScaleState { replicas }
    }

    fn process_event(&self, call: ProcessCall<'_, ScaleEvent, ScaleState>, effects: &mut Effects) {
        if !call.delivery.caught_up {
            return;
        }
        let replicas = call.state.replicas;
        // State-derived obligation: keyed by the desired state, not by the
        // offset that happened to discover it.
        let key = call.delivery.stable_idempotency_key(&format!("replicas={replicas}"));
        let sink = Arc::clone(&self.sink);
        effects.block_processor_while(move || {
            let sink = Arc::clone(&sink);
            let key = key.clone();
            async move {
                sink.post(&key, json!({ "label": format!("replicas={replicas}"), "replicas": replicas }))
                    .await
            }
        });
    }
}
