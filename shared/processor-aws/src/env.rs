//! The processor function from its environment.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `DS_AWS_*` | the substrate (`ds_store_aws::AwsConfig`; `DS_AWS_SCHEDULER_ROLE_ARN` and `DS_AWS_SCHEDULE_DEAD_LETTER_ARN` are also the role revival schedules run as and where they dead-letter) |
//! | `DS_PROCESSOR_FUNCTION_ARN` | this function: the revival schedules' target |
//! | `DS_PROCESSOR_SCHEDULE_GROUP` | the schedule group of revival alarms |
//! | `DS_PROCESSOR_TASK_QUEUE_URL` | the SQS queue background tasks are handed to |
//! | `DS_PROCESSOR_PARKED_QUEUE_URL` | the SQS queue unreadable stream records are parked in |
//! | `DS_METRICS_NAMESPACE` | CloudWatch namespace of the EMF lines (processor lag, revival and task failures); `off`: none (default `DurableStreams`) |
//! | `DS_LIFECYCLE_EVENT_BUS` | an EventBridge bus (name or ARN): each create, close and delete is sent there ([`crate::lifecycle`]); unset or empty: none |
//! | `DS_REGISTRY` | `off` when the HTTP function keeps no `__registry__` (then no lifecycle events either) |
//! | `DS_WEBHOOK_ALLOW_LOOPBACK` | subscriptions may call webhooks on loopback (`http://localhost`, `http://127.0.0.x`): development and tests only |

use std::sync::Arc;

use ds_config::{ConfigError, Settings};
use ds_core::{ServiceConfig, StoreError, StreamService};
use ds_store_aws::{AwsClients, AwsSubstrate};
use ds_subscriptions::{KeyRing, RecordKeyStore, Subscriptions, SubscriptionsConfig, UrlPolicy, WakeScheduler};

use crate::function::{Deployment, FunctionParts, ProcessorFunction, Wiring};
use crate::host::HostConfig;
use crate::queue::SqsQueue;
use crate::revival::{RevivalSchedules, RevivalTarget};
use crate::subscriptions::{DelayedQueue, QueuedWakes, SubscriptionPlane};
use crate::tasks::TaskQueue;
use crate::upkeep::UpkeepPolicy;

/// Why the function could not be built from its environment (the cold
/// start fails with it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A setting is missing or wrong: fix the function's environment.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The deployment could not be built (its processors' configuration is
    /// wrong, or could not be checked against the store): see the source.
    #[error("the deployment: {0}")]
    Deployment(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The subscription plane could not start (its signing key could not be
    /// read or created in the table): retried by the next cold start.
    #[error("subscriptions: {0}")]
    Subscriptions(#[source] StoreError),
}

/// The function over the AWS substrate named by the environment, running
/// the processors `deploy` registers (it may read the store, so it is
/// asynchronous, and fail: a wrong configuration stops the cold start).
pub async fn function_from_env<F, Fut, E>(deploy: F) -> Result<ProcessorFunction, EnvError>
where
    F: FnOnce(Wiring) -> Fut,
    Fut: std::future::Future<Output = Result<Deployment, E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let env = Settings::from_env();
    let cfg = ds_store_aws::AwsConfig::from_settings(&env)?;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    let aws = AwsSubstrate::new(cfg.clone(), AwsClients::from_sdk_config(&sdk));
    let registry = env.switch_or("DS_REGISTRY", ServiceConfig::default().registry)?;
    let service = StreamService::new(aws.substrate(), ServiceConfig { registry, ..ServiceConfig::default() });
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let tasks = SqsQueue::new(sqs.clone(), env.required("DS_PROCESSOR_TASK_QUEUE_URL")?);
    let queue: Arc<dyn TaskQueue> = Arc::new(tasks.clone());
    let target = RevivalTarget {
        schedule_group: env.required("DS_PROCESSOR_SCHEDULE_GROUP")?,
        function_arn: env.required("DS_PROCESSOR_FUNCTION_ARN")?,
        role_arn: cfg.scheduler_role_arn.clone(),
        dead_letter_arn: cfg.schedule_dead_letter_arn.clone(),
    };
    let alarms = Arc::new(RevivalSchedules::new(aws_sdk_scheduler::Client::new(&sdk), target, service.clock().clone()));
    let parking = Arc::new(SqsQueue::new(sqs, env.required("DS_PROCESSOR_PARKED_QUEUE_URL")?));
    let policy = UrlPolicy { allow_loopback: env.switch("DS_WEBHOOK_ALLOW_LOOPBACK")? };
    let delayed = Arc::new(tasks);
    let subscriptions = subscription_plane(&service, delayed, policy).await.map_err(EnvError::Subscriptions)?;
    let deployment =
        deploy(Wiring { service: service.clone(), queue }).await.map_err(|e| EnvError::Deployment(e.into()))?;
    let lifecycle = env.raw("DS_LIFECYCLE_EVENT_BUS").filter(|bus| !bus.is_empty()).map(|bus| {
        crate::lifecycle::LifecycleEvents::new(aws_sdk_eventbridge::Client::new(&sdk), bus, service.clone())
    });
    if lifecycle.is_some() && !registry {
        return Err(EnvError::Config(ConfigError::invalid(
            "DS_LIFECYCLE_EVENT_BUS",
            "lifecycle events are read from the __registry__ stream: DS_REGISTRY must be on",
        )));
    }
    let namespace = env.raw("DS_METRICS_NAMESPACE").unwrap_or_else(|| "DurableStreams".to_owned());
    let function = ProcessorFunction::new(FunctionParts {
        aws,
        service,
        alarms,
        parking,
        deployment,
        host: HostConfig::default(),
        upkeep: UpkeepPolicy::default(),
        subscriptions: Some(subscriptions),
    });
    let function = match lifecycle {
        Some(lifecycle) => function.with_lifecycle(lifecycle),
        None => function,
    };
    Ok(match namespace.as_str() {
        "off" => function,
        _ => function.with_metrics(Arc::new(ds_metrics::emf::EmfMetrics::stdout(namespace))),
    })
}

/// The subscription plane over `service`: the webhook signing key kept in
/// the table (created by whichever function starts first), timers on
/// `delayed`.
pub async fn subscription_plane(
    service: &StreamService,
    delayed: Arc<dyn DelayedQueue>,
    policy: UrlPolicy,
) -> Result<SubscriptionPlane, StoreError> {
    let keys = RecordKeyStore::new(Arc::clone(&service.substrate().store));
    let keys = KeyRing::open(&keys).await?;
    let wakes = Arc::new(QueuedWakes::new(delayed, service.clock().clone()));
    // Deliveries go through the task queue, one message each (see
    // crate::subscriptions): never in a table-stream invocation.
    let cfg = SubscriptionsConfig {
        url_policy: policy,
        sole_writer: false,
        deliver_elsewhere: true,
        ..SubscriptionsConfig::default()
    };
    let engine = Subscriptions::new(service.clone(), keys, cfg, Arc::clone(&wakes) as Arc<dyn WakeScheduler>)?;
    Ok(SubscriptionPlane::new(engine, wakes))
}
