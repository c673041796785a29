//! Crash injection: adapters ask the switch at named boundaries; on the
//! planned hit the adapter never returns (as if the process froze there),
//! and the test drops the runner, which is the process dying.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::lock;

/// Where a crash can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Boundary {
    /// In the effect sink, after the effect was applied, before the caller
    /// heard back.
    EffectApplied,
    /// In the progress store, before a commit is applied.
    BeforeProgressCommit,
    /// In the progress store, after a commit was applied, before the caller
    /// heard back.
    AfterProgressCommit,
    /// In the progress store, before a refold page commit
    /// (`reduced_through < acknowledged_through`) is applied.
    RefoldPageCommit,
    /// In the recovery adapter, before an alarm is armed.
    ArmAlarm,
}

#[derive(Debug, Default)]
struct Plan {
    target: Option<(Boundary, u32)>,
    hits: HashMap<Boundary, u32>,
}

/// Shared crash plan; clones share it.
#[derive(Debug, Clone)]
pub struct CrashSwitch {
    plan: Arc<Mutex<Plan>>,
    trips: watch::Sender<u32>,
}

impl Default for CrashSwitch {
    fn default() -> Self {
        Self::new()
    }
}

impl CrashSwitch {
    pub fn new() -> Self {
        let (trips, _) = watch::channel(0);
        Self { plan: Arc::new(Mutex::new(Plan::default())), trips }
    }

    /// Crash on the `nth` (1-based) future hit of `boundary`; one-shot.
    pub fn arm(&self, boundary: Boundary, nth: u32) {
        lock(&self.plan).target = Some((boundary, nth.max(1)));
    }

    pub fn disarm(&self) {
        lock(&self.plan).target = None;
    }

    /// Called by adapters; `true` means "crash here".
    pub fn hit(&self, boundary: Boundary) -> bool {
        let crash = {
            let mut plan = lock(&self.plan);
            *plan.hits.entry(boundary).or_insert(0) += 1;
            match plan.target {
                Some((b, 1)) if b == boundary => {
                    plan.target = None;
                    true
                }
                Some((b, n)) if b == boundary => {
                    plan.target = Some((b, n - 1));
                    false
                }
                _ => false,
            }
        };
        if crash {
            self.trips.send_modify(|t| *t += 1);
        }
        crash
    }

    /// How often `boundary` was reached.
    pub fn hits(&self, boundary: Boundary) -> u32 {
        lock(&self.plan).hits.get(&boundary).copied().unwrap_or(0)
    }

    /// How many crashes happened so far.
    pub fn trips(&self) -> u32 {
        *self.trips.borrow()
    }

    /// Resolves on the next crash after `seen` crashes.
    pub async fn tripped_after(&self, seen: u32) {
        let mut rx = self.trips.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = rx.wait_for(|t| *t > seen).await;
    }
}

/// Never resolves: the adapter "froze" at the crash point.
pub async fn freeze<T>() -> T {
    std::future::pending().await
}

/// Runs `work` until it finishes or a crash trips. On a crash `work` is
/// dropped mid-flight and `None` returned; drop the runner too to complete
/// the process death.
pub async fn run_until_crash<F: Future>(switch: &CrashSwitch, work: F) -> Option<F::Output> {
    let seen = switch.trips();
    tokio::select! {
        biased;
        _ = switch.tripped_after(seen) => None,
        out = work => Some(out),
    }
}
