//! The processor's contract: who it is, which fold it runs, what it reads.

/// Prefix of the event types the stream and the runner write about themselves
/// (`stream/processor-revived`, diagnostics, audit records).
///
/// The [`ANY_EVENT`] wildcard never matches them: a processor reacts to a core
/// event only by naming it. That keeps a catch-all processor from looping on
/// its own diagnostics and keeps audit records from reaching domain folds.
pub const CORE_EVENT_PREFIX: &str = "stream/";

/// Wildcard entry in [`Contract::consumes`]: every domain (non-`stream/`) event.
pub const ANY_EVENT: &str = "*";

/// Identity and reading list of a processor.
///
/// * `slug` names the processor in progress records, alarms and core events.
/// * `reducer_version` names the fold. A change triggers an automatic
///   re-reduce (reduce only, no effects) through the acknowledged cursor.
/// * `consumes` lists event types (or [`ANY_EVENT`]). Events outside the list
///   still advance both cursors; they are neither reduced nor processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    pub slug: String,
    pub reducer_version: String,
    pub consumes: Vec<String>,
}

impl Contract {
    pub fn new<I, T>(slug: impl Into<String>, reducer_version: impl Into<String>, consumes: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        Self {
            slug: slug.into(),
            reducer_version: reducer_version.into(),
            consumes: consumes.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether an event of `event_type` is delivered to this processor.
    pub fn consumes_type(&self, event_type: &str) -> bool {
        if self.consumes.iter().any(|c| c == event_type) {
            return true;
        }
        !event_type.starts_with(CORE_EVENT_PREFIX) && self.consumes_any()
    }

    /// Whether the processor consumes every domain event; an entry without a
    /// readable type then counts as a malformed consumed event.
    pub fn consumes_any(&self) -> bool {
        self.consumes.iter().any(|c| c == ANY_EVENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_matches_domain_events_but_not_core_events() {
        let c = Contract::new("p", "1", ["*"]);
        assert!(c.consumes_type("order/placed"));
        assert!(!c.consumes_type("stream/processor-revived"));
        let named = Contract::new("p", "1", ["*", "stream/processor-revived"]);
        assert!(named.consumes_type("stream/processor-revived"));
    }

    #[test]
    fn explicit_list_matches_only_listed_types() {
        let c = Contract::new("p", "1", ["a", "b"]);
        assert!(c.consumes_type("a"));
        assert!(!c.consumes_type("c"));
        assert!(!c.consumes_any());
    }
}
