//! Operator controls preempt the driver.
//!
//! The driver holds the work lock while it processes, possibly for ever (a
//! wedged blocker retries forever). An operator control first cancels the
//! driver's token, so the driver abandons the in-flight event (it is
//! redelivered later, same keys) and releases the lock; the driver then waits
//! for all controls to finish before it takes the lock again.

use std::sync::Mutex;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::sync_util::lock;

struct GateState {
    controls: usize,
    driver: CancellationToken,
}

pub(crate) struct PreemptGate {
    state: Mutex<GateState>,
    controls_pending: watch::Sender<usize>,
}

/// Held by an operator control for its whole run.
pub(crate) struct ControlTicket<'a> {
    gate: &'a PreemptGate,
}

impl PreemptGate {
    pub(crate) fn new() -> Self {
        let (controls_pending, _) = watch::channel(0);
        Self { state: Mutex::new(GateState { controls: 0, driver: CancellationToken::new() }), controls_pending }
    }

    /// Announces a control and cancels the current driver.
    pub(crate) fn enter_control(&self) -> ControlTicket<'_> {
        let pending = {
            let mut s = lock(&self.state);
            s.controls += 1;
            s.driver.cancel();
            s.controls
        };
        self.controls_pending.send_replace(pending);
        ControlTicket { gate: self }
    }

    /// A token for a driver that just took the lock; already cancelled when
    /// a control is waiting. Checked and stored under one lock so a control
    /// cannot slip between the check and the store.
    pub(crate) fn driver_token(&self) -> CancellationToken {
        let mut s = lock(&self.state);
        let token = CancellationToken::new();
        if s.controls > 0 {
            token.cancel();
        }
        s.driver = token.clone();
        token
    }

    /// Resolves when no control is pending.
    pub(crate) async fn controls_done(&self) {
        let mut rx = self.controls_pending.subscribe();
        // The sender lives as long as the gate, so this cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

impl Drop for ControlTicket<'_> {
    fn drop(&mut self) {
        let pending = {
            let mut s = lock(&self.gate.state);
            s.controls -= 1;
            s.controls
        };
        self.gate.controls_pending.send_replace(pending);
    }
}
