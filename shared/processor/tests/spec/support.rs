//! The probe processor and helpers shared by the spec tests.

use std::sync::{Arc, Mutex};

use ds_processor::{
    event_key, CheckpointCadence, Contract, Effects, Envelope, Phase, ProcessCall, Processor, Rejection, Runner,
    RunnerConfig,
};
use ds_processor_testkit::harness::{EffectSink, MemoryJournal, MemorySink, Timeline, World};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub const SLUG: &str = "probe";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum ProbeEvent {
    #[serde(rename = "probe/tick")]
    Tick {
        n: i64,
        #[serde(default)]
        effects: u8,
        #[serde(default)]
        background: bool,
    },
    #[serde(rename = "probe/note")]
    Note { text: String },
    #[serde(rename = "stream/processor-revived")]
    Revived {
        #[serde(rename = "processorSlug")]
        processor_slug: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeState {
    pub sum: i64,
    pub trail: Vec<i64>,
    pub notes: u32,
    pub background_at: Vec<u64>,
    pub revivals: u32,
}

/// One `process_event` call as the probe saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `None` for the eventless call.
    pub position: Option<u64>,
    pub source_position: u64,
    pub caught_up: bool,
    pub revision: u64,
    pub phase: Phase,
    pub sum: i64,
    /// Keys of the effects this call registered (blocking and background).
    pub keys: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub version: String,
    /// Fold weight: a new version with another weight folds differently.
    pub weight: i64,
    /// Post the fold under `caught_up` (blocking, state-derived key).
    pub reconcile: bool,
    /// Under `caught_up`, re-issue background work for every tick that
    /// asked for it (what a revival turn is for).
    pub rederive_background: bool,
    pub consume_revived: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self { version: "1".into(), weight: 1, reconcile: false, rederive_background: false, consume_revived: false }
    }
}

pub struct Probe {
    contract: Contract,
    sink: Arc<MemorySink>,
    calls: Arc<Mutex<Vec<Call>>>,
    timeline: Timeline,
    options: ProbeOptions,
}

pub type CallLog = Arc<Mutex<Vec<Call>>>;

impl Probe {
    pub fn new(world: &World, options: ProbeOptions) -> (Self, CallLog) {
        let calls: CallLog = Arc::default();
        let mut consumes = vec!["probe/tick", "probe/note"];
        if options.consume_revived {
            consumes.push("stream/processor-revived");
        }
        (
            Self {
                contract: Contract::new(SLUG, options.version.clone(), consumes),
                sink: world.sink.clone(),
                calls: calls.clone(),
                timeline: world.timeline.clone(),
                options,
            },
            calls,
        )
    }
}

fn post(
    sink: &Arc<MemorySink>,
    key: String,
    body: Value,
    timeline: Option<(Timeline, String)>,
) -> impl FnMut() -> futures::future::BoxFuture<'static, Result<(), ds_processor::EffectError>> + Send + 'static {
    let sink = sink.clone();
    move || {
        let sink = sink.clone();
        let key = key.clone();
        let body = body.clone();
        let timeline = timeline.clone();
        Box::pin(async move {
            sink.post(&key, body).await?;
            if let Some((timeline, note)) = timeline {
                timeline.note(note);
            }
            Ok(())
        })
    }
}

impl Processor for Probe {
    type State = ProbeState;
    type Event = ProbeEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> ProbeState {
        ProbeState::default()
    }

    fn validate(&self, event: &Envelope<ProbeEvent>, _state: &ProbeState) -> Result<(), Rejection> {
        match event.event {
            ProbeEvent::Tick { n: 13, .. } => Err(Rejection::new("13 is unlucky")),
            _ => Ok(()),
        }
    }

    fn reduce(&self, mut state: ProbeState, event: &Envelope<ProbeEvent>) -> ProbeState {
        match &event.event {
            ProbeEvent::Tick { n, background, .. } => {
                state.sum += n * self.options.weight;
                state.trail.push(*n);
                if *background {
                    state.background_at.push(event.position);
                }
            }
            ProbeEvent::Note { .. } => state.notes += 1,
            ProbeEvent::Revived { .. } => state.revivals += 1,
        }
        state
    }

    fn process_event(&self, call: ProcessCall<'_, ProbeEvent, ProbeState>, effects: &mut Effects) {
        let d = call.delivery;
        let mut keys = Vec::new();
        let at = call.event.map_or("eventless".to_owned(), |e| e.position.to_string());
        self.timeline.note(format!("process:{at}"));
        if let Some(envelope) = call.event {
            if let ProbeEvent::Tick { effects: count, background, .. } = envelope.event {
                for i in 0..count {
                    let key = d.idempotency_key(&format!("tick-{i}"));
                    keys.push(key.clone());
                    let label = format!("tick:{}:{i}", envelope.position);
                    effects.block_processor_while(post(
                        &self.sink,
                        key,
                        json!({ "label": label }),
                        Some((self.timeline.clone(), format!("settled:{}:{i}", envelope.position))),
                    ));
                }
                if background {
                    let key = d.idempotency_key("bg");
                    keys.push(key.clone());
                    let mut work = post(&self.sink, key, json!({ "label": format!("bg:{}", envelope.position) }), None);
                    effects.run_in_background(work());
                }
            }
        }
        if d.caught_up && self.options.rederive_background {
            for &p in &call.state.background_at {
                let key = event_key("bg", p, d.cursor_revision, &d.stream_incarnation);
                keys.push(key.clone());
                let mut work = post(&self.sink, key, json!({ "label": format!("bg:{p}") }), None);
                effects.run_in_background(work());
            }
        }
        if d.caught_up && self.options.reconcile {
            let key = d.stable_idempotency_key(&format!("sum={}", call.state.sum));
            keys.push(key.clone());
            effects.block_processor_while(post(
                &self.sink,
                key,
                json!({ "label": format!("reconcile@{}", d.source_position) }),
                None,
            ));
        }
        self.calls.lock().unwrap().push(Call {
            position: call.event.map(|e| e.position),
            source_position: d.source_position,
            caught_up: d.caught_up,
            revision: d.cursor_revision,
            phase: d.phase,
            sum: call.state.sum,
            keys,
        });
    }
}

/// A journal entry to generate.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    Tick {
        n: i64,
        effects: u8,
        background: bool,
    },
    Note,
    Unconsumed,
    /// A consumed type whose payload does not decode.
    Malformed,
    /// Not JSON at all (unconsumed for the probe: it has no `*`).
    Garbage,
}

pub fn tick(n: i64, effects: u8) -> Spec {
    Spec::Tick { n, effects, background: false }
}

pub fn spec_strategy(background: bool, malformed: bool) -> impl Strategy<Value = Spec> {
    let tick = (-5i64..20, 0u8..3, proptest::bool::weighted(if background { 0.2 } else { 0.0 }))
        .prop_map(|(n, effects, background)| Spec::Tick { n: if n == 13 { 12 } else { n }, effects, background });
    let weight_malformed = if malformed { 1 } else { 0 };
    prop_oneof![
        6 => tick,
        1 => Just(Spec::Note),
        2 => Just(Spec::Unconsumed),
        weight_malformed => Just(Spec::Malformed),
        weight_malformed => Just(Spec::Garbage),
    ]
}

pub fn journal_strategy(max: usize, background: bool, malformed: bool) -> impl Strategy<Value = Vec<Spec>> {
    proptest::collection::vec(spec_strategy(background, malformed), 0..max)
}

pub fn cadence_strategy() -> impl Strategy<Value = CheckpointCadence> {
    prop_oneof![
        Just(CheckpointCadence::EveryEvent),
        (1u32..4).prop_map(CheckpointCadence::EveryN),
        Just(CheckpointCadence::Interval { millis: 0 }),
        (1u64..200).prop_map(CheckpointCadence::EveryBytes),
        Just(CheckpointCadence::Idle),
        Just(CheckpointCadence::BatchEnd),
    ]
}

pub fn append(journal: &MemoryJournal, spec: &Spec) -> u64 {
    match spec {
        Spec::Tick { n, effects, background } => {
            journal.append_event("probe/tick", json!({ "n": n, "effects": effects, "background": background }))
        }
        Spec::Note => journal.append_event("probe/note", json!({ "text": "hello" })),
        Spec::Unconsumed => journal.append_event("other/thing", json!({ "x": 1 })),
        Spec::Malformed => journal.append_event("probe/tick", json!({ "n": "not a number" })),
        Spec::Garbage => journal.append_raw("{not json"),
    }
}

pub fn write(journal: &MemoryJournal, specs: &[Spec]) -> Vec<u64> {
    specs.iter().map(|s| append(journal, s)).collect()
}

/// The fold a fresh runner must reach over `specs` at `weight`.
pub fn expected_fold(specs: &[Spec], positions: &[u64], weight: i64) -> ProbeState {
    let mut state = ProbeState::default();
    for (spec, &p) in specs.iter().zip(positions) {
        match spec {
            Spec::Tick { n, background, .. } => {
                state.sum += n * weight;
                state.trail.push(*n);
                if *background {
                    state.background_at.push(p);
                }
            }
            Spec::Note => state.notes += 1,
            _ => {}
        }
    }
    state
}

pub fn config(cadence: CheckpointCadence) -> RunnerConfig {
    RunnerConfig { cadence, page_size: 3, ..RunnerConfig::default() }
}

/// A current-thread runtime on paused time: backoff sleeps auto-advance.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
}

pub async fn open(world: &World, options: ProbeOptions, cadence: CheckpointCadence) -> (Runner<Probe>, CallLog) {
    let (probe, calls) = Probe::new(world, options);
    (world.open(probe, config(cadence)).await.unwrap(), calls)
}

/// Appended by the runner: `(type, payload)` of `stream/` events.
pub fn core_events(world: &World) -> Vec<(String, Value)> {
    world
        .journal
        .entries()
        .iter()
        .filter_map(|e| serde_json::from_slice::<Value>(&e.data).ok())
        .filter(|v| v["type"].as_str().is_some_and(|t| t.starts_with("stream/")))
        .map(|v| (v["type"].as_str().unwrap_or_default().to_owned(), v["payload"].clone()))
        .collect()
}

pub fn calls(log: &CallLog) -> Vec<Call> {
    log.lock().unwrap().clone()
}

/// A far deadline for drains.
pub fn far() -> u64 {
    u64::MAX / 2
}

/// Yields until `condition` holds; panics after a bound so a broken runner
/// fails the test instead of hanging it.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..20_000 {
        if condition() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

/// Like [`eventually`], but lets (paused) time pass between checks so
/// backoff sleeps elapse.
pub async fn eventually_in_time(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("never happened: {what}");
}
