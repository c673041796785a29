//! Build the chosen substrate.

use anyhow::Context;
use ds_core::{ExpiryDue, Substrate};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::cli::{ServeArgs, StoreKind};

/// The substrate, and the in-process expiry alarms to feed to the service
/// (`None` where alarms fire elsewhere, e.g. EventBridge Scheduler).
pub async fn open(args: &ServeArgs) -> anyhow::Result<(Substrate, Option<UnboundedReceiver<ExpiryDue>>)> {
    match args.store {
        StoreKind::Memory => {
            let (sub, due) = ds_store_memory::memory_substrate();
            Ok((sub, Some(due)))
        }
        StoreKind::Local => {
            std::fs::create_dir_all(&args.data_dir)
                .with_context(|| format!("creating data dir {}", args.data_dir.display()))?;
            let (sub, due) = ds_store_local::local_substrate(&args.data_dir)
                .with_context(|| format!("opening local store in {}", args.data_dir.display()))?;
            Ok((sub, Some(due)))
        }
        StoreKind::Aws => Ok((crate::aws::open().await?, None)),
    }
}
