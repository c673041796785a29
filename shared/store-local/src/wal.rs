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
//! `lsn: u64 LE`, `body`. Entries are appended at the end and synced one at a
//! time, so only the last one can be torn by a crash: reading stops at the
//! first frame that is short or fails its checksum, and that tail is cut off.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// File name of the log inside the store directory.
pub const WAL_FILE: &str = "streams.wal";

const HEADER: usize = 16;

/// The open log. Owned by the writer thread (and by recovery before it).
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// End of the last entry known to be whole and synced.
    len: u64,
    /// An append failed and cutting its bytes off failed too: the file may
    /// end with an entry whose commits were answered with an error. Nothing
    /// more is appended until the cut succeeds (see [`Wal::append`]).
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
        Ok(Self { file, path, len, dirty_tail: false })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of whole entries in the log.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Call `apply` with each whole entry `(lsn, body)` in order, then cut
    /// off any torn tail. Stops at the first error `apply` returns.
    pub(crate) fn replay<E>(
        &mut self,
        mut apply: impl FnMut(u64, Vec<u8>) -> Result<(), E>,
    ) -> Result<Result<(), E>, io::Error> {
        let size = self.file.metadata()?.len();
        // Appends write at explicit offsets: the cursor is wherever the last
        // replay left it.
        (&self.file).seek(SeekFrom::Start(0))?;
        let mut reader = BufReader::with_capacity(1 << 20, &self.file);
        let mut end = 0u64;
        loop {
            let mut header = [0u8; HEADER];
            if !read_whole(&mut reader, &mut header)? {
                break;
            }
            let body_len = u64::from(u32::from_le_bytes([header[0], header[1], header[2], header[3]]));
            if end + HEADER as u64 + body_len > size {
                break; // torn: the length runs past the file
            }
            let mut body = vec![0u8; body_len as usize];
            if !read_whole(&mut reader, &mut body)? {
                break;
            }
            let sum = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            let lsn_bytes: [u8; 8] = header[8..16].try_into().unwrap_or_default();
            if frame_sum(&lsn_bytes, &body) != sum {
                break; // torn (or damaged) tail
            }
            if let Err(e) = apply(u64::from_le_bytes(lsn_bytes), body) {
                return Ok(Err(e));
            }
            end += HEADER as u64 + body_len;
        }
        drop(reader);
        if end < size {
            tracing::warn!(log = %self.path.display(), whole = end, size, "local store: cutting a torn log tail");
            self.file.set_len(end)?;
            self.file.sync_all()?;
        }
        self.len = end;
        Ok(Ok(()))
    }

    /// Append one entry and sync it: when this returns `Ok`, the entry
    /// survives a crash. On an error the entry's bytes are cut off again, so
    /// a failed append leaves nothing behind to be replayed; if even that
    /// fails, the error says the outcome is unknown and later appends are
    /// refused until a cut succeeds.
    pub(crate) fn append(&mut self, lsn: u64, body: &[u8]) -> Result<(), AppendError> {
        if self.dirty_tail {
            self.cut().map_err(AppendError::Unknown)?;
        }
        let body_len = u32::try_from(body.len())
            .map_err(|_| AppendError::NotWritten(io::Error::other("log entry larger than 4 GiB")))?;
        let lsn_bytes = lsn.to_le_bytes();
        let mut frame = Vec::with_capacity(HEADER + body.len());
        frame.extend_from_slice(&body_len.to_le_bytes());
        frame.extend_from_slice(&frame_sum(&lsn_bytes, body).to_le_bytes());
        frame.extend_from_slice(&lsn_bytes);
        frame.extend_from_slice(body);
        match self.file.write_all_at(&frame, self.len).and_then(|()| self.file.sync_data()) {
            Ok(()) => {
                self.len += frame.len() as u64;
                Ok(())
            }
            Err(e) => match self.cut() {
                Ok(()) => Err(AppendError::NotWritten(e)),
                Err(cut) => {
                    self.dirty_tail = true;
                    tracing::error!(error = %cut, "local store: could not cut a failed log append off");
                    Err(AppendError::Unknown(e))
                }
            },
        }
    }

    /// Empty the log (after a checkpoint made all of it durable in redb).
    pub(crate) fn clear(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.sync_all()?;
        self.len = 0;
        self.dirty_tail = false;
        Ok(())
    }

    /// Cut the file back to its whole entries.
    fn cut(&mut self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_all()?;
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
    fn entries_come_back_in_order_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path()).unwrap();
        assert!(entries(&mut wal).is_empty());
        wal.append(1, b"first").unwrap();
        wal.append(2, b"").unwrap();
        wal.append(3, b"third entry").unwrap();
        let whole = wal.len();
        drop(wal);

        // A crash in the middle of a fourth append: half its frame on disk.
        let file = OpenOptions::new().append(true).open(dir.path().join(WAL_FILE)).unwrap();
        let mut torn = 40u32.to_le_bytes().to_vec();
        torn.extend_from_slice(&[1, 2, 3, 4, 4, 0, 0, 0, 0, 0, 0, 0, b'x']);
        file.write_all_at(&torn, whole).unwrap();
        drop(file);

        let mut wal = Wal::open(dir.path()).unwrap();
        let got = entries(&mut wal);
        assert_eq!(got, vec![(1, b"first".to_vec()), (2, Vec::new()), (3, b"third entry".to_vec())]);
        assert_eq!(wal.len(), whole, "the torn tail was cut");
        assert_eq!(std::fs::metadata(dir.path().join(WAL_FILE)).unwrap().len(), whole);
        // Appends continue after the last whole entry.
        wal.append(4, b"fourth").unwrap();
        assert_eq!(entries(&mut wal).last().unwrap(), &(4, b"fourth".to_vec()));
    }

    #[test]
    fn a_damaged_entry_ends_the_log_and_clear_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::open(dir.path()).unwrap();
        wal.append(7, b"kept").unwrap();
        let first = wal.len();
        wal.append(8, b"damaged").unwrap();
        drop(wal);
        let file = OpenOptions::new().write(true).open(dir.path().join(WAL_FILE)).unwrap();
        file.write_all_at(b"D", first + HEADER as u64).unwrap(); // flip the body's first byte
        drop(file);

        let mut wal = Wal::open(dir.path()).unwrap();
        assert_eq!(entries(&mut wal), vec![(7, b"kept".to_vec())]);
        wal.clear().unwrap();
        assert_eq!(wal.len(), 0);
        assert!(entries(&mut Wal::open(dir.path()).unwrap()).is_empty());
    }
}
