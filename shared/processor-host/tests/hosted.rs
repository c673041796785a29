//! Processors registered by pattern, opened per stream through the
//! type-erased runner, over the substrate adapters.

use std::sync::Arc;

use bytes::Bytes;
use ds_core::{CreateRequest, ServiceConfig, StreamService};
use ds_processor::{Journal, OutgoingEvent, RunnerConfig, StreamIncarnation};
use ds_processor_host::{adapters, InProcAlarms, ProcessorRegistry, RegistryError, Spec, StreamJournal};
use ds_processor_testkit::examples::Counter;
use ds_protocol::headers::Lifetime;
use serde_json::json;

#[test]
fn the_registry_matches_patterns_and_refuses_a_slug_twice() {
    let mut registry = ProcessorRegistry::new();
    registry.register("counters/*", Arc::new(Spec::new(Counter::new))).expect("register");
    assert_eq!(registry.for_path("counters/a").len(), 1);
    assert!(registry.for_path("counters/a/b").is_empty());
    assert!(registry.for_path("other").is_empty());
    let again = registry.register("more/**", Arc::new(Spec::new(Counter::new)));
    assert!(matches!(again, Err(RegistryError::DuplicateSlug { .. })), "{again:?}");
    assert!(matches!(registry.register("bad*", Arc::new(Spec::new(Counter::new))), Err(RegistryError::Pattern(_))));
}

#[tokio::test]
async fn a_registered_processor_runs_on_a_matching_stream() {
    let (sub, _due) = ds_store_memory::memory_substrate();
    let svc = StreamService::new(sub, ServiceConfig::default());
    let req = CreateRequest {
        path: "counters/a".into(),
        content_type: Some("application/json".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    let inc = StreamIncarnation::new(svc.create(req).await.expect("create").meta.incarnation.to_string());
    let journal = StreamJournal::new(svc.clone(), "counters/a");
    for by in [2, 5] {
        let event = OutgoingEvent::new("counter/incremented", json!({ "by": by })).encode();
        journal.append(&inc, event, &format!("k{by}")).await.expect("append");
    }
    let mut registry = ProcessorRegistry::new();
    registry.register("counters/*", Arc::new(Spec::new(Counter::new))).expect("register");
    let specs = registry.for_path("counters/a");
    let alarms = InProcAlarms::manual(svc.clone());
    let runner = specs[0]
        .open(adapters(&svc, "counters/a", specs[0].slug(), alarms), RunnerConfig::default())
        .await
        .expect("open");
    runner.catch_up().await.expect("catch up");
    assert_eq!(runner.state_json()["value"], json!(7));
    assert_eq!(runner.runtime_state().lag, 0);
}
