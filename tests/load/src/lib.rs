//! ds-load: drives any Durable Streams server over HTTP and measures it, and
//! verifies while it measures (every request must succeed and every stream
//! must hold exactly what was acknowledged), so a fast server that loses data
//! shows up as a failure rather than a win.
//!
//! Layout: `client` speaks the protocol, `record` makes and checks the
//! payloads, `workloads` holds P1–P4, `server` spawns servers and measures P6,
//! `bench` runs the interleaved rounds and `report` renders the tables.

pub mod aws;
pub mod bench;
pub mod client;
pub mod metrics;
pub mod record;
pub mod report;
pub mod server;
pub mod sse;
pub mod stats;
pub mod workloads;
