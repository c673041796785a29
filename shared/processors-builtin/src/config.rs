//! The processors configuration file (TOML): which processors run, on which
//! streams, with which options; every mistake is reported with the
//! processor and the field it is in.
//!
//! ```toml
//! [host]                          # optional
//! lag_log_interval = "30s"        # structured lag log lines; "off" disables them
//!
//! [[processor]]
//! kind = "outbox"                 # a kind the catalog knows (built in: outbox, counter)
//! slug = "order-events"           # names its progress record: [A-Za-z0-9._-], at most 64
//! streams = "orders/*"            # stream path pattern: `*` one segment, `**` any number
//! checkpoint = "every 100 events" # optional: how often progress is persisted (see `checkpoint`)
//! inline = false                  # optional: true runs it inside each append's commit (kinds that can)
//! target = "order-events"         # kind-specific options follow
//! ```

use std::time::Duration;

use ds_processor::CheckpointCadence;
use serde_json::Value;

/// Longest slug: it is part of record keys and log lines.
pub const MAX_SLUG_LEN: usize = 64;

/// Every mistake is a [`ConfigError`] (the workspace's one configuration
/// error): [`ConfigError::Syntax`] for text that is not TOML or not the
/// file's shape, [`ConfigError::Field`] for a field of `[host]` or of one
/// `[[processor]]` (entry `processor #N ("slug")`), and
/// [`ConfigError::Unchecked`] when the store could not be asked (e.g.
/// whether a target stream exists).
pub use ds_config::ConfigError;

/// The entry name of processor `number` in messages.
fn entry(number: usize, slug: &str) -> String {
    format!("processor #{number} ({})", display_slug(slug))
}

/// The `[host]` entry's error about `field`.
fn host_error(field: &str, reason: String) -> ConfigError {
    ConfigError::Field { entry: "[host]".into(), field: field.to_owned(), reason }
}

/// Host-wide settings (`[host]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSettings {
    /// How often the host logs its processors' lag; `None`: never.
    pub lag_log_interval: Option<Duration>,
}

impl Default for HostSettings {
    fn default() -> Self {
        Self { lag_log_interval: Some(Duration::from_secs(30)) }
    }
}

/// A parsed configuration file.
#[derive(Debug, Clone, Default)]
pub struct ProcessorsConfig {
    pub host: HostSettings,
    pub processors: Vec<ProcessorDef>,
}

/// One `[[processor]]` table.
#[derive(Debug, Clone)]
pub struct ProcessorDef {
    /// 1-based position in the file, for messages.
    pub number: usize,
    pub kind: String,
    pub slug: String,
    /// The stream path pattern, unparsed (the catalog parses it).
    pub streams: String,
    /// `checkpoint = "…"`; `None`: the host's default.
    pub checkpoint: Option<CheckpointCadence>,
    /// `inline = true|false`; `None`: the kind's default (inline for kinds
    /// that only run inline, such as `json-schema`).
    pub inline: Option<bool>,
    /// The kind-specific fields.
    pub options: Options,
}

impl ProcessorDef {
    /// An error about `field` of this processor.
    pub fn error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Field { entry: entry(self.number, &self.slug), field: field.to_owned(), reason: message.into() }
    }

    /// This processor could not be checked against the store.
    pub fn unchecked(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Unchecked { entry: entry(self.number, &self.slug), reason: message.into() }
    }
}

fn display_slug(slug: &str) -> String {
    if slug.is_empty() {
        "no slug".to_owned()
    } else {
        format!("{slug:?}")
    }
}

impl ProcessorsConfig {
    /// Parses the TOML text of a configuration file.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax(e.to_string()))?;
        let host = match doc.remove("host") {
            None => HostSettings::default(),
            Some(toml::Value::Table(t)) => host_settings(t)?,
            Some(_) => return Err(ConfigError::Syntax("`host` must be a table ([host])".into())),
        };
        let processors = match doc.remove("processor") {
            None => Vec::new(),
            Some(toml::Value::Array(items)) => {
                items.into_iter().enumerate().map(|(i, item)| processor_def(i + 1, item)).collect::<Result<_, _>>()?
            }
            Some(_) => {
                return Err(ConfigError::Syntax("`processor` must be an array of tables ([[processor]])".into()))
            }
        };
        if let Some(key) = doc.keys().next() {
            return Err(ConfigError::Syntax(format!(
                "unknown top-level key `{key}` (expected [host] and [[processor]])"
            )));
        }
        Ok(Self { host, processors })
    }
}

fn host_settings(mut t: toml::Table) -> Result<HostSettings, ConfigError> {
    let mut host = HostSettings::default();
    if let Some(v) = t.remove("lag_log_interval") {
        let bad = |message: String| host_error("lag_log_interval", message);
        let text = v.as_str().ok_or_else(|| bad(format!("expected a duration like \"30s\" or \"off\", found {v}")))?;
        host.lag_log_interval = match text {
            "off" => None,
            d => match ds_config::parse_duration(d) {
                Ok(d) if d.is_zero() => None,
                Ok(d) => Some(d),
                Err(e) => return Err(bad(e.to_string())),
            },
        };
    }
    if let Some(key) = t.keys().next() {
        return Err(host_error(key, "unknown setting (known: lag_log_interval)".into()));
    }
    Ok(host)
}

fn processor_def(number: usize, item: toml::Value) -> Result<ProcessorDef, ConfigError> {
    let toml::Value::Table(mut t) = item else {
        return Err(ConfigError::Syntax(format!("processor #{number} is not a table")));
    };
    let slug = match t.get("slug") {
        Some(toml::Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let mut def = ProcessorDef {
        number,
        kind: String::new(),
        slug,
        streams: String::new(),
        checkpoint: None,
        inline: None,
        options: Options::default(),
    };
    for field in ["kind", "slug", "streams"] {
        let value = match t.remove(field) {
            Some(toml::Value::String(s)) => s,
            Some(other) => return Err(def.error(field, format!("expected a string, found {other}"))),
            None => return Err(def.error(field, "missing")),
        };
        match field {
            "kind" => def.kind = value,
            "slug" => check_slug(&value).map_err(|m| def.error("slug", m))?,
            _ => def.streams = value,
        }
    }
    def.checkpoint = match t.remove("checkpoint") {
        None => None,
        Some(toml::Value::String(s)) => {
            Some(crate::checkpoint::parse_checkpoint(&s).map_err(|m| def.error("checkpoint", m))?)
        }
        Some(other) => {
            return Err(def.error("checkpoint", format!("expected a string like \"every 100 events\", found {other}")))
        }
    };
    def.inline = match t.remove("inline") {
        None => None,
        Some(toml::Value::Boolean(b)) => Some(b),
        Some(other) => return Err(def.error("inline", format!("expected true or false, found {other}"))),
    };
    if def.inline == Some(true) && def.checkpoint.is_some() {
        return Err(def.error(
            "checkpoint",
            "an inline processor has no checkpoint: its reduction is written in every append's own commit",
        ));
    }
    def.options = Options { number, slug: def.slug.clone(), fields: t };
    Ok(def)
}

/// Slugs name progress records and alarms: a short, plain name.
fn check_slug(slug: &str) -> Result<(), String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if slug.is_empty() || slug.len() > MAX_SLUG_LEN || !slug.chars().all(plain) {
        return Err(format!("{slug:?} is not a slug: 1 to {MAX_SLUG_LEN} of A-Z a-z 0-9 . _ -"));
    }
    Ok(())
}

/// The kind-specific fields of one processor. A kind takes each field it
/// knows, then [`Options::finish`] refuses any it did not take.
#[derive(Debug, Clone, Default)]
pub struct Options {
    number: usize,
    slug: String,
    fields: toml::Table,
}

impl Options {
    fn error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Field { entry: entry(self.number, &self.slug), field: field.to_owned(), reason: message.into() }
    }

    /// Takes an optional string field.
    pub fn string(&mut self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.error(field, format!("expected a string, found {other}"))),
        }
    }

    /// Takes a required string field.
    pub fn required_string(&mut self, field: &str) -> Result<String, ConfigError> {
        self.string(field)?.ok_or_else(|| self.error(field, "missing"))
    }

    /// Takes an optional boolean field.
    pub fn bool(&mut self, field: &str) -> Result<Option<bool>, ConfigError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(b)),
            Some(other) => Err(self.error(field, format!("expected true or false, found {other}"))),
        }
    }

    /// Takes an optional non-negative integer field.
    pub fn count(&mut self, field: &str) -> Result<Option<u64>, ConfigError> {
        match self.fields.remove(field) {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if n >= 0 => Ok(Some(n.unsigned_abs())),
            Some(other) => Err(self.error(field, format!("expected a non-negative integer, found {other}"))),
        }
    }

    /// Takes an optional list of strings.
    pub fn strings(&mut self, field: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(value) = self.fields.remove(field) else { return Ok(None) };
        let toml::Value::Array(items) = value else {
            return Err(self.error(field, format!("expected a list of strings, found {value}")));
        };
        items
            .into_iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s),
                other => Err(self.error(field, format!("expected a list of strings, found an item {other}"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Takes an optional field of any shape, as JSON (TOML dates become
    /// strings).
    pub fn json(&mut self, field: &str) -> Result<Option<Value>, ConfigError> {
        let Some(value) = self.fields.remove(field) else { return Ok(None) };
        serde_json::to_value(value).map(Some).map_err(|e| self.error(field, e.to_string()))
    }

    /// Refuses the fields nobody took, naming the ones that were `known`.
    pub fn finish(&self, known: &[&str]) -> Result<(), ConfigError> {
        match self.fields.keys().next() {
            None => Ok(()),
            Some(field) => {
                let mut all = vec!["kind", "slug", "streams", "checkpoint", "inline"];
                all.extend_from_slice(known);
                Err(self.error(field, format!("unknown field (this kind knows: {})", all.join(", "))))
            }
        }
    }

    /// An error about `field` (for checks a kind makes itself).
    pub fn invalid(&self, field: &str, message: impl Into<String>) -> ConfigError {
        self.error(field, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match ProcessorsConfig::from_toml(text) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_host_settings_and_processors_with_their_options() {
        let text = r#"
            [host]
            lag_log_interval = "off"
            [[processor]]
            kind = "outbox"
            slug = "o-1"
            streams = "orders/*"
            target = "out"
            create_target = true
        "#;
        let mut config = ProcessorsConfig::from_toml(text).expect("valid");
        assert_eq!(config.host.lag_log_interval, None);
        let def = &mut config.processors[0];
        assert_eq!(
            (def.number, def.kind.as_str(), def.slug.as_str(), def.streams.as_str()),
            (1, "outbox", "o-1", "orders/*")
        );
        assert_eq!(def.options.required_string("target").expect("target"), "out");
        assert_eq!(def.options.bool("create_target").expect("bool"), Some(true));
        def.options.clone().finish(&[]).expect("nothing left");
    }

    #[test]
    fn mistakes_name_the_processor_and_the_field() {
        assert_eq!(
            err("[[processor]]\nkind = \"outbox\"\nstreams = \"a\""),
            "processor #1 (no slug): field `slug`: missing"
        );
        assert_eq!(
            err("[[processor]]\nkind = \"outbox\"\nslug = \"a b\"\nstreams = \"a\""),
            "processor #1 (\"a b\"): field `slug`: \"a b\" is not a slug: 1 to 64 of A-Z a-z 0-9 . _ -"
        );
        assert_eq!(
            err("[[processor]]\nkind = 3\nslug = \"x\"\nstreams = \"a\""),
            "processor #1 (\"x\"): field `kind`: expected a string, found 3"
        );
        assert_eq!(
            err("[host]\nlag_log_interval = \"30\""),
            "[host]: field `lag_log_interval`: \"30\" is not a duration like 500ms, 20s, 2m or 1h"
        );
        assert!(err("[[processor]\n").contains("line 1"), "syntax errors carry the line");
        assert_eq!(err("processors = []"), "unknown top-level key `processors` (expected [host] and [[processor]])");
        let mut config =
            ProcessorsConfig::from_toml("[[processor]]\nkind = \"k\"\nslug = \"x\"\nstreams = \"a\"\ntargt = \"t\"")
                .expect("parses");
        let options = config.processors.remove(0).options;
        assert_eq!(
            options.finish(&["target"]).expect_err("unknown").to_string(),
            "processor #1 (\"x\"): field `targt`: unknown field (this kind knows: kind, slug, streams, checkpoint, inline, target)"
        );
    }

    #[test]
    fn checkpoint_is_a_field_of_every_processor() {
        let text = "[[processor]]\nkind = \"k\"\nslug = \"x\"\nstreams = \"a\"\ncheckpoint = \"every 100 events\"";
        let config = ProcessorsConfig::from_toml(text).expect("valid");
        assert_eq!(config.processors[0].checkpoint, Some(CheckpointCadence::EveryN(100)));
        config.processors[0].options.finish(&[]).expect("not left to the kind");
        assert_eq!(
            ProcessorsConfig::from_toml(&text.replace("checkpoint = \"every 100 events\"", ""))
                .expect("valid")
                .processors[0]
                .checkpoint,
            None
        );
        assert!(err(&text.replace("100 events", "0 events"))
            .starts_with("processor #1 (\"x\"): field `checkpoint`: \"every 0 events\" is not a count"));
        assert_eq!(
            err(&text.replace("\"every 100 events\"", "100")),
            "processor #1 (\"x\"): field `checkpoint`: expected a string like \"every 100 events\", found 100"
        );
    }
}
