//! The JSON Schema gate: an inline processor whose `validate` checks each
//! consumed event's `payload` against the JSON Schema configured for its
//! event type. Inline, `validate` runs inside the append commit, so a
//! payload that does not match refuses the append and leaves no trace.
//!
//! ```toml
//! [[processor]]
//! kind = "json-schema"
//! slug = "order-schemas"
//! streams = "orders/*"
//! unknown_types = "reject"        # optional; default "accept"
//! # A schema is JSON text in a TOML string...
//! schemas."order.placed" = '''{"type": "object", "required": ["id"]}'''
//!
//! # ...or a TOML table, read as the JSON object it spells.
//! [processor.schemas."order.shipped"]
//! type = "object"
//! required = ["id", "carrier"]
//! ```
//!
//! Options:
//! - `schemas` (required, at least one): event type → schema. A schema
//!   without `$schema` is read as draft 2020-12; `$schema` picks an older
//!   draft. `format` is an annotation, as draft 2020-12 says, not a check.
//!   Every schema is compiled when the configuration is built, so a schema
//!   that is not JSON or not a valid schema is a configuration error, never
//!   a failure at append time.
//! - `unknown_types`: what happens to a consumed event whose type has no
//!   schema: `"accept"` (default) lets it through, `"reject"` refuses it.
//! - `consumes`: the event types the gate sees. Default: the types that have
//!   a schema with `unknown_types = "accept"` (nothing else could be
//!   refused), every domain event (`*`) with `"reject"`. Each schema's type
//!   must be consumed, or its schema would never be applied.
//!
//! A schema is self-contained: a `$ref` may point inside it (`#/$defs/…`)
//! or at a draft's meta-schema, which the validator ships; any other `$ref`
//! (`https://…`, `file:…`) is a configuration error. Nothing is fetched,
//! so building a configuration opens no connection and reads no file.
//!
//! The gate has no state (`()`): the verdict depends on the event alone, so
//! there is no reduction worth persisting and a host can skip the record
//! write an append would otherwise cost. Its reducer version is still derived
//! from the schemas and options, so it names the rules a stream was checked
//! against; a change refolds nothing of value (the fold is the identity) and
//! does not re-check events already committed.

use std::collections::BTreeMap;
use std::sync::Arc;

use ds_processor::{Contract, Envelope, Processor, Rejection, ANY_EVENT};
use jsonschema::Validator;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{ConfigError, Options, ProcessorDef};

/// The kind's name in a configuration (`kind = "json-schema"`).
pub const KIND: &str = "json-schema";

/// Longest rejection reason, in bytes: it travels back to the appender and
/// into logs, and a payload value quoted in it can be arbitrarily large.
pub const MAX_REASON_LEN: usize = 512;

/// Errors a rejection lists; the first few locate the problem, the rest
/// would only lengthen the message.
const MAX_LISTED_ERRORS: usize = 3;

/// Longest listed error (`at payload/…: message`) and longest event type
/// in a reason: three errors, the type and "; and more" fit in
/// [`MAX_REASON_LEN`], so a long value quoted in the first error cannot
/// push the others out.
const MAX_ERROR_LEN: usize = 140;
const MAX_TYPE_LEN: usize = 64;

/// The fields this kind takes.
const FIELDS: [&str; 3] = ["schemas", "unknown_types", "consumes"];

/// What happens to a consumed event whose type has no schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownTypes {
    /// Appended unchecked.
    #[default]
    Accept,
    /// Refused.
    Reject,
}

impl UnknownTypes {
    fn as_str(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Reject => "reject",
        }
    }
}

/// One event type's schema: as configured (for the digest and for
/// operators) and compiled.
#[derive(Debug)]
pub struct EventSchema {
    source: Value,
    validator: Validator,
}

impl EventSchema {
    /// The schema as configured, as JSON.
    pub fn source(&self) -> &Value {
        &self.source
    }
}

/// Options of one JSON Schema gate (see module docs).
#[derive(Debug)]
pub struct JsonSchemaSettings {
    consumes: Vec<String>,
    unknown_types: UnknownTypes,
    schemas: BTreeMap<String, EventSchema>,
}

impl JsonSchemaSettings {
    /// Takes and checks this kind's options from `def` (compiling every
    /// schema), then refuses any field it does not know.
    pub fn from_def(def: &mut ProcessorDef) -> Result<Self, ConfigError> {
        let options = &mut def.options;
        let schemas = take_schemas(options)?;
        let unknown_types = take_unknown_types(options)?;
        let consumes = match options.strings("consumes")? {
            Some(consumes) => consumes,
            None => default_consumes(&schemas, unknown_types),
        };
        check_consumes(options, &consumes, &schemas)?;
        options.finish(&FIELDS)?;
        Ok(Self { consumes, unknown_types, schemas })
    }

    /// The event types the gate sees (its contract's `consumes`).
    pub fn consumes(&self) -> &[String] {
        &self.consumes
    }

    pub fn unknown_types(&self) -> UnknownTypes {
        self.unknown_types
    }

    /// The schema of `event_type`, if it has one.
    pub fn schema(&self, event_type: &str) -> Option<&EventSchema> {
        self.schemas.get(event_type)
    }

    /// The event types that have a schema, sorted.
    pub fn event_types(&self) -> impl Iterator<Item = &str> {
        self.schemas.keys().map(String::as_str)
    }
}

/// The field name of `event_type`'s schema in messages: `schemas."a.b"`.
fn schema_field(event_type: &str) -> String {
    format!("schemas.{event_type:?}")
}

fn take_schemas(options: &mut Options) -> Result<BTreeMap<String, EventSchema>, ConfigError> {
    let table = match options.json("schemas")? {
        Some(Value::Object(table)) if !table.is_empty() => table,
        Some(Value::Object(_)) | None => {
            return Err(options.invalid("schemas", "missing: a table of event type = JSON Schema, at least one"))
        }
        Some(other) => {
            return Err(
                options.invalid("schemas", format!("expected a table of event type = JSON Schema, found {other}"))
            )
        }
    };
    table
        .into_iter()
        .map(|(event_type, spelled)| {
            let schema = compile(spelled).map_err(|m| options.invalid(&schema_field(&event_type), m))?;
            Ok((event_type, schema))
        })
        .collect()
}

/// A schema spelled as JSON text (a TOML string) or as a TOML table
/// (already JSON here), compiled.
fn compile(spelled: Value) -> Result<EventSchema, String> {
    let source = match spelled {
        Value::String(text) => {
            serde_json::from_str(&text).map_err(|e| format!("not JSON: {e} (write JSON text or a TOML table)"))?
        }
        other => other,
    };
    // Offline: a reference outside the schema and the bundled meta-schemas
    // is an error here rather than a fetch (see module docs). Said again
    // although the crate is built without its HTTP and file retrievers,
    // since another crate of the build could turn those features on.
    let validator = jsonschema::options()
        .offline()
        .build(&source)
        .map_err(|e| bounded(format!("not a valid JSON Schema: {e}"), MAX_REASON_LEN))?;
    Ok(EventSchema { source, validator })
}

fn take_unknown_types(options: &mut Options) -> Result<UnknownTypes, ConfigError> {
    match options.string("unknown_types")?.as_deref() {
        None | Some("accept") => Ok(UnknownTypes::Accept),
        Some("reject") => Ok(UnknownTypes::Reject),
        Some(other) => Err(options.invalid("unknown_types", format!("{other:?} is not \"accept\" or \"reject\""))),
    }
}

/// Accepting unknown types, the gate need not see them at all; rejecting
/// them, it must see every domain event.
fn default_consumes(schemas: &BTreeMap<String, EventSchema>, unknown_types: UnknownTypes) -> Vec<String> {
    match unknown_types {
        UnknownTypes::Accept => schemas.keys().cloned().collect(),
        UnknownTypes::Reject => vec![ANY_EVENT.to_owned()],
    }
}

/// A schema whose type is not consumed would never be applied: that is a
/// mistake in the configuration, not a choice.
fn check_consumes(
    options: &Options,
    consumes: &[String],
    schemas: &BTreeMap<String, EventSchema>,
) -> Result<(), ConfigError> {
    if consumes.is_empty() {
        return Err(options.invalid("consumes", "an empty list: the gate would check nothing"));
    }
    let consumed = Contract::new("", "", consumes.iter().cloned());
    match schemas.keys().find(|t| !consumed.consumes_type(t)) {
        Some(t) => Err(options.invalid(
            &schema_field(t),
            format!("event type {t:?} is not consumed (consumes = {consumes:?}): its schema would never be applied"),
        )),
        None => Ok(()),
    }
}

/// `json-schema-1:` and a digest of the schemas and options.
fn reducer_version(s: &JsonSchemaSettings) -> String {
    let mut hasher = Sha256::new();
    for (event_type, schema) in &s.schemas {
        hasher.update(event_type.as_bytes());
        hasher.update([0]);
        hasher.update(schema.source.to_string().as_bytes());
        hasher.update([0]);
    }
    hasher.update([1]);
    for consumed in &s.consumes {
        hasher.update(consumed.as_bytes());
        hasher.update([0]);
    }
    hasher.update([1]);
    hasher.update(s.unknown_types.as_str().as_bytes());
    format!("json-schema-1:{}", &hex::encode(hasher.finalize())[..12])
}

/// The gate's contract: its slug, reducer version and consumed types.
pub fn contract(slug: &str, settings: &JsonSchemaSettings) -> Contract {
    Contract::new(slug, reducer_version(settings), settings.consumes.iter().cloned())
}

/// `text` cut to at most `max` bytes on a character boundary, marked `…`
/// when cut.
fn bounded(mut text: String, max: usize) -> String {
    const MARK: &str = "…";
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
    text
}

/// Why `payload` does not match: the first errors with the payload
/// location of each (`payload/items/0/id`), bounded in length.
fn mismatch(event_type: &str, validator: &Validator, payload: &Value) -> String {
    let mut reason = format!("event {}", quoted_type(event_type));
    let mut errors = validator.iter_errors(payload);
    let mut listed = 0;
    for error in errors.by_ref().take(MAX_LISTED_ERRORS) {
        let entry = format!("at payload{}: {error}", error.instance_path());
        reason.push_str(if listed == 0 { " " } else { "; " });
        reason.push_str(&bounded(entry, MAX_ERROR_LEN));
        listed += 1;
    }
    if listed == 0 {
        reason.push_str(": the payload does not match its schema");
    } else if errors.next().is_some() {
        reason.push_str("; and more");
    }
    bounded(reason, MAX_REASON_LEN)
}

/// An event type as a reason shows it: quoted, bounded.
fn quoted_type(event_type: &str) -> String {
    bounded(format!("{event_type:?}"), MAX_TYPE_LEN)
}

/// The JSON Schema gate (see module docs). Cloning shares the compiled
/// schemas.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    contract: Contract,
    settings: Arc<JsonSchemaSettings>,
}

impl JsonSchema {
    pub fn new(slug: &str, settings: Arc<JsonSchemaSettings>) -> Self {
        Self { contract: contract(slug, &settings), settings }
    }

    pub fn settings(&self) -> &JsonSchemaSettings {
        &self.settings
    }

    /// The verdict on one event's payload (`None`: no payload, checked as
    /// JSON `null`).
    pub fn check(&self, event_type: &str, payload: Option<&Value>) -> Result<(), Rejection> {
        let payload = payload.unwrap_or(&Value::Null);
        match (self.settings.schemas.get(event_type), self.settings.unknown_types) {
            // `is_valid` first: it stops at the first failure and collects
            // nothing, so an accepted append, the common case, pays only that.
            (Some(schema), _) if schema.validator.is_valid(payload) => Ok(()),
            (Some(schema), _) => Err(Rejection::new(mismatch(event_type, &schema.validator, payload))),
            (None, UnknownTypes::Accept) => Ok(()),
            (None, UnknownTypes::Reject) => Err(Rejection::new(bounded(
                format!("event {} has no schema (unknown_types = \"reject\")", quoted_type(event_type)),
                MAX_REASON_LEN,
            ))),
        }
    }
}

/// Parses a `json-schema` processor's options, compiles its schemas and
/// builds the gate. Every mistake names the processor and the field.
pub fn processor(mut def: ProcessorDef) -> Result<JsonSchema, ConfigError> {
    let settings = JsonSchemaSettings::from_def(&mut def)?;
    Ok(JsonSchema::new(&def.slug, Arc::new(settings)))
}

impl Processor for JsonSchema {
    /// Nothing: the verdict depends on the event alone, so there is no
    /// reduction for a host to persist on each append.
    type State = ();
    /// `{"type", "payload"}` as decoded: any consumed type decodes.
    type Event = Value;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) {}

    fn validate(&self, event: &Envelope<Value>, _state: &()) -> Result<(), Rejection> {
        self.check(&event.event_type, event.event.get("payload"))
    }
}

#[cfg(test)]
mod tests {
    use ds_processor::{AdmitError, InlineRunner, Metadata, StreamIncarnation};
    use serde_json::json;

    use super::*;
    use crate::config::ProcessorsConfig;

    const ORDER_PLACED_JSON: &str = r#"schemas."order.placed" = '''
        {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}'''"#;

    const ORDER_PLACED_TABLE: &str = r#"
        [processor.schemas."order.placed"]
        type = "object"
        required = ["id"]
        properties.id.type = "integer"
    "#;

    /// The one processor of a configuration whose `[[processor]]` table
    /// has `options` after its common fields.
    fn def(options: &str) -> ProcessorDef {
        let text = format!("[[processor]]\nkind = \"json-schema\"\nslug = \"s\"\nstreams = \"orders/*\"\n{options}");
        ProcessorsConfig::from_toml(&text).expect("valid TOML").processors.remove(0)
    }

    fn gate(options: &str) -> JsonSchema {
        processor(def(options)).expect("a valid configuration")
    }

    fn config_error(options: &str) -> String {
        match processor(def(options)) {
            Ok(gate) => panic!("accepted: {:?}", gate.contract()),
            Err(e) => e.to_string(),
        }
    }

    fn envelope(event_type: &str, payload: Option<Value>) -> Envelope<Value> {
        let mut event = json!({ "type": event_type });
        if let Some(payload) = payload {
            event["payload"] = payload;
        }
        Envelope { position: 1, event_type: event_type.into(), event, metadata: Metadata::new() }
    }

    fn verdict(gate: &JsonSchema, event_type: &str, payload: Option<Value>) -> Result<(), String> {
        gate.validate(&envelope(event_type, payload), &()).map_err(|r| r.reason)
    }

    #[test]
    fn a_matching_payload_passes_and_a_mismatch_is_rejected_with_its_location() {
        let gate = gate(ORDER_PLACED_JSON);
        assert_eq!(verdict(&gate, "order.placed", Some(json!({ "id": 7 }))), Ok(()));
        assert_eq!(
            verdict(&gate, "order.placed", Some(json!({ "id": "abc" }))),
            Err(r#"event "order.placed" at payload/id: "abc" is not of type "integer""#.to_owned())
        );
        assert_eq!(
            verdict(&gate, "order.placed", Some(json!({}))),
            Err(r#"event "order.placed" at payload: "id" is a required property"#.to_owned())
        );
    }

    #[test]
    fn a_missing_payload_is_checked_as_null() {
        let gate = gate(ORDER_PLACED_JSON);
        assert_eq!(
            verdict(&gate, "order.placed", None),
            Err(r#"event "order.placed" at payload: null is not of type "object""#.to_owned())
        );
        let nullable = gate_with_null();
        assert_eq!(verdict(&nullable, "ping", None), Ok(()));
        assert_eq!(verdict(&nullable, "ping", Some(Value::Null)), Ok(()));
        assert!(verdict(&nullable, "ping", Some(json!(1))).is_err());
    }

    fn gate_with_null() -> JsonSchema {
        gate(r#"schemas.ping = '{"type": "null"}'"#)
    }

    #[test]
    fn a_rejection_lists_at_most_three_errors_within_512_bytes() {
        let batch = gate(
            r#"schemas.batch = '{"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}}'"#,
        );
        let items: Vec<Value> = (0..10).map(|_| json!({ "id": "x".repeat(2000) })).collect();
        let reason = verdict(&batch, "batch", Some(Value::Array(items))).expect_err("ids are not integers");
        assert!(reason.len() <= MAX_REASON_LEN, "{} bytes: {reason}", reason.len());
        assert!(reason.starts_with(r#"event "batch" at payload/0/id: "xxx"#), "{reason}");
        for listed in ["payload/0/id", "payload/1/id", "payload/2/id"] {
            assert!(reason.contains(listed), "{listed} missing from {reason}");
        }
        assert!(!reason.contains("payload/3/id"), "a fourth error is listed: {reason}");
        assert!(reason.ends_with("; and more"), "{reason}");
        // A multi-byte character at the cut stays whole.
        assert_eq!(bounded("ééé".to_owned(), 5), "é…");
        assert_eq!(bounded("short".to_owned(), 5), "short");
        let long_type = "t".repeat(5000);
        let rejecting = gate(&format!("unknown_types = \"reject\"\n{ORDER_PLACED_JSON}"));
        let reason = verdict(&rejecting, &long_type, None).expect_err("no schema");
        assert!(reason.len() <= MAX_REASON_LEN && reason.ends_with("has no schema (unknown_types = \"reject\")"));
    }

    #[test]
    fn unknown_types_are_accepted_by_default_and_rejected_on_request() {
        let accepting = gate(ORDER_PLACED_JSON);
        assert_eq!(accepting.contract().consumes, ["order.placed"], "only the types that have a schema");
        assert_eq!(verdict(&accepting, "order.cancelled", Some(json!("anything"))), Ok(()));

        let rejecting = gate(&format!("unknown_types = \"reject\"\n{ORDER_PLACED_JSON}"));
        assert_eq!(rejecting.contract().consumes, [ANY_EVENT]);
        assert_eq!(
            verdict(&rejecting, "order.cancelled", Some(json!({}))),
            Err(r#"event "order.cancelled" has no schema (unknown_types = "reject")"#.to_owned())
        );
        assert_eq!(verdict(&rejecting, "order.placed", Some(json!({ "id": 1 }))), Ok(()));
        assert!(!rejecting.contract().consumes_type("stream/processor-revived"), "core events are not gated");
    }

    #[test]
    fn json_text_and_toml_table_spellings_give_the_same_verdicts() {
        let text = gate(ORDER_PLACED_JSON);
        let table = gate(ORDER_PLACED_TABLE);
        assert_eq!(
            text.settings().schema("order.placed").map(EventSchema::source),
            table.settings().schema("order.placed").map(EventSchema::source)
        );
        for payload in [Some(json!({ "id": 1 })), Some(json!({ "id": "abc" })), Some(json!({})), Some(json!(3)), None] {
            assert_eq!(
                verdict(&text, "order.placed", payload.clone()),
                verdict(&table, "order.placed", payload.clone()),
                "{payload:?}"
            );
        }
        assert_eq!(text.contract().reducer_version, table.contract().reducer_version);
    }

    #[test]
    fn the_module_example_mixes_both_spellings() {
        let example = r#"
            unknown_types = "reject"
            schemas."order.placed" = '''{"type": "object", "required": ["id"]}'''
            [processor.schemas."order.shipped"]
            type = "object"
            required = ["id", "carrier"]
        "#;
        let gate = gate(example);
        assert_eq!(gate.settings().event_types().collect::<Vec<_>>(), ["order.placed", "order.shipped"]);
        assert_eq!(verdict(&gate, "order.shipped", Some(json!({ "id": 1, "carrier": "c" }))), Ok(()));
        assert_eq!(
            verdict(&gate, "order.shipped", Some(json!({ "id": 1 }))),
            Err(r#"event "order.shipped" at payload: "carrier" is a required property"#.to_owned())
        );
    }

    #[test]
    fn schemas_that_do_not_compile_are_configuration_errors_naming_the_field() {
        let not_a_schema = config_error(r#"schemas."order.placed" = '{"type": 12}'"#);
        assert!(
            not_a_schema.starts_with(
                r#"processor #1 ("s"): field `schemas."order.placed"`: not a valid JSON Schema: 12 is not valid under any of the schemas "#
            ),
            "{not_a_schema}"
        );
        let not_json = config_error(r#"schemas."order.placed" = '{"type": "object"'"#);
        assert!(
            not_json.starts_with(r#"processor #1 ("s"): field `schemas."order.placed"`: not JSON: "#),
            "{not_json}"
        );
        let bad_table = config_error("[processor.schemas.\"order.placed\"]\ntype = \"objekt\"");
        assert!(bad_table.contains(r#"field `schemas."order.placed"`: not a valid JSON Schema"#), "{bad_table}");
        let bad_pattern = config_error(r#"schemas.a = '{"pattern": "("}'"#);
        assert!(bad_pattern.contains("field `schemas.\"a\"`"), "{bad_pattern}");
    }

    #[test]
    fn remote_references_are_refused_without_fetching() {
        // 10.0.0.1 is never contacted: the offline retriever refuses before
        // any connection, which the message says.
        for target in ["http://10.0.0.1/x.json", "file:///etc/passwd"] {
            let e = config_error(&format!(r#"schemas.a = '{{"$ref": "{target}"}}'"#));
            assert!(e.starts_with(r#"processor #1 ("s"): field `schemas."a"`: not a valid JSON Schema"#), "{e}");
            assert!(e.contains("Retrieval is disabled"), "refused by the offline retriever: {e}");
        }
        // References inside the schema and to a bundled meta-schema need no fetch.
        let local = gate(
            r##"schemas.a = '''{"$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": {"id": {"type": "integer"}}, "properties": {"id": {"$ref": "#/$defs/id"}}}'''
                schemas.b = '{"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}'"##,
        );
        assert!(verdict(&local, "a", Some(json!({ "id": 1 }))).is_ok());
        assert_eq!(
            verdict(&local, "a", Some(json!({ "id": "1" }))),
            Err(r#"event "a" at payload/id: "1" is not of type "integer""#.to_owned())
        );
        assert!(verdict(&local, "b", Some(json!(1))).is_err());
    }

    #[test]
    fn option_mistakes_name_the_field() {
        assert_eq!(
            config_error(&format!("{ORDER_PLACED_JSON}\nunknown_type = \"reject\"")),
            "processor #1 (\"s\"): field `unknown_type`: unknown field (this kind knows: kind, slug, streams, \
             checkpoint, inline, schemas, unknown_types, consumes)"
        );
        assert_eq!(
            config_error(&format!("{ORDER_PLACED_JSON}\nunknown_types = \"drop\"")),
            "processor #1 (\"s\"): field `unknown_types`: \"drop\" is not \"accept\" or \"reject\""
        );
        assert!(config_error("").contains("field `schemas`: missing"));
        assert!(config_error("schemas = {}").contains("field `schemas`: missing"));
        assert!(config_error("schemas = 3").contains("field `schemas`: expected a table"));
        assert_eq!(
            config_error(&format!("{ORDER_PLACED_JSON}\nconsumes = [\"order.shipped\"]")),
            "processor #1 (\"s\"): field `schemas.\"order.placed\"`: event type \"order.placed\" is not consumed \
             (consumes = [\"order.shipped\"]): its schema would never be applied"
        );
        assert!(config_error(&format!("{ORDER_PLACED_JSON}\nconsumes = []")).contains("field `consumes`"));
        let explicit = gate(&format!("{ORDER_PLACED_JSON}\nconsumes = [\"*\"]"));
        assert_eq!(explicit.contract().consumes, ["*"]);
    }

    #[test]
    fn the_reducer_version_follows_the_schemas_and_options() {
        let version = |options: &str| gate(options).contract().reducer_version.clone();
        let base = version(ORDER_PLACED_JSON);
        assert!(base.starts_with("json-schema-1:"), "{base}");
        assert_eq!(base, version(ORDER_PLACED_JSON), "deterministic");
        assert_ne!(base, version(&ORDER_PLACED_JSON.replace("\"integer\"", "\"string\"")), "a schema changed");
        assert_ne!(base, version(&format!("{ORDER_PLACED_JSON}\nunknown_types = \"reject\"")));
        assert_ne!(base, version(&format!("{ORDER_PLACED_JSON}\nconsumes = [\"*\"]")));
    }

    #[test]
    fn inline_a_rejection_refuses_the_append() {
        let mut runner = InlineRunner::new(gate(ORDER_PLACED_JSON), StreamIncarnation::new("i")).expect("runner");
        let admitted = runner.admit(br#"{"type": "order.placed", "payload": {"id": 1}}"#).expect("valid");
        assert_eq!(admitted.position, 1);
        let refused = runner.admit(br#"{"type": "order.placed", "payload": {"id": "x"}}"#);
        assert!(matches!(&refused, Err(AdmitError::Rejected(r)) if r.reason.contains("payload/id")), "{refused:?}");
        assert_eq!(runner.head(), 1, "the refused append took no position");
        let unconsumed = runner.admit(br#"{"type": "order.cancelled"}"#).expect("not checked");
        assert_eq!(unconsumed.position, 2);
    }
}
