//! Listing streams by prefix through the path index (`ds_store_aws::index`),
//! counted at the emulator: the calls and read units of a listing grow with
//! the streams it matches, not with the table (the bar: ≤ 3
//! DynamoDB calls and read units in proportion to the matches). Also: a
//! stream whose meta item the TTL removed is skipped and its index entry
//! removed, and the migration backfill indexes streams written without one.
//!
//! The clients sign with an access key of their own, so the counts
//! (`by_key`) are theirs alone on a shared emulator.

use aws_sdk_dynamodb::types::AttributeValue;
use ds_core::contract::fixtures::create;
use ds_core::Substrate;
use ds_store_aws::schema::{self, ItemKey};
use ds_store_aws::test_util::{AwsFactory, CallCounter};
use serde_json::Value;

/// DynamoDB calls and read units of the clients signing with `key`.
fn cost(snapshot: &Value, key: &str) -> (u64, f64) {
    let calls =
        snapshot["by_key"][key]["dynamodb"].as_object().map_or(0, |ops| ops.values().filter_map(Value::as_u64).sum());
    let rcu = snapshot["capacity_by_key"][key]["rcu"].as_f64().unwrap_or(0.0);
    (calls, rcu)
}

/// Create `paths`, 16 at a time.
async fn create_all(sub: &Substrate, paths: Vec<String>) {
    for batch in paths.chunks(16) {
        futures::future::join_all(batch.iter().map(|p| create(sub, p))).await;
    }
}

async fn listed(sub: &Substrate, prefix: &str, limit: usize) -> Vec<String> {
    let page = sub.store.list_streams_with_prefix(prefix, None, limit).await.expect("list by prefix");
    page.into_iter().map(|m| m.path.to_string()).collect()
}

/// The listing, with its cost.
async fn measured(counter: &CallCounter, key: &str, sub: &Substrate, prefix: &str) -> (Vec<String>, u64, f64) {
    counter.reset().await;
    let paths = listed(sub, prefix, 500).await;
    let (calls, rcu) = cost(&counter.snapshot().await, key);
    (paths, calls, rcu)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_by_prefix_costs_what_it_matches() {
    let Some(f) = AwsFactory::new("listing_by_prefix_costs_what_it_matches").await else { return };
    let counter = CallCounter::new().expect("emulator endpoint");
    let key = format!("listing-{}", uuid::Uuid::new_v4().simple());
    let sub = f.signing_as(&key).aws().substrate();
    let root = format!("listing/{}", uuid::Uuid::new_v4());
    let prefix = format!("{root}/m/");
    let mut matches: Vec<String> = (0..10).map(|i| format!("{prefix}{i:02}")).collect();
    create_all(&sub, matches.clone()).await;
    matches.sort();

    let (alone, calls_alone, rcu_alone) = measured(&counter, &key, &sub, &prefix).await;
    assert_eq!(alone, matches, "every match, in byte-wise path order");
    println!("10 matches, nothing else under the root: {calls_alone} DynamoDB calls, {rcu_alone} RCU");

    // 490 streams that do not match, sorting before, after and right beside
    // the prefix (`{root}/m` itself, `{root}/m0`: string neighbours).
    let others: Vec<String> = (0..490)
        .map(|i| match i % 4 {
            0 => format!("{root}/a/{i}"),
            1 => format!("{root}/z/{i}"),
            2 => format!("{root}/m{i}"),
            _ => format!("{root}/l/{i}"),
        })
        .chain([format!("{root}/m")])
        .collect();
    create_all(&sub, others).await;

    let (among, calls, rcu) = measured(&counter, &key, &sub, &prefix).await;
    println!("10 matches among 501 streams: {calls} DynamoDB calls, {rcu} RCU");
    assert_eq!(among, matches, "the same matches");
    assert!(calls <= 3, "a listing of 10 matches: {calls} DynamoDB calls");
    assert_eq!(rcu, rcu_alone, "read units do not grow with the streams that do not match");
    assert!(rcu <= 11.0, "read units in proportion to the matches (one per meta, one for the index page): {rcu}");

    // Paging: the same streams, two at a time, each page strictly after the last.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = sub.store.list_streams_with_prefix(&prefix, after.as_deref(), 2).await.expect("page");
        paged.extend(page.iter().map(|m| m.path.to_string()));
        match page.last() {
            Some(last) if page.len() == 2 => after = Some(last.path.to_string()),
            _ => break,
        }
    }
    assert_eq!(paged, matches, "paged in path order");
    // An `after` outside the prefix: before it, everything; past it, nothing.
    let before = sub.store.list_streams_with_prefix(&prefix, Some(&format!("{root}/a")), 100).await.expect("list");
    assert_eq!(before.len(), 10);
    let past = sub.store.list_streams_with_prefix(&prefix, Some(&format!("{root}/n")), 100).await.expect("list");
    assert!(past.is_empty(), "{past:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_removed_meta_is_skipped_and_the_backfill_indexes_old_streams() {
    let Some(f) = AwsFactory::new("a_ttl_removed_meta_is_skipped_and_the_backfill_indexes_old_streams").await else {
        return;
    };
    let aws = f.aws();
    let sub = aws.substrate();
    let ddb = f.clients().ddb;
    let root = format!("listing-ttl/{}", uuid::Uuid::new_v4());
    let paths: Vec<String> = (0..4).map(|i| format!("{root}/{i}")).collect();
    create_all(&sub, paths.clone()).await;
    let key_of = |k: &ItemKey| {
        [(schema::PK.to_owned(), AttributeValue::S(k.pk())), (schema::SK.to_owned(), AttributeValue::S(k.sk()))]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>()
    };
    let exists = |k: ItemKey| {
        let ddb = ddb.clone();
        let table = f.cfg.table.clone();
        let key = key_of(&k);
        async move {
            let out = ddb.get_item().table_name(table).consistent_read(true).set_key(Some(key)).send().await;
            out.expect("get item").item().is_some()
        }
    };

    // The TTL backstop deletes a meta item alone.
    let gone = &paths[1];
    let del = ddb.delete_item().table_name(&f.cfg.table).set_key(Some(key_of(&ItemKey::Meta { path: gone.clone() })));
    del.send().await.expect("delete the meta item");
    assert!(exists(ItemKey::PathIndex { path: gone.clone() }).await, "its index item is left behind");
    let listed_now = listed(&sub, &format!("{root}/"), 10).await;
    let live: Vec<String> = paths.iter().filter(|p| *p != gone).cloned().collect();
    assert_eq!(listed_now, live, "a stream without its meta item is not listed");
    assert!(!exists(ItemKey::PathIndex { path: gone.clone() }).await, "the listing removed the dangling entry");
    // Removing it again is harmless; the entry of a live stream stays.
    assert!(aws.remove_dangling_index(gone).await.expect("remove"), "idempotent");
    assert!(!aws.remove_dangling_index(&paths[0]).await.expect("remove"));
    assert!(exists(ItemKey::PathIndex { path: paths[0].clone() }).await, "a live stream keeps its entry");

    // A stream written before the index existed: meta item, no index item.
    let old = &paths[2];
    let del =
        ddb.delete_item().table_name(&f.cfg.table).set_key(Some(key_of(&ItemKey::PathIndex { path: old.clone() })));
    del.send().await.expect("delete the index item");
    let unindexed: Vec<String> = live.iter().filter(|p| *p != old).cloned().collect();
    assert_eq!(listed(&sub, &format!("{root}/"), 10).await, unindexed, "not listed before the migration");
    let report = aws.backfill_path_index().await.expect("backfill");
    assert!(report.streams >= 3 && report.written == report.streams, "{report:?}");
    assert_eq!(listed(&sub, &format!("{root}/"), 10).await, live, "listed after it");
}
