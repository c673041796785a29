//! The write-ahead log file: where a batch of commits becomes durable.
//!
//! Why a log in front of redb (measured with `examples/throughput.rs` on the
//! project machine): a durable redb commit writes every B-tree page the batch
//! dirtied and syncs them, 3,783 commits/s for one writer where the same disk
//! syncs 12,000 small sequential writes a second. With the log, the commit
//! point is ONE sequential write + `fdatasync` of the batch's net writes; the
//! tables are then updated by a non-durable redb commit (no sync), and a
//! periodic checkpoint (a durable redb commit) makes them durable, after which
//! the log is emptied. How the writer orders these steps, and how a crash is
//! recovered, is in [`crate::redo`].
//!
//! Frame: `body length: u32 LE`, `CRC-32 of (lsn ‖ body): u32 LE`,
//! `lsn: u64 LE`, `body`. Entries are written one after another from the
//! start of the file, each synced before the next, with consecutive LSNs.
//!
//! Emptying the log after a checkpoint does not shrink the file (only a
//! clean shutdown does): the next entries overwrite the old ones from
//! offset 0, because syncing an overwrite
//! of allocated blocks costs no metadata update (measured here: 15–19k
//! `fdatasync`s a second for 150 B overwrites against 11k for appends that
//! grow the file). For the same reason the file is grown ahead of the
//! entries, [`GROW_STEP`] of zeros at a time, written and synced with the
//! entry that needs them: otherwise every entry past the largest log so far
//! (all of them after a start, and whenever the load rises) grows the file
//! and pays the metadata update (a `pwrite` + `fdatasync` loop of 322 B
//! entries on the project machine, 2026-12-04: 219 µs each growing the
//! file, 124–143 µs overwriting).
//! Reading therefore stops at the first frame that is short,
//! fails its checksum, or does not carry the next LSN: a torn last write, an
//! older entry left behind (every LSN written later is higher than any
//! still in the file, so an old entry never continues the sequence), or the
//! zeros ahead of the log (a zero header fails the checksum: the CRC of an
//! all-zero LSN is not zero).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// File name of the log inside the store directory.
pub const WAL_FILE: &str = "streams.wal";

const HEADER: usize = 16;

/// How far the file is grown ahead of the entries at a time (see the
/// module docs): one such write per 3,000-odd single-append entries.
pub(crate) const GROW_STEP: u64 = 1 << 20;

/// The open log. Owned by the writer thread (and by recovery before it).
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// End of the last entry known to be whole and synced.
    len: u64,
    /// Bytes of the file that are written (entries, old entries, or the
    /// zeros ahead of them): an entry that ends within them overwrites.
    written: u64,
    /// An append failed and invalidating its frame failed too: the file may
    /// hold an entry whose commits were answered with an error. Nothing more
    /// is appended until invalidating succeeds (see [`Wal::append`]).
    dirty_tail: bool,
}

impl Wal {
    /// Open (creating if needed) the log in `dir`. Call [`Wal::replay`]
    /// before the first append: it finds the end of the whole entries.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        let path = dir.join(WAL_FILE);
        let existed = path.exists();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if !existed {
            // The new directory entry must survive a crash like the data.
            File::open(dir)?.sync_all()?;
        }
        let len = file.metadata()?.len();
        Ok(Self { file, path, len, written: len, dirty_tail: false })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of whole entries in the log.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Call `apply` with each entry `(lsn, body)` of the log in order (see
    /// the module docs for where it ends). Stops at the first error `apply`
    /// returns.
    pub(crate) fn replay<E>(
        &mut self,
        mut apply: impl FnMut(u64, Vec<u8>) -> Result<(), E>,
    ) -> Result<Result<(), E>, io::Error> {
        let size = self.file.metadata()?.len();
        // Writes go to explicit offsets: the cursor is wherever the last
        // replay left it.
        (&self.file).seek(SeekFrom::Start(0))?;
        let mut reader = BufReader::with_capacity(1 << 20, &self.file);
        let (mut end, mut last) = (0u64, None::<u64>);
        loop {
            let mut header = [0u8; HEADER];
            if !read_whole(&mut reader, &mut header)? {
                break;
            }
            let body_len = u64::from(u32::from_le_bytes([header[0], header[1], header[2], header[3]]));
            if end + HEADER as u64 + body_len > size {
                break; // torn: the length runs past the file
            }
            let lsn_bytes: [u8; 8] = header[8..16].try_into().unwrap_or_default();
            let lsn = u64::from_le_bytes(lsn_bytes);
            if last.is_some_and(|last| lsn != last + 1) {
                break; // an entry of an earlier round, left behind
            }
            let mut body = vec![0u8; body_len as usize];
            if !read_whole(&mut reader, &mut body)? {
                break;
            }
            let sum = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            if frame_sum(&lsn_bytes, &body) != sum {
                break; // torn (or damaged) write
            }
            if let Err(e) = apply(lsn, body) {
                return Ok(Err(e));
            }
            end += HEADER as u64 + body_len;
            last = Some(lsn);
        }
        self.len = end;
        Ok(Ok(()))
    }

    /// Append entry `lsn` (the one after the last, or the first after
    /// [`Wal::clear`]) and sync it: when this returns `Ok`, the entry
    /// survives a crash. On an error the frame is invalidated again, so a
    /// failed append leaves nothing behind to be replayed; if even that fails,
    /// the error says the outcome is unknown and later appends are refused
    /// until invalidating succeeds.
    pub(crate) fn append(&mut self, lsn: u64, body: &[u8]) -> Result<(), AppendError> {
        if self.dirty_tail {
            self.invalidate_next().map_err(AppendError::Unknown)?;
        }
        let body_len = u32::try_from(body.len())
            .map_err(|_| AppendError::NotWritten(io::Error::other("log entry larger than 4 GiB")))?;
        let lsn_bytes = lsn.to_le_bytes();
        let mut frame = Vec::with_capacity(HEADER + body.len());
        frame.extend_from_slice(&body_len.to_le_bytes());
        frame.extend_from_slice(&frame_sum(&lsn_bytes, body).to_le_bytes());
        frame.extend_from_slice(&lsn_bytes);
        frame.extend_from_slice(body);
        let end = self.len + frame.len() as u64;
        let grown = self.grow_for(end);
        match self.file.write_all_at(&frame, self.len).and_then(|()| self.file.sync_data()) {
            Ok(()) => {
                self.len = end;
                self.written = self.written.max(grown).max(end);
                Ok(())
            }
            Err(e) => match self.invalidate_next() {
                Ok(()) => Err(AppendError::NotWritten(e)),
                Err(invalidate) => {
                    self.dirty_tail = true;
                    tracing::error!(error = %invalidate, "local store: could not invalidate a failed log append");
                    Err(AppendError::Unknown(e))
                }
            },
        }
    }

    /// Write zeros ahead of the log so that it reaches past `end`, rounded up
    /// to [`GROW_STEP`], unless the file already does; they are synced with
    /// the entry. Returns how far the file is written now. A failure (a
    /// full disk) is not the entry's: it is written without the zeros (any
    /// zeros that did land are harmless, and written again next time).
    fn grow_for(&self, end: u64) -> u64 {
        if end <= self.written {
            return self.written;
        }
        let target = end.div_ceil(GROW_STEP) * GROW_STEP;
        let Ok(n) = usize::try_from(target - self.written) else { return self.written };
        if let Err(e) = self.file.write_all_at(&vec![0u8; n], self.written) {
            tracing::debug!(error = %e, "local store: could not grow the log ahead of its entries");
            return self.written;
        }
        target
    }

    /// Empty the log, after a checkpoint made all of it durable in redb. No
    /// I/O: the next entry overwrites the first, and reading stops at the
    /// first old entry after the new ones (its LSN does not follow).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Give the file's space back (a clean shutdown, after the last
    /// checkpoint emptied the log).
    pub(crate) fn truncate_empty(&mut self) -> io::Result<()> {
        if self.len == 0 {
            self.file.set_len(0)?;
            self.file.sync_all()?;
            self.written = 0;
        }
        Ok(())
    }

    /// Zero the header of the frame after the last whole one, so whatever a
    /// failed append left there is never read as an entry.
    fn invalidate_next(&mut self) -> io::Result<()> {
        let size = self.file.metadata()?.len();
        if size > self.len {
            let n = (size - self.len).min(HEADER as u64) as usize;
            self.file.write_all_at(&[0u8; HEADER][..n], self.len)?;
            self.file.sync_data()?;
        }
        self.dirty_tail = false;
        Ok(())
    }
}

/// Why [`Wal::append`] failed.
#[derive(Debug)]
pub(crate) enum AppendError {
    /// Nothing of the entry is in the log.
    NotWritten(io::Error),
    /// The entry may be in the log (it would be replayed after a crash).
    Unknown(io::Error),
}

fn frame_sum(lsn: &[u8; 8], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(lsn);
    hasher.update(body);
    hasher.finalize()
}

/// Fill `buf`; `false` if the input ended first.
fn read_whole(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entries(wal: &mut Wal) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        wal.replay(|lsn, body| {
            out.push((lsn, body));
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
        out
    }

    #[test]
    fn entries_come_back_in_order_and_a_torn_tail_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path()).unwrap();
        assert!(entries(&mut wal).is_empty());
        wal.append(1, b"first").unwrap();
        wal.append(2, b"").unwrap();
        wal.append(3, b"third entry").unwrap();
        let whole = wal.len();
        drop(wal);

        // A crash in the middle of a fourth append: half its frame on disk.
        let file = OpenOptions::new().write(true).open(dir.path().join(WAL_FILE)).unwrap();
        let mut torn = 40u32.to_le_bytes().to_vec();
        torn.extend_from_slice(&[1, 2, 3, 4, 4, 0, 0, 0, 0, 0, 0, 0, b'x']);
        file.write_all_at(&torn, whole).unwrap();
        drop(file);

        let mut wal = Wal::open(dir.path()).unwrap();
        let got = entries(&mut wal);
        assert_eq!(got, vec![(1, b"first".to_vec()), (2, Vec::new()), (3, b"third entry".to_vec())]);
        assert_eq!(wal.len(), whole, "the log ends before the torn frame");
        // Appends continue after the last whole entry, over the torn bytes.
        wal.append(4, b"fourth").unwrap();
        assert_eq!(entries(&mut wal).last().unwrap(), &(4, b"fourth".to_vec()));
    }

    #[test]
    fn after_clear_new_entries_overwrite_and_old_ones_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path()).unwrap();
        for lsn in 1..=5 {
            wal.append(lsn, format!("old entry {lsn} with a longer body").as_bytes()).unwrap();
        }
        let size = std::fs::metadata(dir.path().join(WAL_FILE)).unwrap().len();
        wal.clear();
        assert!(entries(&mut wal).len() == 5, "clear does no I/O: a crash now replays the old round");
        wal.clear();
        wal.append(6, b"new 6").unwrap();
        wal.append(7, b"new 7").unwrap();
        assert_eq!(std::fs::metadata(dir.path().join(WAL_FILE)).unwrap().len(), size, "the file was not shrunk");
        // Reopened: the old entries behind the new ones are whole frames, but
        // their LSNs do not follow 7, so they end the log.
        let mut wal = Wal::open(dir.path()).unwrap();
        assert_eq!(entries(&mut wal), vec![(6, b"new 6".to_vec()), (7, b"new 7".to_vec())]);
    }

    #[test]
    fn the_file_grows_ahead_of_the_entries_and_its_zeros_end_the_log() {
        // A zero header is no entry: its checksum field (0) is not the CRC
        // of a zero LSN and an empty body.
        assert_ne!(frame_sum(&[0; 8], &[]), 0);
        let dir = tempfile::tempdir().unwrap();
        let file_len = || std::fs::metadata(dir.path().join(WAL_FILE)).unwrap().len();
        let mut wal = Wal::open(dir.path()).unwrap();
        assert_eq!(file_len(), 0);
        wal.append(1, b"first").unwrap();
        assert_eq!(file_len(), GROW_STEP, "grown a whole step ahead of the first entry");
        let body = vec![b'b'; 1000];
        let mut lsn = 1;
        while wal.len() + (HEADER + body.len()) as u64 <= GROW_STEP {
            lsn += 1;
            wal.append(lsn, &body).unwrap();
        }
        assert_eq!(file_len(), GROW_STEP, "entries within the step overwrite its zeros");
        lsn += 1;
        wal.append(lsn, &body).unwrap();
        assert_eq!(file_len(), 2 * GROW_STEP, "the entry past the step grew the file by another");
        let big = vec![b'g'; GROW_STEP as usize + 10];
        lsn += 1;
        wal.append(lsn, &big).unwrap();
        let whole = wal.len();
        assert_eq!(file_len(), whole.div_ceil(GROW_STEP) * GROW_STEP, "an entry larger than a step: rounded up");
        drop(wal);

        // Reopened (as after a crash): every entry, then the zeros end the log.
        let mut wal = Wal::open(dir.path()).unwrap();
        let got = entries(&mut wal);
        assert_eq!(got.len() as u64, lsn);
        assert_eq!(got.first().unwrap(), &(1, b"first".to_vec()));
        assert_eq!(got.last().unwrap(), &(lsn, big));
        assert_eq!(wal.len(), whole, "the log ends where its entries do, not at the file's end");
        // Appends go on after the last entry, into the zeros, without growing.
        let before = file_len();
        wal.append(lsn + 1, b"next").unwrap();
        assert_eq!(file_len(), before);
        assert_eq!(entries(&mut wal).last().unwrap(), &(lsn + 1, b"next".to_vec()));

        // A clean shutdown gives the space back; the next entry grows it again.
        wal.clear();
        wal.truncate_empty().unwrap();
        assert_eq!(file_len(), 0);
        wal.append(lsn + 2, b"again").unwrap();
        assert_eq!(file_len(), GROW_STEP);
        assert_eq!(entries(&mut wal), vec![(lsn + 2, b"again".to_vec())]);
    }

    #[test]
    fn a_damaged_entry_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path()).unwrap();
        wal.append(7, b"kept").unwrap();
        let first = wal.len();
        wal.append(8, b"damaged").unwrap();
        wal.append(9, b"after the damage").unwrap();
        drop(wal);
        let file = OpenOptions::new().write(true).open(dir.path().join(WAL_FILE)).unwrap();
        file.write_all_at(b"D", first + HEADER as u64).unwrap(); // the second entry's first body byte
        drop(file);

        let mut wal = Wal::open(dir.path()).unwrap();
        assert_eq!(entries(&mut wal), vec![(7, b"kept".to_vec())]);
    }
}
