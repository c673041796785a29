//! The fork peer: it reads exactly the named incarnation of a source, and a
//! soft-deleted source stays readable through it.

use bytes::Bytes;

use super::fixtures::{append, create, unique_path};
use super::SubstrateFactory;
use crate::{Commit, Expect, ForkPeer, Op};

/// Every byte `peer` returns for `(path, incarnation)`.
async fn read(peer: &dyn ForkPeer, path: &str, incarnation: &str) -> Vec<u8> {
    let chunks = peer.read_source(path, incarnation, 0, 64, usize::MAX).await.expect("read_source");
    chunks.iter().flat_map(|c| c.data.to_vec()).collect()
}

/// `ForkPeer` returns the source's meta (soft-deleted included) and the bytes
/// of exactly the incarnation it is asked for: after the source is deleted
/// and re-created, the old incarnation reads as empty and the new one as its
/// own data — never a mix.
pub async fn fork_peer_reads_named_incarnation(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("fork-peer");
    create(&s, &path).await;
    let old = append(&s, &path, Bytes::from_static(b"old bytes"), None).await.meta;
    let peer = s.fork_peer.as_ref();
    assert_eq!(peer.source_meta(&old.path).await.expect("source_meta"), Some(old.clone()));
    assert_eq!(read(peer, &path, &old.incarnation).await, b"old bytes");

    let mut soft = old.clone();
    soft.soft_deleted = true;
    soft.version += 1;
    s.store
        .commit(Commit { ops: vec![Op::PutMeta { meta: soft.clone(), expect: Expect::Version(old.version) }] })
        .await
        .expect("soft delete");
    assert_eq!(peer.source_meta(&old.path).await.expect("source_meta"), Some(soft.clone()), "still visible");
    assert_eq!(read(peer, &path, &old.incarnation).await, b"old bytes", "a soft-deleted source stays readable");

    let delete =
        Op::DeleteStream { path: old.path.clone(), incarnation: old.incarnation.clone(), expect_version: soft.version };
    s.store.commit(Commit { ops: vec![delete] }).await.expect("delete");
    let new = create(&s, &old.path).await;
    append(&s, &new.path, Bytes::from_static(b"new"), None).await;
    assert!(read(peer, &path, &old.incarnation).await.is_empty(), "the deleted incarnation has no bytes left");
    assert_eq!(read(peer, &path, &new.incarnation).await, b"new", "the new incarnation reads its own bytes only");
}
