//! Where failures land on AWS, for an operator: list what sits in each
//! queue with its reason, and redrive it.
//!
//! | queue ([`QueueRole`]) | what lands there | redrive |
//! | --- | --- | --- |
//! | task dead letters | a background task that failed `maxReceiveCount` receives | sent back to the task queue; the task's completion record makes a second run a no-op |
//! | failed invocations | Lambda's invocation record of an asynchronous invocation (a revival, an expiry) whose every attempt failed | re-run: a one-shot schedule invokes the function again with the original event |
//! | schedule dead letters | an expiry or revival Scheduler could not hand to Lambda (error in the message attributes) | re-run, the same way |
//! | parked records | a table-stream record the processor function could not read, or the batch metadata of records its event source gave up on | a record is re-run (the processor function gets it again); batch metadata names records that are no longer deliverable and stays for the operator |
//!
//! [`letter`] reads a message (pure), [`queues`] does the SQS and Scheduler
//! calls. Re-runs are idempotent twice over: the re-run schedule is named
//! after its target and event, so redriving the same letter again before
//! it fired replaces it; and what it runs is keyed (a revival appends one
//! event per arming, an expiry of a deleted stream is a no-op).

pub mod letter;
pub mod queues;

/// The clock a [`DeadLetterQueues`] times its re-runs by (re-exported so
/// that callers need no dependency of their own for it).
pub use ds_clock::Clock;
pub use letter::{Letter, QueueRole};
pub use queues::{DeadLetter, DeadLetterQueues, Redriven, RerunTarget};
