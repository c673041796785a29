//! The policy syntax every host reads (the local server's `--retention`
//! flag, the Lambda functions' `DS_RETENTION` variable), in the
//! configuration dialect of every other setting (`ds_config`: sizes like
//! `1GiB`, durations like `168h`): one policy is
//! `prefix=logs/,max-age=168h,max-bytes=1GiB`; several are separated by `;`.
//! Bad input is refused at start-up with the setting, the field and the
//! reason. `name` is the setting as the operator wrote it (for errors).

use ds_config::ConfigError;

use super::RetentionPolicy;

/// Parse one policy: `prefix=…` (required; empty for every stream) and at
/// least one of `max-age=<duration>` and `max-bytes=<size>`, comma
/// separated, each once.
pub fn parse_policy(name: &str, text: &str) -> Result<RetentionPolicy, ConfigError> {
    let field = |field: &str, reason: String| ConfigError::Field {
        entry: format!("{name} {text:?}"),
        field: field.to_owned(),
        reason,
    };
    let (mut prefix, mut max_age, mut max_bytes) = (None, None, None);
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(field(part, "expected key=value".into()));
        };
        let (key, value) = (key.trim(), value.trim());
        let twice = || field(key, "given twice".into());
        match key {
            "prefix" if prefix.is_some() => return Err(twice()),
            "prefix" => prefix = Some(value.to_owned()),
            "max-age" if max_age.is_some() => return Err(twice()),
            "max-age" => {
                let age = ds_config::parse_duration(value).map_err(|e| field(key, e.to_string()))?;
                if age.is_zero() {
                    return Err(field(key, "must be above 0 (omit it to keep history of any age)".into()));
                }
                max_age = Some(age);
            }
            "max-bytes" if max_bytes.is_some() => return Err(twice()),
            "max-bytes" => {
                let bytes = ds_config::parse_size(value).map_err(|e| field(key, e.to_string()))?;
                if bytes == 0 {
                    return Err(field(key, "must be above 0 (omit it to keep history of any size)".into()));
                }
                max_bytes = Some(bytes);
            }
            other => return Err(field(other, "unknown; expected prefix, max-age or max-bytes".into())),
        }
    }
    let Some(prefix) = prefix else {
        return Err(field("prefix", "missing (prefix= applies the policy to every stream)".into()));
    };
    if max_age.is_none() && max_bytes.is_none() {
        return Err(field("max-age", "a policy needs max-age, max-bytes or both".into()));
    }
    Ok(RetentionPolicy { prefix, max_age, max_bytes })
}

/// Refuse two policies for one prefix (which would win is not obvious).
pub fn check(name: &str, policies: &[RetentionPolicy]) -> Result<(), ConfigError> {
    for (i, p) in policies.iter().enumerate() {
        if policies[..i].iter().any(|q| q.prefix == p.prefix) {
            return Err(ConfigError::invalid(name, format!("two policies for the prefix {:?}", p.prefix)));
        }
    }
    Ok(())
}

/// Every policy of a `;`-separated list (empty parts skipped: an empty
/// text is no policy), checked with [`check`].
pub fn parse_policies(name: &str, text: &str) -> Result<Vec<RetentionPolicy>, ConfigError> {
    let policies = text
        .split(';')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse_policy(name, p))
        .collect::<Result<Vec<_>, _>>()?;
    check(name, &policies)?;
    Ok(policies)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NAME: &str = "--retention";

    #[test]
    fn policies_parse_in_the_dialect() {
        let p = parse_policy(NAME, "prefix=logs/,max-age=168h,max-bytes=1GiB").expect("parses");
        assert_eq!(p.prefix, "logs/");
        assert_eq!(p.max_age, Some(Duration::from_secs(168 * 3600)));
        assert_eq!(p.max_bytes, Some(1 << 30));
        let all = parse_policy(NAME, " prefix= , max-bytes=900KiB ").expect("every stream");
        assert_eq!((all.prefix.as_str(), all.max_age, all.max_bytes), ("", None, Some(900 << 10)));
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let reason = |text: &str| parse_policy(NAME, text).expect_err(text).to_string();
        assert!(reason("max-bytes=1GiB").contains("`prefix`: missing"), "{}", reason("max-bytes=1GiB"));
        assert!(reason("prefix=a/").contains("needs max-age, max-bytes or both"));
        assert!(reason("prefix=a/,max-age=7d").contains("not a duration like"), "{}", reason("prefix=a/,max-age=7d"));
        assert!(reason("prefix=a/,max-bytes=lots").contains("not a size like"));
        assert!(reason("prefix=a/,max-bytes=0").contains("must be above 0"));
        assert!(reason("prefix=a/,max-age=0s").contains("must be above 0"));
        assert!(reason("prefix=a/,max-size=1GiB").contains("`max-size`: unknown"));
        assert!(reason("prefix=a/,prefix=b/,max-bytes=1").contains("given twice"));
        assert!(reason("prefix=a/,max-bytes").contains("expected key=value"));
    }

    #[test]
    fn one_policy_per_prefix() {
        let a = parse_policy(NAME, "prefix=a/,max-bytes=1MiB").expect("parses");
        let b = parse_policy(NAME, "prefix=b/,max-age=1h").expect("parses");
        assert!(check(NAME, &[a.clone(), b]).is_ok());
        let err = check(NAME, &[a.clone(), a]).expect_err("a prefix twice").to_string();
        assert!(err.contains("two policies for the prefix \"a/\""), "{err}");
    }

    #[test]
    fn lists_split_on_semicolons_and_may_be_empty() {
        assert_eq!(parse_policies("DS_RETENTION", " ").expect("empty"), Vec::new());
        let two = parse_policies("DS_RETENTION", "prefix=a/,max-bytes=1MiB; prefix=b/,max-age=1h;").expect("two");
        assert_eq!(two.iter().map(|p| p.prefix.as_str()).collect::<Vec<_>>(), ["a/", "b/"]);
        let err = parse_policies("DS_RETENTION", "prefix=a/,max-bytes=1;prefix=a/,max-age=1h").expect_err("dup");
        assert!(err.to_string().contains("DS_RETENTION"), "{err}");
    }
}
