//! Identity of one life of a stream.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Opaque id of a stream's current incarnation.
///
/// Deleting and re-creating a stream yields a new incarnation. Progress
/// records carry it so a runner bound to a dead incarnation is fenced, and
/// idempotency keys include it so a re-created stream re-emits its effects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StreamIncarnation(String);

impl StreamIncarnation {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StreamIncarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for StreamIncarnation {
    fn from(id: &str) -> Self {
        Self::new(id)
    }
}
