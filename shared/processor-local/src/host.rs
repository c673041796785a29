//! The host's shared state: which streams have processors (one [`Slot`] per
//! processor and stream), how a commit's doorbell reaches them, how a
//! stream's slots are retired when the stream is gone, and the revival
//! alarm loop.
//!
//! Ring/retire invariant: a ring bumps a slot's counter while holding the
//! map's read lock, and a slot retires (leaves the map) only under the write
//! lock and only if its counter did not move since its last look at the
//! store. So a stream re-created after its slot saw it gone either finds the
//! slot still there (and rings it) or finds it retired and creates a new one:
//! no life of a matching stream is ever missed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use ds_core::{StreamService, TailSignal};
use ds_processor::{JournalError, Recovery, RecoveryError, RunnerConfig};
use ds_processor_host::{FiredAlarm, InProcAlarms, ProcessorRegistry, Registration, StreamRecovery};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::slot::{Opening, Slot, Tail, Turn};
use crate::tasks::Tasks;

/// Tunables of the host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub runner: RunnerConfig,
    /// How often lag is logged (and `None`: never).
    pub lag_log_interval: Option<Duration>,
    /// How long shutdown waits for runners to drain.
    pub drain_timeout: Duration,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            runner: RunnerConfig::default(),
            lag_log_interval: Some(Duration::from_secs(30)),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// What the host runs on, set once by `start`.
pub(crate) struct Running {
    pub service: StreamService,
    pub registry: ProcessorRegistry,
    pub alarms: Arc<InProcAlarms>,
}

/// The processors of one stream: slot `i` runs the `i`-th registration
/// matching the stream (the registry does not change while the host runs);
/// `None`: retired.
pub(crate) struct StreamEntry {
    pub slots: Vec<Option<Arc<Slot>>>,
    pub tail: Arc<Tail>,
}

pub(crate) struct Inner {
    pub config: HostConfig,
    pub running: OnceLock<Running>,
    pub streams: RwLock<HashMap<String, StreamEntry>>,
    pub shutdown: CancellationToken,
    pub tasks: Tasks,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // Every critical section is a map lookup or a single insert/remove.
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    pub(crate) fn new(config: HostConfig) -> Self {
        Self {
            config,
            running: OnceLock::new(),
            streams: RwLock::default(),
            shutdown: CancellationToken::new(),
            tasks: Tasks::default(),
        }
    }

    pub(crate) fn running(&self) -> &Running {
        self.running.get().expect("slots run only after start")
    }

    /// What a slot opens its runner with.
    pub(crate) fn opening(&self) -> Opening<'_> {
        let running = self.running();
        Opening {
            service: &running.service,
            alarms: &running.alarms,
            runner: &self.config.runner,
            shutdown: &self.shutdown,
        }
    }

    /// A commit on `path` (called by the hub, synchronously: cheap).
    pub(crate) fn ring(self: &Arc<Self>, path: &str, signal: &TailSignal) {
        let Some(running) = self.running.get() else { return };
        if self.shutdown.is_cancelled() {
            return;
        }
        {
            let streams = read(&self.streams);
            match streams.get(path) {
                Some(entry) => {
                    entry.tail.note(signal);
                    if entry.slots.iter().all(Option::is_some) {
                        entry.slots.iter().flatten().for_each(|s| s.ring());
                        return;
                    }
                }
                None if signal.deleted => return,
                None => {}
            }
        }
        let matching = matching(&running.registry, path);
        if !matching.is_empty() {
            self.ensure(path, matching, Some(signal));
        }
    }

    /// Makes sure every processor matching `path` has a running slot, and
    /// rings the slots that already had one.
    pub(crate) fn ensure(self: &Arc<Self>, path: &str, matching: Vec<Registration>, signal: Option<&TailSignal>) {
        let mut streams = write(&self.streams);
        let entry = streams
            .entry(path.to_owned())
            .or_insert_with(|| StreamEntry { slots: vec![None; matching.len()], tail: Arc::default() });
        if let Some(signal) = signal {
            entry.tail.note(signal);
        }
        for (i, registration) in matching.into_iter().enumerate() {
            match &entry.slots[i] {
                Some(slot) => slot.ring(),
                None => {
                    let slot = Arc::new(Slot::new(path, registration, Arc::clone(&entry.tail)));
                    entry.slots[i] = Some(Arc::clone(&slot));
                    self.tasks.spawn(run_slot(Arc::clone(self), slot));
                }
            }
        }
    }

    /// Removes `slot` from the map if no ring reached it since it read
    /// `seen`; `false`: it was rung, so it must look at the store again.
    pub(crate) fn retire(&self, slot: &Arc<Slot>, seen: u64) -> bool {
        let mut streams = write(&self.streams);
        if slot.rung.load(Ordering::SeqCst) != seen {
            return false;
        }
        if let Some(entry) = streams.get_mut(&slot.path) {
            for s in &mut entry.slots {
                if s.as_ref().is_some_and(|s| Arc::ptr_eq(s, slot)) {
                    *s = None;
                }
            }
            if entry.slots.iter().all(Option::is_none) {
                streams.remove(&slot.path);
            }
        }
        true
    }

    /// Every slot now in the map, by stream path.
    pub(crate) fn slots(&self) -> Vec<(String, Vec<Arc<Slot>>)> {
        let streams = read(&self.streams);
        let mut out: Vec<_> =
            streams.iter().map(|(path, e)| (path.clone(), e.slots.iter().flatten().cloned().collect())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The slot of `slug` on `path`, if one is running.
    pub(crate) fn slot(&self, path: &str, slug: &str) -> Option<Arc<Slot>> {
        let streams = read(&self.streams);
        streams.get(path)?.slots.iter().flatten().find(|s| s.registration.spec.slug() == slug).cloned()
    }
}

/// The registrations whose pattern matches `path`, in registry order.
pub(crate) fn matching(registry: &ProcessorRegistry, path: &str) -> Vec<Registration> {
    registry.registrations().iter().filter(|r| r.pattern.matches(path)).cloned().collect()
}

/// Delivers fired revival alarms: each appends its revival event (which
/// rings the stream's slots like any commit) and is then settled. A failed
/// delivery is retried with backoff; its record stays, so a restart re-arms
/// it too.
pub(crate) async fn run_alarms(inner: Arc<Inner>, mut fired: UnboundedReceiver<FiredAlarm>) {
    loop {
        let alarm = tokio::select! {
            a = fired.recv() => match a { Some(a) => a, None => return },
            () = inner.shutdown.cancelled() => return,
        };
        let inner = Arc::clone(&inner);
        inner.tasks.clone().spawn(async move { deliver(&inner, alarm).await });
    }
}

async fn deliver(inner: &Inner, fired: FiredAlarm) {
    let running = inner.running();
    let recovery = StreamRecovery::new(running.service.clone(), &fired.path, running.alarms.clone());
    let mut delay = Duration::from_millis(100);
    loop {
        match recovery.handle_alarm(&fired.alarm).await {
            Ok(outcome) => {
                tracing::info!(stream = %fired.path, processor = %fired.alarm.slug, position = outcome.position, "revival alarm fired");
                break;
            }
            Err(RecoveryError::Journal(JournalError::IncarnationChanged { .. } | JournalError::StreamNotFound)) => {
                tracing::info!(stream = %fired.path, processor = %fired.alarm.slug, "revival alarm of a stream life that is over: dropped");
                break;
            }
            Err(error) => {
                tracing::warn!(stream = %fired.path, processor = %fired.alarm.slug, %error, "revival alarm delivery failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = inner.shutdown.cancelled() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
    if let Err(error) = running.alarms.settle(&fired).await {
        tracing::warn!(stream = %fired.path, processor = %fired.alarm.slug, %error, "could not settle a delivered alarm; it fires again after a restart");
    }
}

/// Longest pause between attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The task of one slot (see the module docs of `slot`).
pub(crate) async fn run_slot(inner: Arc<Inner>, slot: Arc<Slot>) {
    let mut failures = 0u32;
    loop {
        if inner.shutdown.is_cancelled() {
            return;
        }
        let seen = slot.rung.load(Ordering::SeqCst);
        match slot.drive(&inner.opening()).await {
            Turn::Idle => failures = 0,
            Turn::Reopen => continue,
            Turn::Gone => {
                if inner.retire(&slot, seen) {
                    tracing::debug!(stream = %slot.path, processor = slot.slug(), "stream gone: processor retired");
                    return;
                }
                continue;
            }
            Turn::NotJson(content_type) => {
                if !slot.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(stream = %slot.path, processor = slot.slug(), %content_type, "stream matches the processor's pattern but is not a JSON stream: not processed");
                }
            }
            Turn::Failed(error) => {
                failures = failures.saturating_add(1);
                let delay = Duration::from_millis(100).saturating_mul(1 << failures.min(9)).min(MAX_BACKOFF);
                tracing::warn!(stream = %slot.path, processor = slot.slug(), %error, retry_in = ?delay, "processor turn failed");
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = inner.shutdown.cancelled() => return,
                }
            }
            Turn::Drained => return,
        }
        tokio::select! {
            () = slot.bell.notified() => {}
            () = inner.shutdown.cancelled() => return,
        }
        // Rings during the delay coalesce into the next turn (see
        // `ProcessorSpec::wake_delay`).
        let delay = slot.registration.spec.wake_delay();
        if !delay.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = inner.shutdown.cancelled() => return,
            }
        }
    }
}
