//! Per-test AWS resources on the shared emulator.

use std::sync::Arc;

use aws_sdk_sqs::types::QueueAttributeName;
use ds_core::{ServiceConfig, StreamService};
use ds_store_aws::test_util::{config, endpoint, ensure_resources, ensure_schedule_group, sdk_config};
use ds_store_aws::{AwsClients, AwsConfig, AwsSubstrate};
use ds_subscriptions::UrlPolicy;

use ds_processor_aws::env::subscription_plane;
use ds_processor_aws::function::{Deployment, FunctionParts, ProcessorFunction, Wiring};
use ds_processor_aws::host::HostConfig;
use ds_processor_aws::queue::SqsQueue;
use ds_processor_aws::revival::{RevivalSchedules, RevivalTarget};
use ds_processor_aws::subscriptions::SubscriptionPlane;
use ds_processor_aws::tasks::TaskQueue;
use ds_processor_aws::upkeep::UpkeepPolicy;

use crate::asynchronous::AsyncInvoke;

/// Receives after which the test task queue dead-letters a message.
pub const TEST_MAX_RECEIVES: u32 = 3;
/// Seconds a received message stays invisible: short, so a test can crash a
/// delivery and see the message again without waiting long.
pub const TEST_VISIBILITY_SECS: u32 = 2;

/// One test's table, bucket, schedule groups and queues (see module docs).
pub struct ProcessorEnv {
    pub conf: aws_config::SdkConfig,
    pub cfg: AwsConfig,
    pub revival_group: String,
    pub sqs: aws_sdk_sqs::Client,
    pub task_queue_url: String,
    pub task_dead_letter_url: String,
    pub parked_queue_url: String,
    /// The processor function's on-failure destination (its
    /// `EventInvokeConfig`): revivals whose invocations all failed.
    pub failed_invocations_url: String,
}

async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str, redrive: Option<String>) -> String {
    let mut req = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, TEST_VISIBILITY_SECS.to_string());
    if let Some(policy) = redrive {
        req = req.attributes(QueueAttributeName::RedrivePolicy, policy);
    }
    let out = req.send().await.unwrap_or_else(|e| panic!("creating queue {name}: {e:?}"));
    out.queue_url().expect("queue url").to_owned()
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes");
    out.attributes().and_then(|a| a.get(&QueueAttributeName::QueueArn)).expect("queue arn").clone()
}

impl ProcessorEnv {
    /// `None` (skip, loudly) without an emulator.
    pub async fn new(test: &str) -> Option<Self> {
        endpoint(test)?;
        let conf = sdk_config().await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut cfg = config();
        cfg.table = format!("dsp-{id}");
        cfg.bucket = format!("dsp-{id}");
        cfg.schedule_group = format!("dsp-expiry-{id}");
        ensure_resources(&conf, &cfg).await;
        let revival_group = format!("dsp-revival-{id}");
        ensure_schedule_group(&aws_sdk_scheduler::Client::new(&conf), &revival_group).await;
        let sqs = aws_sdk_sqs::Client::new(&conf);
        let task_dead_letter_url = create_queue(&sqs, &format!("dsp-tasks-dlq-{id}"), None).await;
        let dlq_arn = queue_arn(&sqs, &task_dead_letter_url).await;
        let redrive = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": TEST_MAX_RECEIVES });
        let task_queue_url = create_queue(&sqs, &format!("dsp-tasks-{id}"), Some(redrive.to_string())).await;
        let parked_queue_url = create_queue(&sqs, &format!("dsp-parked-{id}"), None).await;
        let failed_invocations_url = create_queue(&sqs, &format!("dsp-failed-{id}"), None).await;
        Some(Self {
            conf,
            cfg,
            revival_group,
            sqs,
            task_queue_url,
            task_dead_letter_url,
            parked_queue_url,
            failed_invocations_url,
        })
    }

    /// A substrate instance of its own (like another Lambda instance).
    pub fn aws(&self) -> AwsSubstrate {
        AwsSubstrate::new(self.cfg.clone(), AwsClients::from_sdk_config(&self.conf))
    }

    /// A core service over a fresh substrate instance.
    pub fn service(&self) -> StreamService {
        StreamService::new(self.aws().substrate(), ServiceConfig::default())
    }

    pub fn clients(&self) -> AwsClients {
        AwsClients::from_sdk_config(&self.conf)
    }

    pub fn revival_target(&self) -> RevivalTarget {
        RevivalTarget {
            schedule_group: self.revival_group.clone(),
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:ds-processor".into(),
            role_arn: self.cfg.scheduler_role_arn.clone(),
            dead_letter_arn: self.cfg.schedule_dead_letter_arn.clone(),
        }
    }

    /// The processor function's asynchronous invocation as template.yaml
    /// configures it, failures sent to [`Self::failed_invocations_url`].
    pub fn async_invoke(&self) -> AsyncInvoke {
        AsyncInvoke {
            function_arn: self.revival_target().function_arn,
            maximum_retry_attempts: crate::template::async_retry_attempts("ProcessorFunction"),
            on_failure_url: self.failed_invocations_url.clone(),
            sqs: self.sqs.clone(),
        }
    }

    /// The same resources seen through clients made from `conf` (another
    /// endpoint, other credentials).
    pub fn with_conf(&self, conf: aws_config::SdkConfig) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(&conf),
            conf,
            cfg: self.cfg.clone(),
            revival_group: self.revival_group.clone(),
            task_queue_url: self.task_queue_url.clone(),
            task_dead_letter_url: self.task_dead_letter_url.clone(),
            parked_queue_url: self.parked_queue_url.clone(),
            failed_invocations_url: self.failed_invocations_url.clone(),
        }
    }

    /// The same resources seen through clients signing with `access_key`
    /// (moto takes any key): the emulator's fault rules and call counts
    /// can single out what they do.
    pub fn as_access_key(&self, access_key: &str) -> Self {
        let creds = aws_sdk_sqs::config::Credentials::new(access_key, "test", None, None, "ds-test");
        let provider = aws_sdk_sqs::config::SharedCredentialsProvider::new(creds);
        self.with_conf(self.conf.to_builder().credentials_provider(provider).build())
    }

    pub fn task_queue(&self) -> Arc<dyn TaskQueue> {
        Arc::new(SqsQueue::new(self.sqs.clone(), self.task_queue_url.clone()))
    }

    /// A processor function instance of its own (own substrate, registry
    /// and warm runners), with default settings.
    pub fn function(&self, deploy: impl FnOnce(&Wiring) -> Deployment) -> ProcessorFunction {
        self.function_with(deploy, HostConfig::default(), UpkeepPolicy::default())
    }

    pub fn function_with(
        &self,
        deploy: impl FnOnce(&Wiring) -> Deployment,
        host: HostConfig,
        upkeep: UpkeepPolicy,
    ) -> ProcessorFunction {
        let aws = self.aws();
        let service = StreamService::new(aws.substrate(), ServiceConfig::default());
        self.assemble(aws, service, deploy, host, upkeep, None)
    }

    /// A processor function instance that also runs subscriptions, its
    /// timers on the test's task queue; webhooks on loopback allowed (the
    /// tests' receivers listen on 127.0.0.1).
    pub async fn function_with_subscriptions(&self, deploy: impl FnOnce(&Wiring) -> Deployment) -> ProcessorFunction {
        let aws = self.aws();
        let service = StreamService::new(aws.substrate(), ServiceConfig::default());
        let delayed = Arc::new(SqsQueue::new(self.sqs.clone(), self.task_queue_url.clone()));
        let plane = subscription_plane(&service, delayed, UrlPolicy { allow_loopback: true })
            .await
            .expect("the subscription plane starts");
        self.assemble(aws, service, deploy, HostConfig::default(), UpkeepPolicy::default(), Some(plane))
    }

    fn assemble(
        &self,
        aws: AwsSubstrate,
        service: StreamService,
        deploy: impl FnOnce(&Wiring) -> Deployment,
        host: HostConfig,
        upkeep: UpkeepPolicy,
        subscriptions: Option<SubscriptionPlane>,
    ) -> ProcessorFunction {
        let alarms = Arc::new(RevivalSchedules::new(
            aws_sdk_scheduler::Client::new(&self.conf),
            self.revival_target(),
            service.clock().clone(),
        ));
        let parking = Arc::new(SqsQueue::new(self.sqs.clone(), self.parked_queue_url.clone()));
        let deployment = deploy(&Wiring { service: service.clone(), queue: self.task_queue() });
        ProcessorFunction::new(FunctionParts { aws, service, alarms, parking, deployment, host, upkeep, subscriptions })
    }

    /// Bodies of the messages waiting in `queue_url` (received, then made
    /// visible again).
    pub async fn peek(&self, queue_url: &str) -> Vec<String> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .expect("receive");
        out.messages().iter().filter_map(|m| m.body().map(str::to_owned)).collect()
    }
}
