//! The in-process change feed: a [`StreamHub`] decorator that hands every
//! published commit (path and new tail) to the subscription engine after
//! passing it on to live readers. The core publishes only after a commit
//! returned `Ok`, so subscriptions never see rolled-back data.
//!
//! Only commits of this process pass through its hub: this is the feed of
//! a single-process host (the local server, on any store). A multi-process
//! deployment feeds [`Subscriptions::on_stream_changed`] from the store's
//! own change stream instead.

use std::sync::{Arc, OnceLock, Weak};

use ds_core::{HubSubscription, StreamHandle, StreamHub, Substrate, TailSignal};

use crate::engine::Inner;
use crate::Subscriptions;

/// Where tapped commits go once the engine exists.
///
/// Weak: the engine holds the service, which holds the substrate, whose
/// hub holds this tap. A strong reference closed that cycle, so the store
/// was never dropped: the local store's database was not closed at
/// shutdown and every start after a clean stop had to repair it.
#[derive(Default)]
pub struct ChangeTap {
    engine: OnceLock<Weak<Inner>>,
}

impl ChangeTap {
    /// Start feeding `engine` (later calls are ignored).
    pub fn connect(&self, engine: &Subscriptions) {
        let _ = self.engine.set(Arc::downgrade(&engine.inner));
    }
}

struct TappedHub {
    inner: Arc<dyn StreamHub>,
    tap: Arc<ChangeTap>,
}

impl StreamHub for TappedHub {
    fn publish(&self, stream: &StreamHandle, signal: TailSignal) {
        if let Some(inner) = self.tap.engine.get().and_then(Weak::upgrade) {
            Subscriptions { inner }.on_stream_changed(stream.path(), &signal);
        }
        self.inner.publish(stream, signal);
    }

    fn subscribe(&self, stream: &StreamHandle) -> Box<dyn HubSubscription> {
        self.inner.subscribe(stream)
    }
}

/// Put a tap on `substrate`'s hub; connect the engine to the returned tap
/// once it is built over the same substrate.
pub fn tap_hub(substrate: &mut Substrate) -> Arc<ChangeTap> {
    let tap = Arc::new(ChangeTap::default());
    substrate.hub = Arc::new(TappedHub { inner: Arc::clone(&substrate.hub), tap: Arc::clone(&tap) });
    tap
}
