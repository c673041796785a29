//! GET `live=sse`: catch-up then live tail as Server-Sent Events. Every data
//! event is followed by a control event (§5.8); the connection ends at EOF,
//! when the stream goes away, or after the configured duration (§10.2).

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use ds_protocol::cursor::next_cursor;
use ds_protocol::headers::is_json;
use ds_protocol::sse::{control_event, data_event, Control, DataEncoding};
use ds_protocol::{json, Offset};
use futures::Stream;
use tokio::time::Instant;

use super::{ReadRequest, ServiceError, ServiceResult, StreamService};
use crate::{HubSubscription, StreamHandle, StreamMeta, TailSignal};

/// The SSE body: framed events, ready to write.
pub type SseStream = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

struct SseState {
    svc: StreamService,
    stream: StreamHandle,
    pos: u64,
    encoding: DataEncoding,
    json: bool,
    client_cursor: Option<String>,
    sub: Box<dyn HubSubscription>,
    deadline: Instant,
    first: bool,
    done: bool,
    pending: VecDeque<Bytes>,
}

impl StreamService {
    /// The `Stream-Cursor` of a live response (long-poll or SSE control
    /// event), from the service's clock and the client's echoed cursor (§10.1).
    pub fn live_cursor(&self, client_cursor: Option<&str>) -> String {
        let jitter = self.random().in_range(1..=3600);
        next_cursor(self.clock.now_ms(), client_cursor, jitter)
    }

    /// Open an SSE read. Errors (404, 410, 400) are returned before any byte
    /// is streamed; the returned meta describes the stream at open time.
    pub async fn sse(&self, req: ReadRequest, client_cursor: Option<String>) -> ServiceResult<(StreamMeta, SseStream)> {
        if req.offset.is_none() {
            return Err(ServiceError::BadRequest("SSE reads need an offset".into()));
        }
        let stream = self.sub.registry.enter(&req.path);
        let mut sub = self.sub.hub.subscribe(&stream);
        let meta = self.live_read_meta(&stream, &mut sub, super::read::waits_at(req.offset)).await?;
        self.touch(&stream, &meta).await;
        let (pos, _) = self.start_position(&meta, req.offset).await?;
        let state = SseState {
            svc: self.clone(),
            stream,
            pos,
            encoding: DataEncoding::for_content_type(&meta.content_type),
            json: is_json(&meta.content_type),
            client_cursor,
            sub,
            deadline: Instant::now() + self.cfg.sse_max_duration,
            first: true,
            done: false,
            pending: VecDeque::new(),
        };
        let stream = futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(event) = st.pending.pop_front() {
                    return Some((event, st));
                }
                if st.done {
                    return None;
                }
                st.step().await;
            }
        });
        Ok((meta, Box::pin(stream)))
    }
}

impl SseState {
    /// Queue the next events, or wait for the stream to move, or finish.
    async fn step(&mut self) {
        let meta = match self.svc.live_read_meta(&self.stream, &mut self.sub, Some(self.pos)).await {
            Ok(meta) => meta,
            Err(_) => {
                self.done = true; // deleted or expired: end the connection
                return;
            }
        };
        if self.pos < meta.tail {
            let (raw, next) = match self.svc.read_bytes(&self.stream, &meta, self.pos).await {
                Ok(read) => read,
                // A reader that fell behind a trim: the connection ends, and
                // its reconnection at this offset is answered 410 with the
                // earliest offset (an event stream has no status to say it).
                Err(ServiceError::NotRetained { .. }) => {
                    self.done = true;
                    return;
                }
                Err(e) => {
                    tracing::warn!(path = %self.stream.path(), error = %e, "SSE read failed");
                    self.done = true;
                    return;
                }
            };
            let payload = if self.json { json::render_array(&raw) } else { raw };
            self.pending.push_back(data_event(&payload, self.encoding));
            self.pos = next;
            self.first = false;
            self.queue_control(&meta);
            return;
        }
        if self.first || meta.closed {
            self.first = false;
            self.queue_control(&meta);
            return;
        }
        if !self.svc.wait_changed(&mut self.sub, &TailSignal::of(&meta), self.deadline).await {
            self.done = true;
        }
    }

    fn queue_control(&mut self, meta: &StreamMeta) {
        let up_to_date = self.pos >= meta.tail;
        let closed = meta.closed && up_to_date;
        let cursor = (!closed).then(|| self.svc.live_cursor(self.client_cursor.as_deref()));
        let control = Control { next_offset: Offset(self.pos).to_string(), cursor, up_to_date, closed };
        self.pending.push_back(control_event(&control));
        if closed {
            self.done = true;
        }
    }
}
