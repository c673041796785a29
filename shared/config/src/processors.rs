//! Where a host's processors configuration (the TOML of
//! `ds_processors_builtin`) comes from. The two settings mean the same on
//! every host (the local server's flags and environment, the Lambda
//! functions' environment): [`PROCESSORS_FILE`] names a file holding the
//! TOML, [`PROCESSORS_TOML`] holds the TOML itself. Setting both is refused.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{ConfigError, Settings};

/// The path of a processors configuration file (flag `--processors`).
pub const PROCESSORS_FILE: &str = "DS_PROCESSORS";
/// The processors configuration's TOML itself (flag `--processors-toml`;
/// the SAM template's `Processors` parameter).
pub const PROCESSORS_TOML: &str = "DS_PROCESSORS_TOML";

/// Which setting a processors configuration came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessorsOrigin {
    /// Read from this file ([`PROCESSORS_FILE`]).
    File(PathBuf),
    /// Given inline ([`PROCESSORS_TOML`]).
    Inline,
}

impl fmt::Display for ProcessorsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{PROCESSORS_FILE} {}", path.display()),
            Self::Inline => f.write_str(PROCESSORS_TOML),
        }
    }
}

/// A processors configuration's text and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorsText {
    pub origin: ProcessorsOrigin,
    pub text: String,
}

/// The processors configuration named by a file path or given inline (at
/// most one of them); `None` when neither is set.
pub fn processors_text(file: Option<&Path>, inline: Option<&str>) -> Result<Option<ProcessorsText>, ConfigError> {
    match (file, inline) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            PROCESSORS_TOML,
            format!("set {PROCESSORS_FILE} (a file) or {PROCESSORS_TOML} (the TOML itself), not both"),
        )),
        (None, Some(text)) => Ok(Some(ProcessorsText { origin: ProcessorsOrigin::Inline, text: text.to_owned() })),
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::invalid(PROCESSORS_FILE, format!("cannot read {}: {e}", path.display())))?;
            Ok(Some(ProcessorsText { origin: ProcessorsOrigin::File(path.to_owned()), text }))
        }
    }
}

impl<F: Fn(&str) -> Option<String>> Settings<F> {
    /// The processors configuration these settings name ([`processors_text`]
    /// over [`PROCESSORS_FILE`] and [`PROCESSORS_TOML`]).
    pub fn processors(&self) -> Result<Option<ProcessorsText>, ConfigError> {
        let file = self.raw(PROCESSORS_FILE).map(PathBuf::from);
        processors_text(file.as_deref(), self.raw(PROCESSORS_TOML).as_deref())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(vars: Vec<(&'static str, String)>) -> Settings<impl Fn(&str) -> Option<String>> {
        Settings::new(move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn a_file_or_the_text_with_one_meaning_each() {
        let dir = std::env::temp_dir().join(format!("ds-config-processors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("processors.toml");
        std::fs::write(&path, "[[processor]]\n").unwrap();

        let from_file = settings(vec![(PROCESSORS_FILE, path.display().to_string())]).processors().unwrap().unwrap();
        assert_eq!(from_file.text, "[[processor]]\n");
        assert_eq!(from_file.origin.to_string(), format!("DS_PROCESSORS {}", path.display()));

        let inline = settings(vec![(PROCESSORS_TOML, "[host]".into())]).processors().unwrap().unwrap();
        assert_eq!(inline, ProcessorsText { origin: ProcessorsOrigin::Inline, text: "[host]".into() });
        assert_eq!(inline.origin.to_string(), "DS_PROCESSORS_TOML");

        assert_eq!(settings(vec![]).processors(), Ok(None));
        assert_eq!(settings(vec![(PROCESSORS_FILE, " ".into())]).processors(), Ok(None));

        let both = settings(vec![(PROCESSORS_FILE, path.display().to_string()), (PROCESSORS_TOML, "[host]".into())]);
        assert!(matches!(both.processors(), Err(ConfigError::Invalid { name, .. }) if name == PROCESSORS_TOML));

        // The TOML given where a path is expected is a missing file, named as such.
        let text_as_path = settings(vec![(PROCESSORS_FILE, "[[processor]]".into())]).processors().unwrap_err();
        assert!(text_as_path.to_string().starts_with("DS_PROCESSORS: cannot read [[processor]]"), "{text_as_path}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
