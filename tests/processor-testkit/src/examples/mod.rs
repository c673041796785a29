//! Example processors: the shapes the model is built
//! for, used by the docs, `examples/` and the test suite.

mod counter;
mod outbox;
mod reconciler;

pub use counter::{Counter, CounterEvent, CounterState};
pub use outbox::{Outbox, OutboxEvent, OutboxState};
pub use reconciler::{Reconciler, ScaleEvent, ScaleState};
