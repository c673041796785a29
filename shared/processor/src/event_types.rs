//! Which event type names a processor's `Event` type decodes.
//!
//! The names live in the author's serde attributes (`#[serde(rename =
//! "order/placed")]` on a `#[serde(tag = "type")]` enum). To read them
//! without a derive of our own, the type is deserialized from a stand-in for
//! `{"type": <name>}` whose error type records serde's "unknown variant"
//! report, which carries the variant list. Types that accept any name (a
//! `serde_json::Value`, an enum with a `#[serde(other)]` variant, a struct)
//! never report one, and are treated as open.

use std::fmt;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};

/// A tag no author type names (NUL cannot appear in a sensible type name).
const SENTINEL: &str = "\u{0}ds-processor/introspection";

/// The only key of the stand-in object, as in the decoded event shape.
const TAG: &str = "type";

/// The event type names `E` decodes, if `E` is a closed enum tagged by them;
/// `None` for a type that accepts any name.
pub(crate) fn event_type_names<E: DeserializeOwned>() -> Option<&'static [&'static str]> {
    match E::deserialize(TaggedProbe { tag: SENTINEL }) {
        Err(Found::Variants(names)) => Some(names),
        _ => None,
    }
}

/// Whether `E` accepts `event_type` as its tag (false only when `E` says
/// "unknown variant" for it; aliases and catch-all variants count as known).
pub(crate) fn decodes_type<E: DeserializeOwned>(event_type: &str) -> bool {
    !matches!(E::deserialize(TaggedProbe { tag: event_type }), Err(Found::Variants(_)))
}

#[derive(Debug)]
enum Found {
    Variants(&'static [&'static str]),
    Other,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Variants(names) => write!(f, "unknown variant, expected one of {names:?}"),
            Self::Other => f.write_str("not introspectable"),
        }
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: fmt::Display>(_message: T) -> Self {
        Self::Other
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        Self::Variants(expected)
    }
}

/// Deserializes like the JSON object `{"type": tag}`.
struct TaggedProbe<'a> {
    tag: &'a str,
}

impl<'de, 'a> Deserializer<'de> for TaggedProbe<'a> {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_map(OneEntry { tag: self.tag, taken: false })
    }

    /// An externally tagged enum reads `{"Variant": …}`, not the `type`
    /// member the runner decodes: its names are not event type names.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Found> {
        Err(Found::Other)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

struct OneEntry<'a> {
    tag: &'a str,
    taken: bool,
}

impl<'de, 'a> MapAccess<'de> for OneEntry<'a> {
    type Error = Found;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Found> {
        if self.taken {
            return Ok(None);
        }
        let key: StrDeserializer<'_, Found> = TAG.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Found> {
        self.taken = true;
        let value: StrDeserializer<'_, Found> = self.tag.into_deserializer();
        seed.deserialize(value)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::Value;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", content = "payload")]
    #[allow(dead_code)]
    enum Adjacent {
        #[serde(rename = "a/one")]
        One { n: i64 },
        #[serde(rename = "a/two", alias = "a/deux")]
        Two,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type")]
    #[allow(dead_code)]
    enum Internal {
        #[serde(rename = "i/one")]
        One { n: i64 },
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", content = "payload")]
    #[allow(dead_code)]
    enum Open {
        #[serde(rename = "o/one")]
        One,
        #[serde(other)]
        Anything,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum External {
        One,
    }

    #[test]
    fn tagged_enums_list_their_type_names() {
        // serde lists aliases among the names: events under them decode too.
        let names = event_type_names::<Adjacent>().expect("Adjacent is closed");
        assert!(["a/one", "a/two", "a/deux"].iter().all(|n| names.contains(n)), "{names:?}");
        assert_eq!(names.len(), 3);
        assert_eq!(event_type_names::<Internal>(), Some(&["i/one"][..]));
        assert!(decodes_type::<Adjacent>("a/one"));
        assert!(decodes_type::<Adjacent>("a/deux"), "aliases are known");
        assert!(!decodes_type::<Adjacent>("a/three"));
    }

    #[test]
    fn open_or_untagged_types_list_nothing() {
        assert_eq!(event_type_names::<Value>(), None);
        assert_eq!(event_type_names::<Open>(), None);
        assert_eq!(event_type_names::<External>(), None);
        assert!(decodes_type::<Value>("anything"));
        assert!(decodes_type::<Open>("anything"));
    }
}
