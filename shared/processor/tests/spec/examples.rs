//! The example processors: a pure counter fold, an outbox with blocking
//! idempotent delivery, a reconciler acting only under `caught_up`.

use std::sync::Arc;

use ds_processor::{event_key, stable_key, RunnerConfig, StreamIncarnation};
use ds_processor_testkit::examples::{Counter, CounterState, Outbox, Reconciler};
use ds_processor_testkit::harness::World;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn counter_is_a_pure_fold() {
    let world = World::new();
    world.journal.append_event("counter/incremented", json!({ "by": 3 }));
    world.journal.append_event("counter/reset", json!(null));
    world.journal.append_event("counter/incremented", json!({ "by": 4 }));
    world.journal.append_event("counter/incremented", json!({ "by": "four" }));
    let runner = world.open(Counter::new(), RunnerConfig::default()).await.unwrap();
    runner.catch_up().await.unwrap();
    assert_eq!(runner.snapshot().state, CounterState { value: 4, changes: 3 });
    assert_eq!(world.journal.events_of_type("stream/processor-diagnostic").len(), 1);
    assert_eq!(world.sink.total_attempts(), 0);
}

#[tokio::test(start_paused = true)]
async fn outbox_posts_each_message_once_under_its_delivery_key() {
    let world = World::new();
    world.sink.fail_when(|_, _, attempt| attempt <= 2);
    let p1 = world.journal.append_event("outbox/message-queued", json!({ "id": "a", "body": {"to": "x"} }));
    let p2 = world.journal.append_event("outbox/message-queued", json!({ "id": "b", "body": "y" }));
    let runner = world.open(Outbox::new(world.sink.clone()), RunnerConfig::default()).await.unwrap();
    runner.catch_up().await.unwrap();
    let inc = StreamIncarnation::new("incarnation-1");
    let (ka, kb) = (event_key("outbox/a", p1, 0, &inc), event_key("outbox/b", p2, 0, &inc));
    assert_eq!(world.sink.applied_keys(), {
        let mut k = vec![ka.clone(), kb.clone()];
        k.sort();
        k
    });
    assert_eq!((world.sink.attempts(&ka), world.sink.attempts(&kb)), (3, 3));
    assert_eq!(world.sink.applied()[&ka]["body"], json!({"to": "x"}));
    assert_eq!(runner.snapshot().state.queued, 2);
}

#[tokio::test(start_paused = true)]
async fn reconciler_acts_only_when_caught_up() {
    let world = World::new();
    for replicas in [1, 5, 2, 7] {
        world.journal.append_event("scale/set", json!({ "replicas": replicas }));
    }
    let sink: Arc<dyn ds_processor_testkit::harness::EffectSink> = world.sink.clone();
    let runner = world.open(Reconciler::new(sink), RunnerConfig::default()).await.unwrap();
    runner.catch_up().await.unwrap();
    assert_eq!(world.sink.labels(), ["replicas=7"], "only the final desired state is pushed");
    assert_eq!(world.sink.applied_keys(), vec![stable_key("replicas=7", &StreamIncarnation::new("incarnation-1"))]);

    world.journal.append_event("scale/set", json!({ "replicas": 3 }));
    world.journal.append_event("unrelated/thing", json!({}));
    runner.catch_up().await.unwrap();
    assert_eq!(world.sink.labels(), ["replicas=7", "replicas=3"]);
}
