//! Subscriptions (protocol §6-7): durable cursors over a set of streams (a
//! glob pattern and explicit links) that wake workers when the streams get
//! data — by a signed webhook (`POST`, Ed25519) or by wake events on a
//! pull-wake stream that workers claim — with generation fencing, leases and
//! persisted retry schedules.
//!
//! Written once over the substrate seam (`ds_core`), so memory, local disk
//! and AWS keep subscriptions the same way:
//! - state: one keyed record per subscription ([`record`], [`store`]), every
//!   change one conditional write ([`engine`]); transitions are pure
//!   ([`machine`]);
//! - commits reach the engine through [`Subscriptions::on_stream_changed`]
//!   (in process: the hub tap, [`tap_hub`]), or, for a host fed by the
//!   store's change stream (the AWS processor function),
//!   [`Subscriptions::stream_changed`] and [`Subscriptions::record_changed`];
//! - later work (delivery now, a lease's end, a retry time) goes through the
//!   [`WakeScheduler`] seam ([`InProcWakes`] in process; [`FeedWakes`] for a
//!   front end that leaves the work to such a host), and the time is
//!   persisted in the record so a restart re-arms it
//!   ([`Subscriptions::start`]);
//! - a request reaches no stream its caller's grants do not cover
//!   ([`reach`]: read on everything a subscription can name, write on its
//!   wake stream);
//! - webhook URLs follow the SSRF rules ([`webhook_url`]); signing keys
//!   ([`signing`]) are generated once and persisted through a [`KeyStore`].

mod api;
mod config;
mod deliver;
mod engine;
mod error;
pub mod machine;
pub mod reach;
pub mod record;
mod schedule;
pub mod signing;
mod store;
mod tap;
pub mod token;
mod view;
pub mod webhook_url;

pub use api::PutOutcome;
pub use config::{Config, Kind, DEFAULT_LEASE_TTL_MS, MAX_DESCRIPTION_BYTES, MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS};
pub use engine::{Subscriptions, SubscriptionsConfig};
pub use error::{SubResult, SubscriptionError};
pub use reach::literal_prefix;
pub use reach::{Guard, Need, Open};
pub use schedule::{FeedWakes, InProcWakes, WakeScheduler};
pub use signing::{FileKeyStore, KeyRing, KeyStore, MemoryKeyStore, RecordKeyStore};
pub use store::subscription_of_record;
pub use tap::{tap_hub, ChangeTap};
pub use webhook_url::UrlPolicy;

/// Most streams one subscription links (its state is one record of at most
/// `ds_core::MAX_RECORD_BYTES`).
pub const MAX_LINKS: usize = 1000;
