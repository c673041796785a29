//! S3 access for chunk bodies and sealed segments: write-once puts
//! (`If-None-Match: *`), ranged reads and deletes.

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use tracing::{debug, warn};

use crate::error::{classify, AwsError};
#[cfg(feature = "fault-injection")]
use crate::faults::{Fault, FaultPoint, Faults};

/// The bucket and its client.
#[derive(Clone, Debug)]
pub struct Blobs {
    pub s3: aws_sdk_s3::Client,
    pub bucket: String,
    #[cfg(feature = "fault-injection")]
    pub faults: std::sync::Arc<Faults>,
}

impl Blobs {
    /// An injected failure for this call at `point`, if one is queued.
    #[cfg(feature = "fault-injection")]
    fn injected(&self, point: FaultPoint) -> Result<(), AwsError> {
        match self.faults.take(point) {
            Some(Fault::Throttle) => Err(AwsError::Throttled("injected: S3 SlowDown".into())),
            Some(Fault::Reject) => Err(AwsError::Rejected("injected: S3 AccessDenied".into())),
            Some(Fault::LoseAck) | None => Ok(()),
        }
    }

    /// Store `data` under the fresh `key`. Fails with
    /// [`AwsError::AlreadyExists`] rather than overwrite: every key is meant
    /// to be written exactly once.
    ///
    /// A PUT whose answer was lost (a 500 or a reset after S3 stored the
    /// object) is retried by the SDK, and the retry finds the object there:
    /// if it holds exactly `data`, that is this put, and it succeeded.
    #[tracing::instrument(level = "debug", skip(self, data), fields(len = data.len()))]
    pub async fn put_new(&self, key: &str, data: Bytes) -> Result<(), AwsError> {
        #[cfg(feature = "fault-injection")]
        self.injected(FaultPoint::S3Put)?;
        let put = self
            .s3
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .if_none_match("*")
            .content_length(i64::try_from(data.len()).unwrap_or(i64::MAX))
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .map_err(classify);
        match put {
            Ok(_) => Ok(()),
            Err(AwsError::AlreadyExists) => self.confirm_own_put(key, &data).await,
            Err(e) => Err(e),
        }
    }

    /// After `If-None-Match` found `key` taken: `Ok` if it holds `data` (an
    /// earlier attempt of the same put landed), else `AlreadyExists`.
    async fn confirm_own_put(&self, key: &str, data: &Bytes) -> Result<(), AwsError> {
        let stored =
            match self.s3.get_object().bucket(&self.bucket).key(key).send().await {
                Ok(out) => out.body.collect().await.map(|b| b.into_bytes()).map_err(|e| {
                    AwsError::Ambiguous(format!("reading back {key} after its put found it taken: {e}"))
                })?,
                // Taken by a write still in progress, or unreadable now: the
                // outcome is unknown, and retryable.
                Err(e) => {
                    return Err(AwsError::Ambiguous(format!(
                        "reading back {key} after its put found it taken: {}",
                        classify(e)
                    )))
                }
            };
        if stored == *data {
            debug!(key, "put found its own earlier attempt stored (lost answer); done");
            Ok(())
        } else {
            Err(AwsError::AlreadyExists)
        }
    }

    /// Bytes `[offset, offset + len)` of the object at `key`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, AwsError> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        #[cfg(feature = "fault-injection")]
        self.injected(FaultPoint::S3Get)?;
        let out = self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", offset, offset + len - 1))
            .send()
            .await
            .map_err(classify)?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| AwsError::Ambiguous(format!("reading S3 body of {key}: {e}")))?
            .into_bytes();
        if body.len() as u64 != len {
            return Err(AwsError::Rejected(format!(
                "object {key} returned {} bytes for a {len}-byte range at {offset}",
                body.len()
            )));
        }
        Ok(body)
    }

    /// Delete `key`; a missing object is fine.
    pub async fn delete(&self, key: &str) -> Result<(), AwsError> {
        match self.s3.delete_object().bucket(&self.bucket).key(key).send().await {
            Ok(_) => Ok(()),
            Err(e) => match classify(e) {
                AwsError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Best-effort delete of objects no committed item points at (used after
    /// a failed commit); failures are logged and left to `cleanup::sweep_path`.
    pub async fn discard(&self, keys: &[String]) {
        for key in keys {
            match self.delete(key).await {
                Ok(()) => debug!(key, "discarded uncommitted object"),
                Err(e) => {
                    warn!(key, error = %e, "could not discard an uncommitted object; left to cleanup::sweep_path")
                }
            }
        }
    }

    /// Every key under `prefix` with its last-modified time (epoch ms).
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, i64)>, AwsError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .s3
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(classify)?;
            for obj in page.contents() {
                if let Some(key) = obj.key() {
                    let modified = obj.last_modified().and_then(|t| t.to_millis().ok()).unwrap_or(0);
                    out.push((key.to_owned(), modified));
                }
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        Ok(out)
    }
}
