//! An outbox delivering through a flaky, deduping sink:
//! `cargo run -p ds-processor --example outbox --features test-util`.

use ds_processor::{EventBatch, RunnerConfig, RunnerError};
use ds_processor_testkit::examples::Outbox;
use ds_processor_testkit::harness::World;
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), RunnerError> {
    let world = World::new();
    // Every request fails once; the runner retries under the same key.
    world.sink.fail_when(|_, _, attempt| attempt == 1);
    for id in ["a", "b", "c"] {
        world.journal.append_event("outbox/message-queued", json!({ "id": id, "body": format!("hello {id}") }));
    }
    let runner = world.open(Outbox::new(world.sink.clone()), RunnerConfig::default()).await?;
    let callback = runner.open_event_batch_callback();
    callback.process_event_batch(EventBatch::doorbell()).await?;
    for (key, body) in world.sink.applied() {
        println!("{} <- {body}", &key[..12]);
    }
    println!("acknowledged through {}", runner.runtime_state().acknowledged_through);
    Ok(())
}
