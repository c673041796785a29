//! Deterministic idempotency keys.
//!
//! A key is a SHA-256 over a domain tag and length-prefixed fields, so no
//! choice of author key can collide with another field layout. No randomness:
//! a crash retry recomputes the same key and the effect dedupes downstream.

use sha2::{Digest, Sha256};

use crate::incarnation::StreamIncarnation;

fn digest(domain: &str, fields: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(domain.as_bytes());
    hasher.update([0u8]);
    for field in fields {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field);
    }
    hex::encode(hasher.finalize())
}

/// Key for an effect caused by the event at `source_position`.
///
/// Same on crash retry; different after `reprocess_from` (new cursor
/// revision) or stream re-creation (new incarnation), so those genuinely
/// re-emit.
pub fn event_key(
    author_key: &str,
    source_position: u64,
    cursor_revision: u64,
    incarnation: &StreamIncarnation,
) -> String {
    digest(
        "ds-processor/event-key/v1",
        &[
            author_key.as_bytes(),
            &source_position.to_be_bytes(),
            &cursor_revision.to_be_bytes(),
            incarnation.as_str().as_bytes(),
        ],
    )
}

/// Offset-free key for a state-derived obligation (typically acted on under
/// `caught_up`): the same obligation dedupes whichever event or eventless
/// call happens to discover it, across revisions, within one incarnation.
pub fn stable_key(author_key: &str, incarnation: &StreamIncarnation) -> String {
    digest("ds-processor/stable-key/v1", &[author_key.as_bytes(), incarnation.as_str().as_bytes()])
}

/// Key for the runner's own appends (diagnostics, audit, revival), in a
/// domain of its own so it never equals an author key.
pub(crate) fn runner_key(purpose: &str, fields: &[&str]) -> String {
    let mut all: Vec<&[u8]> = vec![purpose.as_bytes()];
    all.extend(fields.iter().map(|f| f.as_bytes()));
    digest("ds-processor/runner-key/v1", &all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_boundaries_do_not_collide() {
        assert_ne!(runner_key("a", &["bc"]), runner_key("ab", &["c"]));
        let inc = StreamIncarnation::new("i");
        assert_ne!(event_key("k", 1, 0, &inc), stable_key("k", &inc));
    }
}
