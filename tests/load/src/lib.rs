//! ds-load: drives any Durable Streams server over HTTP and measures it, and
//! verifies while it measures (every request must succeed and every stream
//! must hold exactly what was acknowledged), so a fast server that loses data
//! shows up as a failure rather than a win.
//!
//! Layout: `client` speaks the protocol, `record` makes and checks the
//! payloads (`state_record` P1's State Protocol upserts), `workloads` holds
//! P1–P4 and P7, `raw` is the lean HTTP/1.1 driver of the throughput
//! workloads and of P2's timed reads, `server` spawns servers and measures
//! P6, `calibrate` measures the tool's ceiling against `sink`, `cpu` is the
//! busy-machine guard, `processor` the processor effect latency, `webhook`
//! the subscription webhook latency, `bench` runs the interleaved rounds and
//! `report` renders the tables.

pub mod aws;
pub mod aws_ceiling;
pub mod aws_cost;
pub mod aws_meter;
pub mod aws_scale;
pub mod bench;
pub mod calibrate;
pub mod client;
pub mod cpu;
pub mod lambda;
pub mod metrics;
pub mod processor;
pub mod raw;
pub mod record;
pub mod report;
pub mod server;
pub mod sink;
pub mod sse;
pub mod state_record;
pub mod stats;
pub mod webhook;
pub mod workloads;
