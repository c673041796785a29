//! [`Chunks`]: the stored bytes of one stream incarnation, as a vector of
//! chunks sorted by start.
//!
//! A vector rather than a `BTreeMap`: appends only ever add at the end (or
//! extend the last chunk), lookups are a binary search, and an idle stream
//! holding one small chunk costs one 40-byte allocation instead of a B-tree
//! leaf node of several hundred bytes.

use bytes::{Bytes, BytesMut};
use ds_core::JOINED_CHUNK_TARGET;

/// Chunks of one `(path, incarnation)`, sorted by start, never overlapping
/// (the commit preconditions guarantee it before [`Chunks::put`]).
#[derive(Default)]
pub(crate) struct Chunks(Vec<(u64, Bytes)>);

impl Chunks {
    /// The chunk containing position `pos` (if any), then every chunk that
    /// starts in `(pos, until)`, in order.
    pub(crate) fn covering(&self, pos: u64, until: u64) -> impl Iterator<Item = &(u64, Bytes)> {
        // Index of the first chunk starting after `pos`.
        let after = self.0.partition_point(|(start, _)| *start <= pos);
        let first = after.checked_sub(1).filter(|&i| {
            let (start, data) = &self.0[i];
            start + data.len() as u64 > pos
        });
        let end = self.0.partition_point(|(start, _)| *start < until).max(after);
        first.map(|i| &self.0[i]).into_iter().chain(self.0[after..end].iter())
    }

    /// Whether any stored byte lies in `[start, end)`.
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        self.covering(start, end).next().is_some()
    }

    /// Store the bytes appended at `start`, joined onto the chunk ending there
    /// while that stays within [`JOINED_CHUNK_TARGET`]: a catch-up read of
    /// small appends then walks one entry per few KiB instead of one per
    /// append. Always copied: a request body is often a slice of a larger
    /// network buffer, and keeping the slice would pin the whole buffer.
    pub(crate) fn put(&mut self, start: u64, data: &[u8]) {
        if let Some((row_start, row)) = self.0.last_mut() {
            if *row_start + row.len() as u64 == start && row.len() + data.len() <= JOINED_CHUNK_TARGET {
                let mut joined = BytesMut::with_capacity(row.len() + data.len());
                joined.extend_from_slice(row);
                joined.extend_from_slice(data);
                *row = joined.freeze();
                return;
            }
        }
        if self.0.capacity() == 0 {
            // Most streams hold a chunk or a few: no room for four up front.
            self.0.reserve_exact(1);
        }
        let at = self.0.partition_point(|(s, _)| *s < start);
        self.0.insert(at, (start, Bytes::copy_from_slice(data)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(chunks: &Chunks) -> Vec<(u64, usize)> {
        chunks.0.iter().map(|(s, d)| (*s, d.len())).collect()
    }

    #[test]
    fn small_appends_join_up_to_the_target_and_large_ones_stand_alone() {
        let mut chunks = Chunks::default();
        let mut expected = Vec::new();
        let mut tail = 0u64;
        for i in 0..100u8 {
            chunks.put(tail, &[i; 100]);
            expected.extend_from_slice(&[i; 100]);
            tail += 100;
        }
        // 40 appends of 100 B fit in 4,096 B: rows of 4,000, 4,000 and 2,000.
        assert_eq!(layout(&chunks), vec![(0, 4000), (4000, 4000), (8000, 2000)]);
        chunks.put(tail, &[9; JOINED_CHUNK_TARGET]);
        chunks.put(tail + JOINED_CHUNK_TARGET as u64, b"next");
        assert_eq!(layout(&chunks)[3..], [(tail, JOINED_CHUNK_TARGET), (tail + JOINED_CHUNK_TARGET as u64, 4)]);
        let joined: Vec<u8> = chunks.0.iter().take(3).flat_map(|(_, d)| d.iter().copied()).collect();
        assert_eq!(joined, expected, "joining keeps every byte at its position");
    }

    #[test]
    fn chunks_not_continuing_the_last_one_are_kept_apart_and_in_order() {
        let mut chunks = Chunks::default();
        chunks.put(30, b"elsewhere");
        chunks.put(10, b"fork data");
        chunks.put(50, b"x");
        assert_eq!(layout(&chunks), vec![(10, 9), (30, 9), (50, 1)]);
    }

    #[test]
    fn covering_starts_at_the_chunk_holding_pos_and_stops_before_until() {
        let mut chunks = Chunks::default();
        for (start, len) in [(0u64, 5usize), (5, 3), (10, 4)] {
            // 0..5 and 5..8 join; the gap 8..10 keeps 10..14 apart.
            chunks.put(start, &vec![b'a'; len]);
        }
        assert_eq!(layout(&chunks), vec![(0, 8), (10, 4)]);
        let starts = |pos, until| chunks.covering(pos, until).map(|(s, _)| *s).collect::<Vec<_>>();
        assert_eq!(starts(0, 20), vec![0, 10]);
        assert_eq!(starts(7, 11), vec![0, 10]);
        assert_eq!(starts(8, 10), Vec::<u64>::new(), "the gap holds nothing");
        assert_eq!(starts(8, 11), vec![10]);
        assert_eq!(starts(13, 14), vec![10]);
        assert_eq!(starts(14, 20), Vec::<u64>::new(), "nothing at or past the end");
        assert!(chunks.overlaps(9, 11) && !chunks.overlaps(8, 10) && !chunks.overlaps(14, 15));
    }
}
