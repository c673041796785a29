//! The `__registry__` stream: State Protocol change messages (type
//! `stream`, key = the stream's path, value `{path, contentType,
//! createdAt}`; insert on create, delete on delete) that list a server's
//! streams, as the reference server keeps them. Folding it is the State
//! Protocol's materialization (STATE-PROTOCOL §6) restricted to one type.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The registry stream's path.
pub const REGISTRY_PATH: &str = "__registry__";

/// One listed stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub content_type: Option<String>,
    /// As the registry gives it (the reference server: milliseconds since the epoch).
    pub created_at: Option<serde_json::Value>,
    /// The stream is closed (our server's registry says so; the reference
    /// server's never does).
    pub closed: bool,
}

/// The materialized registry: path → entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Registry {
    pub streams: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(rename = "type")]
    kind: Option<String>,
    key: Option<String>,
    value: Option<serde_json::Value>,
    #[serde(default)]
    headers: Headers,
}

#[derive(Deserialize, Default)]
struct Headers {
    operation: Option<String>,
    control: Option<String>,
}

impl Registry {
    /// Applies one message. Messages of other types and snapshot markers
    /// change nothing; a `reset` clears; a malformed message is an error
    /// naming it, never folded silently.
    pub fn apply(&mut self, message: &RawValue) -> Result<(), String> {
        let m: Message =
            serde_json::from_str(message.get()).map_err(|e| format!("registry message {}: {e}", message.get()))?;
        if let Some(control) = m.headers.control.as_deref() {
            match control {
                "reset" => self.streams.clear(),
                "snapshot-start" | "snapshot-end" => {}
                other => return Err(format!("registry message {}: unknown control {other:?}", message.get())),
            }
            return Ok(());
        }
        if m.kind.as_deref() != Some("stream") {
            return Ok(());
        }
        let (Some(key), Some(op)) = (m.key, m.headers.operation) else {
            return Err(format!("registry message {}: a change needs key and headers.operation", message.get()));
        };
        match op.as_str() {
            "insert" | "update" | "upsert" => {
                let value = m.value.unwrap_or_default();
                let content_type = value["contentType"].as_str().map(str::to_owned);
                let created_at = value.get("createdAt").cloned();
                let closed = value["closed"].as_bool().unwrap_or(false);
                let path = value["path"].as_str().map_or_else(|| key.clone(), str::to_owned);
                self.streams.insert(key, Entry { path, content_type, created_at, closed });
            }
            "delete" => {
                self.streams.remove(&key);
            }
            other => return Err(format!("registry message {}: unknown operation {other:?}", message.get())),
        }
        Ok(())
    }

    /// The streams under `prefix` (all with an empty prefix), by path.
    pub fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.streams.range(prefix.to_owned()..).take_while(move |(k, _)| k.starts_with(prefix)).map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(messages: &str) -> Result<Registry, String> {
        let mut r = Registry::default();
        for m in crate::json::messages(messages.as_bytes())? {
            r.apply(&m)?;
        }
        Ok(r)
    }

    #[test]
    fn creates_and_deletes_fold_to_the_live_streams() {
        let r = fold(
            r#"[
            {"type":"stream","key":"chat/a","value":{"path":"chat/a","contentType":"application/json","createdAt":1},"headers":{"operation":"insert"}},
            {"type":"stream","key":"logs","value":{"path":"logs","contentType":"text/plain","createdAt":2},"headers":{"operation":"insert"}},
            {"type":"other","key":"x","value":{},"headers":{"operation":"insert"}},
            {"type":"stream","key":"chat/b","value":{"path":"chat/b","contentType":"text/plain","createdAt":3},"headers":{"operation":"insert"}},
            {"type":"stream","key":"chat/a","headers":{"operation":"delete"}}
        ]"#,
        )
        .expect("folds");
        let paths: Vec<&str> = r.under("").map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["chat/b", "logs"]);
        let chat: Vec<&str> = r.under("chat/").map(|e| e.path.as_str()).collect();
        assert_eq!(chat, ["chat/b"]);
        assert_eq!(r.streams["logs"].content_type.as_deref(), Some("text/plain"));
        assert!(!r.streams["logs"].closed);
    }

    #[test]
    fn an_update_that_says_closed_marks_the_stream_closed() {
        let r = fold(
            r#"[{"type":"stream","key":"a","value":{"path":"a","contentType":"text/plain","createdAt":1},"headers":{"operation":"insert"}},
                {"type":"stream","key":"a","value":{"path":"a","contentType":"text/plain","createdAt":1,"closed":true},"headers":{"operation":"update"}}]"#,
        )
        .expect("folds");
        assert!(r.streams["a"].closed);
        assert_eq!(r.streams["a"].content_type.as_deref(), Some("text/plain"));
    }

    #[test]
    fn reset_clears_and_malformed_changes_are_reported() {
        let r = fold(
            r#"[{"type":"stream","key":"a","value":{"path":"a"},"headers":{"operation":"insert"}},
                {"headers":{"control":"reset"}},
                {"type":"stream","key":"b","value":{"path":"b"},"headers":{"operation":"upsert"}}]"#,
        )
        .expect("folds");
        assert_eq!(r.streams.keys().collect::<Vec<_>>(), ["b"]);
        let bad = fold(r#"[{"type":"stream","key":"a","headers":{"operation":"rename"}}]"#).expect_err("refused");
        assert!(bad.contains("unknown operation \"rename\""), "{bad}");
        assert!(fold(r#"[{"type":"stream","value":{}}]"#).is_err());
    }
}
