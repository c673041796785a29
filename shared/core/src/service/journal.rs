//! Reading a JSON-mode stream as a journal of messages with positions, for
//! consumers inside the process (stream processors). A message's position is
//! the offset just past it: positions start above 0 and strictly increase,
//! and "everything after position p" is the stream read from offset p.

use bytes::Bytes;
use ds_protocol::headers::is_json;

use super::{ServiceError, ServiceResult, StreamService};

/// Messages of one journal read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPage {
    /// `(position, message)`: each message as stored (minified JSON, without
    /// its line terminator), its position the offset just past it.
    pub entries: Vec<(u64, Bytes)>,
    /// The stream's tail when read: the position of its last message.
    pub tail: u64,
    pub closed: bool,
}

impl StreamService {
    /// Messages of the JSON stream at `path` after position `after` (a
    /// message boundary), up to about `max_bytes`, only while the stream is
    /// still `incarnation`: a re-created stream answers
    /// [`ServiceError::IncarnationChanged`] and none of its data.
    pub async fn read_journal(
        &self,
        path: &str,
        incarnation: &str,
        after: u64,
        max_bytes: usize,
    ) -> ServiceResult<JournalPage> {
        let stream = self.sub.registry.enter(path);
        let meta = self.read_live_meta(&stream).await?;
        if meta.incarnation != incarnation {
            return Err(ServiceError::IncarnationChanged { expected: incarnation.to_owned(), found: meta.incarnation });
        }
        if !is_json(&meta.content_type) {
            return Err(ServiceError::BadRequest(format!("{path} is not a JSON stream")));
        }
        if after > meta.tail {
            return Err(ServiceError::BadRequest(format!("position {after} is beyond the tail {}", meta.tail)));
        }
        let mut entries = Vec::new();
        let mut pos = after;
        if after < meta.tail {
            let pieces = self.read_pieces(&stream, &meta, after, max_bytes.max(1), super::read::Cut::AtBudget).await?;
            for piece in pieces {
                for line in piece.split_inclusive(|b| *b == b'\n') {
                    pos += line.len() as u64;
                    let message = piece.slice_ref(line.strip_suffix(b"\n").unwrap_or(line));
                    entries.push((pos, message));
                }
            }
        }
        Ok(JournalPage { entries, tail: meta.tail, closed: meta.closed })
    }
}
