//! One configuration dialect for every host (the local server's flags and
//! environment, the Lambda functions' environment, the processors' TOML):
//! durations are written `500ms`, `20s`, `2m` or `1h`, sizes `1048576`,
//! `900KiB`, `1MiB` or `1GiB`, switches `true`/`false` (or `1`/`0`,
//! `yes`/`no`, `on`/`off`). Values are parsed by one function each, and
//! every mistake is one [`ConfigError`] that names the setting (or the
//! entry and field of a configuration text) it came from. A processors
//! configuration is named the same way everywhere too (`DS_PROCESSORS`: a
//! file; `DS_PROCESSORS_TOML`: the TOML itself; see [`processors_text`]).

use std::time::Duration;

mod processors;
pub use processors::{processors_text, ProcessorsOrigin, ProcessorsText, PROCESSORS_FILE, PROCESSORS_TOML};

/// A value that is not in the dialect; each variant holds the value as
/// written. Write it as the message shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Not a number with one of the units `ms`, `s`, `m`, `h`.
    #[error("{0:?} is not a duration like 500ms, 20s, 2m or 1h")]
    Duration(String),
    /// Not a number of bytes, bare or with `B`, `KiB`, `MiB` or `GiB`.
    #[error("{0:?} is not a size like 1048576, 900KiB, 1MiB or 1GiB")]
    Size(String),
    /// In the dialect, but past what 64 bits (or this machine's `usize`) hold.
    #[error("{0:?} is too large")]
    Overflow(String),
    /// Not one of the switch words.
    #[error("{0:?} is not a switch like true, false, 1 or 0")]
    Switch(String),
}

/// A configuration a host refuses to start with: the one error type of
/// every setting, from flags, the environment or a configuration text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required setting is not set: set it.
    #[error("{name} is not set")]
    Missing { name: String },
    /// A setting's value is not in the dialect: write it as the message
    /// shows.
    #[error("{name}: {source}")]
    Value {
        /// The environment variable (or flag) the value came from.
        name: String,
        #[source]
        source: ValueError,
    },
    /// A value in the dialect that this setting does not take (out of its
    /// range, or at odds with another setting): the message says what it
    /// takes.
    #[error("{name}: {reason}")]
    Invalid { name: String, reason: String },
    /// A configuration text (the processors' TOML) that does not parse, or
    /// is not the expected shape: the message has the line or the key.
    #[error("{0}")]
    Syntax(String),
    /// One field of one entry of a configuration text is wrong: fix that
    /// field. `entry` names the entry as the operator wrote it (`[host]`,
    /// `processor #2 ("orders")`).
    #[error("{entry}: field `{field}`: {reason}")]
    Field { entry: String, field: String, reason: String },
    /// An entry could not be checked against the store (the store did not
    /// answer): start again once it answers.
    #[error("{entry}: {reason}")]
    Unchecked { entry: String, reason: String },
}

impl ConfigError {
    /// [`ConfigError::Invalid`] for `name`.
    pub fn invalid(name: &str, reason: impl Into<String>) -> Self {
        Self::Invalid { name: name.to_owned(), reason: reason.into() }
    }
}

/// A switch: `true`/`1`/`yes`/`on` or `false`/`0`/`no`/`off` (any case),
/// what the local server's flags take from the environment too.
pub fn parse_switch(s: &str) -> Result<bool, ValueError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(ValueError::Switch(s.to_owned())),
    }
}

/// Split `"20s"` into `(20, "s")`; the number must be present.
fn split_number(s: &str) -> Option<(u64, &str)> {
    let s = s.trim();
    let at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(at);
    Some((num.parse().ok()?, unit.trim()))
}

/// `500ms`, `20s`, `2m`, `1h`. A unit is required: a bare number is ambiguous
/// between the millisecond and second conventions of other tools.
pub fn parse_duration(s: &str) -> Result<Duration, ValueError> {
    let bad = || ValueError::Duration(s.to_owned());
    let (n, unit) = split_number(s).ok_or_else(bad)?;
    let secs = |mul: u64| n.checked_mul(mul).map(Duration::from_secs).ok_or_else(|| ValueError::Overflow(s.to_owned()));
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        _ => Err(bad()),
    }
}

/// Plain bytes (`1048576`, `512B`) or binary units (`KiB`, `MiB`, `GiB`).
pub fn parse_size(s: &str) -> Result<u64, ValueError> {
    let (n, unit) = split_number(s).ok_or_else(|| ValueError::Size(s.to_owned()))?;
    let mul: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(ValueError::Size(s.to_owned())),
    };
    n.checked_mul(mul).ok_or_else(|| ValueError::Overflow(s.to_owned()))
}

/// [`parse_size`] as a `usize` (for in-memory limits).
pub fn parse_size_usize(s: &str) -> Result<usize, ValueError> {
    usize::try_from(parse_size(s)?).map_err(|_| ValueError::Overflow(s.to_owned()))
}

/// Reads settings from a key → value lookup (the process environment, or a
/// map in tests). Unset and empty values read as "not set".
pub struct Settings<F> {
    lookup: F,
}

impl Settings<fn(&str) -> Option<String>> {
    /// Settings from the process environment.
    pub fn from_env() -> Self {
        Self { lookup: |name| std::env::var(name).ok() }
    }
}

impl<F: Fn(&str) -> Option<String>> Settings<F> {
    pub fn new(lookup: F) -> Self {
        Self { lookup }
    }

    /// The raw value of `name`, if set and not empty.
    pub fn raw(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    /// The value of `name`, which must be set.
    pub fn required(&self, name: &str) -> Result<String, ConfigError> {
        self.raw(name).ok_or_else(|| ConfigError::Missing { name: name.to_owned() })
    }

    fn parsed<T>(&self, name: &str, parse: impl Fn(&str) -> Result<T, ValueError>) -> Result<Option<T>, ConfigError> {
        self.raw(name)
            .map(|v| parse(&v).map_err(|source| ConfigError::Value { name: name.to_owned(), source }))
            .transpose()
    }

    pub fn duration(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        self.parsed(name, parse_duration)
    }

    pub fn size(&self, name: &str) -> Result<Option<usize>, ConfigError> {
        self.parsed(name, parse_size_usize)
    }

    /// A switch; unset reads as off.
    pub fn switch(&self, name: &str) -> Result<bool, ConfigError> {
        self.switch_or(name, false)
    }

    /// A switch that is `default` when unset (one that is on unless turned off).
    pub fn switch_or(&self, name: &str, default: bool) -> Result<bool, ConfigError> {
        Ok(self.parsed(name, parse_switch)?.unwrap_or(default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["20", "", "s", "2d", "-1s", "1.5s"] {
            assert_eq!(parse_duration(bad), Err(ValueError::Duration(bad.into())), "{bad:?}");
        }
        assert!(matches!(parse_duration("18446744073709551615h"), Err(ValueError::Overflow(_))));
    }

    #[test]
    fn switches_read_both_ways_and_refuse_anything_else() {
        for on in ["true", "1", "YES", " on "] {
            assert_eq!(parse_switch(on), Ok(true), "{on:?}");
        }
        for off in ["false", "0", "No", "OFF"] {
            assert_eq!(parse_switch(off), Ok(false), "{off:?}");
        }
        assert_eq!(parse_switch("2"), Err(ValueError::Switch("2".into())));
        let env = Settings::new(|name: &str| (name == "X").then(|| "maybe".to_owned()));
        assert_eq!(
            env.switch("X").map_err(|e| e.to_string()),
            Err("X: \"maybe\" is not a switch like true, false, 1 or 0".into())
        );
        assert_eq!(env.switch("UNSET"), Ok(false));
    }

    #[test]
    fn sizes_take_bytes_or_binary_units() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("900KiB"), Ok(900 << 10));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        for bad in ["1MB", "1 mb", "", "MiB", "-1"] {
            assert_eq!(parse_size(bad), Err(ValueError::Size(bad.into())), "{bad:?}");
        }
        assert!(matches!(parse_size("18446744073709551615GiB"), Err(ValueError::Overflow(_))));
    }

    #[test]
    fn settings_name_the_variable_in_errors() {
        let s = Settings::new(|name: &str| match name {
            "DS_A" => Some("20s".to_owned()),
            "DS_B" => Some("twenty".to_owned()),
            "DS_EMPTY" => Some(String::new()),
            _ => None,
        });
        assert_eq!(s.duration("DS_A"), Ok(Some(Duration::from_secs(20))));
        assert_eq!(s.duration("DS_UNSET"), Ok(None));
        assert_eq!(s.duration("DS_EMPTY"), Ok(None));
        let err = s.duration("DS_B").expect_err("not a duration");
        assert_eq!(err.to_string(), "DS_B: \"twenty\" is not a duration like 500ms, 20s, 2m or 1h");
        assert!(matches!(s.size("DS_B"), Err(ConfigError::Value { name, .. }) if name == "DS_B"));
        assert_eq!(s.required("DS_A").as_deref(), Ok("20s"));
        assert_eq!(s.required("DS_EMPTY"), Err(ConfigError::Missing { name: "DS_EMPTY".into() }));
        assert_eq!(s.required("DS_UNSET").map_err(|e| e.to_string()), Err("DS_UNSET is not set".into()));
    }
}
