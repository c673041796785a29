//! The executable spec of the runner: one module per concern, each test
//! named after the property it pins (acceptance points of issue #3 in
//! brackets in each module's doc).
#![allow(clippy::unwrap_used)]

mod ack;
mod authoring;
mod batch_division;
mod blocking;
mod caught_up;
mod controls;
mod crash;
mod examples;
mod fencing;
mod hosting;
mod idempotency;
mod inline;
mod race;
mod refold;
mod revival;
mod support;
mod wait;
