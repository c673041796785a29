//! The `state` kind: materializes State Protocol streams.

pub mod fold;

pub use fold::{Malformed, MalformedReport, Materialized};
