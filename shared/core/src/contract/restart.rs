//! Durability across a restart, for substrates that outlive their process.

use bytes::Bytes;

use super::fixtures::{append, create, read_all, unique_path};
use super::records::rich_meta;
use super::SubstrateFactory;
use crate::{Commit, Expect, Op, ProducerState};

/// Everything committed before a restart is there after it: metas (every
/// field), chunks byte-exact, producer state, deletions; and appends continue
/// at the old tail.
///
/// `reopen.instance()` is called twice: the first instance writes and is
/// dropped (the caller's factory must release the storage on drop, e.g. a file
/// lock), then a second instance over the same storage verifies.
pub async fn restart_keeps_committed(reopen: &dyn SubstrateFactory) {
    let a_path = unique_path("restart-a");
    let rich = rich_meta(&unique_path("restart-rich"));
    let gone_path = unique_path("restart-gone");
    let (a_meta, a_chunks) = {
        let s = reopen.instance().await;
        create(&s, &a_path).await;
        let mut last = None;
        for seq in 0..20u64 {
            let data = Bytes::from(format!("chunk-{seq}-{}", "x".repeat(seq as usize)));
            let state = ProducerState { epoch: 2, last_seq: seq };
            last = Some(append(&s, &a_path, data, Some(("p", state))).await);
        }
        let a_meta = last.expect("appended").meta;
        let commit = Commit { ops: vec![Op::PutMeta { meta: rich.clone(), expect: Expect::Absent }] };
        s.store.commit(commit).await.expect("commit rich meta");
        let gone = create(&s, &gone_path).await;
        let delete =
            Op::DeleteStream { path: gone_path.as_str().into(), incarnation: gone.incarnation, expect_version: 0 };
        s.store.commit(Commit { ops: vec![delete] }).await.expect("delete");
        let chunks = read_all(&s, &a_path, &a_meta.incarnation, a_meta.tail).await;
        (a_meta, chunks)
    };

    let s = reopen.instance().await;
    assert_eq!(s.store.read_meta(&s.registry.enter(&a_path)).await.expect("read_meta"), Some(a_meta.clone()));
    assert_eq!(
        s.store.read_meta(&s.registry.enter(&rich.path)).await.expect("read_meta"),
        Some(rich),
        "every meta field survives"
    );
    assert_eq!(s.store.read_meta(&s.registry.enter(&gone_path)).await.expect("read_meta"), None, "deletions survive");
    assert_eq!(read_all(&s, &a_path, &a_meta.incarnation, a_meta.tail).await, a_chunks, "chunks survive byte-exact");
    let p = s.store.read_producer(&s.registry.enter(&a_path), &a_meta.incarnation, "p").await.expect("read_producer");
    assert_eq!(p, Some(ProducerState { epoch: 2, last_seq: 19 }));
    let next = append(&s, &a_path, Bytes::from_static(b"after restart"), None).await;
    assert_eq!(next.position, a_meta.tail, "appends continue at the old tail");
}
