//! An HTTP-like effect sink that dedupes by idempotency key, with failure,
//! hold, jitter and crash injection.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use split_mix::SplitMix;
use tokio::sync::watch;

use super::crash::{freeze, Boundary, CrashSwitch};
use super::timeline::{Mark, Timeline};
use crate::lock;
use ds_processor::EffectError;

/// Where processors send external effects (an HTTP endpoint in production).
///
/// Contract: a key seen before is acknowledged without applying again, so
/// retries and redeliveries under the same key are harmless.
#[async_trait]
pub trait EffectSink: Send + Sync {
    async fn post(&self, idempotency_key: &str, body: Value) -> Result<(), EffectError>;
}

/// Decides per attempt: `(key, body, attempt number for this key, 1-based)`.
pub type FailRule = Arc<dyn Fn(&str, &Value, u32) -> bool + Send + Sync>;
/// Decides whether a post waits for [`MemorySink::release`].
pub type HoldRule = Arc<dyn Fn(&str, &Value) -> bool + Send + Sync>;

#[derive(Default)]
struct SinkState {
    applied: BTreeMap<String, Value>,
    order: Vec<String>,
    attempts: HashMap<String, u32>,
    duplicates: u64,
    in_flight: usize,
    fail: Option<FailRule>,
    hold: Option<HoldRule>,
    jitter: Option<(SplitMix, u32)>,
}

/// In-memory [`EffectSink`].
pub struct MemorySink {
    state: Mutex<SinkState>,
    released: watch::Sender<u64>,
    crash: CrashSwitch,
    timeline: Timeline,
}

impl std::fmt::Debug for MemorySink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySink").field("applied", &lock(&self.state).order).finish()
    }
}

impl Default for MemorySink {
    fn default() -> Self {
        Self::new(CrashSwitch::new(), Timeline::new())
    }
}

struct InFlight<'a>(&'a Mutex<SinkState>);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(self.0).in_flight -= 1;
    }
}

impl MemorySink {
    pub fn new(crash: CrashSwitch, timeline: Timeline) -> Self {
        let (released, _) = watch::channel(0);
        Self { state: Mutex::new(SinkState::default()), released, crash, timeline }
    }

    /// Fails attempts matching `rule` (replaces any previous rule).
    pub fn fail_when(&self, rule: impl Fn(&str, &Value, u32) -> bool + Send + Sync + 'static) {
        lock(&self.state).fail = Some(Arc::new(rule));
    }

    pub fn clear_failures(&self) {
        lock(&self.state).fail = None;
    }

    /// Posts matching `rule` wait until [`MemorySink::release`].
    pub fn hold_when(&self, rule: impl Fn(&str, &Value) -> bool + Send + Sync + 'static) {
        lock(&self.state).hold = Some(Arc::new(rule));
    }

    /// Lets every held post through and stops holding.
    pub fn release(&self) {
        lock(&self.state).hold = None;
        self.released.send_modify(|g| *g += 1);
    }

    /// Each post yields to the scheduler a pseudo-random number of times
    /// (`0..=max_yields`) before settling, to shake out ordering bugs.
    pub fn jitter(&self, seed: u64, max_yields: u32) {
        lock(&self.state).jitter = Some((SplitMix(seed), max_yields));
    }

    /// Keys applied, sorted.
    pub fn applied_keys(&self) -> Vec<String> {
        lock(&self.state).applied.keys().cloned().collect()
    }

    pub fn applied(&self) -> BTreeMap<String, Value> {
        lock(&self.state).applied.clone()
    }

    /// `body["label"]` of every applied effect, in application order.
    pub fn labels(&self) -> Vec<String> {
        let s = lock(&self.state);
        s.order.iter().map(|k| label_of(s.applied.get(k).unwrap_or(&Value::Null))).collect()
    }

    pub fn attempts(&self, key: &str) -> u32 {
        lock(&self.state).attempts.get(key).copied().unwrap_or(0)
    }

    pub fn total_attempts(&self) -> u32 {
        lock(&self.state).attempts.values().sum()
    }

    /// Posts that hit an already-applied key.
    pub fn duplicates(&self) -> u64 {
        lock(&self.state).duplicates
    }

    /// Posts currently running (a dropped post leaves this count).
    pub fn in_flight(&self) -> usize {
        lock(&self.state).in_flight
    }
}

fn label_of(body: &Value) -> String {
    body.get("label").and_then(Value::as_str).unwrap_or_default().to_owned()
}

#[async_trait]
impl EffectSink for MemorySink {
    async fn post(&self, idempotency_key: &str, body: Value) -> Result<(), EffectError> {
        let (attempt, fail, hold, yields) = {
            let mut s = lock(&self.state);
            s.in_flight += 1;
            let attempt = {
                let a = s.attempts.entry(idempotency_key.to_owned()).or_insert(0);
                *a += 1;
                *a
            };
            let fail = s.fail.as_ref().is_some_and(|rule| rule(idempotency_key, &body, attempt));
            let hold = s.hold.as_ref().is_some_and(|rule| rule(idempotency_key, &body));
            let yields = match &mut s.jitter {
                Some((rng, max)) if *max > 0 => (rng.next() % u64::from(*max + 1)) as u32,
                _ => 0,
            };
            (attempt, fail, hold, yields)
        };
        let _in_flight = InFlight(&self.state);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        if hold {
            let mut rx = self.released.subscribe();
            let generation = *rx.borrow_and_update();
            let _ = rx.wait_for(|g| *g > generation).await;
        }
        if fail {
            return Err(EffectError::new(format!("injected failure (attempt {attempt}) for {}", label_of(&body))));
        }
        {
            let mut s = lock(&self.state);
            if s.applied.contains_key(idempotency_key) {
                s.duplicates += 1;
            } else {
                self.timeline.push(Mark::EffectApplied { key: idempotency_key.to_owned(), label: label_of(&body) });
                s.applied.insert(idempotency_key.to_owned(), body);
                s.order.push(idempotency_key.to_owned());
            }
        }
        if self.crash.hit(Boundary::EffectApplied) {
            return freeze().await;
        }
        Ok(())
    }
}

/// Tiny deterministic generator (SplitMix64), so the harness needs no
/// random-number dependency.
mod split_mix {
    #[derive(Debug, Clone)]
    pub struct SplitMix(pub u64);

    impl SplitMix {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }
}
