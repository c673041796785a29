//! Subscriptions in the local server, on every store: the engine over the
//! service, fed by the hub tap, its timers in process (re-armed from the
//! persisted records at start-up), and the webhook signing key kept per
//! store: a 0600 file in the data directory (local), a record of the table
//! (aws), or the process's memory (memory).

use std::sync::Arc;

use anyhow::Context;
use ds_core::StreamService;
use ds_subscriptions::{
    ChangeTap, FileKeyStore, InProcWakes, KeyRing, KeyStore, MemoryKeyStore, RecordKeyStore, Subscriptions,
    SubscriptionsConfig, UrlPolicy,
};

use crate::cli::{ServeArgs, StoreKind};

/// The file of the webhook signing keys in the local data directory.
const KEY_FILE: &str = "webhook-signing-keys.json";

pub async fn start(args: &ServeArgs, service: &StreamService, tap: &ChangeTap) -> anyhow::Result<Subscriptions> {
    let keys: Box<dyn KeyStore> = match args.store {
        StoreKind::Memory => Box::new(MemoryKeyStore::default()),
        StoreKind::Local => Box::new(FileKeyStore::new(args.data_dir.join(KEY_FILE))),
        StoreKind::Aws => Box::new(RecordKeyStore::new(Arc::clone(&service.substrate().store))),
    };
    let keys = KeyRing::open(keys.as_ref()).await.context("opening the webhook signing key")?;
    tracing::info!(kid = keys.active_kid(), "webhook signing key");
    if args.webhook_allow_loopback {
        tracing::warn!("webhook URLs on loopback are allowed (--webhook-allow-loopback): development only");
    }
    let cfg = SubscriptionsConfig {
        url_policy: UrlPolicy { allow_loopback: args.webhook_allow_loopback },
        // A table may also be served by the Lambda functions or another
        // server: read before deciding.
        sole_writer: !matches!(args.store, StoreKind::Aws),
        ..SubscriptionsConfig::default()
    };
    let (wakes, due) = InProcWakes::new(service.clock().clone());
    let engine = Subscriptions::new(service.clone(), keys, cfg, Arc::new(wakes)).context("subscriptions")?;
    tokio::spawn(engine.clone().run_due_loop(due));
    tap.connect(&engine);
    let loaded = engine.start().await.context("resuming subscriptions")?;
    tracing::info!(subscriptions = loaded, "subscriptions resumed");
    Ok(engine)
}
