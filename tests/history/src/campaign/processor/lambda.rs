//! The processor function as Lambda runs it, with instances that die: an
//! invocation chosen to be killed is aborted a random moment into its work
//! (mid-batch, effects and progress commits in flight) and its instance is
//! dropped; the next invocation gets a fresh instance (cold start: own
//! substrate, registry and warm runners), and the event source delivers the
//! batch again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ds_lambda_pump::{Invoke, ProcessorEnv};
use ds_processor_aws::{Deployment, ProcessorFunction, TaskHandlers};
use ds_processors_builtin::Catalog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// Counts of what happened to invocations.
#[derive(Debug, Default)]
pub struct Invocations {
    pub total: AtomicU64,
    /// Aborted while still running.
    pub killed: AtomicU64,
    /// Chosen to be killed, but done before the moment came.
    pub finished_before_kill: AtomicU64,
    /// Returned an error (the whole batch comes again).
    pub failed: AtomicU64,
    /// Instances started (the first one included).
    pub cold_starts: AtomicU64,
    /// Time spent in invocations, in all and the longest one (ms): a drain
    /// that slows down shows here whether the function or the pump is slow.
    pub busy_ms: AtomicU64,
    pub longest_ms: AtomicU64,
}

impl Invocations {
    /// "n invocations, mean m ms, longest l ms".
    pub fn timing(&self) -> String {
        let n = self.total.load(SeqCst);
        let busy = self.busy_ms.load(SeqCst);
        format!("{n} invocations (mean {} ms, longest {} ms)", busy / n.max(1), self.longest_ms.load(SeqCst))
    }

    fn took(&self, started: std::time::Instant) {
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.busy_ms.fetch_add(ms, SeqCst);
        self.longest_ms.fetch_max(ms, SeqCst);
    }
}

/// See the module docs.
pub struct Lambda<'a> {
    env: &'a ProcessorEnv,
    config: &'a str,
    instance: tokio::sync::Mutex<Option<Arc<ProcessorFunction>>>,
    rng: Mutex<StdRng>,
    /// Share of invocations killed (never two in a row, so the event
    /// source's retry budget is not spent by kills alone).
    kill_rate: f64,
    killing: AtomicBool,
    last_killed: AtomicBool,
    pub counts: Invocations,
}

impl<'a> Lambda<'a> {
    pub fn new(env: &'a ProcessorEnv, config: &'a str, kill_rate: f64, seed: u64) -> Self {
        Self {
            env,
            config,
            instance: tokio::sync::Mutex::new(None),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            kill_rate,
            killing: AtomicBool::new(true),
            last_killed: AtomicBool::new(false),
            counts: Invocations::default(),
        }
    }

    /// Stop killing (the drain after the run).
    pub fn stop_killing(&self) {
        self.killing.store(false, SeqCst);
    }

    /// The warm instance, or a cold start (loading the configuration may
    /// meet faults: retried).
    async fn instance(&self) -> Result<Arc<ProcessorFunction>, String> {
        let mut slot = self.instance.lock().await;
        if let Some(f) = slot.as_ref() {
            return Ok(Arc::clone(f));
        }
        let service = self.env.service();
        let (_, registry) =
            Catalog::builtin().load(self.config, &service).await.map_err(|e| format!("cold start: {e}"))?;
        let function = Arc::new(self.env.function(move |_| Deployment { registry, tasks: TaskHandlers::new() }));
        self.counts.cold_starts.fetch_add(1, SeqCst);
        *slot = Some(Arc::clone(&function));
        Ok(function)
    }

    /// When to kill this invocation, if at all.
    fn kill_after(&self) -> Option<Duration> {
        let mut rng = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kill = self.killing.load(SeqCst) && !self.last_killed.load(SeqCst) && rng.gen_bool(self.kill_rate);
        kill.then(|| Duration::from_millis(rng.gen_range(1..400)))
    }
}

#[async_trait::async_trait]
impl Invoke for Lambda<'_> {
    async fn invoke(&self, payload: Value, deadline_ms: u64) -> Result<Value, String> {
        let started = std::time::Instant::now();
        let answer = self.invoke_timed(payload, deadline_ms).await;
        self.counts.took(started);
        answer
    }
}

impl Lambda<'_> {
    async fn invoke_timed(&self, payload: Value, deadline_ms: u64) -> Result<Value, String> {
        self.counts.total.fetch_add(1, SeqCst);
        let function = match self.instance().await {
            Ok(f) => f,
            Err(e) => {
                self.counts.failed.fetch_add(1, SeqCst);
                return Err(e);
            }
        };
        let Some(after) = self.kill_after() else {
            self.last_killed.store(false, SeqCst);
            let answer = function.handle(payload, deadline_ms).await.map_err(|e| e.to_string());
            if answer.is_err() {
                self.counts.failed.fetch_add(1, SeqCst);
            }
            return answer;
        };
        let running = Arc::clone(&function);
        let mut run =
            tokio::spawn(async move { running.handle(payload, deadline_ms).await.map_err(|e| e.to_string()) });
        tokio::select! {
            done = &mut run => {
                self.counts.finished_before_kill.fetch_add(1, SeqCst);
                self.last_killed.store(false, SeqCst);
                done.map_err(|e| e.to_string())?
            }
            _ = tokio::time::sleep(after) => {
                run.abort();
                let _ = run.await;
                // The instance dies with the invocation.
                *self.instance.lock().await = None;
                self.counts.killed.fetch_add(1, SeqCst);
                self.last_killed.store(true, SeqCst);
                Err(format!("killed {after:?} into the invocation"))
            }
        }
    }
}
