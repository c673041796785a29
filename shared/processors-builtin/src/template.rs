//! JSON templates: a JSON value in which a string `"$"` stands for the whole
//! input document and `"$/a/b"` for the value at the JSON pointer `/a/b` in
//! it (RFC 6901; `null` when absent); `"$$…"` is the literal string `"$…"`.
//! Everything else is copied as is. Checked once, when the configuration
//! is loaded, so rendering cannot fail.
//!
//! The input document of an event is [`event_document`]:
//! `{"type", "payload", "metadata", "stream", "position"}`.

use serde_json::{Map, Value};

/// A checked template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Node);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Literal(Value),
    /// A JSON pointer into the input (`""`: the whole input).
    Pointer(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Template {
    /// The template that copies the whole input.
    pub fn identity() -> Self {
        Self(Node::Pointer(String::new()))
    }

    /// Checks `value` as a template; the error names where in it the
    /// mistake is (as a JSON pointer).
    pub fn parse(value: &Value) -> Result<Self, String> {
        parse_node(value, "").map(Self)
    }

    /// The template applied to `input`.
    pub fn render(&self, input: &Value) -> Value {
        render_node(&self.0, input)
    }
}

fn parse_node(value: &Value, at: &str) -> Result<Node, String> {
    Ok(match value {
        Value::String(s) => match s.strip_prefix('$') {
            None => Node::Literal(value.clone()),
            Some(rest) if rest.starts_with('$') => Node::Literal(Value::String(rest.to_owned())),
            Some(pointer) if pointer.is_empty() || pointer.starts_with('/') => Node::Pointer(pointer.to_owned()),
            Some(_) => {
                return Err(format!(
                    "at {:?}: {s:?} is neither \"$\" (the whole event), a \"$/json/pointer\" nor an escaped \"$$…\"",
                    if at.is_empty() { "/" } else { at }
                ))
            }
        },
        Value::Array(items) => Node::Array(
            items.iter().enumerate().map(|(i, v)| parse_node(v, &format!("{at}/{i}"))).collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Node::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), parse_node(v, &format!("{at}/{}", escape(k)))?)))
                .collect::<Result<_, String>>()?,
        ),
        other => Node::Literal(other.clone()),
    })
}

/// A key as a JSON pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn render_node(node: &Node, input: &Value) -> Value {
    match node {
        Node::Literal(v) => v.clone(),
        Node::Pointer(p) => input.pointer(p).cloned().unwrap_or(Value::Null),
        Node::Array(items) => Value::Array(items.iter().map(|n| render_node(n, input)).collect()),
        Node::Object(fields) => {
            Value::Object(fields.iter().map(|(k, n)| (k.clone(), render_node(n, input))).collect::<Map<_, _>>())
        }
    }
}

/// The input document of one event: its type, payload and metadata as
/// appended, the stream it is on (`null` if the host did not say) and its
/// position (the stream offset just past it).
pub fn event_document(event: &Value, metadata: &Map<String, Value>, stream: Option<&str>, position: u64) -> Value {
    let mut doc = Map::new();
    doc.insert("type".into(), event.get("type").cloned().unwrap_or(Value::Null));
    doc.insert("payload".into(), event.get("payload").cloned().unwrap_or(Value::Null));
    doc.insert("metadata".into(), Value::Object(metadata.clone()));
    doc.insert("stream".into(), stream.map_or(Value::Null, |s| Value::String(s.to_owned())));
    doc.insert("position".into(), Value::from(position));
    Value::Object(doc)
}

/// Checks a JSON pointer given on its own (`group_by`): empty or `/…`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(format!("{pointer:?} is not a JSON pointer (it must start with '/', e.g. \"/payload/status\")"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pointers_literals_and_escapes() {
        let t = Template::parse(&json!({
            "type": "email/requested",
            "payload": { "order": "$/payload/id", "to": ["$/payload/customer/email"], "missing": "$/payload/nope" },
            "price": "$$5",
            "n": 3,
            "source": "$/stream",
        }))
        .expect("valid");
        let input = event_document(
            &json!({ "type": "order/placed", "payload": { "id": "o-1", "customer": { "email": "a@b" } } }),
            &Map::new(),
            Some("orders/1"),
            42,
        );
        assert_eq!(
            t.render(&input),
            json!({
                "type": "email/requested",
                "payload": { "order": "o-1", "to": ["a@b"], "missing": null },
                "price": "$5",
                "n": 3,
                "source": "orders/1",
            })
        );
        assert_eq!(Template::identity().render(&input), input);
        assert_eq!(input["position"], json!(42));
    }

    #[test]
    fn a_bad_reference_is_refused_with_its_place() {
        let err = Template::parse(&json!({ "payload": { "a/b": ["x", "$payload"] } })).expect_err("bad");
        assert!(err.starts_with("at \"/payload/a~1b/1\": \"$payload\" is neither"), "{err}");
        assert!(check_pointer("payload/x").is_err());
        assert!(check_pointer("/payload/x").is_ok());
    }
}
