//! `submit` ordering (append pipelining) and the incarnation half of
//! `Expect::Version`.

use bytes::Bytes;

use super::fixtures::{append_commit, create, read_all, unique_path};
use super::SubstrateFactory;
use crate::{Commit, Expect, Op, StoreError};

/// Commits submitted one after another apply in submission order: a commit
/// planned on top of a pending one lands after it, and one stacked on a
/// failed commit fails with `Conflict` and writes nothing.
pub async fn submit_is_ordered(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("submit-order");
    let m0 = create(&s, &path).await;

    // Three appends, each planned on the predicted result of the previous one,
    // all submitted before any is awaited.
    let (c1, m1) = append_commit(&m0, &Bytes::from_static(b"one-"), None);
    let (c2, m2) = append_commit(&m1, &Bytes::from_static(b"two-"), None);
    let (c3, m3) = append_commit(&m2, &Bytes::from_static(b"three"), None);
    let p1 = s.store.submit(c1).await.expect("submit 1");
    let p2 = s.store.submit(c2).await.expect("submit 2");
    let p3 = s.store.submit(c3).await.expect("submit 3");
    let (r1, r2, r3) = futures::join!(p1, p2, p3);
    r1.expect("first applies");
    r2.expect("second applies after the first");
    r3.expect("third applies after the second");
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(m3.clone()));
    let data: Vec<u8> =
        read_all(&s, &path, &m3.incarnation, m3.tail).await.iter().flat_map(|c| c.data.to_vec()).collect();
    assert_eq!(data, b"one-two-three");

    // A failing commit poisons what was stacked on it.
    let mut bad = m3.clone();
    bad.version += 1;
    let failing = Commit { ops: vec![Op::PutMeta { meta: bad.clone(), expect: Expect::Version(m3.version + 5) }] };
    let (stacked, _) = append_commit(&bad, &Bytes::from_static(b"never"), None);
    // A substrate may report the failure from `submit` itself or from its handle.
    let submitted_failing = s.store.submit(failing).await;
    let submitted_stacked = s.store.submit(stacked).await;
    let rf = match submitted_failing {
        Ok(pending) => pending.await,
        Err(e) => Err(e),
    };
    let rs = match submitted_stacked {
        Ok(pending) => pending.await,
        Err(e) => Err(e),
    };
    assert!(matches!(rf, Err(StoreError::Conflict)));
    assert!(matches!(rs, Err(StoreError::Conflict)), "a commit stacked on a failed one must fail");
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(m3));
}

/// `Expect::Version` also pins the incarnation: a writer holding a deleted
/// stream's meta cannot overwrite a re-created stream at the same version.
pub async fn version_pins_incarnation(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("version-incarnation");
    let old = create(&s, &path).await;
    let delete = Commit {
        ops: vec![Op::DeleteStream {
            path: path.as_str().into(),
            incarnation: old.incarnation.clone(),
            expect_version: 0,
        }],
    };
    s.store.commit(delete).await.expect("delete");
    let new = create(&s, &path).await;
    assert_eq!(new.version, old.version);
    let (stale, _) = append_commit(&old, &Bytes::from_static(b"zombie"), None);
    assert!(matches!(s.store.commit(stale).await, Err(StoreError::Conflict)));
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(new));
}
