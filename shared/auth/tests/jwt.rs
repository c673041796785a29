//! JWT verification with static keys: every algorithm, every way a token can
//! be wrong, and the static-token path beside it.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ds_auth::mint;
use ds_auth::{AuthError, AuthSettings, Authenticator, Grants, Op};
use ds_config::ConfigError;
use ds_testpki::{jwt_key_pair, JwtKeyAlg};
use jsonwebtoken::Algorithm;
use serde_json::json;

const ISS: &str = "https://issuer.test";
const AUD: &str = "durable-streams";
const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test-secret";

fn grants() -> Grants {
    serde_json::from_value(json!([{"prefix": "chat/", "ops": ["read", "write"]}])).unwrap()
}

fn settings() -> AuthSettings {
    AuthSettings {
        jwt_issuer: Some(ISS.into()),
        jwt_audience: Some(AUD.into()),
        jwt_leeway: Duration::from_secs(5),
        ..AuthSettings::default()
    }
}

fn hs256_auth() -> Authenticator {
    AuthSettings { jwt_hs256_secret: Some(SECRET.to_vec()), ..settings() }.build().unwrap().unwrap()
}

async fn check(auth: &Authenticator, token: &str) -> Result<Grants, AuthError> {
    auth.authenticate(Some(&format!("Bearer {token}"))).await.map(|p| p.grants.clone())
}

#[tokio::test]
async fn hs256_tokens_are_checked_for_signature_issuer_audience_and_expiry() {
    let auth = hs256_auth();
    let good = mint::claims(ISS, AUD, "alice", &grants(), 300);
    let token = mint::hs256(SECRET, &good).unwrap();
    let g = check(&auth, &token).await.unwrap();
    assert!(g.allows("chat/1", Op::Write) && !g.allows("chat/1", Op::Admin));
    // Again: served from the verification cache, same answer.
    assert_eq!(check(&auth, &token).await.unwrap(), g);

    let with = |k: &str, v: serde_json::Value| {
        let mut c = good.clone();
        c[k] = v;
        mint::hs256(SECRET, &c).unwrap()
    };
    let now = good["iat"].as_i64().unwrap();
    assert_eq!(check(&auth, &with("exp", json!(now - 60))).await, Err(AuthError::Expired));
    // Inside the clock-skew allowance an expired token still passes.
    assert!(check(&auth, &with("exp", json!(now - 2))).await.is_ok());
    assert_eq!(
        check(&auth, &with("iss", json!("https://evil.test"))).await,
        Err(AuthError::Invalid("wrong issuer".into()))
    );
    assert_eq!(check(&auth, &with("aud", json!("other"))).await, Err(AuthError::Invalid("wrong audience".into())));
    assert!(matches!(check(&auth, &with("nbf", json!(now + 600))).await, Err(AuthError::Invalid(_))));
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert!(matches!(check(&auth, &mint::hs256(SECRET, &no_exp).unwrap()).await, Err(AuthError::Invalid(_))));
    let forged = mint::hs256(b"another-secret-another-secret-another", &good).unwrap();
    assert_eq!(check(&auth, &forged).await, Err(AuthError::Invalid("bad signature".into())));
    // A tampered payload with the original signature.
    let parts: Vec<&str> = token.split('.').collect();
    let other = with("sub", json!("mallory"));
    let spliced = format!("{}.{}.{}", parts[0], other.split('.').nth(1).unwrap(), parts[2]);
    assert_eq!(check(&auth, &spliced).await, Err(AuthError::Invalid("bad signature".into())));
    // No `streams` claim: authenticated, allowed nothing.
    let mut bare = good.clone();
    bare.as_object_mut().unwrap().remove("streams");
    assert_eq!(check(&auth, &mint::hs256(SECRET, &bare).unwrap()).await.unwrap(), Grants::default());
    // A malformed `streams` claim is an invalid token, not an empty grant.
    assert!(matches!(check(&auth, &with("streams", json!([{"prefix": 1}]))).await, Err(AuthError::Invalid(_))));
}

#[tokio::test]
async fn header_shapes() {
    let auth = hs256_auth();
    assert_eq!(auth.authenticate(None).await, Err(AuthError::Missing));
    assert_eq!(auth.authenticate(Some("Basic dXNlcjpwdw==")).await, Err(AuthError::NotBearer));
    assert_eq!(auth.authenticate(Some("Bearer ")).await, Err(AuthError::NotBearer));
    assert_eq!(auth.authenticate(Some("Bearer  ")).await, Err(AuthError::NotBearer));
    assert!(matches!(auth.authenticate(Some("Bearer a.b.c")).await, Err(AuthError::Invalid(_))));
    let token = mint::hs256(SECRET, &mint::claims(ISS, AUD, "a", &grants(), 60)).unwrap();
    assert!(auth.authenticate(Some(&format!("bearer {token}"))).await.is_ok(), "the scheme is case-insensitive");
}

#[tokio::test]
async fn public_key_algorithms_and_alg_confusion() {
    for (kind, alg) in [
        (JwtKeyAlg::Es256, Algorithm::ES256),
        (JwtKeyAlg::EdDsa, Algorithm::EdDSA),
        (JwtKeyAlg::Rs256, Algorithm::RS256),
    ] {
        let (private, public) = jwt_key_pair(kind).unwrap();
        let auth = AuthSettings { jwt_public_key_pem: Some(public.clone().into_bytes()), ..settings() }
            .build()
            .unwrap()
            .unwrap();
        let claims = mint::claims(ISS, AUD, "svc", &grants(), 60);
        let token = mint::with_pem(alg, private.as_bytes(), None, &claims).unwrap();
        assert!(check(&auth, &token).await.is_ok(), "{alg:?}");
        let (other, _) = jwt_key_pair(kind).unwrap();
        let forged = mint::with_pem(alg, other.as_bytes(), None, &claims).unwrap();
        assert_eq!(check(&auth, &forged).await, Err(AuthError::Invalid("bad signature".into())), "{alg:?}");
        // HS256 signed with the public key as the secret (the classic
        // algorithm confusion): no HS256 key is configured, so refused.
        let confused = mint::hs256(public.as_bytes(), &claims).unwrap();
        assert!(matches!(check(&auth, &confused).await, Err(AuthError::Invalid(_))), "{alg:?}");
    }
}

#[tokio::test]
async fn configuration_is_checked() {
    let no_iss = AuthSettings { jwt_hs256_secret: Some(SECRET.to_vec()), jwt_issuer: None, ..settings() };
    let err = no_iss.build().err().unwrap();
    assert!(matches!(&err, ConfigError::Invalid { name, .. } if name == "DS_JWT_ISSUER"), "{err}");
    assert!(err.to_string().contains("issuer"), "{err}");
    let short = AuthSettings { jwt_hs256_secret: Some(b"short".to_vec()), ..settings() };
    let err = short.build().err().unwrap();
    assert!(matches!(&err, ConfigError::Invalid { name, .. } if name == "DS_JWT_HS256_SECRET"), "{err}");
    assert!(err.to_string().contains("32 bytes"), "{err}");
    let bad_pem = AuthSettings { jwt_public_key_pem: Some(b"nope".to_vec()), ..settings() };
    assert!(matches!(bad_pem.build(), Err(ConfigError::Invalid { name, .. }) if name == "DS_JWT_PUBLIC_KEY"));
    assert!(AuthSettings::default().build().unwrap().is_none(), "nothing configured: access control off");
}

/// A static token "ci" (read on everything), the tokens file that names it,
/// and an authenticator taking it and HS256 JWTs.
fn static_token_and_hs256() -> (String, serde_json::Value, Authenticator) {
    let token = ds_auth::tokens::generate();
    let file = json!({"tokens": [{"name": "ci", "sha256": ds_auth::tokens::digest_hex(&token),
        "streams": [{"prefix": "", "ops": ["read"]}]}]});
    let auth =
        AuthSettings { tokens_json: Some(file.to_string()), jwt_hs256_secret: Some(SECRET.to_vec()), ..settings() }
            .build()
            .unwrap()
            .unwrap();
    (token, file, auth)
}

#[tokio::test]
async fn static_tokens_and_jwts_side_by_side() {
    let (token, file, auth) = static_token_and_hs256();
    let p = auth.authenticate(Some(&format!("Bearer {token}"))).await.unwrap();
    assert_eq!(p.subject, "ci");
    assert!(p.grants.allows("x", Op::Read) && !p.grants.allows("x", Op::Write));
    assert_eq!(check(&auth, "dst_not-a-configured-token").await, Err(AuthError::Invalid("unknown token".into())));
    let jwt = mint::hs256(SECRET, &mint::claims(ISS, AUD, "bob", &grants(), 60)).unwrap();
    assert_eq!(auth.authenticate(Some(&format!("Bearer {jwt}"))).await.unwrap().subject, "bob");
    // Static tokens only: a JWT is refused.
    let only_static =
        AuthSettings { tokens_json: Some(file.to_string()), ..AuthSettings::default() }.build().unwrap().unwrap();
    assert!(matches!(check(&only_static, &jwt).await, Err(AuthError::Invalid(_))));
}

#[tokio::test]
async fn authenticate_now_settles_all_but_an_unverified_jwt() {
    let (token, _, auth) = static_token_and_hs256();
    assert_eq!(auth.authenticate_now(None), Some(Err(AuthError::Missing)));
    assert_eq!(auth.authenticate_now(Some("Basic dXNlcjpwdw==")), Some(Err(AuthError::NotBearer)));
    assert_eq!(auth.authenticate_now(Some(&format!("Bearer {token}"))).unwrap().unwrap().subject, "ci");
    assert!(matches!(auth.authenticate_now(Some("Bearer dst_unknown")), Some(Err(AuthError::Invalid(_)))));

    let jwt = mint::hs256(SECRET, &mint::claims(ISS, AUD, "bob", &grants(), 60)).unwrap();
    let header = format!("Bearer {jwt}");
    assert_eq!(auth.authenticate_now(Some(&header)), None, "not verified yet: must go through verify");
    let forged = format!(
        "Bearer {}",
        mint::hs256(b"another-secret-another-secret-0000", &mint::claims(ISS, AUD, "bob", &grants(), 60)).unwrap()
    );
    assert!(auth.authenticate(Some(&forged)).await.is_err());
    assert_eq!(auth.authenticate_now(Some(&forged)), None, "a refused token is never remembered");
    assert_eq!(auth.authenticate(Some(&header)).await.unwrap().subject, "bob");
    assert_eq!(auth.authenticate_now(Some(&header)).unwrap().unwrap().subject, "bob", "verified: settled at once");
}
