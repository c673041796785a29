//! Minting tokens: for tests, benchmarks and the examples in docs/ (a real
//! deployment's JWTs come from its identity provider).

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::scope::Grants;

/// The claims of a token valid from now for `ttl_secs`.
pub fn claims(issuer: &str, audience: &str, subject: &str, grants: &Grants, ttl_secs: i64) -> Value {
    let now = i64::try_from(crate::jwt::now_secs()).unwrap_or(i64::MAX);
    json!({ "iss": issuer, "aud": audience, "sub": subject, "iat": now, "exp": now + ttl_secs, "streams": grants })
}

/// An HS256 JWT signed with a shared secret.
pub fn hs256(secret: &[u8], claims: &Value) -> Result<String, String> {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret)).map_err(|e| e.to_string())
}

/// A JWT signed with a PKCS#8 PEM private key (RS256, ES256 or EdDSA).
pub fn with_pem(alg: Algorithm, private_pem: &[u8], kid: Option<&str>, claims: &Value) -> Result<String, String> {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(private_pem),
        Algorithm::ES256 => EncodingKey::from_ec_pem(private_pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(private_pem),
        other => return Err(format!("unsupported alg {other:?}")),
    }
    .map_err(|e| e.to_string())?;
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, &key).map_err(|e| e.to_string())
}
