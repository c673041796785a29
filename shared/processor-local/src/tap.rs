//! The doorbell: the substrate's hub, wrapped so that every publish (which
//! the core makes after each commit: appends, creates, deletes) also rings
//! the host for that stream. Live readers are woken exactly as before.

use std::sync::{Arc, Weak};

use ds_core::{HubSubscription, StreamHandle, StreamHub, TailSignal};

use crate::host::Inner;

pub(crate) struct RingingHub {
    pub(crate) inner: Arc<dyn StreamHub>,
    /// Weak: the host holds the service, which holds this hub.
    pub(crate) host: Weak<Inner>,
}

impl StreamHub for RingingHub {
    fn publish(&self, stream: &StreamHandle, signal: TailSignal) {
        if let Some(host) = self.host.upgrade() {
            host.ring(stream.path(), &signal);
        }
        self.inner.publish(stream, signal);
    }

    fn subscribe(&self, stream: &StreamHandle) -> Box<dyn HubSubscription> {
        self.inner.subscribe(stream)
    }
}
