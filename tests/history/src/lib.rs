//! Histories checked the way Jepsen checks databases.
//!
//! Concurrent clients record every operation they make against real
//! servers ([`client`], [`workload`]) into a [`history`]; after the run the
//! final state of every stream is read and the [`check`]er verifies the
//! consistency model the protocol and our docs promise, printing the first
//! violation with the operations involved. [`campaign`]s run this under
//! faults: `kill -9` of the local store, a full disk, injected AWS faults,
//! network faults between the servers and the AWS emulator (the
//! [`proxy`]), and the AWS processor plane with invocations killed
//! mid-batch. [`report`] writes the figures.

pub mod campaign;
pub mod check;
pub mod client;
pub mod history;
pub mod proxy;
pub mod report;
pub mod workload;
