//! The runner itself over the adapter set: what it stores, another host
//! resumes from.

use std::sync::Arc;

use serde_json::json;

use super::AdapterFactory;
use crate::examples::{Counter, CounterState};
use ds_processor::core_events::PROCESSOR_REPROCESSED;
use ds_processor::OutgoingEvent;
use ds_processor::{Runner, RunnerConfig};

/// A runner on one instance processes and drains; a runner on another
/// instance resumes at its ack with the same fold (the state survived the
/// store as JSON), processes what follows, and an operator rewind through it
/// leaves exactly one audit event.
pub async fn runner_resumes_across_instances(f: &dyn AdapterFactory) {
    let stream = f.create_stream().await;
    let (a, b) = (f.instance(&stream, "counter").await, f.instance(&stream, "counter").await);
    let inc = a.journal.incarnation().await.expect("incarnation");
    let append = |by: i64, key: String| {
        let journal = Arc::clone(&a.journal);
        let inc = inc.clone();
        async move {
            let data = OutgoingEvent::new("counter/incremented", json!({ "by": by })).encode();
            journal.append(&inc, data, &key).await.expect("append").position
        }
    };
    for by in [1, 2, 3] {
        append(by, format!("inc-{by}")).await;
    }
    let clock = ds_processor::Clock::tokio();
    let first = Runner::open(Counter::new(), a.adapters(clock.clone()), RunnerConfig::default()).await.expect("open");
    first.catch_up().await.expect("catch up");
    let report = first.drain(u64::MAX / 2).await;
    assert!(report.revival.covered() && !report.revival.is_armed(), "{report:?}");
    let head = report.acknowledged_through;

    let second = Runner::open(Counter::new(), b.adapters(clock), RunnerConfig::default()).await.expect("open");
    assert_eq!(second.runtime_state().acknowledged_through, head, "resumes at the ack");
    assert_eq!(second.snapshot().state, CounterState { value: 6, changes: 3 });
    let last = append(10, "inc-10".into()).await;
    second.catch_up().await.expect("catch up");
    assert_eq!(second.snapshot().state, CounterState { value: 16, changes: 4 });
    assert_eq!(second.runtime_state().acknowledged_through, last);

    second.reprocess_from(2, 0, "contract check").await.expect("reprocess");
    second.catch_up().await.expect("catch up");
    assert_eq!(second.snapshot().state, CounterState { value: 16, changes: 4 });
    let entries = b.journal.read_after(&inc, 0, 1_000).await.expect("read");
    let audits = entries.iter().filter(|e| String::from_utf8_lossy(&e.data).contains(PROCESSOR_REPROCESSED)).count();
    assert_eq!(audits, 1);
}
