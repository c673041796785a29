//! The processor function end to end on the emulator, driven by the pumps
//! that play Lambda's event sources and EventBridge Scheduler.

#[path = "../common/mod.rs"]
mod common;

mod builtin;
mod crash;
mod e2e;
mod lag;
mod redrive;
mod revival;
mod subscriptions;
mod upkeep;
