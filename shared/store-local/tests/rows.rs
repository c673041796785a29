//! How the local store lays appends out in rows: small appends share a row up
//! to a few KiB (so a catch-up read walks few rows), large ones stand alone,
//! and extending a row never hides damage to its stored bytes.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use ds_core::contract::fixtures::{append, assert_tiles, bytes_at, create};
use ds_core::{StoreError, StreamHandle};
use ds_store_local::{local_substrate, DB_FILE};
use redb::ReadableTable;

const ROW_TARGET: usize = ds_core::JOINED_CHUNK_TARGET;

type ChunkKey = (&'static str, &'static str, u64);
type ChunkValue = (u32, &'static [u8]);
const CHUNKS: redb::TableDefinition<ChunkKey, ChunkValue> = redb::TableDefinition::new("chunks.v2");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_appends_share_rows_large_ones_stand_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _due) = local_substrate(dir.path()).unwrap();
    let meta = create(&s, "rows/small").await;
    let mut expected = Vec::new();
    let mut starts = Vec::new();
    for i in 0..200u8 {
        let data = Bytes::from(vec![i; 100]);
        starts.push(append(&s, &meta.path, data.clone(), None).await.position);
        expected.extend_from_slice(&data);
    }
    let big = Bytes::from(vec![7u8; 3 * ROW_TARGET]);
    let big_at = append(&s, &meta.path, big.clone(), None).await.position;
    expected.extend_from_slice(&big);
    let after = append(&s, &meta.path, Bytes::from_static(b"after"), None).await;
    expected.extend_from_slice(b"after");

    let read_all = |s: ds_core::Substrate| {
        let (path, incarnation) = (meta.path.clone(), meta.incarnation.clone());
        async move {
            s.store.read_chunks(&StreamHandle::detached(&path), &incarnation, 0, after.meta.tail, usize::MAX).await
        }
    };
    // Served from the overlay (and the tables, if a checkpoint ran between).
    let chunks = read_all(s.clone()).await.unwrap();
    assert_tiles(&chunks, after.meta.tail);
    assert_eq!(bytes_at(&chunks, 0, after.meta.tail), expected);
    // The layout in the tables: dropping the store checkpoints everything.
    drop((s, _due));
    let (s, _due) = local_substrate(dir.path()).unwrap();
    let chunks = read_all(s.clone()).await.unwrap();
    assert_tiles(&chunks, after.meta.tail);
    assert_eq!(bytes_at(&chunks, 0, after.meta.tail), expected);
    let small_rows: Vec<_> = chunks.iter().filter(|c| c.start < big_at).collect();
    // 20,000 bytes in rows of whole 100 B appends up to 4,096 B: 40 per row.
    assert_eq!(
        small_rows.len(),
        5,
        "200 appends of 100 B in rows of 40: {:?}",
        small_rows.iter().map(|c| c.data.len()).collect::<Vec<_>>()
    );
    for row in &small_rows {
        assert!(
            row.data.len() <= ROW_TARGET && starts.contains(&row.start),
            "row at {} of {} B",
            row.start,
            row.data.len()
        );
    }
    let rest: Vec<_> = chunks.iter().filter(|c| c.start >= big_at).map(|c| (c.start, c.data.len())).collect();
    assert_eq!(rest, vec![(big_at, big.len()), (after.position, 5)], "a large append is a row of its own and ends it");

    // A read from inside a shared row gets the whole row; readers slice.
    let mid = s.store.read_chunks(&StreamHandle::detached(&meta.path), &meta.incarnation, 150, 160, 1).await.unwrap();
    assert_eq!((mid.len(), mid[0].start), (1, 0), "the row holding position 150");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_a_damaged_row_keeps_the_damage_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, incarnation) = {
        let (s, _due) = local_substrate(dir.path()).unwrap();
        let meta = create(&s, "rows/damaged").await;
        for part in [&b"first;"[..], b"second;", b"third;"] {
            append(&s, &meta.path, Bytes::copy_from_slice(part), None).await;
        }
        (meta.path, meta.incarnation)
        // Dropping the store checkpoints every commit into the tables.
    };
    {
        // Flip one stored bit of the shared row, keeping its checksum.
        let db = redb::Database::create(dir.path().join(DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(CHUNKS).unwrap();
            let (sum, mut bytes) = {
                let row = table.get((&*path, &*incarnation, 0)).unwrap().expect("one row from 0");
                let (sum, bytes) = row.value();
                (sum, bytes.to_vec())
            };
            assert_eq!(bytes, b"first;second;third;", "the three appends share one row");
            bytes[2] ^= 0x20;
            table.insert((&*path, &*incarnation, 0), (sum, bytes.as_slice())).unwrap();
        }
        txn.commit().unwrap();
    }
    let done = {
        let (s, _due) = local_substrate(dir.path()).unwrap();
        append(&s, &path, Bytes::from_static(b"fourth;"), None).await
        // The append sits in the overlay until a checkpoint writes it into
        // the tables, extending the damaged row: dropping the store does.
    };
    assert_eq!(done.position, 19);
    let (s, _due) = local_substrate(dir.path()).unwrap();
    let read = s.store.read_chunks(&StreamHandle::detached(&path), &incarnation, 0, done.meta.tail, usize::MAX).await;
    assert!(matches!(read, Err(StoreError::Corrupt { .. })), "the extended row still fails its check: {read:?}");
    let whole = s.store.read_contiguous(&StreamHandle::detached(&path), &incarnation, 0, done.meta.tail, 1 << 20).await;
    assert!(matches!(whole, Err(StoreError::Corrupt { .. })), "and is never served whole: {whole:?}");
    let from_inside = s.store.read_chunks(&StreamHandle::detached(&path), &incarnation, 20, 21, 1).await;
    assert!(matches!(from_inside, Err(StoreError::Corrupt { .. })), "nor from inside it: {from_inside:?}");
}
