//! A pure fold over an in-memory journal: `cargo run -p ds-processor
//! --example counter --features test-util`.

use ds_processor::{RunnerConfig, RunnerError};
use ds_processor_testkit::examples::Counter;
use ds_processor_testkit::harness::World;
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), RunnerError> {
    let world = World::new();
    for by in [1, 2, 3] {
        world.journal.append_event("counter/incremented", json!({ "by": by }));
    }
    let runner = world.open(Counter::new(), RunnerConfig::default()).await?;
    runner.catch_up().await?;
    let snapshot = runner.snapshot();
    println!(
        "counter = {} after {} changes (reduced through {})",
        snapshot.state.value, snapshot.state.changes, snapshot.reduced_through
    );
    Ok(())
}
