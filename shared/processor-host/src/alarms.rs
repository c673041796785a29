//! Where revival alarms live: the [`AlarmScheduler`] seam, and
//! [`InProcAlarms`], its single-process implementation.
//!
//! An armed alarm is kept twice: as the record `alarm/<slug>` of the
//! stream incarnation it was armed for (so it survives a restart:
//! [`InProcAlarms::rearm`] starts its timer again), and as a tokio timer that
//! delivers a [`FiredAlarm`] on the channel the host drains. There is one
//! alarm per (stream, slug): arming again replaces it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{Commit, Op, Record, RecordExpect, StoreError, StreamService};
use ds_processor::{Alarm, RecoveryError, StreamIncarnation};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::AbortHandle;

/// Keeps one-shot revival alarms per (stream path, processor slug).
#[async_trait]
pub trait AlarmScheduler: Send + Sync {
    /// Arms `alarm` for the stream at `path`, replacing any alarm of its slug.
    async fn arm(&self, path: &str, alarm: &Alarm) -> Result<(), RecoveryError>;
    /// Cancels the alarm of `slug` on `path`, if one is armed.
    async fn disarm(&self, path: &str, slug: &str) -> Result<(), RecoveryError>;
}

/// An alarm that went off, for the host to hand to the recovery adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredAlarm {
    pub path: String,
    pub alarm: Alarm,
}

/// The persisted form of an armed alarm (record `alarm/<slug>`); an empty
/// value means disarmed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArmedRecord {
    token: String,
    at_ms: u64,
}

fn alarm_key(slug: &str) -> String {
    format!("alarm/{slug}")
}

type Key = (String, String);

struct Armed {
    alarm: Alarm,
    /// The timer; `None` in manual mode.
    timer: Option<AbortHandle>,
}

/// The in-process [`AlarmScheduler`] (see module docs).
pub struct InProcAlarms {
    service: StreamService,
    armed: Arc<Mutex<HashMap<Key, Armed>>>,
    /// `None`: manual mode, alarms are taken with [`Self::take_due`].
    fired: Option<UnboundedSender<FiredAlarm>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single map operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unavailable(e: impl std::fmt::Display) -> RecoveryError {
    RecoveryError::Unavailable(e.to_string())
}

impl InProcAlarms {
    /// Alarms on tokio timers; fired ones arrive on the returned receiver.
    pub fn new(service: StreamService) -> (Arc<Self>, UnboundedReceiver<FiredAlarm>) {
        let (tx, rx) = unbounded_channel();
        (Arc::new(Self { service, armed: Arc::default(), fired: Some(tx) }), rx)
    }

    /// Alarms without timers: nothing fires until [`Self::take_due`] takes
    /// it (tests playing the scheduler).
    pub fn manual(service: StreamService) -> Arc<Self> {
        Arc::new(Self { service, armed: Arc::default(), fired: None })
    }

    /// Removes and returns the alarms of `path` due at `now_ms`.
    pub fn take_due(&self, path: &str, now_ms: u64) -> Vec<Alarm> {
        let mut armed = lock(&self.armed);
        let due: Vec<Key> =
            armed.iter().filter(|((p, _), a)| p == path && a.alarm.at_ms <= now_ms).map(|(k, _)| k.clone()).collect();
        due.iter()
            .filter_map(|k| armed.remove(k))
            .map(|a| {
                if let Some(t) = a.timer {
                    t.abort();
                }
                a.alarm
            })
            .collect()
    }

    /// Number of armed alarms (tests, metrics).
    pub fn armed(&self) -> usize {
        lock(&self.armed).len()
    }

    /// Starts the timers of alarms persisted before a restart, for the
    /// processors `slugs` of the stream at `path` (its live incarnation).
    /// Returns how many were armed.
    pub async fn rearm(&self, path: &str, slugs: &[String]) -> Result<usize, RecoveryError> {
        let meta = match self.service.head(path).await {
            Ok(meta) => meta,
            Err(ds_core::ServiceError::NotFound | ds_core::ServiceError::Gone) => return Ok(0),
            Err(e) => return Err(unavailable(e)),
        };
        let stream = self.service.substrate().registry.enter(path);
        let mut rearmed = 0;
        for slug in slugs {
            let record = self.service.substrate().store.read_record(&stream, &meta.incarnation, &alarm_key(slug)).await;
            let Some(record) = record.map_err(unavailable)? else { continue };
            let Ok(armed) = serde_json::from_slice::<ArmedRecord>(&record.value) else { continue };
            let alarm = Alarm {
                slug: slug.clone(),
                incarnation: StreamIncarnation::new(meta.incarnation.to_string()),
                token: armed.token,
                at_ms: armed.at_ms,
            };
            self.start(path, alarm);
            rearmed += 1;
        }
        Ok(rearmed)
    }

    /// The alarm `fired` was handled: forget its record, unless it was armed
    /// again meanwhile (another token).
    pub async fn settle(&self, fired: &FiredAlarm) -> Result<(), RecoveryError> {
        self.write_record(&fired.path, &fired.alarm.incarnation, &fired.alarm.slug, None, Some(&fired.alarm.token))
            .await
    }

    /// Keep `alarm` in memory (and on a timer), replacing its slug's alarm.
    fn start(&self, path: &str, alarm: Alarm) {
        let key: Key = (path.to_owned(), alarm.slug.clone());
        let mut armed = lock(&self.armed);
        let timer = self.fired.as_ref().map(|tx| {
            let (tx, map, key, alarm) = (tx.clone(), Arc::clone(&self.armed), key.clone(), alarm.clone());
            // On the service's clock: a manual one fires the alarm when moved past it.
            let due = self.service.clock().sleep_until(i64::try_from(alarm.at_ms).unwrap_or(i64::MAX));
            tokio::spawn(async move {
                due.await;
                let due = {
                    let mut armed = lock(&map);
                    let current = armed.get(&key).is_some_and(|a| a.alarm.token == alarm.token);
                    current.then(|| armed.remove(&key)).flatten()
                };
                if due.is_some() {
                    // A closed channel means the host stopped: nothing to deliver to.
                    let _ = tx.send(FiredAlarm { path: key.0, alarm });
                }
            })
            .abort_handle()
        });
        if let Some(old) = armed.insert(key, Armed { alarm, timer }) {
            if let Some(t) = old.timer {
                t.abort();
            }
        }
    }

    /// Write the alarm record of `slug` (`armed`: `None` disarms), replacing
    /// whatever is stored — or, with `only_token`, only a record still
    /// holding that token.
    async fn write_record(
        &self,
        path: &str,
        incarnation: &StreamIncarnation,
        slug: &str,
        armed: Option<&ArmedRecord>,
        only_token: Option<&str>,
    ) -> Result<(), RecoveryError> {
        let stream = self.service.substrate().registry.enter(path);
        let store = &self.service.substrate().store;
        let key = alarm_key(slug);
        let value = match armed {
            Some(a) => Bytes::from(serde_json::to_vec(a).map_err(unavailable)?),
            None => Bytes::new(),
        };
        // Last writer wins; a lost race is read again and retried.
        for _ in 0..8 {
            let stored = store.read_record(&stream, incarnation.as_str(), &key).await.map_err(unavailable)?;
            if let Some(token) = only_token {
                let holds = stored.as_ref().and_then(|r| serde_json::from_slice::<ArmedRecord>(&r.value).ok());
                if holds.is_none_or(|a| a.token != token) {
                    return Ok(());
                }
            }
            let (revision, expect) = match &stored {
                Some(r) => (r.revision + 1, RecordExpect::Revision(r.revision)),
                None => (1, RecordExpect::Absent),
            };
            let op = Op::PutRecord {
                path: path.into(),
                incarnation: incarnation.as_str().into(),
                key: key.clone(),
                record: Record { revision, value: value.clone() },
                expect,
            };
            match store.commit(Commit { ops: vec![op] }).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(unavailable(e)),
            }
        }
        Err(RecoveryError::Unavailable(format!("alarm record of {path} ({slug}) kept changing")))
    }
}

#[async_trait]
impl AlarmScheduler for InProcAlarms {
    async fn arm(&self, path: &str, alarm: &Alarm) -> Result<(), RecoveryError> {
        let record = ArmedRecord { token: alarm.token.clone(), at_ms: alarm.at_ms };
        self.write_record(path, &alarm.incarnation, &alarm.slug, Some(&record), None).await?;
        self.start(path, alarm.clone());
        Ok(())
    }

    async fn disarm(&self, path: &str, slug: &str) -> Result<(), RecoveryError> {
        let removed = lock(&self.armed).remove(&(path.to_owned(), slug.to_owned()));
        let Some(removed) = removed else { return Ok(()) };
        if let Some(t) = removed.timer {
            t.abort();
        }
        self.write_record(path, &removed.alarm.incarnation, slug, None, Some(&removed.alarm.token)).await
    }
}
