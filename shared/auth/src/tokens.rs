//! Static API tokens for a single-tenant server: the server keeps only their
//! SHA-256 digests (tokens are 256-bit random strings, so a fast hash is
//! enough to make a leaked token file useless), and compares digests in
//! constant time.

use std::sync::Arc;

use base64::Engine;
use ds_config::ConfigError;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::scope::Grants;
use crate::{CredentialKind, Principal};

/// The token file: `{"tokens": [{"name": …, "sha256": …, "streams": […]}]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    /// Shown in logs instead of the token.
    name: String,
    /// Hex SHA-256 of the token.
    sha256: String,
    streams: Grants,
}

/// One configured token: its digest, and who it stands for.
#[derive(Debug, Clone)]
struct StaticToken {
    digest: [u8; 32],
    principal: Arc<Principal>,
}

/// The configured static tokens.
#[derive(Debug, Clone, Default)]
pub struct StaticTokens {
    tokens: Vec<StaticToken>,
}

impl StaticTokens {
    /// Parses the JSON token file format (see docs/access-control.md).
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let file: TokenFile =
            serde_json::from_str(json).map_err(|e| ConfigError::Syntax(format!("token file: {e}")))?;
        let mut tokens = Vec::with_capacity(file.tokens.len());
        for t in file.tokens {
            let field = |reason: &str| ConfigError::Field {
                entry: format!("token {:?}", t.name),
                field: "sha256".into(),
                reason: reason.into(),
            };
            let bytes = hex::decode(&t.sha256).map_err(|_| field("not hex"))?;
            let digest: [u8; 32] = bytes.try_into().map_err(|_| field("must be 64 hex digits"))?;
            let principal = Principal { subject: t.name, grants: t.streams, kind: CredentialKind::StaticToken };
            tokens.push(StaticToken { digest, principal: Arc::new(principal) });
        }
        Ok(Self { tokens })
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token matching `presented`. Every configured digest is compared
    /// (no early exit), each in constant time.
    pub fn find(&self, presented: &str) -> Option<Arc<Principal>> {
        let digest = sha256(presented);
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.digest.ct_eq(&digest)) {
                found = Some(t.principal.clone());
            }
        }
        found
    }
}

pub(crate) fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The hex SHA-256 digest a token file stores for `token`.
pub fn digest_hex(token: &str) -> String {
    hex::encode(sha256(token))
}

/// A new random token: `dst_` and 256 random bits, base64url.
pub fn generate() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("dst_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::scope::Op;

    #[test]
    fn tokens_are_found_by_digest_only() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(a.starts_with("dst_") && a.len() == 4 + 43);
        let json = format!(
            r#"{{"tokens":[{{"name":"ci","sha256":"{}","streams":[{{"prefix":"ci/","ops":["read","write"]}}]}},
                {{"name":"ops","sha256":"{}","streams":[{{"prefix":"","ops":["admin"]}}]}}]}}"#,
            digest_hex(&a),
            digest_hex(&b)
        );
        assert!(!json.contains(&a), "the file holds digests, not tokens");
        let tokens = StaticTokens::from_json(&json).unwrap();
        let ci = tokens.find(&a).unwrap();
        assert_eq!(ci.subject, "ci");
        assert!(ci.grants.allows("ci/x", Op::Write));
        assert_eq!(tokens.find(&b).unwrap().subject, "ops");
        assert!(tokens.find(&generate()).is_none());
        assert!(tokens.find("").is_none());
    }

    #[test]
    fn bad_files_name_the_problem() {
        let field = |json: &str| match StaticTokens::from_json(json) {
            Err(ConfigError::Field { entry, field, reason }) => format!("{entry} {field}: {reason}"),
            other => panic!("{other:?}"),
        };
        assert_eq!(field(r#"{"tokens":[{"name":"x","sha256":"zz","streams":[]}]}"#), "token \"x\" sha256: not hex");
        assert_eq!(
            field(r#"{"tokens":[{"name":"x","sha256":"abcd","streams":[]}]}"#),
            "token \"x\" sha256: must be 64 hex digits"
        );
        assert!(matches!(
            StaticTokens::from_json(r#"{"tokens":[{"name":"x","token":"abc","streams":[]}]}"#),
            Err(ConfigError::Syntax(_))
        ));
    }
}
