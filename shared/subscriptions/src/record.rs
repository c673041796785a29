//! The persisted state of one subscription: one keyed record
//! ([`ds_core::Record`]) holding configuration, stream links with their
//! cursors, and the wake/lease/retry state, so every change is one
//! conditional write (two writers racing on one callback: exactly one wins).
//!
//! **This is a persisted format** (JSON, field names are the format): add
//! fields with `#[serde(default)]`, never rename or repurpose one.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::config::{Config, Kind};

/// One linked stream's cursor (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Linked by `streams[]` or the membership API.
    pub explicit: bool,
    /// Linked because `pattern` matches.
    pub glob: bool,
    /// Last processed position (an offset is a position): everything before
    /// it is acknowledged. Meaningful for `incarnation` only.
    pub acked: u64,
    /// The stream incarnation `acked` belongs to; `None` when linked before
    /// the stream existed. A re-created stream starts unacknowledged.
    pub incarnation: Option<String>,
}

impl Link {
    /// `explicit` wins in serialized responses (§6.1).
    pub fn link_type(&self) -> &'static str {
        if self.explicit {
            "explicit"
        } else {
            "glob"
        }
    }

    /// The acknowledged position for the stream's current incarnation `inc`.
    pub fn acked_for(&self, inc: &str) -> u64 {
        if self.incarnation.as_deref() == Some(inc) {
            self.acked
        } else {
            0
        }
    }
}

/// A stream's current state, as the engine read it for one transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub incarnation: std::sync::Arc<str>,
    pub tail: u64,
}

/// Current tails of linked streams (`None`: the stream does not exist).
pub type Tails = HashMap<String, Option<Tail>>;

/// A wake in flight (§7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub wake_id: String,
    pub generation: u64,
    pub issued_at_ms: i64,
    /// `(path, tail position)` of the streams with pending work when the wake
    /// was issued (or claimed): what `{done: true}` acknowledges.
    pub streams: Vec<(String, u64)>,
    /// The webhook answered, or the wake event was appended.
    pub delivered: bool,
    /// The pull-wake worker holding the lease.
    pub holder: Option<String>,
    /// When the lease ends (webhook: from issue; pull-wake: from claim).
    pub lease_until_ms: Option<i64>,
}

/// Webhook (or wake-event) delivery failures and the persisted schedule of
/// the next attempt (§7.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// Consecutive failed attempts; `status` is `failed` while non-zero.
    pub attempts: u32,
    pub next_attempt_at_ms: Option<i64>,
}

/// Everything stored about one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRecord {
    pub id: String,
    /// Unique per creation: a subscription deleted and created again under
    /// the same id is another instance, and the old one's tokens are void.
    pub instance: String,
    pub created_at_ms: i64,
    /// Set when deleted: the record stays as a tombstone.
    pub deleted_at_ms: Option<i64>,
    pub config: Config,
    pub config_hash: String,
    /// `scheme://host` the subscription was created through: the base of
    /// `callback_url` in webhook notifications.
    pub base_url: String,
    /// HMAC key of this instance's callback and claim tokens (base64). Never
    /// served by any API, never logged.
    pub token_key: String,
    pub links: BTreeMap<String, Link>,
    /// Bumped by one for every wake (§7.3).
    pub generation: u64,
    pub wake: Option<Wake>,
    #[serde(default)]
    pub retry: Retry,
}

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("id", &self.0.id).field("generation", &self.0.generation).finish()
    }
}

/// A record for logs: id and generation, never the token key.
pub struct Redacted<'a>(pub &'a SubscriptionRecord);

impl SubscriptionRecord {
    pub fn is_deleted(&self) -> bool {
        self.deleted_at_ms.is_some()
    }

    pub fn kind(&self) -> Kind {
        self.config.kind
    }

    /// `active`, or `failed` while a retry follows a failed delivery (§6.3).
    pub fn status(&self) -> &'static str {
        if self.retry.attempts > 0 {
            "failed"
        } else {
            "active"
        }
    }

    /// Whether `path` may be linked by the pattern: it matches, and is not
    /// this subscription's own wake stream (whose wake events would wake it).
    pub fn glob_matches(&self, path: &str) -> bool {
        if ds_protocol::path::is_reserved(path) || self.config.wake_stream.as_deref() == Some(path) {
            return false;
        }
        self.config.glob().is_some_and(|g| g.matches(path))
    }

    /// `(path, tail)` of every linked stream with unacknowledged data.
    pub fn pending(&self, tails: &Tails) -> Vec<(String, u64)> {
        self.links
            .iter()
            .filter_map(|(path, link)| {
                let t = tails.get(path)?.as_ref()?;
                (t.tail > link.acked_for(&t.incarnation)).then(|| (path.clone(), t.tail))
            })
            .collect()
    }

    /// Link `path` (if not linked yet) at `at`: the stream's current tail
    /// for backfill and explicit adds, 0 for a stream found by its first
    /// append. Marks the link explicit or glob.
    pub fn link(&mut self, path: &str, explicit: bool, at: Option<&Tail>) {
        let link = self.links.entry(path.to_owned()).or_insert_with(|| Link {
            explicit: false,
            glob: false,
            acked: at.map_or(0, |t| t.tail),
            incarnation: at.map(|t| t.incarnation.to_string()),
        });
        if explicit {
            link.explicit = true;
        } else {
            link.glob = true;
        }
    }
}
