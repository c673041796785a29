//! Pure Durable Streams protocol rules, free of I/O: everything here is a
//! function of its inputs (and, for cursors, an injected clock reading and
//! random source), so it is unit- and property-tested in isolation.
//!
//! - [`offset`]: the opaque offset token and the `offset` query parameter.
//! - [`headers`]: request header parsing and validation (TTL, expiry,
//!   `Stream-Closed`, producer headers, fork headers, content types).
//! - [`json`]: JSON mode: validation, one-level array flattening, storage framing.
//! - [`producer`]: the idempotent producer state machine (§5.2.1).
//! - [`cursor`]: CDN-collapsing cursors (§10.1).
//! - [`etag`], [`sse`], [`path`], [`fork`]: the rest.

pub mod cursor;
pub mod error;
pub mod etag;
pub mod fork;
pub mod glob;
pub mod headers;
pub mod json;
pub mod offset;
pub mod path;
pub mod producer;
pub mod sse;

pub use error::ProtocolError;
pub use offset::{Offset, ReadOffset};
