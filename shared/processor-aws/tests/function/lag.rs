//! The processor function's lag figure (its EMF `ProcessorLag` line) is the
//! operator API's `lag` for the same processor and stream: after a drive the
//! deadline interrupted (lag > 0), and after the revival caught it up (0).

use std::sync::Arc;

use ds_lambda_pump::{ProcessorEnv, SchedulePump, StreamPump};
use ds_processor_aws::{HostConfig, Wiring};
use ds_processor_host::{OnDemandOperator, ProcessorOperator};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_figure_is_the_operator_apis_lag() {
    let Some(env) = ProcessorEnv::new("the_lag_figure_is_the_operator_apis").await else { return };
    let svc = env.service();
    for path in ["orders/l", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    for id in ["l1", "l2", "l3"] {
        append(&svc, "orders/l", &order(id)).await;
    }
    let world = World::default();
    world.notify.after("l2", Box::new(|| Box::pin(futures::future::pending::<()>())));
    let metrics = Arc::new(RecordedMetrics::default());
    let host = HostConfig { stop_margin_ms: 5_000, ..Default::default() };
    let function = env
        .function_with(|w| world.deployment(w, None), host, Default::default())
        .with_metrics(Arc::clone(&metrics) as _);
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    function.handle(pump.next_event(), wall_ms() + 5_500).await.expect("handled");
    pump.skip_pending();

    let registry = world.deployment(&Wiring { service: svc.clone(), queue: env.task_queue() }, None).registry;
    let operator = OnDemandOperator::new(svc.clone(), registry, None);
    let reported = operator.show("relay", "orders/l").await.expect("the operator API's view").status.lag;
    let emitted = metrics.last_lag("relay").expect("a lag figure for the relay");
    println!("interrupted: EMF ProcessorLag {emitted}, operator API lag {reported}");
    assert!(reported > 0, "l2 and l3 are not acknowledged");
    assert_eq!(emitted, reported);

    let revived = env.function(|w| world.deployment(w, None)).with_metrics(Arc::clone(&metrics) as _);
    let far = i64::try_from(wall_ms()).expect("ms") + 3_600_000;
    assert_eq!(SchedulePump::new(&env).fire_due(&revived, far, deadline()).await, 1);
    let reported = operator.show("relay", "orders/l").await.expect("the operator API's view").status.lag;
    let emitted = metrics.last_lag("relay").expect("a lag figure after the revival");
    println!("revived: EMF ProcessorLag {emitted}, operator API lag {reported}");
    assert_eq!((emitted, reported), (0, 0));
}
