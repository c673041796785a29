//! The webhook signing keys (§6.5, §7.1, §12.10): Ed25519 (aws-lc-rs),
//! generated once and persisted through a [`KeyStore`], published as a JWK
//! Set whose `kid`s are JWK thumbprints (RFC 7638). Rotation makes a new
//! active key and keeps the old public keys published.
//!
//! Private key material never leaves this module: no type here implements
//! `Debug` or `Serialize` over it, and nothing logs it.

use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use ds_core::{Commit, Op, Record, RecordExpect, StoreError, StreamHandle, StreamStore};
use rand::rngs::OsRng;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where the key ring document is kept. `load` returns it with a version
/// that `store` takes as its precondition (`None`: nothing stored yet).
#[async_trait]
pub trait KeyStore: Send + Sync {
    async fn load(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError>;
    /// Store `doc` if the stored version is still `expect`; `Ok(false)` when
    /// another writer stored first (the caller loads again).
    async fn store(&self, doc: &[u8], expect: Option<u64>) -> Result<bool, StoreError>;
}

/// In process only (`--store memory`): a new key per process.
#[derive(Default)]
pub struct MemoryKeyStore(Mutex<Option<(u64, Vec<u8>)>>);

#[async_trait]
impl KeyStore for MemoryKeyStore {
    async fn load(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        Ok(self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    async fn store(&self, doc: &[u8], expect: Option<u64>) -> Result<bool, StoreError> {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.as_ref().map(|(v, _)| *v) != expect {
            return Ok(false);
        }
        *slot = Some((expect.map_or(1, |v| v + 1), doc.to_vec()));
        Ok(true)
    }
}

/// A file readable only by its owner (mode 0600) in the local data directory.
/// One process owns a data directory, so the version is the file's presence.
pub struct FileKeyStore {
    path: PathBuf,
}

impl FileKeyStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::backend("webhook signing key file", e)
}

#[async_trait]
impl KeyStore for FileKeyStore {
    async fn load(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        match tokio::fs::read(&self.path).await {
            Ok(doc) => Ok(Some((1, doc))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    async fn store(&self, doc: &[u8], expect: Option<u64>) -> Result<bool, StoreError> {
        use std::io::Write;
        let (path, doc) = (self.path.clone(), doc.to_vec());
        let task = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
            if expect.is_none() && path.exists() {
                return Ok(false);
            }
            let tmp = path.with_extension("tmp");
            let _ = std::fs::remove_file(&tmp);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&tmp)?;
            file.write_all(&doc)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok(true)
        });
        task.await.map_err(|e| StoreError::backend("webhook signing key file", e))?.map_err(io)
    }
}

/// A keyed record of the substrate (`--store aws`: an item of the streams
/// table, readable only by the roles that read the table).
pub struct RecordKeyStore {
    store: std::sync::Arc<dyn StreamStore>,
}

const KEY_PATH: &str = "__ds/keys";
const KEY_INCARNATION: &str = "v1";
const KEY_RECORD: &str = "webhook-signing";

impl RecordKeyStore {
    pub fn new(store: std::sync::Arc<dyn StreamStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl KeyStore for RecordKeyStore {
    async fn load(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let r = self.store.read_record(&StreamHandle::detached(KEY_PATH), KEY_INCARNATION, KEY_RECORD).await?;
        Ok(r.map(|r| (r.revision, r.value.to_vec())))
    }

    async fn store(&self, doc: &[u8], expect: Option<u64>) -> Result<bool, StoreError> {
        let op = Op::PutRecord {
            path: KEY_PATH.into(),
            incarnation: KEY_INCARNATION.into(),
            key: KEY_RECORD.into(),
            record: Record { revision: expect.map_or(1, |v| v + 1), value: Bytes::copy_from_slice(doc) },
            expect: expect.map_or(RecordExpect::Absent, RecordExpect::Revision),
        };
        match self.store.commit(Commit { ops: vec![op] }).await {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The persisted key ring.
#[derive(Serialize, Deserialize)]
struct RingDoc {
    /// PKCS#8 of the active private key (base64).
    active_pkcs8: String,
    /// Public keys of earlier active keys, newest first.
    #[serde(default)]
    retired: Vec<PublicJwk>,
}

/// One public key as published in the JWK Set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicJwk {
    pub kty: String,
    pub crv: String,
    pub kid: String,
    #[serde(rename = "use")]
    pub use_: String,
    pub alg: String,
    pub x: String,
}

impl PublicJwk {
    fn ed25519(public: &[u8]) -> Self {
        let x = URL_SAFE_NO_PAD.encode(public);
        // RFC 7638: the required members, lexicographic order, no spaces.
        let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = format!("ds_{}", URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes())));
        Self { kty: "OKP".into(), crv: "Ed25519".into(), kid, use_: "sig".into(), alg: "EdDSA".into(), x }
    }
}

/// The signing keys in use: the active pair and every published public key.
pub struct KeyRing {
    active: Ed25519KeyPair,
    active_jwk: PublicJwk,
    retired: Vec<PublicJwk>,
}

/// A key ring record that does not decode.
fn corrupt(what: &'static str) -> StoreError {
    StoreError::corrupt("webhook signing key ring", what)
}

/// A key ring that could not be made.
fn unmade(what: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
    StoreError::backend("webhook signing key ring", what)
}

/// A new key as PKCS#8. The seed comes from the OS (`getrandom`): aws-lc's
/// own generator seeds itself from a CPU-jitter entropy source on first use,
/// which took about 54 ms of every start with a fresh data dir (perf: the
/// `jent_*` functions), longer than the rest of start-up.
fn generate_pkcs8() -> Result<Vec<u8>, StoreError> {
    let mut seed = [0u8; 32];
    OsRng.try_fill_bytes(&mut seed).map_err(|_| unmade("no randomness from the OS"))?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed);
    seed.fill(0);
    let pair = pair.map_err(|_| unmade("key generation failed"))?;
    let doc = pair.to_pkcs8().map_err(|_| unmade("key encoding failed"))?;
    Ok(doc.as_ref().to_vec())
}

impl KeyRing {
    /// The stored key ring, generating and storing one the first time (two
    /// processes racing: one key wins, both use it).
    pub async fn open(store: &dyn KeyStore) -> Result<Self, StoreError> {
        for _ in 0..8 {
            if let Some((_, doc)) = store.load().await? {
                return Self::decode(&doc);
            }
            let doc = RingDoc { active_pkcs8: STANDARD.encode(generate_pkcs8()?), retired: Vec::new() };
            let bytes = serde_json::to_vec(&doc).map_err(unmade)?;
            if store.store(&bytes, None).await? {
                tracing::info!("generated the webhook signing key");
                return Self::decode(&bytes);
            }
        }
        Err(StoreError::Unavailable("webhook signing key ring kept changing".into()))
    }

    /// Make a new active key; the previous public key stays published.
    pub async fn rotate(store: &dyn KeyStore) -> Result<Self, StoreError> {
        for _ in 0..8 {
            let Some((version, doc)) = store.load().await? else {
                Self::open(store).await?;
                continue;
            };
            let old = Self::decode(&doc)?;
            let mut retired = vec![old.active_jwk.clone()];
            retired.extend(old.retired);
            let next = RingDoc { active_pkcs8: STANDARD.encode(generate_pkcs8()?), retired };
            let bytes = serde_json::to_vec(&next).map_err(unmade)?;
            if store.store(&bytes, Some(version)).await? {
                return Self::decode(&bytes);
            }
        }
        Err(StoreError::Unavailable("webhook signing key ring kept changing".into()))
    }

    fn decode(doc: &[u8]) -> Result<Self, StoreError> {
        let doc: RingDoc = serde_json::from_slice(doc).map_err(|_| corrupt("not a key ring document"))?;
        let pkcs8 = STANDARD.decode(&doc.active_pkcs8).map_err(|_| corrupt("bad key encoding"))?;
        let active = Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| corrupt("not an Ed25519 PKCS#8 key"))?;
        let active_jwk = PublicJwk::ed25519(active.public_key().as_ref());
        Ok(Self { active, active_jwk, retired: doc.retired })
    }

    /// `kid` of the key signing now.
    pub fn active_kid(&self) -> &str {
        &self.active_jwk.kid
    }

    /// The JWK Set: the active key first, then the retired ones.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<&PublicJwk> = std::iter::once(&self.active_jwk).chain(self.retired.iter()).collect();
        serde_json::json!({ "keys": keys })
    }

    /// The `Webhook-Signature` header value for `body` sent at `unix_secs`:
    /// `t=<secs>,kid=<kid>,ed25519=<base64url signature of "<secs>.<body>">`.
    pub fn signature_header(&self, unix_secs: i64, body: &[u8]) -> String {
        let mut message = format!("{unix_secs}.").into_bytes();
        message.extend_from_slice(body);
        let signature = self.active.sign(&message);
        format!("t={unix_secs},kid={},ed25519={}", self.active_jwk.kid, URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn generated_once_persisted_and_rotation_keeps_old_public_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = FileKeyStore::new(dir.path().join("keys.json"));
        let first = KeyRing::open(&file).await.unwrap();
        let again = KeyRing::open(&file).await.unwrap();
        assert_eq!(first.active_kid(), again.active_kid(), "loaded, not generated again");
        assert!(first.active_kid().starts_with("ds_"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("keys.json")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "only the owner may read the key file");
        }
        let rotated = KeyRing::rotate(&file).await.unwrap();
        assert_ne!(rotated.active_kid(), first.active_kid());
        let kids: Vec<String> =
            rotated.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect();
        assert_eq!(kids, vec![rotated.active_kid().to_owned(), first.active_kid().to_owned()]);
        let text = serde_json::to_string(&rotated.jwks()).unwrap();
        assert!(!text.contains("pkcs8") && !text.contains("\"d\""), "no private material in the JWKS");
    }

    #[tokio::test]
    async fn racing_openers_agree_on_one_key() {
        let store = MemoryKeyStore::default();
        let (a, b) = tokio::join!(KeyRing::open(&store), KeyRing::open(&store));
        assert_eq!(a.unwrap().active_kid(), b.unwrap().active_kid());
    }

    #[test]
    fn kid_is_the_rfc7638_thumbprint() {
        // RFC 8037 appendix A.3: the thumbprint of its example public key.
        let x = URL_SAFE_NO_PAD.decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo").unwrap();
        assert_eq!(PublicJwk::ed25519(&x).kid, "ds_kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    }
}
