//! The transport: TCP connections in, requests to the protocol surface
//! out. It knows HTTP, not Durable Streams; the protocol surface
//! (`ds-http`) sits above it and implements [`Surface`], the one seam
//! between them.
//!
//! - [`serve`], [`serve_with`]: the accept loop, a task per connection, a
//!   graceful shutdown; a [`Handshake`] turns a TCP connection into the
//!   byte stream served (TLS in the server binary).
//! - [`ConnLimits`]: the deadlines and sizes one connection is held to,
//!   enforced on its socket (`guard.rs`), so a slow or silent client cannot
//!   hold the server.
//! - The HTTP/1.1 fast path (`fast.rs`, `parse.rs`, `write.rs`): plain
//!   `POST` and `PUT` requests parsed and answered without hyper's
//!   machinery, framed as hyper frames them; hyper serves everything else,
//!   HTTP/2 included.
//! - [`serve_connection`]: one connection over any byte stream, for tests.

mod connection;
mod date;
mod fast;
mod guard;
mod limits;
mod listen;
mod parse;
mod repoll;
mod rewind;
mod surface;
mod write;

pub use connection::{serve_connection, serve_connection_with, FastPath, Protocol};
pub use limits::ConnLimits;
pub use listen::{serve, serve_with, Handshake, PlainTcp};
pub use surface::{HeadLines, RawAnswer, RawHeaders, RawRequest, Surface};
