//! Cutting an upload into appends deterministically, so that an idempotent
//! producer that retries the whole upload sends the same batches under the
//! same sequence numbers: the server answers the ones it has with `204`
//! and applies only the rest (protocol §5.2.1).
//!
//! Bytes are cut every `max_bytes`; JSON input (a sequence of JSON values,
//! whitespace between them) is cut between messages, at most `max_bytes`
//! of message text per append (a larger single message goes alone).

use std::io::Read;

use serde_json::value::RawValue;

use crate::json::batch_body;

/// What one append carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub body: Vec<u8>,
    /// Input bytes consumed up to the end of this piece (for progress).
    pub input_end: u64,
    /// Messages in it (JSON), or 0.
    pub messages: usize,
}

/// The pieces of a byte upload.
pub struct BytePieces<R> {
    input: R,
    max_bytes: usize,
    consumed: u64,
    done: bool,
}

impl<R: Read> BytePieces<R> {
    pub fn new(input: R, max_bytes: usize) -> Self {
        Self { input, max_bytes: max_bytes.max(1), consumed: 0, done: false }
    }
}

impl<R: Read> Iterator for BytePieces<R> {
    type Item = std::io::Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // Fill the piece completely unless the input ends: how the input
        // arrives (pipe reads of any size) must not move the cuts.
        let mut body = Vec::with_capacity(self.max_bytes.min(1 << 20));
        match (&mut self.input).take(self.max_bytes as u64).read_to_end(&mut body) {
            Err(e) => return Some(Err(e)),
            Ok(n) if n < self.max_bytes => self.done = true,
            Ok(_) => {}
        }
        if body.is_empty() {
            return None;
        }
        self.consumed += body.len() as u64;
        Some(Ok(Piece { body, input_end: self.consumed, messages: 0 }))
    }
}

/// The pieces of a JSON upload; `flatten` stores a top-level array's
/// elements as separate messages (the upstream CLI's `--batch-json`),
/// otherwise every value, arrays included, is one message.
pub struct JsonPieces<R: Read> {
    values: serde_json::StreamDeserializer<'static, serde_json::de::IoRead<Counting<R>>, Box<RawValue>>,
    consumed: std::rc::Rc<std::cell::Cell<u64>>,
    flatten: bool,
    max_bytes: usize,
    queued: std::collections::VecDeque<Box<RawValue>>,
    done: bool,
}

/// A reader that counts what was read from it.
pub struct Counting<R> {
    inner: R,
    count: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

impl<R: Read> JsonPieces<R> {
    pub fn new(input: R, max_bytes: usize, flatten: bool) -> Self {
        let consumed = std::rc::Rc::new(std::cell::Cell::new(0));
        let reader = Counting { inner: input, count: consumed.clone() };
        let values = serde_json::Deserializer::from_reader(reader).into_iter::<Box<RawValue>>();
        Self { values, consumed, flatten, max_bytes: max_bytes.max(1), queued: Default::default(), done: false }
    }

    /// The next message, from the queue of a flattened array or the input.
    fn next_message(&mut self) -> Option<std::io::Result<Box<RawValue>>> {
        loop {
            if let Some(m) = self.queued.pop_front() {
                return Some(Ok(m));
            }
            if self.done {
                return None;
            }
            let value = match self.values.next() {
                None => {
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("JSON input: {e}"))));
                }
                Some(Ok(v)) => v,
            };
            if self.flatten && value.get().starts_with('[') {
                match serde_json::from_str::<Vec<Box<RawValue>>>(value.get()) {
                    Ok(items) => self.queued.extend(items),
                    Err(e) => return Some(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
                }
                continue;
            }
            return Some(Ok(value));
        }
    }
}

impl<R: Read> Iterator for JsonPieces<R> {
    type Item = std::io::Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut batch: Vec<Box<RawValue>> = Vec::new();
        let mut size = 0;
        loop {
            // Peek by taking: a message that would overflow the piece waits
            // at the queue's front for the next one.
            let m = match self.next_message() {
                None => break,
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(m)) => m,
            };
            let len = m.get().len() + 1;
            if !batch.is_empty() && size + len > self.max_bytes {
                self.queued.push_front(m);
                break;
            }
            size += len;
            batch.push(m);
        }
        if batch.is_empty() {
            return None;
        }
        let body = batch_body(batch.iter().map(AsRef::as_ref));
        Some(Ok(Piece { body, input_end: self.consumed.get(), messages: batch.len() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reader that hands out at most `step` bytes per read, like a pipe.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn bodies<I: Iterator<Item = std::io::Result<Piece>>>(it: I) -> Vec<Vec<u8>> {
        it.map(|p| p.expect("piece").body).collect()
    }

    proptest! {
        /// The cuts depend on the input only, not on how reads return it;
        /// the pieces put back together are the input.
        #[test]
        fn byte_pieces_are_deterministic(data in proptest::collection::vec(any::<u8>(), 0..3000), max in 1usize..700, step in 1usize..300) {
            let whole = bodies(BytePieces::new(&data[..], max));
            let trickled = bodies(BytePieces::new(Trickle { data: &data, step }, max));
            prop_assert_eq!(&whole, &trickled);
            prop_assert_eq!(whole.concat(), data.clone());
            prop_assert!(whole.iter().all(|p| p.len() <= max && !p.is_empty()));
        }

        #[test]
        fn json_pieces_are_deterministic(n in 0usize..60, max in 1usize..200, step in 1usize..40) {
            let input: String = (0..n).map(|i| format!("{{\"i\":{i}}}\n")).collect();
            let whole = bodies(JsonPieces::new(input.as_bytes(), max, false));
            let trickled = bodies(JsonPieces::new(Trickle { data: input.as_bytes(), step }, max, false));
            prop_assert_eq!(&whole, &trickled);
            let messages: Vec<String> = whole.iter()
                .flat_map(|b| crate::json::messages(b).expect("array"))
                .map(|m| m.get().to_owned()).collect();
            let expected: Vec<String> = (0..n).map(|i| format!("{{\"i\":{i}}}")).collect();
            prop_assert_eq!(messages, expected);
        }
    }

    #[test]
    fn arrays_are_one_message_unless_flattened() {
        let input = br#"[{"a":1},{"a":2}] {"b":3}"#;
        assert_eq!(bodies(JsonPieces::new(&input[..], 1 << 20, false)), [br#"[[{"a":1},{"a":2}],{"b":3}]"#.to_vec()]);
        assert_eq!(bodies(JsonPieces::new(&input[..], 1 << 20, true)), [br#"[{"a":1},{"a":2},{"b":3}]"#.to_vec()]);
        // [[{}, {}]] flattened is the one message [{}, {}], as upstream documents.
        assert_eq!(bodies(JsonPieces::new(&b"[[{}, {}]]"[..], 1 << 20, true)), [b"[[{}, {}]]".to_vec()]);
    }

    #[test]
    fn malformed_json_is_an_error_not_a_truncated_upload() {
        let mut it = JsonPieces::new(&br#"{"a":1} {"b":"#[..], 1 << 20, false);
        assert!(it.next().expect("an item").is_err());
    }
}
