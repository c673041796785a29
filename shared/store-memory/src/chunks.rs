//! [`Chunks`]: the stored bytes of one stream incarnation, as a vector of
//! chunks sorted by start.
//!
//! A vector rather than a `BTreeMap`: appends only ever add at the end (or
//! extend the last chunk), lookups are a binary search, and an idle stream
//! holding one small chunk costs one small allocation instead of a B-tree
//! leaf node of several hundred bytes.

use bytes::{Bytes, BytesMut};
use ds_core::JOINED_CHUNK_TARGET;

/// Chunks of one `(path, incarnation)`, sorted by start, never overlapping
/// (the commit preconditions guarantee it before [`Chunks::put`]).
#[derive(Default)]
pub(crate) struct Chunks(Vec<(u64, Row)>);

/// The bytes of one chunk. Only the last chunk grows: small appends are
/// joined onto it in place (amortized doubling up to
/// [`JOINED_CHUNK_TARGET`]) instead of copying the whole chunk into a new
/// buffer on every append, which on a 4 KiB row of 100 B appends was the
/// memory store's largest copy and allocator churn per append.
pub(crate) enum Row {
    Frozen(Bytes),
    Growing(BytesMut),
}

impl Row {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Row::Frozen(b) => b,
            Row::Growing(b) => b,
        }
    }

    /// The chunk as a shared buffer: free for a frozen one, a copy (of at
    /// most [`JOINED_CHUNK_TARGET`] bytes) of a growing one.
    pub(crate) fn to_bytes(&self) -> Bytes {
        match self {
            Row::Frozen(b) => b.clone(),
            Row::Growing(b) => Bytes::copy_from_slice(b),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes().len()
    }
}

impl Chunks {
    /// The chunk containing position `pos` (if any), then every chunk that
    /// starts in `(pos, until)`, in order.
    pub(crate) fn covering(&self, pos: u64, until: u64) -> impl Iterator<Item = &(u64, Row)> {
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
        // Every append asks this just past the last chunk: answered without
        // the two binary searches.
        if let Some((last_start, last)) = self.0.last() {
            if *last_start + last.len() as u64 <= start {
                return false;
            }
        }
        self.covering(start, end).next().is_some()
    }

    /// Drop the chunks that end at or before `below` (a trim's reclaim);
    /// one straddling it stays whole. Returns how many were dropped.
    pub(crate) fn drop_below(&mut self, below: u64) -> usize {
        let gone = self.0.partition_point(|(start, row)| start + row.len() as u64 <= below);
        self.0.drain(..gone);
        gone
    }

    /// Store the bytes appended at `start`, joined onto the chunk ending there
    /// while that stays within [`JOINED_CHUNK_TARGET`]: a catch-up read of
    /// small appends then walks one entry per few KiB instead of one per
    /// append. Always copied: a request body is often a slice of a larger
    /// network buffer, and keeping the slice would pin the whole buffer.
    pub(crate) fn put(&mut self, start: u64, data: &[u8]) {
        if let Some((row_start, row)) = self.0.last_mut() {
            let joined = row.len() + data.len();
            if *row_start + row.len() as u64 == start && joined <= JOINED_CHUNK_TARGET {
                match row {
                    Row::Growing(buf) if buf.capacity() >= joined => buf.extend_from_slice(data),
                    _ => {
                        // Double, capped at the target, allocated exactly
                        // (`BytesMut::reserve` may round up past the cap): a
                        // stream that stops here wastes at most what it holds.
                        let want = joined.max((row.len() * 2).min(JOINED_CHUNK_TARGET));
                        let mut buf = BytesMut::with_capacity(want);
                        buf.extend_from_slice(row.bytes());
                        buf.extend_from_slice(data);
                        *row = Row::Growing(buf);
                    }
                }
                return;
            }
        }
        if self.0.capacity() == 0 {
            // Most streams hold a chunk or a few: no room for four up front.
            self.0.reserve_exact(1);
        }
        let at = self.0.partition_point(|(s, _)| *s < start);
        if at < self.0.len() {
            // Not the last chunk: only the last one may grow.
            self.0.insert(at, (start, Row::Frozen(Bytes::copy_from_slice(data))));
        } else {
            if let Some((_, row @ Row::Growing(_))) = self.0.last_mut() {
                // Full, or not continued: it grows no more.
                if let Row::Growing(buf) = std::mem::replace(row, Row::Frozen(Bytes::new())) {
                    *row = Row::Frozen(buf.freeze());
                }
            }
            // Exactly its size: an idle stream of one small append keeps no
            // spare capacity.
            self.0.push((start, Row::Growing(BytesMut::from(data))));
        }
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
        let joined: Vec<u8> = chunks.0.iter().take(3).flat_map(|(_, d)| d.bytes().iter().copied()).collect();
        assert_eq!(joined, expected, "joining keeps every byte at its position");
    }

    #[test]
    fn only_the_last_chunk_grows_within_the_target_and_reads_are_snapshots() {
        let mut chunks = Chunks::default();
        chunks.put(0, &[1; 100]);
        let Row::Growing(first) = &chunks.0[0].1 else { panic!("the last chunk grows") };
        assert_eq!(first.capacity(), 100, "a stream of one append holds no spare capacity");
        let before = chunks.0[0].1.to_bytes();
        let mut tail = 100u64;
        for _ in 0..45 {
            chunks.put(tail, &[2; 100]);
            tail += 100;
            for (_, row) in &chunks.0 {
                if let Row::Growing(buf) = row {
                    assert!(buf.capacity() <= JOINED_CHUNK_TARGET, "growth stops at the target");
                }
            }
        }
        assert_eq!(before, Bytes::from(vec![1; 100]), "a chunk read earlier is not changed by later appends");
        assert_eq!(layout(&chunks), vec![(0, 4000), (4000, 600)]);
        assert!(matches!(chunks.0[0].1, Row::Frozen(_)) && matches!(chunks.0[1].1, Row::Growing(_)));
        let read: Vec<u8> = chunks.covering(0, tail).flat_map(|(_, r)| r.to_bytes().to_vec()).collect();
        let mut expected = vec![1; 100];
        expected.extend(std::iter::repeat_n(2, 4500));
        assert_eq!(read, expected);
    }

    #[test]
    fn drop_below_frees_whole_chunks_only() {
        let mut chunks = Chunks::default();
        chunks.put(0, &[1; JOINED_CHUNK_TARGET]);
        chunks.put(JOINED_CHUNK_TARGET as u64, &[2; JOINED_CHUNK_TARGET]);
        chunks.put(2 * JOINED_CHUNK_TARGET as u64, b"tail");
        let second = JOINED_CHUNK_TARGET as u64;
        assert_eq!(chunks.drop_below(second + 1), 1, "the chunk straddling the boundary stays");
        assert_eq!(layout(&chunks)[0], (second, JOINED_CHUNK_TARGET));
        assert_eq!(chunks.drop_below(second + 1), 0, "idempotent");
        assert_eq!(chunks.drop_below(u64::MAX), 2);
        assert!(layout(&chunks).is_empty());
        chunks.put(2 * second + 4, b"more");
        assert_eq!(layout(&chunks), vec![(2 * second + 4, 4)], "appends go on after a full reclaim");
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
