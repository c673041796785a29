//! A subscription reaches only what its creator may touch, through the HTTP
//! function's handler (`ds_e2e::reach` has the scenarios). The function only
//! serves the `__ds` API; the wakes are the processor function's work,
//! played here in process by an engine fed the same commits (what the
//! table's stream brings the processor function), with the subscription
//! index re-read before each batch as that function does.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ds_e2e::webhook::Receiver;
use ds_e2e::{reach, Checks};
use ds_subscriptions::{InProcWakes, KeyRing, RecordKeyStore, Subscriptions, SubscriptionsConfig, UrlPolicy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_reach_no_further_than_their_creator_through_the_handler() {
    if !common::emulator("subscriptions_reach_no_further_than_their_creator_through_the_handler") {
        return;
    }
    let (service, tap) = common::tapped_service().await;
    // The emulator's table is shared by the tests: paths of this run only.
    let creds = reach::Creds::new(&format!("reach{}", std::process::id()));
    let env: HashMap<&str, String> = HashMap::from([
        ("DS_AUTH_TOKENS", creds.token_file().to_string()),
        ("DS_WEBHOOK_ALLOW_LOOPBACK", "1".to_owned()),
    ]);
    let send = common::handler_sender(common::router(service.clone(), env).await);
    // The processor function's part.
    let keys = KeyRing::open(&RecordKeyStore::new(Arc::clone(&service.substrate().store))).await.expect("keys");
    let cfg = SubscriptionsConfig {
        url_policy: UrlPolicy { allow_loopback: true },
        sole_writer: false,
        ..SubscriptionsConfig::default()
    };
    let (wakes, due) = InProcWakes::new(service.clock().clone());
    let processor = Subscriptions::new(service, keys, cfg, Arc::new(wakes)).expect("engine");
    tokio::spawn(processor.clone().run_due_loop(due));
    tap.connect(&processor);
    let hook = Receiver::start(0).await.expect("receiver");
    let settle = || -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let processor = processor.clone();
        Box::pin(async move {
            processor.refresh().await.expect("the subscription index");
            tokio::time::sleep(Duration::from_millis(500)).await;
        })
    };
    let count = || hook.deliveries().len();
    let mut checks = Checks::new();
    let _claim_token = reach::run(&send, &creds, &hook.url, &count, &settle, &mut checks).await;
    checks.finish("subscription reach (Lambda handler)");
}
