//! Outbound HTTPS to URLs that come from configuration or from users (a JWKS
//! URL today). A server that fetches such URLs can be turned into a proxy
//! into its own network (SSRF), so every request here:
//!
//! - must be `https://` and name a host (no user info);
//! - is refused before any connection when the host is an address literal in
//!   a forbidden range ([`address::check_ip`]: loopback, private, link-local
//!   including cloud metadata, carrier-grade NAT, unique-local, special
//!   purpose), or when the name resolves to one (the resolver hands the
//!   connector only checked addresses, so a re-resolving DNS answer cannot
//!   slip a private address in between check and connect);
//! - has the peer address it actually connected to checked again;
//! - never goes through a proxy, never follows a redirect, and reads at most
//!   a bounded body within a timeout.
//!
//! Loopback can be allowed for development and tests (a local identity
//! provider); private and link-local ranges never can.

pub mod address;
mod client;

pub use address::{check_ip, Forbidden};
pub use client::{check_url, check_url_for, EgressClient, EgressConfig, EgressError};
