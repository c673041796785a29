//! In-memory adapters and crash injection: the executable spec's world.
//!
//! Reused by hosts' tests that need a journal, progress store, recovery
//! adapter or effect sink without infrastructure (a manual clock is
//! [`ds_processor::Clock::manual`]).

mod crash;
mod factory;
mod journal;
mod progress;
mod recovery;
mod sink;
mod timeline;
mod world;

pub use crash::{freeze, run_until_crash, Boundary, CrashSwitch};
pub use factory::MemoryAdapterFactory;
pub use journal::MemoryJournal;
pub use progress::MemoryProgressStore;
pub use recovery::MemoryRecovery;
pub use sink::{EffectSink, FailRule, HoldRule, MemorySink};
pub use timeline::{Mark, Timeline};
pub use world::{settle_background, World};
