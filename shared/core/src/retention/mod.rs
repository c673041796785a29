//! Retention policies: how much history the streams under a path prefix
//! keep, applied by a host's background task ([`RetentionRunner`]) through
//! [`StreamService::trim`]. Nothing here runs on the append path: with no
//! policy there is no task, and a policy costs appends nothing (the task
//! reads metas and trims, each trim one short critical section).
//!
//! - `max_bytes`: keep about the newest `max_bytes` (the trim stops at an
//!   append or message boundary at or before `tail - max_bytes`, so a
//!   little more may stay).
//! - `max_age`: drop what was appended longer ago than `max_age`. Stores
//!   keep no append times, so the runner samples each stream's tail on
//!   every pass: a sample `(t, tail)` says every byte before `tail` was
//!   appended by `t`, so once `t` is `max_age` old they may go. Bytes are
//!   therefore dropped between `max_age` and `max_age` plus one interval
//!   after their append, never before. The samples live in the runner's
//!   memory only (a few per stream, coarsened as they accumulate): after a
//!   restart nothing is known to be old until `max_age` has passed again,
//!   so a restart delays trimming by age, never makes it early.
//!
//! A stream under several policies' prefixes follows the one with the
//! longest prefix. The `__registry__` stream and reserved paths are never
//! trimmed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use tracing::Instrument;

pub mod policy_syntax;

use crate::{ServiceError, StreamMeta, StreamService};

/// One policy: the streams whose paths start with `prefix` keep at most
/// `max_bytes` of history and nothing older than `max_age` (either may be
/// absent, not both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// A plain string prefix of the stream path (`logs/`); empty: every stream.
    pub prefix: String,
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

/// Most tail samples kept per stream; past it every other one is dropped
/// (coarser, so later trims, never earlier ones).
const MAX_SAMPLES: usize = 64;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPass {
    /// Streams a policy applied to.
    pub streams: usize,
    /// Trims that raised a stream's earliest offset.
    pub trimmed: usize,
    /// Trims that failed (logged; retried on the next pass).
    pub failed: usize,
    /// The pass reached the end of every policy's listing (`false`: its
    /// deadline stopped it, and the next pass resumes where it stopped).
    pub complete: bool,
}

/// Where a round over every policy's streams stands: passes cut short by a
/// deadline ([`RetentionRunner::pass_until`]) leave one to resume.
#[derive(Default)]
struct Round {
    /// Index of the policy being listed.
    policy: usize,
    /// The last path handled under it.
    after: Option<String>,
    /// Streams handled in this round (their samples are kept at its end).
    seen: HashSet<(String, String)>,
}

/// Applies [`RetentionPolicy`]s to the streams of one service, one pass at
/// a time ([`Self::run`] repeats them).
pub struct RetentionRunner {
    service: StreamService,
    /// Longest prefix first: the first policy a path matches is its own.
    policies: Vec<RetentionPolicy>,
    /// `(path, incarnation)` → tail samples `(at_ms, tail)`, oldest first.
    samples: HashMap<(String, String), VecDeque<(i64, u64)>>,
    round: Round,
}

impl RetentionRunner {
    pub fn new(service: StreamService, mut policies: Vec<RetentionPolicy>) -> Self {
        policies.sort_by_key(|p| std::cmp::Reverse(p.prefix.len()));
        Self { service, policies, samples: HashMap::new(), round: Round::default() }
    }

    /// Apply the policies every `interval` until the service shuts down
    /// (the task is dropped with the runtime).
    pub async fn run(mut self, interval: Duration) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let span = tracing::info_span!("retention_pass", policies = self.policies.len());
            let pass = self.pass().instrument(span).await;
            if pass.trimmed > 0 || pass.failed > 0 {
                tracing::info!(streams = pass.streams, trimmed = pass.trimmed, failed = pass.failed, "retention pass");
            }
        }
    }

    /// One pass over every policy's streams.
    pub async fn pass(&mut self) -> RetentionPass {
        self.pass_until(None).await
    }

    /// A pass that stops at `deadline` (after handling at least one stream,
    /// so passes always progress) and leaves the rest of its round to the
    /// next pass: a host whose passes run under a time limit (a Lambda
    /// invocation) covers every stream over several passes instead of
    /// starving the end of the listing.
    pub async fn pass_until(&mut self, deadline: Option<Instant>) -> RetentionPass {
        let mut pass = RetentionPass::default();
        let mut round = std::mem::take(&mut self.round);
        let mut examined = 0usize;
        let now = self.service.clock().now_ms();
        while round.policy < self.policies.len() {
            let i = round.policy;
            let prefix = self.policies[i].prefix.clone();
            loop {
                let store = &self.service.substrate().store;
                let page = match store.list_streams_with_prefix(&prefix, round.after.as_deref(), 500).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(prefix, error = %e, "retention: listing streams failed");
                        pass.failed += 1;
                        break;
                    }
                };
                if page.is_empty() {
                    break;
                }
                for meta in page {
                    if examined > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                        self.round = round;
                        return pass;
                    }
                    examined += 1;
                    round.after = Some(meta.path.to_string());
                    let key = (meta.path.to_string(), meta.incarnation.to_string());
                    if round.seen.contains(&key) || !self.governs(i, &meta) {
                        continue;
                    }
                    round.seen.insert(key.clone());
                    pass.streams += 1;
                    self.apply(i, &key, &meta, now, &mut pass).await;
                }
            }
            round.policy += 1;
            round.after = None;
        }
        // Forget the samples of streams gone (or no longer governed).
        self.samples.retain(|key, _| round.seen.contains(key));
        pass.complete = true;
        pass
    }

    /// Apply policy `i` to one stream: trim it, or, with nothing new to
    /// trim, ask for its reclaim again.
    async fn apply(&mut self, i: usize, key: &(String, String), meta: &StreamMeta, now: i64, pass: &mut RetentionPass) {
        let up_to = self.up_to(i, key, meta, now);
        if up_to <= meta.retained_from {
            // Nothing new to trim, but the last trim's reclaim may have
            // failed or stopped at its bound (AWS): ask again (idempotent;
            // below the listed retained_from, which never moves back).
            if meta.retained_from > 0 {
                self.reclaim(meta).await;
            }
            return;
        }
        match self.service.trim(&meta.path, up_to).await {
            Ok(out) if out.raised => {
                tracing::debug!(path = %meta.path, retained_from = out.retained_from, "retention trim");
                pass.trimmed += 1;
            }
            Ok(_) => {}
            // Deleted or re-created since it was listed: the next pass sees.
            Err(
                ServiceError::NotFound
                | ServiceError::Gone
                | ServiceError::Expired(_)
                | ServiceError::IncarnationChanged { .. },
            ) => {}
            Err(e) => {
                tracing::warn!(path = %meta.path, error = %e, "retention trim failed");
                pass.failed += 1;
            }
        }
    }

    /// Free what `meta`'s earliest offset left unreadable (logged on failure,
    /// asked again on the next pass).
    async fn reclaim(&self, meta: &StreamMeta) {
        let stream = crate::StreamHandle::detached(&meta.path);
        let store = &self.service.substrate().store;
        if let Err(e) = store.reclaim(&stream, &meta.incarnation, meta.retained_from).await {
            tracing::warn!(path = %meta.path, error = %e, "retention: reclaiming failed; asked again next pass");
        }
    }

    /// Whether policy `i` is the one `meta` follows (no longer prefix of an
    /// earlier policy matches it) and the stream may be trimmed at all.
    fn governs(&self, i: usize, meta: &StreamMeta) -> bool {
        let path = &*meta.path;
        !meta.soft_deleted
            && !ds_protocol::path::is_reserved(path)
            && path != crate::REGISTRY_PATH
            && self.policies[..i].iter().all(|p| !path.starts_with(&p.prefix))
    }

    /// The position policy `i` trims `meta` up to at `now_ms` (sampling its
    /// tail for `max_age`).
    fn up_to(&mut self, i: usize, key: &(String, String), meta: &StreamMeta, now_ms: i64) -> u64 {
        let policy = &self.policies[i];
        let by_bytes = policy.max_bytes.map_or(0, |max| meta.tail.saturating_sub(max));
        let Some(max_age) = policy.max_age else { return by_bytes };
        let samples = self.samples.entry(key.clone()).or_default();
        if samples.back().is_none_or(|&(_, tail)| tail < meta.tail) {
            samples.push_back((now_ms, meta.tail));
            if samples.len() > MAX_SAMPLES {
                let mut keep = 0;
                samples.retain(|_| {
                    keep += 1;
                    keep % 2 == 1
                });
            }
        }
        let age_ms = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms.saturating_sub(age_ms);
        // The newest sample old enough: everything before its tail may go.
        let old_enough = samples.iter().take_while(|(at, _)| *at <= cutoff).count();
        let by_age = match old_enough {
            0 => 0,
            n => {
                samples.drain(..n - 1);
                samples.front().map_or(0, |&(_, tail)| tail)
            }
        };
        by_bytes.max(by_age)
    }
}
