//! Retention on AWS: a trim's reclaim deletes the chunk items and S3
//! segments wholly below the stream's earliest offset and nothing else
//! (counted at the emulator: DynamoDB `Query` of the chunk key range, S3
//! `ListObjectsV2` of the stream's prefixes), a second reclaim changes
//! nothing, and reads answer 410 below and the same bytes above.

use bytes::Bytes;
use ds_core::contract::fixtures::{append, create, unique_path};
use ds_core::{LiveMode, ReadRequest, ServiceError, StreamService};
use ds_protocol::{Offset, ReadOffset};
use ds_store_aws::segments::SealOptions;
use ds_store_aws::test_util::AwsFactory;

fn piece(i: usize) -> Bytes {
    Bytes::from(format!("[piece {i:03}{}]", "-".repeat(i % 7)))
}

/// `(start, end)` of every chunk item of the incarnation, from the table.
async fn chunk_items(f: &AwsFactory, path: &str, incarnation: &str) -> Vec<(u64, u64)> {
    use aws_sdk_dynamodb::types::AttributeValue as V;
    let ddb = aws_sdk_dynamodb::Client::new(&f.conf);
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = ddb
            .query()
            .table_name(&f.cfg.table)
            .consistent_read(true)
            .key_condition_expression("pk = :pk AND begins_with(sk, :pre)")
            .expression_attribute_values(":pk", V::S(ds_store_aws::schema::stream_pk(path)))
            .expression_attribute_values(":pre", V::S(ds_store_aws::schema::chunk_sk_prefix(incarnation)))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .expect("query chunk items");
        for item in page.items() {
            let sk = item["sk"].as_s().expect("sk");
            let end = ds_store_aws::schema::chunk_end_from_sk(sk).expect("chunk key");
            let begin: u64 = item["start"].as_n().expect("start").parse().expect("number");
            out.push((begin, end));
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return out,
        }
    }
}

/// `(start, end)` of every segment object of the incarnation, from S3.
async fn segments(f: &AwsFactory, path: &str, incarnation: &str) -> Vec<(u64, u64)> {
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&f.conf).force_path_style(true).build());
    let prefix = ds_store_aws::schema::segment_object_prefix(path, incarnation);
    let listed = s3.list_objects_v2().bucket(&f.cfg.bucket).prefix(&prefix).send().await.expect("list segment objects");
    listed
        .contents()
        .iter()
        .filter_map(|o| {
            let name = o.key()?.strip_prefix(&prefix)?;
            let mut parts = name.split('-');
            let start = u64::from_str_radix(parts.next()?, 16).ok()?;
            let end = u64::from_str_radix(parts.next()?, 16).ok()?;
            Some((start, end))
        })
        .collect()
}

async fn read_at(svc: &StreamService, path: &str, at: u64) -> Result<Bytes, ServiceError> {
    let req = ReadRequest { path: path.to_owned(), offset: Some(ReadOffset::At(Offset(at))), live: LiveMode::None };
    svc.read(req).await.map(|out| out.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_deletes_chunk_items_and_segments_below_the_earliest_offset_only() {
    let Some(f) = AwsFactory::new("reclaim_deletes_chunk_items_and_segments_below_the_earliest_offset_only").await
    else {
        return;
    };
    let (aws, svc) = f.service();
    let s = svc.substrate().clone();
    let path = unique_path("reclaim");
    let meta = create(&s, &path).await;
    let inc = meta.incarnation.to_string();
    let mut expected = Vec::new();
    for i in 0..80 {
        append(&s, &path, piece(i), None).await;
        expected.extend_from_slice(&piece(i));
    }
    // Segments of 10 chunks each, the newest bytes left inline.
    let opts = SealOptions { min_chunks: 4, max_chunks: 10, max_bytes: 1 << 20, keep_tail_bytes: 100 };
    while aws.seal(&path, opts.clone()).await.expect("seal").chunks > 0 {}
    let items_before = chunk_items(&f, &path, &inc).await;
    let segments_before = segments(&f, &path, &inc).await;
    assert_eq!(items_before.len(), 80);
    assert!(segments_before.len() >= 6, "{segments_before:?}");

    // Trim inside the fourth segment: it straddles the boundary and stays.
    let straddling = segments_before[3];
    let trimmed = svc.trim(&path, (straddling.0 + straddling.1) / 2).await.expect("trim");
    let below = trimmed.retained_from;
    assert!(trimmed.raised && below > straddling.0 && below < straddling.1, "{trimmed:?} {straddling:?}");

    let items_after = chunk_items(&f, &path, &inc).await;
    let segments_after = segments(&f, &path, &inc).await;
    let kept_items: Vec<_> = items_before.iter().copied().filter(|&(_, end)| end > below).collect();
    let kept_segments: Vec<_> = segments_before.iter().copied().filter(|&(_, end)| end > below).collect();
    assert_eq!(items_after, kept_items, "chunk items ending at or below {below} go, the others stay");
    assert_eq!(segments_after, kept_segments, "segments wholly below {below} go, the straddling one stays");
    assert!(segments_after.contains(&straddling));
    println!(
        "reclaim below {below}: chunk items {} -> {}, segments {} -> {}",
        items_before.len(),
        items_after.len(),
        segments_before.len(),
        segments_after.len()
    );

    // Again: nothing more goes, nothing fails.
    let again = aws.reclaim(&path, &inc, below).await.expect("second reclaim");
    assert_eq!((again.items_deleted, again.objects_deleted, again.complete), (0, 0, true));
    assert_eq!(chunk_items(&f, &path, &inc).await, kept_items);
    assert_eq!(segments(&f, &path, &inc).await, kept_segments);

    // 410 below, the same bytes from the boundary on (through the segment
    // straddling it, from a fresh instance too).
    match read_at(&svc, &path, below - 1).await {
        Err(ServiceError::NotRetained { earliest }) => assert_eq!(earliest, below),
        other => panic!("expected 410 below the earliest offset, got {other:?}"),
    }
    let fresh = StreamService::new(f.aws().substrate(), svc.config().clone());
    let mut read = Vec::new();
    let mut at = below;
    while at < expected.len() as u64 {
        let body = read_at(&fresh, &path, at).await.expect("read above the boundary");
        assert!(!body.is_empty());
        at += body.len() as u64;
        read.extend_from_slice(&body);
    }
    assert_eq!(read, expected[below as usize..], "bytes above the boundary unchanged");

    // Trimming to the tail frees everything but the newest chunk's end.
    let all = svc.trim(&path, expected.len() as u64).await.expect("trim to the tail");
    assert_eq!(all.retained_from, expected.len() as u64);
    assert!(chunk_items(&f, &path, &inc).await.is_empty());
    assert!(segments(&f, &path, &inc).await.is_empty());
}

/// A reader that read chunk items just before a reclaim deleted their
/// segment: simulated by committing a higher `retained_from` without
/// reclaiming and deleting the segment by hand. The store answers the
/// retained chunks only (a gap the core turns into 410), not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_racing_a_reclaim_finds_a_gap_not_an_error() {
    let Some(f) = AwsFactory::new("a_read_racing_a_reclaim_finds_a_gap_not_an_error").await else { return };
    let (aws, svc) = f.service();
    let s = svc.substrate().clone();
    let path = unique_path("reclaim-race");
    let meta = create(&s, &path).await;
    let inc = meta.incarnation.to_string();
    for i in 0..20 {
        append(&s, &path, piece(i), None).await;
    }
    let opts = SealOptions { min_chunks: 4, max_chunks: 10, max_bytes: 1 << 20, keep_tail_bytes: 0 };
    let first = aws.seal(&path, opts.clone()).await.expect("seal");
    let (seg_start, seg_end) = first.range.expect("a segment");
    assert_eq!(seg_start, 0);
    let stream = ds_core::StreamHandle::detached(&path);
    let current = s.store.read_meta(&stream).await.expect("meta").expect("exists");
    let mut next = current.clone();
    next.retained_from = seg_end;
    next.version += 1;
    let mut commit = ds_core::Commit::with_capacity(1);
    commit.push(ds_core::Op::PutMeta {
        meta: next,
        expect: ds_core::Expect::VersionAt { version: current.version, tail: current.tail },
    });
    s.store.commit(commit).await.expect("raise retained_from without reclaiming");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&f.conf).force_path_style(true).build());
    s3.delete_object().bucket(&f.cfg.bucket).key(first.segment_key.expect("key")).send().await.expect("delete");

    let chunks = s.store.read_chunks(&stream, &inc, 0, current.tail, usize::MAX).await.expect("no error");
    assert!(chunks.first().is_some_and(|c| c.start >= seg_end), "only retained chunks: {:?}", chunks.first());
    let read = read_at(&svc, &path, 0).await;
    assert!(matches!(read, Err(ServiceError::NotRetained { earliest }) if earliest == seg_end), "{read:?}");
}
