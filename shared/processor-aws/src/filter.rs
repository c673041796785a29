//! Lambda event filtering (`FilterCriteria`), the subset of the pattern
//! syntax the template uses: exact values, `prefix`, `exists` and
//! `anything-but`. A pattern with any other operator is refused, so the
//! template cannot start relying on a rule this code would get wrong.
//!
//! Semantics (as Lambda's event filtering): a record passes a criteria list
//! if it matches any one pattern; a pattern matches if every key it names
//! matches — an object recurses, an array lists alternatives for the leaf
//! (any one matching; an array-valued leaf matches if any element does); a
//! missing field matches only `{"exists": false}`.

use serde_json::Value;

/// A pattern this module cannot evaluate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported filter pattern: {0}")]
pub struct PatternError(pub String);

/// A parsed filter pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern(Value);

impl Pattern {
    /// Parses one `Pattern` string of a `FilterCriteria`.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let value: Value = serde_json::from_str(text).map_err(|e| PatternError(format!("{text}: {e}")))?;
        check(&value)?;
        Ok(Self(value))
    }

    pub fn matches(&self, record: &Value) -> bool {
        matches_object(&self.0, Some(record))
    }
}

/// Whether `record` passes any of `patterns`.
pub fn passes(patterns: &[Pattern], record: &Value) -> bool {
    patterns.iter().any(|p| p.matches(record))
}

fn check(pattern: &Value) -> Result<(), PatternError> {
    let Value::Object(fields) = pattern else {
        return Err(PatternError(format!("expected an object, got {pattern}")));
    };
    for (key, rule) in fields {
        match rule {
            Value::Object(_) => check(rule)?,
            Value::Array(alternatives) => {
                for alt in alternatives {
                    if let Value::Object(op) = alt {
                        let known = op.len() == 1
                            && op.keys().all(|k| matches!(k.as_str(), "prefix" | "exists" | "anything-but"));
                        if !known {
                            return Err(PatternError(format!("{key}: operator {alt}")));
                        }
                    }
                }
            }
            other => return Err(PatternError(format!("{key}: {other} is neither an object nor a list"))),
        }
    }
    Ok(())
}

fn matches_object(pattern: &Value, value: Option<&Value>) -> bool {
    let Value::Object(fields) = pattern else { return false };
    fields.iter().all(|(key, rule)| {
        let field = value.and_then(|v| v.get(key));
        match rule {
            Value::Object(_) => match field {
                Some(inner @ Value::Object(_)) => matches_object(rule, Some(inner)),
                // A nested pattern on a missing field holds only if it asks for absence.
                _ => matches_object(rule, None),
            },
            Value::Array(alternatives) => alternatives.iter().any(|alt| matches_leaf(alt, field)),
            _ => false,
        }
    })
}

fn matches_leaf(alt: &Value, field: Option<&Value>) -> bool {
    if let Value::Object(op) = alt {
        if let Some(Value::Bool(want)) = op.get("exists") {
            return field.is_some() == *want;
        }
    }
    match field {
        None => false,
        Some(Value::Array(items)) => items.iter().any(|item| matches_scalar(alt, item)),
        Some(v) => matches_scalar(alt, v),
    }
}

fn matches_scalar(alt: &Value, v: &Value) -> bool {
    match alt {
        Value::Object(op) => {
            if let Some(Value::String(prefix)) = op.get("prefix") {
                return v.as_str().is_some_and(|s| s.starts_with(prefix.as_str()));
            }
            if let Some(but) = op.get("anything-but") {
                return match but {
                    Value::Array(excluded) => !excluded.contains(v),
                    single => single != v,
                };
            }
            false
        }
        literal => literal == v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_values_prefixes_and_alternatives() {
        let p = Pattern::parse(r#"{"eventName": ["INSERT"], "dynamodb": {"Keys": {"sk": {"S": [{"prefix": "c#"}]}}}}"#)
            .expect("parses");
        let chunk = json!({"eventName": "INSERT", "dynamodb": {"Keys": {"sk": {"S": "c#i#01"}}}});
        assert!(p.matches(&chunk));
        assert!(!p.matches(&json!({"eventName": "MODIFY", "dynamodb": {"Keys": {"sk": {"S": "c#i#01"}}}})));
        assert!(!p.matches(&json!({"eventName": "INSERT", "dynamodb": {"Keys": {"sk": {"S": "meta"}}}})));
        assert!(!p.matches(&json!({"eventName": "INSERT"})), "a missing field does not match a value");
    }

    #[test]
    fn exists_and_anything_but() {
        let p =
            Pattern::parse(r#"{"userIdentity": {"principalId": [{"exists": true}]}, "a": [{"anything-but": ["x"]}]}"#)
                .expect("parses");
        assert!(p.matches(&json!({"userIdentity": {"principalId": "p"}, "a": "y"})));
        assert!(!p.matches(&json!({"userIdentity": {"principalId": "p"}, "a": "x"})));
        assert!(!p.matches(&json!({"a": "y"})));
        let absent = Pattern::parse(r#"{"userIdentity": {"type": [{"exists": false}]}}"#).expect("parses");
        assert!(absent.matches(&json!({})));
        assert!(!absent.matches(&json!({"userIdentity": {"type": "Service"}})));
    }

    #[test]
    fn any_pattern_of_a_list_passes_and_unknown_operators_are_refused() {
        let a = Pattern::parse(r#"{"k": ["a"]}"#).expect("a");
        let b = Pattern::parse(r#"{"k": ["b", 3]}"#).expect("b");
        assert!(passes(&[a.clone(), b.clone()], &json!({"k": "b"})));
        assert!(passes(&[a.clone(), b.clone()], &json!({"k": 3})));
        assert!(!passes(&[a, b], &json!({"k": "c"})));
        assert!(Pattern::parse(r#"{"k": [{"numeric": [">", 1]}]}"#).is_err());
        assert!(Pattern::parse(r#"{"k": "a"}"#).is_err());
    }
}
