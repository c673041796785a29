//! The host's tasks, counted so shutdown can wait for them to end.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub(crate) struct Tasks(Arc<Counter>);

#[derive(Default)]
struct Counter {
    running: AtomicUsize,
    ended: Notify,
}

/// Counts one task out when it ends (or is dropped by the runtime).
struct Running(Arc<Counter>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

impl Tasks {
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(&self.0));
        tokio::spawn(async move {
            let _running = running;
            task.await;
        });
    }

    /// Resolves once no task runs.
    pub(crate) async fn wait(&self) {
        loop {
            let ended = self.0.ended.notified();
            if self.0.running.load(Ordering::Acquire) == 0 {
                return;
            }
            ended.await;
        }
    }
}
