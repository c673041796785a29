//! The processor's contract: who it is, which fold it runs, what it reads.

use serde::de::DeserializeOwned;

use crate::event_types::{decodes_type, event_type_names};

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
///
/// The event type names usually already live in the processor's `Event`
/// enum (`#[serde(rename = "order/placed")]`). [`Contract::for_events`]
/// takes them from there, so they are written once. A list given to
/// [`Contract::new`] is checked against the `Event` type when a runner is
/// built ([`Contract::check_events`]): naming a type the enum cannot decode
/// is an error, because every such event would only earn a diagnostic.
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

    /// A contract consuming exactly the event types `E` decodes: the names
    /// of a `#[serde(tag = "type")]` (optionally `content = "payload"`) enum.
    /// Fails for a type that does not list its names (see
    /// [`ContractError::EventTypesUnknown`]); list them with [`Contract::new`].
    pub fn for_events<E: DeserializeOwned>(
        slug: impl Into<String>,
        reducer_version: impl Into<String>,
    ) -> Result<Self, ContractError> {
        let slug = slug.into();
        match event_type_names::<E>() {
            Some(names) => Ok(Self::new(slug, reducer_version, names.iter().copied())),
            None => Err(ContractError::EventTypesUnknown { slug }),
        }
    }

    /// Checks `consumes` against the names `E` decodes. A type that accepts
    /// any name (`serde_json::Value`, an enum with `#[serde(other)]`) passes.
    /// A variant the contract does not consume is allowed (a processor may
    /// consume a subset) but logged, since its events are skipped.
    pub fn check_events<E: DeserializeOwned>(&self) -> Result<(), ContractError> {
        let Some(names) = event_type_names::<E>() else {
            return Ok(());
        };
        let known = || names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        for consumed in &self.consumes {
            if consumed == ANY_EVENT {
                return Err(ContractError::WildcardWithClosedEvents { slug: self.slug.clone(), known: known() });
            }
            if !decodes_type::<E>(consumed) {
                return Err(ContractError::UnknownConsumedType {
                    slug: self.slug.clone(),
                    event_type: consumed.clone(),
                    known: known(),
                });
            }
        }
        for name in names.iter().filter(|n| !self.consumes_type(n)) {
            tracing::warn!(slug = %self.slug, event_type = name, "the event type decodes a type the contract does not consume; such events are skipped");
        }
        Ok(())
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

/// A contract that disagrees with its processor's `Event` type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    #[error(
        "processor `{slug}` consumes `{event_type}`, which its event type cannot decode (it decodes {known:?}): \
         every such event would only earn a diagnostic"
    )]
    UnknownConsumedType { slug: String, event_type: String, known: Vec<String> },
    #[error(
        "processor `{slug}` consumes every domain event (`*`), but its event type decodes only {known:?}: \
         every other event would only earn a diagnostic (use an open event type, or name the types)"
    )]
    WildcardWithClosedEvents { slug: String, known: Vec<String> },
    #[error(
        "processor `{slug}`: its event type does not list the event types it decodes (it is not an enum \
         tagged by `type`); name them with `Contract::new`"
    )]
    EventTypesUnknown { slug: String },
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", content = "payload")]
    #[allow(dead_code)]
    enum Orders {
        #[serde(rename = "order/placed")]
        Placed { id: String },
        #[serde(rename = "order/cancelled")]
        Cancelled,
    }

    #[test]
    fn for_events_takes_the_names_from_the_event_enum() {
        let c = Contract::for_events::<Orders>("orders", "1").expect("Orders is tagged by type");
        assert_eq!(c.consumes, ["order/placed", "order/cancelled"]);
        assert_eq!(c.check_events::<Orders>(), Ok(()));
        assert_eq!(
            Contract::for_events::<serde_json::Value>("any", "1"),
            Err(ContractError::EventTypesUnknown { slug: "any".into() })
        );
    }

    #[test]
    fn a_consumed_type_the_enum_cannot_decode_is_drift() {
        let typo = Contract::new("orders", "1", ["order/placed", "order/canceled"]);
        assert!(matches!(
            typo.check_events::<Orders>(),
            Err(ContractError::UnknownConsumedType { event_type, .. }) if event_type == "order/canceled"
        ));
        let wildcard = Contract::new("orders", "1", ["*"]);
        assert!(matches!(wildcard.check_events::<Orders>(), Err(ContractError::WildcardWithClosedEvents { .. })));
        // A subset is fine, and an open event type takes anything.
        assert_eq!(Contract::new("orders", "1", ["order/placed"]).check_events::<Orders>(), Ok(()));
        assert_eq!(wildcard.check_events::<serde_json::Value>(), Ok(()));
    }

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
