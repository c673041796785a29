//! What operators see: the HTTP surface's exchanges, reported through the
//! port this crate defines ([`Metrics`], [`Exchange`]; `ds-http` calls it), and
//! the stores' own figures, rendered as Prometheus text on the local server
//! ([`prometheus`]) or written as CloudWatch Embedded Metric Format lines by
//! the Lambda function ([`emf`]).
//!
//! Metric names (Prometheus):
//! - `ds_http_requests_total{route,status}`: exchanges finished;
//! - `ds_http_request_duration_seconds{route}`: time to the response head;
//! - `ds_http_request_bytes_total{route}`, `ds_http_response_bytes_total{route}`;
//! - `ds_live_readers{mode}`: open long-poll and SSE requests;
//! - `ds_stream_contexts`: streams with in-process state (in use now);
//! - `ds_store_commit_batch_size`, `ds_store_fsync_seconds`,
//!   `ds_store_checkpoint_seconds`: the local store's group commit (commits
//!   per durable batch, how long each batch's log append with its fsync
//!   took) and its checkpoints (writing the overlay into the tables);
//! - `ds_store_read_cache_hits_total`: the local store's catch-up reads
//!   served (at least in part) from its cache of recent catch-up reads.

pub mod emf;
mod port;
pub mod prometheus;
mod registry;

pub use port::{Exchange, Metrics};
