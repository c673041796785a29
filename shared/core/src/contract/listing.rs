//! The `__registry__` stream, seen through the service: every create and
//! delete is listed in the same commit, so the registry folded at any moment
//! names exactly the streams that exist — also when several services (as
//! processes or Lambda instances would) create and delete at once.
//!
//! Checks share their storage with other checks (and so the registry):
//! each folds only the entries under its own unique prefix.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Barrier;

use super::fixtures::{create_request, unique_path, wall_clock_ms};
use super::SubstrateFactory;
use crate::{
    CreateRequest, ForkRequest, LiveMode, ReadRequest, ServiceConfig, ServiceError, StreamService, Substrate,
    REGISTRY_PATH,
};

fn service(s: Substrate) -> StreamService {
    StreamService::new(s, ServiceConfig::default())
}

/// One registry change message: `(key, operation, value)`.
type Change = (String, String, Option<serde_json::Value>);

/// The registry's messages about paths under `prefix`, in stream order.
/// Panics on a message that is not a well-formed change of type `stream`.
async fn changes_under(svc: &StreamService, prefix: &str) -> Vec<Change> {
    let mut messages: Vec<serde_json::Value> = Vec::new();
    let mut offset = ds_protocol::ReadOffset::Beginning;
    loop {
        let read = svc
            .read(ReadRequest { path: REGISTRY_PATH.to_owned(), offset: Some(offset), live: LiveMode::None })
            .await
            .expect("the registry reads like any stream");
        let page: Vec<serde_json::Value> = serde_json::from_slice(&read.body).expect("a JSON page is one array");
        messages.extend(page);
        if read.up_to_date {
            break;
        }
        offset = ds_protocol::ReadOffset::At(ds_protocol::Offset(read.next));
    }
    let mut out = Vec::new();
    for m in messages {
        assert_eq!(m["type"], "stream", "{m}");
        let key = m["key"].as_str().unwrap_or_else(|| panic!("a change has a key: {m}")).to_owned();
        let op = m["headers"]["operation"].as_str().unwrap_or_else(|| panic!("a change has an operation: {m}"));
        if key.starts_with(prefix) {
            out.push((key, op.to_owned(), m.get("value").cloned()));
        }
    }
    out
}

/// The State Protocol fold of `changes`: path → value.
fn fold(changes: &[Change]) -> BTreeMap<String, serde_json::Value> {
    let mut state = BTreeMap::new();
    for (key, op, value) in changes {
        match op.as_str() {
            "insert" => {
                let value = value.clone().unwrap_or_else(|| panic!("an insert carries a value: {key}"));
                assert!(state.insert(key.clone(), value).is_none(), "{key} inserted twice without a delete");
            }
            "update" => {
                let value = value.clone().unwrap_or_else(|| panic!("an update carries a value: {key}"));
                assert!(state.insert(key.clone(), value).is_some(), "{key} updated while not listed");
            }
            "delete" => {
                assert!(state.remove(key).is_some(), "{key} deleted while not listed");
            }
            other => panic!("unexpected operation {other} for {key}"),
        }
    }
    state
}

/// The live streams under `prefix`, as the store lists them.
async fn live_under(s: &Substrate, prefix: &str) -> BTreeSet<String> {
    let metas = s.store.list_streams_with_prefix(prefix, None, 10_000).await.expect("list");
    metas.into_iter().filter(|m| !m.soft_deleted).map(|m| m.path.to_string()).collect()
}

fn fork_request(path: &str, source: &str) -> CreateRequest {
    CreateRequest {
        fork: Some(ForkRequest { source: source.to_owned(), offset: None, sub_offset: 0 }),
        content_type: None,
        ..create_request(path)
    }
}

/// Creates, forks, soft and hard deletes, a cascade, expiry and a close: each leaves
/// exactly its change in the registry, with the reference server's message
/// shape; clients cannot write the registry.
pub async fn registry_lists_lifecycle(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let svc = service(s.clone());
    let p = format!("{}/", unique_path("registry"));
    let (a, b, c, d) = (format!("{p}a"), format!("{p}b"), format!("{p}c"), format!("{p}d"));

    let json = CreateRequest { content_type: Some("application/json".into()), ..create_request(&a) };
    let created = svc.create(json).await.expect("create a").meta;
    svc.create(create_request(&b)).await.expect("create b");
    svc.create(create_request(&b)).await.expect("an idempotent create lists nothing again");
    svc.create(fork_request(&c, &a)).await.expect("fork c from a");
    svc.delete(&b).await.expect("delete b");
    svc.delete(&a).await.expect("soft-delete a (c still references it)");

    let changes = changes_under(&svc, &p).await;
    let ops: Vec<(&str, &str)> = changes.iter().map(|(k, o, _)| (k.as_str(), o.as_str())).collect();
    assert_eq!(
        ops,
        [(&*a, "insert"), (&*b, "insert"), (&*c, "insert"), (&*b, "delete"), (&*a, "delete")],
        "one change per create and delete, in commit order"
    );
    let expected_a =
        serde_json::json!({"path": a, "contentType": "application/json", "createdAt": created.created_at_ms});
    assert_eq!(changes[0].2.as_ref(), Some(&expected_a), "the reference server's value shape");
    assert_eq!(changes[2].2.as_ref().map(|v| v["contentType"].clone()), Some("application/json".into()));
    assert!(changes[3].2.is_none(), "a delete carries no value");
    assert_eq!(fold(&changes).keys().cloned().collect::<BTreeSet<_>>(), live_under(&s, &p).await);

    // Deleting the fork collects its soft-deleted source: one change, the fork's.
    svc.delete(&c).await.expect("delete c");
    let after = changes_under(&svc, &p).await;
    assert_eq!(after.len(), changes.len() + 1, "{after:?}");
    assert_eq!((after[5].0.as_str(), after[5].1.as_str()), (&*c, "delete"));

    // An expired stream leaves when it is removed.
    let lifetime = ds_protocol::headers::Lifetime { ttl_secs: None, expires_at_ms: Some(wall_clock_ms() + 1_000) };
    let expiring = svc.create(CreateRequest { lifetime, ..create_request(&d) }).await.expect("create d").meta;
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    svc.run_expiry(&d, &expiring.incarnation).await.expect("expiry runs");
    let after = changes_under(&svc, &p).await;
    let ops: Vec<(&str, &str)> = after[6..].iter().map(|(k, o, _)| (k.as_str(), o.as_str())).collect();
    assert_eq!(ops, [(&*d, "insert"), (&*d, "delete")]);
    assert!(fold(&after).is_empty() && live_under(&s, &p).await.is_empty());

    // A close is an update saying so, once.
    let e = format!("{p}e");
    svc.create(create_request(&e)).await.expect("create e");
    let close =
        crate::AppendRequest { close: true, ..super::fixtures::append_request(&e, Bytes::from_static(b"last")) };
    svc.append(close).await.expect("append and close");
    let close_again = crate::AppendRequest { close: true, ..super::fixtures::append_request(&e, Bytes::new()) };
    svc.append(close_again).await.expect("closing a closed stream changes nothing");
    let after = changes_under(&svc, &p).await;
    let ops: Vec<(&str, &str)> = after[8..].iter().map(|(k, o, _)| (k.as_str(), o.as_str())).collect();
    assert_eq!(ops, [(&*e, "insert"), (&*e, "update")]);
    assert_eq!(after[9].2.as_ref().map(|v| v["closed"].clone()), Some(true.into()), "{:?}", after[9]);
    assert_eq!(after[8].2.as_ref().and_then(|v| v.get("closed")), None, "an open stream's value has no closed field");
    svc.delete(&e).await.expect("delete e");

    // Only the server writes the registry.
    let reserved = |r: Result<(), ServiceError>, what: &str| {
        assert!(matches!(r, Err(ServiceError::Reserved(_))), "{what}: {r:?}");
    };
    reserved(svc.create(create_request(REGISTRY_PATH)).await.map(drop), "create");
    let append = super::fixtures::append_request(REGISTRY_PATH, Bytes::from_static(b"{}"));
    reserved(svc.append(append).await.map(drop), "append");
    reserved(svc.delete(REGISTRY_PATH).await, "delete");
    reserved(svc.create(fork_request(&format!("{p}f"), REGISTRY_PATH)).await.map(drop), "fork");
    let meta = svc.head(REGISTRY_PATH).await.expect("the registry exists");
    assert_eq!(&*meta.content_type, "application/json");
}

/// Eight services over one storage, as eight processes, each creating and
/// deleting its own streams at once: every commit lists its change exactly
/// once, and the folded registry equals the streams that exist.
pub async fn registry_concurrent_services(f: &dyn SubstrateFactory) {
    const SERVICES: usize = 8;
    const STREAMS_EACH: usize = 6;
    let p = format!("{}/", unique_path("registry-race"));
    let barrier = Arc::new(Barrier::new(SERVICES));
    let mut tasks = Vec::new();
    for w in 0..SERVICES {
        let (svc, p, barrier) = (service(f.instance().await), p.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut deleted = 0;
            for i in 0..STREAMS_EACH {
                let path = format!("{p}w{w}-{i}");
                svc.create(create_request(&path)).await.unwrap_or_else(|e| panic!("create {path}: {e}"));
                if i % 2 == 1 {
                    svc.delete(&path).await.unwrap_or_else(|e| panic!("delete {path}: {e}"));
                    deleted += 1;
                }
            }
            deleted
        }));
    }
    let mut deletes = 0;
    for task in tasks {
        deletes += task.await.expect("writer task completes");
    }
    let s = f.instance().await;
    let changes = changes_under(&service(s.clone()), &p).await;
    assert_eq!(changes.len(), SERVICES * STREAMS_EACH + deletes, "one change per create and delete: {changes:?}");
    let listed: BTreeSet<String> = fold(&changes).into_keys().collect();
    assert_eq!(listed, live_under(&s, &p).await);
    assert_eq!(listed.len(), SERVICES * STREAMS_EACH - deletes);
}
