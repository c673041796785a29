//! Seal / compaction: inline chunks packed into one S3 segment read back
//! byte-identical (one ranged GET for the run), concurrent appends are not
//! disturbed, a failed seal leaves the stream as it was, and the sweeper
//! removes orphaned objects but never referenced ones.

use bytes::Bytes;
use ds_core::contract::fixtures::{append, create, read_all, unique_path, wall_clock_ms};
use ds_core::{Commit, Op, StreamHandle};
use ds_store_aws::segments::SealOptions;
use ds_store_aws::test_util::AwsFactory;
use ds_store_aws::{Fault, FaultPoint};

fn piece(i: usize) -> Bytes {
    Bytes::from(format!("[piece {i:03}{}]", "-".repeat(i % 13)))
}

fn opts() -> SealOptions {
    SealOptions { min_chunks: 4, max_chunks: 99, max_bytes: 1 << 20, keep_tail_bytes: 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_read_back_identically() {
    let Some(f) = AwsFactory::new("sealed_segments_read_back_identically").await else { return };
    let aws = f.aws();
    let s = aws.substrate();
    let path = unique_path("seal");
    let meta = create(&s, &path).await;
    let mut expected = Vec::new();
    for i in 0..40 {
        append(&s, &path, piece(i), None).await;
        expected.extend_from_slice(&piece(i));
    }
    let tail = expected.len() as u64;
    let before = read_all(&s, &path, &meta.incarnation, tail).await;

    let report = aws.seal(&path, SealOptions { keep_tail_bytes: 40, ..opts() }).await.expect("seal");
    assert!(report.chunks >= 4, "{report:?}");
    let (start, end) = report.range.expect("sealed range");
    assert_eq!(start, 0);
    assert!(end <= tail - 40, "the newest bytes stay inline");

    // Same chunks, same bytes, from this and from a fresh instance; the
    // sealed run is served by ranged GETs into the segment.
    let other = f.aws().substrate();
    for sub in [&s, &other] {
        let after = read_all(sub, &path, &meta.incarnation, tail).await;
        assert_eq!(after, before, "sealing never changes what is read");
        let whole = sub
            .store
            .read_chunks(&StreamHandle::detached(&path), &meta.incarnation, 0, tail, usize::MAX)
            .await
            .expect("read");
        let bytes: Vec<u8> = whole.iter().flat_map(|c| c.data.to_vec()).collect();
        assert_eq!(bytes, expected);
        // Reads starting inside the sealed range, across its end.
        let mid = sub
            .store
            .read_chunks(&StreamHandle::detached(&path), &meta.incarnation, end - 3, end + 3, usize::MAX)
            .await
            .expect("read");
        assert!(mid.first().is_some_and(|c| c.start <= end - 3));
    }

    // Appends continue; a second seal picks up the next run only.
    for i in 40..60 {
        append(&s, &path, piece(i), None).await;
        expected.extend_from_slice(&piece(i));
    }
    let second = aws.seal(&path, opts()).await.expect("seal again");
    assert_eq!(second.range.map(|r| r.0), Some(end), "{second:?}");
    let tail = expected.len() as u64;
    let bytes: Vec<u8> =
        read_all(&other, &path, &meta.incarnation, tail).await.iter().flat_map(|c| c.data.to_vec()).collect();
    assert_eq!(bytes, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_seal_changes_nothing_and_leaves_no_segment() {
    let Some(f) = AwsFactory::new("failed_seal_changes_nothing_and_leaves_no_segment").await else { return };
    let aws = f.aws();
    let s = aws.substrate();
    let path = unique_path("seal-fail");
    let meta = create(&s, &path).await;
    for i in 0..10 {
        append(&s, &path, piece(i), None).await;
    }
    let m = s.store.read_meta(&StreamHandle::detached(&path)).await.expect("read").expect("exists");
    let before = read_all(&s, &path, &meta.incarnation, m.tail).await;
    aws.inject_fault(FaultPoint::S3Put, Fault::Throttle, 1);
    assert!(aws.seal(&path, opts()).await.is_err(), "the segment put failed");
    assert_eq!(read_all(&s, &path, &meta.incarnation, m.tail).await, before);

    // The stream is deleted between the segment put and the swap: the swap's
    // conditions fail, nothing is re-created, the segment is discarded.
    let gone = Commit {
        ops: vec![Op::DeleteStream {
            path: path.as_str().into(),
            incarnation: meta.incarnation.clone(),
            expect_version: m.version,
        }],
    };
    s.store.commit(gone).await.expect("delete");
    let report = aws.seal(&path, opts()).await.expect("seal of a deleted stream");
    assert_eq!(report.chunks, 0);
    assert!(s
        .store
        .read_chunks(&StreamHandle::detached(&path), &meta.incarnation, 0, m.tail, usize::MAX)
        .await
        .expect("read")
        .is_empty());
    let swept = aws.sweep(&path, 0, wall_clock_ms()).await.expect("sweep");
    assert_eq!(swept.objects_deleted, 0, "no segment was left behind: {swept:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeper_removes_orphans_only() {
    let Some(f) = AwsFactory::new("sweeper_removes_orphans_only").await else { return };
    let aws = f.aws();
    let s = aws.substrate();
    let path = unique_path("sweep");
    let meta = create(&s, &path).await;
    let big = Bytes::from(vec![b'x'; 64 * 1024]);
    append(&s, &path, big.clone(), None).await;
    // An orphan: an object written for a commit that never happened (crash
    // between the S3 put and the transaction).
    let orphan = ds_store_aws::schema::ObjectKey::Chunk {
        path: path.clone(),
        incarnation: meta.incarnation.to_string(),
        start: big.len() as u64,
        nonce: "crashed".into(),
    }
    .render();
    f.clients()
        .s3
        .put_object()
        .bucket(&f.cfg.bucket)
        .key(&orphan)
        .body(aws_sdk_s3::primitives::ByteStream::from(Bytes::from_static(b"never committed")))
        .send()
        .await
        .expect("put orphan");
    // Within the grace period nothing is touched (a commit may be in flight).
    let young = aws.sweep(&path, 3_600_000, wall_clock_ms()).await.expect("sweep");
    assert_eq!(young.objects_deleted, 0);
    let swept = aws.sweep(&path, 0, wall_clock_ms() + 1_000).await.expect("sweep");
    assert_eq!(swept.objects_deleted, 1, "only the orphan: {swept:?}");
    let chunks = read_all(&s, &path, &meta.incarnation, big.len() as u64).await;
    assert_eq!(chunks.first().map(|c| c.data.clone()), Some(big), "referenced data survives");

    // A deleted incarnation's leftovers (as if its purge had crashed) go too:
    // its chunk items and its objects; the live incarnation's stay.
    let stale = ds_store_aws::codec::chunk_to_item(
        &path,
        "dead-incarnation",
        &ds_store_aws::codec::ChunkItem {
            start: 0,
            end: 3,
            body: ds_store_aws::codec::ChunkBody::Inline(Bytes::from_static(b"old")),
        },
    );
    f.clients().ddb.put_item().table_name(&f.cfg.table).set_item(Some(stale)).send().await.expect("put stale item");
    let dead_object = ds_store_aws::schema::ObjectKey::Chunk {
        path: path.clone(),
        incarnation: "dead-incarnation".into(),
        start: 0,
        nonce: "old".into(),
    }
    .render();
    f.clients()
        .s3
        .put_object()
        .bucket(&f.cfg.bucket)
        .key(&dead_object)
        .body(aws_sdk_s3::primitives::ByteStream::from(Bytes::from_static(b"old")))
        .send()
        .await
        .expect("put dead object");
    let swept = aws.sweep(&path, 3_600_000, wall_clock_ms()).await.expect("sweep");
    assert_eq!(swept, ds_store_aws::cleanup::SweepReport { items_deleted: 1, objects_deleted: 1 });
    let dead =
        s.store.read_chunks(&StreamHandle::detached(&path), "dead-incarnation", 0, 10, usize::MAX).await.expect("read");
    assert!(dead.is_empty());
    let live = read_all(&s, &path, &meta.incarnation, 64 * 1024).await;
    assert_eq!(live.len(), 1, "the live incarnation is untouched");
}
