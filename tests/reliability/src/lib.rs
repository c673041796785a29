//! Reliability campaigns for the Durable Streams server (issue 13).
//!
//! - [`gen`]: proptest strategies for adversarial HTTP/1.1 requests.
//! - [`client`]: a raw client that writes them verbatim and classifies the
//!   outcome (response, close, hung), over TCP or in-process.
//! - [`campaign`]: workers sending generated cases with ledger appends
//!   interleaved, and the report (requests tried, 5xx, hung, ledger check).
//! - [`inprocess`]: the router over the memory substrate served in-process.
//! - [`procfs`]: resident memory and open descriptors of a process.
//! - [`soak`]: mixed load with a memory/descriptor curve; [`idle`]: memory
//!   per idle live reader.

pub mod campaign;
pub mod client;
pub mod gen;
pub mod idle;
pub mod inprocess;
pub mod procfs;
pub mod soak;
