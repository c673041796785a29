//! Time and chance, injected (portable-architecture: Clock and Random are
//! swappable). Every crate that needs the wall clock or a random jitter
//! takes a [`Clock`] or a [`Random`] from whoever built it (the substrate,
//! the service, a host's wiring) instead of reading the operating system
//! itself, so a test can run on a manual clock and a seeded generator.
//!
//! Both are cheap handles (`Clone` shares one source). Secrets (signing
//! keys, tokens) never come from [`Random`]: a seeded one is predictable by
//! design, so key material is drawn from the operating system's generator
//! where it is made.

mod clock;
mod random;

pub use clock::Clock;
pub use random::Random;
