//! The control operations the HTTP layer serves (§6-7): create or
//! re-confirm, read, delete, explicit membership, claim, callback/ack and
//! release. Each is validated here and applied as one transition (or, for
//! create and delete, one commit of the subscription and the index).

use std::collections::BTreeMap;
use std::sync::Arc;

use ds_core::Commit;
use ds_protocol::glob::Glob;
use ds_protocol::Offset;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::{self, Config};
use crate::engine::Subscriptions;
use crate::error::{SubResult, SubscriptionError};
use crate::machine;
use crate::reach::{self, Guard};
use crate::record::{Retry, SubscriptionRecord, Tail};
use crate::store;
use crate::{token, view, MAX_LINKS};

/// Streams listed per page when backfilling a pattern.
const BACKFILL_PAGE: usize = 500;
/// Longest pull-wake worker name, in bytes.
const MAX_WORKER_BYTES: usize = 256;

/// What `PUT` did.
#[derive(Debug)]
pub struct PutOutcome {
    /// `true`: 201 Created; `false`: 200, re-confirmed.
    pub created: bool,
    pub body: Value,
}

#[derive(Deserialize)]
struct StreamsBody {
    streams: Vec<String>,
}

#[derive(Deserialize)]
struct ClaimBody {
    worker: Option<String>,
}

#[derive(Deserialize)]
struct AckItem {
    stream: String,
    offset: String,
}

#[derive(Deserialize)]
struct WakeBody {
    wake_id: String,
    generation: u64,
    #[serde(default)]
    acks: Vec<AckItem>,
    #[serde(default)]
    done: bool,
}

fn invalid(message: impl Into<String>) -> SubscriptionError {
    SubscriptionError::Invalid(message.into())
}

fn json_body<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> SubResult<T> {
    serde_json::from_slice(body).map_err(|e| invalid(format!("body is not a valid {what}: {e}")))
}

impl Subscriptions {
    /// `PUT …/__ds/subscriptions/{id}` (§6.2). `base_url` (`scheme://host`)
    /// is where the request came in: the base of callback and JWKS URLs.
    /// `caller` must reach everything the configuration does
    /// ([`reach::of_config`]), checked before anything is resolved, stored
    /// or sent.
    pub async fn put(&self, id: &str, body: &[u8], base_url: &str, caller: &dyn Guard) -> SubResult<PutOutcome> {
        config::validate_id(id)?;
        let policy = self.inner.policy;
        let config = config::parse(body, |url| policy.check_syntax(url).map(|_| ()))?;
        reach::check(caller, reach::of_config(&config))?;
        if let Some(url) = &config.webhook_url {
            policy.check(url).await?;
        }
        let hash = config.hash();
        let guard = self.id_lock(id);
        let _held = guard.lock().await;
        for _ in 0..16 {
            let existing = store::read_subscription(self.store(), id).await?;
            if let Some(s) = existing.as_ref().filter(|s| !s.value.is_deleted()) {
                if s.value.config_hash != hash {
                    return Err(SubscriptionError::ConfigConflict);
                }
                let rec = self.remember(s.revision, s.value.clone());
                return Ok(PutOutcome { created: false, body: self.render(&rec, base_url).await? });
            }
            let rec = self.new_record(id, config.clone(), hash.clone(), base_url).await?;
            let index = store::read_index(self.store()).await?;
            let mut ids = index.as_ref().map(|i| i.value.clone()).unwrap_or_default();
            ids.ids.insert(id.to_owned());
            let ops = vec![
                store::put_subscription(&rec, existing.as_ref().map(|s| s.revision))?,
                store::put_index(&ids, index.as_ref().map(|i| i.revision))?,
            ];
            match self.store().commit(Commit { ops }).await {
                Ok(()) => {
                    let revision = existing.map_or(1, |s| s.revision + 1);
                    let rec = self.remember(revision, rec);
                    tracing::info!(subscription = %id, kind = rec.config.kind.as_str(), links = rec.links.len(), "subscription created");
                    // Rendered with the tails it was just linked at (read
                    // moments ago, in this request): reading each linked
                    // stream again would cost one read per match.
                    let tails = tails_as_linked(&rec);
                    let body = view::subscription(&rec, &tails, base_url, self.inner.keys.active_kid());
                    return Ok(PutOutcome { created: true, body });
                }
                Err(ds_core::StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SubscriptionError::Contention)
    }

    /// A new instance of `id`, its explicit streams and the streams its
    /// pattern matches linked at their current tails (§6.2 backfill).
    async fn new_record(
        &self,
        id: &str,
        config: Config,
        hash: String,
        base_url: &str,
    ) -> SubResult<SubscriptionRecord> {
        let mut rec = SubscriptionRecord {
            id: id.to_owned(),
            instance: uuid::Uuid::new_v4().simple().to_string(),
            created_at_ms: self.clock().now_ms(),
            deleted_at_ms: None,
            config,
            config_hash: hash,
            base_url: base_url.to_owned(),
            token_key: token::new_key(),
            links: BTreeMap::new(),
            generation: 0,
            wake: None,
            retry: Retry::default(),
        };
        let explicit = self.read_tails(rec.config.streams.iter()).await?;
        for (path, tail) in &explicit {
            rec.link(path, true, tail.as_ref());
        }
        if let Some(glob) = rec.config.glob() {
            self.backfill(&mut rec, &glob).await?;
        }
        Ok(rec)
    }

    async fn backfill(&self, rec: &mut SubscriptionRecord, glob: &Glob) -> SubResult<()> {
        let prefix = reach::literal_prefix(glob.as_str());
        let now = self.clock().now_ms();
        let mut after: Option<String> = None;
        loop {
            let page = self.store().list_streams_with_prefix(&prefix, after.as_deref(), BACKFILL_PAGE).await?;
            for meta in &page {
                if meta.soft_deleted || meta.is_expired(now) || !rec.glob_matches(&meta.path) {
                    continue;
                }
                let tail = crate::record::Tail { incarnation: meta.incarnation.clone(), tail: meta.tail };
                rec.link(&meta.path, false, Some(&tail));
                if rec.links.len() > MAX_LINKS {
                    return Err(SubscriptionError::TooLarge(format!(
                        "a subscription links at most {MAX_LINKS} streams"
                    )));
                }
            }
            match page.last() {
                Some(last) if page.len() == BACKFILL_PAGE => after = Some(last.path.to_string()),
                _ => return Ok(()),
            }
        }
    }

    async fn render(&self, rec: &Arc<SubscriptionRecord>, base_url: &str) -> SubResult<Value> {
        let tails = self.read_tails(rec.links.keys()).await?;
        Ok(view::subscription(rec, &tails, base_url, self.inner.keys.active_kid()))
    }

    /// `GET …/__ds/subscriptions/{id}` (§6.3), read from the store. The
    /// answer names streams and their tails: `caller` must be able to read
    /// every stream the subscription can name ([`reach::disclosed`]).
    pub async fn get(&self, id: &str, base_url: &str, caller: &dyn Guard) -> SubResult<Value> {
        config::validate_id(id)?;
        let stored = self.fetch(id).await?.filter(|s| !s.value.is_deleted()).ok_or(SubscriptionError::NotFound)?;
        reach::check(caller, reach::disclosed(&stored.value.config))?;
        self.render(&stored.value, base_url).await
    }

    /// `DELETE …/__ds/subscriptions/{id}` (§6.3): a tombstone; callbacks,
    /// acks and releases of it fail from now on.
    pub async fn delete(&self, id: &str) -> SubResult<()> {
        config::validate_id(id)?;
        let guard = self.id_lock(id);
        let _held = guard.lock().await;
        for _ in 0..16 {
            let stored = store::read_subscription(self.store(), id).await?;
            let stored = stored.filter(|s| !s.value.is_deleted()).ok_or(SubscriptionError::NotFound)?;
            let mut tomb = stored.value.clone();
            tomb.deleted_at_ms = Some(self.clock().now_ms());
            tomb.wake = None;
            tomb.retry = Retry::default();
            tomb.links.clear();
            let index = store::read_index(self.store()).await?;
            let mut ids = index.as_ref().map(|i| i.value.clone()).unwrap_or_default();
            ids.ids.remove(id);
            let ops = vec![
                store::put_subscription(&tomb, Some(stored.revision))?,
                store::put_index(&ids, index.as_ref().map(|i| i.revision))?,
            ];
            match self.store().commit(Commit { ops }).await {
                Ok(()) => {
                    self.remember(stored.revision + 1, tomb);
                    self.disarm(id).await;
                    tracing::info!(subscription = %id, "subscription deleted");
                    return Ok(());
                }
                Err(ds_core::StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SubscriptionError::Contention)
    }

    /// `POST …/{id}/streams` (§6.4): explicit links at the current tails,
    /// each one a stream `caller` may read.
    pub async fn add_streams(&self, id: &str, body: &[u8], caller: &dyn Guard) -> SubResult<()> {
        config::validate_id(id)?;
        let paths =
            config::normalize_streams("streams", json_body::<StreamsBody>(body, "{\"streams\": [...]}")?.streams)?;
        reach::check(caller, reach::explicit(&paths))?;
        let at = self.read_tails(paths.iter()).await?;
        self.transition(id, |rec, _, _, _| {
            let new = paths.iter().filter(|p| !rec.links.contains_key(*p)).count();
            if rec.links.len() + new > MAX_LINKS {
                return Err(SubscriptionError::TooLarge(format!("a subscription links at most {MAX_LINKS} streams")));
            }
            for path in &paths {
                rec.link(path, true, at.get(path).and_then(Option::as_ref));
            }
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// `DELETE …/{id}/streams/{path}` (§6.4): drops the explicit link only.
    pub async fn remove_stream(&self, id: &str, path: &str) -> SubResult<()> {
        config::validate_id(id)?;
        config::validate_stream_path("stream path", path)?;
        self.transition(id, |rec, _, _, _| {
            let keep_as_glob = rec.glob_matches(path);
            if let Some(link) = rec.links.get_mut(path) {
                link.explicit = false;
                link.glob |= keep_as_glob;
                if !link.glob {
                    rec.links.remove(path);
                }
            }
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// `POST …/{id}/claim` (§7.2). The answer names streams and their
    /// tails: `caller` must be able to read every stream the subscription
    /// can name, checked before the lease is taken.
    pub async fn claim(&self, id: &str, body: &[u8], caller: &dyn Guard) -> SubResult<Value> {
        config::validate_id(id)?;
        let body: ClaimBody = if body.is_empty() { ClaimBody { worker: None } } else { json_body(body, "claim")? };
        let worker = body.worker.unwrap_or_else(|| "worker".into());
        if worker.is_empty() || worker.len() > MAX_WORKER_BYTES {
            return Err(invalid(format!("worker must be 1-{MAX_WORKER_BYTES} bytes")));
        }
        let (answer, _) = self
            .transition(id, |rec, tails, now, e| {
                reach::check(caller, reach::disclosed(&rec.config))?;
                machine::claim(rec, tails, &worker, now, e)?;
                let wake = rec.wake.as_ref().ok_or(SubscriptionError::Fenced)?;
                Ok(json!({
                    "wake_id": wake.wake_id,
                    "generation": wake.generation,
                    "token": token::mint(rec, wake.generation, &wake.wake_id)?,
                    "streams": view::wake_streams(rec, tails, &wake.streams),
                    "lease_ttl_ms": rec.config.lease_ttl_ms,
                }))
            })
            .await?;
        tracing::debug!(subscription = %id, "claimed");
        Ok(answer)
    }

    /// `POST …/{id}/callback` (webhook) and `…/ack` (pull-wake), §7.1-7.3:
    /// `{"ok": true, "next_wake": …}`.
    pub async fn ack(&self, id: &str, authorization: Option<&str>, body: &[u8]) -> SubResult<Value> {
        config::validate_id(id)?;
        let token = token::bearer(authorization)?;
        let req: WakeBody = json_body(body, "callback")?;
        let mut acks = Vec::with_capacity(req.acks.len());
        for a in &req.acks {
            let offset = Offset::parse(&a.offset).map_err(|e| invalid(format!("acks: {e}")))?;
            acks.push((a.stream.clone(), offset.position()));
        }
        let (next_wake, _) = self
            .transition(id, |rec, tails, now, e| {
                authorize(rec, token, &req.wake_id, req.generation, now)?;
                machine::ack(rec, tails, &acks, req.done, now, e)
            })
            .await?;
        Ok(json!({ "ok": true, "next_wake": next_wake }))
    }

    /// `POST …/{id}/release` (§7.2).
    pub async fn release(&self, id: &str, authorization: Option<&str>, body: &[u8]) -> SubResult<()> {
        config::validate_id(id)?;
        let token = token::bearer(authorization)?;
        let req: WakeBody = json_body(body, "release")?;
        self.transition(id, |rec, tails, now, e| {
            authorize(rec, token, &req.wake_id, req.generation, now)?;
            Ok(machine::release(rec, tails, now, e))
        })
        .await?;
        Ok(())
    }
}

/// §7.3: a genuine token of this subscription (else 401), for the current
/// wake, which the request names (else 409 FENCED).
fn authorize(rec: &SubscriptionRecord, token: &str, wake_id: &str, generation: u64, now: i64) -> SubResult<()> {
    let (token_generation, token_wake) = token::verify(rec, token)?;
    machine::current_wake(rec, wake_id, generation, now)?;
    if token_generation != generation || token_wake != wake_id {
        return Err(SubscriptionError::Fenced);
    }
    Ok(())
}

/// The tails a new record's streams were linked at (`None`: an explicit
/// stream that did not exist), as `Subscriptions::read_tails` would
/// have read them then.
fn tails_as_linked(rec: &SubscriptionRecord) -> crate::record::Tails {
    rec.links
        .iter()
        .map(|(path, link)| {
            let tail = link.incarnation.as_deref().map(|inc| Tail { incarnation: inc.into(), tail: link.acked });
            (path.clone(), tail)
        })
        .collect()
}
