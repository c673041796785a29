//! The protocol's operations on one stream, one request each (§5).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::error::Error;
use crate::transport::{flag, header, Client};

/// `PUT` options (§5.1).
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// The stream's content type; the server's default when `None`.
    pub content_type: Option<String>,
    /// `Stream-TTL` in seconds.
    pub ttl_seconds: Option<u64>,
    /// `Stream-Expires-At` (RFC 3339).
    pub expires_at: Option<String>,
    /// Create it closed (`Stream-Closed: true`).
    pub closed: bool,
    /// Initial content.
    pub body: Bytes,
}

/// `PUT` with `Stream-Forked-From` (§4.2).
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    /// The source stream's path.
    pub from: String,
    /// `Stream-Fork-Offset`; the source's tail when `None`.
    pub offset: Option<String>,
    /// `Stream-Fork-Sub-Offset`.
    pub sub_offset: Option<u64>,
    /// Must equal the source's content type if given.
    pub content_type: Option<String>,
}

/// What a create or fork answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// `201` (new) rather than `200` (it existed with the same configuration).
    pub created: bool,
    pub next_offset: Option<String>,
}

/// An idempotent producer's identity on one append (§5.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// `POST` options (§5.2).
#[derive(Debug, Clone, Default)]
pub struct AppendOptions {
    /// Must match the stream's content type.
    pub content_type: Option<String>,
    pub producer: Option<Producer>,
    /// Close the stream with this append (`Stream-Closed: true`).
    pub close: bool,
}

/// What an append answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The stream's tail after the append (absent on a producer's duplicate
    /// at some servers).
    pub next_offset: Option<String>,
    /// `204` to a producer's append: this `(id, epoch, seq)` was applied
    /// before, nothing was written now.
    pub duplicate: bool,
}

/// `HEAD` (§5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub content_type: Option<String>,
    pub next_offset: String,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<String>,
    pub closed: bool,
}

/// One catch-up read's answer (§5.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The stream's bytes from the requested offset (for a JSON stream, a
    /// JSON array of messages: see [`crate::json::messages`]).
    pub data: Bytes,
    pub next_offset: String,
    pub up_to_date: bool,
    /// The end of a closed stream was reached: nothing more will ever come.
    pub closed: bool,
    pub content_type: Option<String>,
}

fn put(headers: &mut HeaderMap, name: &'static str, value: &str) -> Result<(), Error> {
    let v =
        HeaderValue::from_str(value).map_err(|_| Error::Invalid(format!("{name}: {value:?} cannot be a header")))?;
    headers.insert(name, v);
    Ok(())
}

impl Client {
    /// Creates the stream, or finds it with the same configuration.
    pub async fn create(&self, path: &str, opts: &CreateOptions) -> Result<Created, Error> {
        let mut h = HeaderMap::new();
        if let Some(ct) = &opts.content_type {
            put(&mut h, "content-type", ct)?;
        }
        if let Some(ttl) = opts.ttl_seconds {
            put(&mut h, "stream-ttl", &ttl.to_string())?;
        }
        if let Some(at) = &opts.expires_at {
            put(&mut h, "stream-expires-at", at)?;
        }
        if opts.closed {
            put(&mut h, "stream-closed", "true")?;
        }
        self.put_stream(path, h, opts.body.clone()).await
    }

    /// Creates `path` as a fork of `opts.from` (§4.2).
    pub async fn fork(&self, path: &str, opts: &ForkOptions) -> Result<Created, Error> {
        let mut h = HeaderMap::new();
        // The header names the source by its URL path on the same server.
        put(&mut h, "stream-forked-from", self.stream_url(&opts.from)?.path())?;
        if let Some(o) = &opts.offset {
            put(&mut h, "stream-fork-offset", o)?;
        }
        if let Some(s) = opts.sub_offset {
            put(&mut h, "stream-fork-sub-offset", &s.to_string())?;
        }
        if let Some(ct) = &opts.content_type {
            put(&mut h, "content-type", ct)?;
        }
        self.put_stream(path, h, Bytes::new()).await
    }

    async fn put_stream(&self, path: &str, h: HeaderMap, body: Bytes) -> Result<Created, Error> {
        let url = self.stream_url(path)?;
        let (parts, _) = self.call(Method::PUT, &url, h, body).await?;
        Ok(Created {
            created: parts.status == StatusCode::CREATED,
            next_offset: header(&parts, "stream-next-offset").map(str::to_owned),
        })
    }

    /// Appends `body`.
    pub async fn append(&self, path: &str, body: Bytes, opts: &AppendOptions) -> Result<Appended, Error> {
        let url = self.stream_url(path)?;
        let mut h = HeaderMap::new();
        if let Some(ct) = &opts.content_type {
            put(&mut h, "content-type", ct)?;
        }
        if let Some(p) = &opts.producer {
            put(&mut h, "producer-id", &p.id)?;
            put(&mut h, "producer-epoch", &p.epoch.to_string())?;
            put(&mut h, "producer-seq", &p.seq.to_string())?;
        }
        if opts.close {
            put(&mut h, "stream-closed", "true")?;
        }
        let (parts, _) = self.call(Method::POST, &url, h, body).await?;
        Ok(Appended {
            next_offset: header(&parts, "stream-next-offset").map(str::to_owned),
            duplicate: opts.producer.is_some() && parts.status == StatusCode::NO_CONTENT,
        })
    }

    /// Closes the stream (idempotent, §5.3); returns its final offset.
    pub async fn close(&self, path: &str) -> Result<Option<String>, Error> {
        let url = self.stream_url(path)?;
        let mut h = HeaderMap::new();
        put(&mut h, "stream-closed", "true")?;
        let (parts, _) = self.call(Method::POST, &url, h, Bytes::new()).await?;
        Ok(header(&parts, "stream-next-offset").map(str::to_owned))
    }

    /// Deletes the stream (§5.4).
    pub async fn delete(&self, path: &str) -> Result<(), Error> {
        let url = self.stream_url(path)?;
        self.call(Method::DELETE, &url, HeaderMap::new(), Bytes::new()).await.map(|_| ())
    }

    /// The stream's metadata (§5.5).
    pub async fn head(&self, path: &str) -> Result<StreamInfo, Error> {
        let url = self.stream_url(path)?;
        let (parts, _) = self.call(Method::HEAD, &url, HeaderMap::new(), Bytes::new()).await?;
        let next_offset = header(&parts, "stream-next-offset").ok_or_else(|| Error::Protocol {
            url: url.to_string(),
            message: "HEAD without Stream-Next-Offset".into(),
        })?;
        Ok(StreamInfo {
            content_type: header(&parts, "content-type").map(str::to_owned),
            next_offset: next_offset.to_owned(),
            ttl_seconds: header(&parts, "stream-ttl").and_then(|v| v.parse().ok()),
            expires_at: header(&parts, "stream-expires-at").map(str::to_owned),
            closed: flag(&parts, "stream-closed"),
        })
    }

    /// One catch-up read from `offset` (`-1`: the start, `now`: the tail).
    pub async fn read(&self, path: &str, offset: &str) -> Result<Chunk, Error> {
        let mut url = self.stream_url(path)?;
        url.query_pairs_mut().append_pair("offset", offset);
        let (parts, data) = self.call(Method::GET, &url, HeaderMap::new(), Bytes::new()).await?;
        let next_offset = header(&parts, "stream-next-offset").ok_or_else(|| Error::Protocol {
            url: url.to_string(),
            message: "a read without Stream-Next-Offset".into(),
        })?;
        Ok(Chunk {
            data,
            next_offset: next_offset.to_owned(),
            up_to_date: flag(&parts, "stream-up-to-date"),
            closed: flag(&parts, "stream-closed"),
            content_type: header(&parts, "content-type").map(str::to_owned),
        })
    }
}
