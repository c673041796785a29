//! Response bodies through Lambda's streaming runtime: every body frame the
//! router yields becomes its own chunk on the way to the client, whereas the
//! local server (hyper) writes whatever frames are ready in one go. An SSE
//! batch is a `data` event immediately followed by its `control` event (two
//! frames, both ready at once); sent as two chunks, a client that reads until
//! it has seen `event: control` followed by a blank line can stop at a payload
//! line that merely contains that text and never see the real control event.
//! [`Coalesce`] restores the local server's behaviour: frames that are ready
//! together leave together, so each SSE batch (data and control) reaches the
//! client as one chunk.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// Stop gathering ready frames past this many bytes (bounds the copy; an
/// SSE batch is at most the read budget plus framing, well below it).
pub const MAX_COALESCED_BYTES: usize = 4 * 1024 * 1024;

/// A body whose data frames that are ready at the same poll are joined into
/// one frame. Bytes, order, errors and trailers are passed through unchanged.
#[derive(Debug)]
pub struct Coalesce<B: Body> {
    inner: B,
    /// The inner body ended while a joined frame was being returned.
    ended: bool,
    /// A trailers frame or an error met after some data was gathered:
    /// returned by the next poll.
    held: Option<Result<Frame<Bytes>, B::Error>>,
}

// Only `inner` is ever polled through a pin, and it is `Unpin`; the held
// error is moved, never pinned.
impl<B: Body + Unpin> Unpin for Coalesce<B> {}

impl<B: Body> Coalesce<B> {
    pub fn new(inner: B) -> Self {
        Self { inner, ended: false, held: None }
    }
}

/// Data gathered during one poll: the first frame as is (no copy when it is
/// alone), joined with later ones in a buffer.
enum Gathered {
    None,
    One(Bytes),
    Many(BytesMut),
}

impl Gathered {
    fn len(&self) -> usize {
        match self {
            Self::None => 0,
            Self::One(b) => b.len(),
            Self::Many(b) => b.len(),
        }
    }

    fn push(&mut self, data: Bytes) {
        *self = match std::mem::replace(self, Self::None) {
            Self::None => Self::One(data),
            Self::One(first) => {
                let mut buf = BytesMut::with_capacity(first.len() + data.len());
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&data);
                Self::Many(buf)
            }
            Self::Many(mut buf) => {
                buf.extend_from_slice(&data);
                Self::Many(buf)
            }
        };
    }

    fn into_frame(self) -> Option<Frame<Bytes>> {
        match self {
            Self::None => None,
            Self::One(b) => Some(Frame::data(b)),
            Self::Many(b) => Some(Frame::data(b.freeze())),
        }
    }
}

impl<B> Body for Coalesce<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(held));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        let mut gathered = Gathered::None;
        while gathered.len() < MAX_COALESCED_BYTES {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    this.ended = true;
                    break;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => gathered.push(data),
                    Err(other) => {
                        this.held = Some(Ok(other));
                        break;
                    }
                },
                Poll::Ready(Some(Err(e))) => {
                    this.held = Some(Err(e));
                    break;
                }
            }
        }
        match gathered.into_frame() {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None => match this.held.take() {
                Some(held) => Poll::Ready(Some(held)),
                None if this.ended => Poll::Ready(None),
                None => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // Nothing is kept between polls except a trailers frame or an error,
        // so the inner body's remaining size is this body's remaining size.
        if self.ended {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    type Item = Result<Frame<Bytes>, &'static str>;
    type Frames = Pin<Box<dyn futures::Stream<Item = Item> + Send>>;

    /// A body whose frames become ready when the test sends them.
    fn body(mut rx: tokio::sync::mpsc::UnboundedReceiver<Item>) -> Coalesce<StreamBody<Frames>> {
        let frames: Frames = Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        Coalesce::new(StreamBody::new(frames))
    }

    fn data(s: &'static str) -> Item {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    async fn next_data<B: Body<Data = Bytes> + Unpin>(b: &mut B) -> Option<Bytes>
    where
        B::Error: std::fmt::Debug,
    {
        let frame = b.frame().await?.expect("no error");
        Some(frame.into_data().expect("a data frame"))
    }

    #[tokio::test]
    async fn frames_ready_together_leave_as_one_and_later_ones_separately() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut b = body(rx);
        tx.send(data("event: data\ndata:x\n\n")).expect("receiver alive");
        tx.send(data("event: control\ndata:{}\n\n")).expect("receiver alive");
        assert_eq!(
            next_data(&mut b).await.as_deref(),
            Some(&b"event: data\ndata:x\n\nevent: control\ndata:{}\n\n"[..])
        );
        // Nothing ready: the body waits (it does not end, nor spin).
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), b.frame()).await;
        assert!(waiting.is_err(), "pending while the inner body is");
        tx.send(data("later")).expect("receiver alive");
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"later"[..]));
        drop(tx);
        assert!(b.frame().await.is_none(), "ends when the inner body ends");
        assert!(b.is_end_stream());
    }

    #[tokio::test]
    async fn errors_and_trailers_follow_the_data_gathered_before_them() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut b = body(rx);
        tx.send(data("a")).expect("receiver alive");
        tx.send(data("b")).expect("receiver alive");
        tx.send(Err("boom")).expect("receiver alive");
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"ab"[..]));
        assert_eq!(b.frame().await.map(|r| r.err()), Some(Some("boom")));

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut b = body(rx);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-t", http::HeaderValue::from_static("1"));
        tx.send(data("a")).expect("receiver alive");
        tx.send(Ok(Frame::trailers(trailers))).expect("receiver alive");
        drop(tx);
        assert_eq!(next_data(&mut b).await.as_deref(), Some(&b"a"[..]));
        let t = b.frame().await.expect("trailers").expect("ok");
        assert!(t.is_trailers());
        assert!(b.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_whole_body_and_an_empty_body_pass_through() {
        let whole = Coalesce::new(axum::body::Body::from("complete response"));
        assert_eq!(whole.size_hint().exact(), Some(17));
        assert_eq!(&whole.collect().await.expect("body").to_bytes()[..], b"complete response");
        let mut empty = Coalesce::new(axum::body::Body::empty());
        assert!(empty.frame().await.is_none());

        // A stream of many ready frames is one frame, bounded by the cap.
        let chunks = futures::stream::iter(
            (0..3).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b'x'; MAX_COALESCED_BYTES / 2]))),
        );
        let mut big = Coalesce::new(axum::body::Body::from_stream(chunks));
        let first = next_data(&mut big).await.expect("first");
        assert_eq!(first.len(), MAX_COALESCED_BYTES, "stops gathering at the cap");
        assert_eq!(next_data(&mut big).await.map(|b| b.len()), Some(MAX_COALESCED_BYTES / 2));
        assert!(big.frame().await.is_none());
    }
}
