//! Your own processor, registered as a kind next to the built-in ones and
//! served by your own server binary (docs/processors.md, "Your own processor"):
//!
//! ```sh
//! cargo run -p ds-processor-local --example custom_processor -- 127.0.0.1:4437
//! ```
//!
//! `revenue` folds `order/placed` and `order/refunded` into a running total
//! (its state, shown by `GET /v1/processors/revenue/streams/{stream}`), and
//! appends an `order/large` alert to the stream `alerts` for every order
//! above a threshold, exactly once per order event (the append is keyed by
//! the delivery's idempotency key).

use std::sync::Arc;

use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest, ServiceConfig, StreamService};
use ds_processor::{Contract, EffectError, Effects, Envelope, ProcessCall, Processor};
use ds_processor_host::{ProcessorSpec, Spec};
use ds_processor_local::{HostConfig, LocalHost};
use ds_processors_builtin::{Catalog, ConfigError, ProcessorDef, ProcessorsConfig};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The events it reads: the enum's names are the consumed event types.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", content = "payload")]
enum OrderEvent {
    #[serde(rename = "order/placed")]
    Placed { id: String, cents: i64 },
    #[serde(rename = "order/refunded")]
    Refunded { cents: i64 },
}

/// Its state, stored in the progress record (JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Revenue {
    orders: u64,
    net_cents: i64,
}

struct RevenueView {
    contract: Contract,
    alert_above_cents: i64,
    service: StreamService,
}

impl Processor for RevenueView {
    type State = Revenue;
    type Event = OrderEvent;

    fn contract(&self) -> &Contract {
        &self.contract
    }

    fn initial_state(&self) -> Revenue {
        Revenue::default()
    }

    /// Pure: re-run by re-reduce and rewinds.
    fn reduce(&self, state: Revenue, event: &Envelope<OrderEvent>) -> Revenue {
        match event.event {
            OrderEvent::Placed { cents, .. } => {
                Revenue { orders: state.orders + 1, net_cents: state.net_cents + cents }
            }
            OrderEvent::Refunded { cents } => Revenue { net_cents: state.net_cents - cents, ..state },
        }
    }

    /// Registers effects only; the runner runs them (and retries them).
    fn process_event(&self, call: ProcessCall<'_, OrderEvent, Revenue>, effects: &mut Effects) {
        let Some(Envelope { event: OrderEvent::Placed { id, cents }, .. }) = call.event else { return };
        if *cents <= self.alert_above_cents {
            return;
        }
        let alert = json!({ "type": "order/large", "payload": { "id": id, "cents": cents } });
        let request = AppendRequest {
            path: "alerts".into(),
            content_type: Some("application/json".into()),
            body: Bytes::from(format!("[{alert}]")),
            close: false,
            seq: None,
            producer: None,
            // Same key on every retry and after a crash: the alert is appended once.
            dedupe_key: Some(call.delivery.idempotency_key("large-order-alert")),
            incarnation: None,
            expect_tail: None,
            trace_context: None,
        };
        let service = self.service.clone();
        effects.block_processor_while(move || {
            let (service, request) = (service.clone(), request.clone());
            async move { service.append(request).await.map(|_| ()).map_err(|e| EffectError::new(e.to_string())) }
        });
    }
}

/// The kind: reads its options from the processor's table.
fn revenue_kind(def: ProcessorDef, service: &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
    let mut options = def.options.clone();
    let threshold = options.count("alert_above_cents")?.unwrap_or(100_000);
    options.finish(&["alert_above_cents"])?;
    let alert_above_cents = i64::try_from(threshold).map_err(|_| options.invalid("alert_above_cents", "too large"))?;
    let (slug, service) = (def.slug, service.clone());
    Ok(Arc::new(Spec::new(move || RevenueView {
        contract: Contract::for_events::<OrderEvent>(slug.clone(), "1").expect("OrderEvent is tagged by type"),
        alert_above_cents,
        service: service.clone(),
    })))
}

const CONFIG: &str = r#"
[[processor]]
kind = "revenue"
slug = "revenue"
streams = "shops/*/orders"
alert_above_cents = 50000
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let bind = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4437".to_owned());
    let (substrate, _expiry) = ds_store_memory::memory_substrate();
    let host = LocalHost::new(HostConfig::default());
    let service = StreamService::new(host.tap(substrate), ServiceConfig::default());
    let json_stream = |path: &str| CreateRequest {
        path: path.into(),
        content_type: Some("application/json".into()),
        lifetime: Default::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    service.create(json_stream("alerts")).await?;

    let catalog = Catalog::builtin().with_kind_fn("revenue", revenue_kind);
    let registry = catalog.build(&ProcessorsConfig::from_toml(CONFIG)?, &service).await?;
    host.start(service.clone(), registry).await?;

    let ops = ds_http::Operations { processors: Some(host.operator()), store_name: "memory", ..Default::default() };
    let router = ds_http::router_with(service, ds_http::HttpConfig::default(), ops);
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("serving on http://{}: try PUT /v1/stream/shops/a/orders", listener.local_addr()?);
    axum::serve(listener, router).with_graceful_shutdown(async { tokio::signal::ctrl_c().await.unwrap_or(()) }).await?;
    host.shutdown().await;
    Ok(())
}
