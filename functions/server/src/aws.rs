//! `--store aws`: the router served locally over the AWS substrate
//! (DynamoDB + S3 + EventBridge Scheduler), configured by the environment:
//! `AWS_ENDPOINT_URL` (an emulator, e.g. `infra/aws-emulator/start.sh`),
//! `AWS_REGION` and credentials, `DS_AWS_TABLE`, `DS_AWS_BUCKET`,
//! `DS_AWS_SCHEDULE_GROUP`, `DS_AWS_ALARM_TARGET_ARN`,
//! `DS_AWS_SCHEDULER_ROLE_ARN`, `DS_AWS_SCHEDULE_DEAD_LETTER_ARN` (the last
//! three are required against real AWS), `DS_AWS_NO_GROUP_COMMIT` (see
//! `ds_store_aws::group`).
//! Expiry alarms fire in the alarm Lambda, not in this process.

use anyhow::Context;
use ds_core::Substrate;

pub async fn open() -> anyhow::Result<Substrate> {
    let aws = ds_store_aws::AwsSubstrate::from_env().await.context("configuring the AWS substrate")?;
    let cfg = aws.config();
    tracing::info!(table = %cfg.table, bucket = %cfg.bucket, schedule_group = %cfg.schedule_group, "AWS substrate");
    Ok(aws.substrate())
}
