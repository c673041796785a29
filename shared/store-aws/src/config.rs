//! Substrate configuration: resource names from the environment (read once
//! per process, in the workspace's one dialect, `ds_config`) and the tuning
//! knobs, each with the reason for its default.

use std::time::Duration;

use ds_config::{ConfigError, Settings};

/// Default table name (also used by `infra/aws-emulator/create-resources`).
pub const DEFAULT_TABLE: &str = "durable-streams";
/// Default bucket name.
pub const DEFAULT_BUCKET: &str = "durable-streams-chunks";
/// Default EventBridge Scheduler group.
pub const DEFAULT_SCHEDULE_GROUP: &str = "durable-streams";

/// Largest body stored inline in a chunk item. DynamoDB items max out at
/// 400 KB and a transaction at 4 MB, but cost decides long before that: a
/// transactional write costs 2 WCU per KB, so a 32 KiB inline chunk costs
/// ~66 WCU against one S3 PUT plus a small pointer item above it. Below the
/// threshold the extra S3 round trip (tens of ms) would dominate append
/// latency; above it S3 is both cheaper and keeps items small for reads.
pub const DEFAULT_INLINE_THRESHOLD: usize = 32 * 1024;
/// Hard cap on the inline threshold: leaves room under the 400 KB item limit
/// for keys and attributes.
pub const MAX_INLINE_THRESHOLD: usize = 350 * 1024;

#[derive(Debug, Clone)]
pub struct AwsConfig {
    pub table: String,
    pub bucket: String,
    pub schedule_group: String,
    /// ARN of the alarm Lambda (the schedules' target).
    pub alarm_target_arn: String,
    /// Role EventBridge Scheduler assumes to invoke the alarm Lambda.
    pub scheduler_role_arn: String,
    /// SQS queue every schedule the code creates dead-letters to
    /// ([`crate::schedules`]); the scheduler role may send to it.
    pub schedule_dead_letter_arn: String,
    pub inline_threshold: usize,
    pub poll: PollConfig,
    pub registry: RegistryConfig,
    pub retry: RetryConfig,
    /// Sliding-TTL refreshes of one stream are written at most this often
    /// (shortened for tiny TTLs, see [`crate::store`]'s touch).
    pub touch_interval: Duration,
    /// Group commit ([`crate::group`]); off (`DS_AWS_NO_GROUP_COMMIT=1`):
    /// every commit its own transaction, run under the stream's lock.
    pub group_commit: bool,
}

/// Adaptive polling of the meta item by the poll-backed hub.
#[derive(Debug, Clone)]
pub struct PollConfig {
    /// First interval after a subscription starts or a change was seen: a
    /// just-active stream is likely to change again soon.
    pub min: Duration,
    /// Upper bound: the longest a cross-instance change stays unseen.
    pub max: Duration,
    /// Growth factor per poll that saw no change.
    pub backoff: f64,
}

/// Bounds of the per-process map of per-stream contexts.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Contexts beyond this count are evicted as soon as they are unused.
    pub max_contexts: usize,
    /// An unused context is kept this long (warm cache for the next request).
    pub idle_ttl: Duration,
}

/// The one retry layer of the substrate's writes ([`crate::retry`]): every
/// conditional write to DynamoDB (the commit's `TransactWriteItems`, the
/// touch's `UpdateItem`, the seal's swap, the path index's repairs) and the
/// cleanup's `BatchWriteItem` are retried here, with the SDK's own retries
/// off for them, so no call is retried in two layers and every attempt's
/// answer is seen (an unknown outcome is told from a definite failure).
///
/// The budget is time, not a count: DynamoDB throttles a hot partition for
/// as long as its traffic exceeds ~1,000 WCU/s and a throttled write is not
/// applied, so what must be survived is a burst of about a second (an
/// on-demand table doubling its warm throughput, or one partition's burst
/// capacity running out) — a handful of attempts 5–200 ms apart gave up
/// after about half a second. Attempt n (0-based) sleeps a uniform draw
/// from `[0, min(cap, base × 2^n)]` first ("full jitter", which spreads
/// the retries of many clients of one throttled partition instead of
/// synchronising them); attempts stop at `attempts`, or when the next sleep
/// would end past `budget` after the first attempt began.
#[derive(Debug, Clone)]
pub struct RetryConfig {
    /// At most this many attempts of one call (a bound on the calls one
    /// write can make, should the jitter keep drawing short sleeps).
    pub attempts: u32,
    /// The first sleep's ceiling; it doubles with every attempt.
    pub base: Duration,
    /// The largest sleep ceiling: past it, attempts come about every
    /// `cap / 2` on average.
    pub cap: Duration,
    /// Total time from the first attempt after which no new attempt starts.
    pub budget: Duration,
}

impl Default for PollConfig {
    fn default() -> Self {
        Self { min: Duration::from_millis(20), max: Duration::from_millis(500), backoff: 1.5 }
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self { max_contexts: 4096, idle_ttl: Duration::from_secs(60) }
    }
}

impl Default for RetryConfig {
    /// 10 ms doubling to 1 s within 5 s: a one-second throttling burst is
    /// ridden out with room to spare (on average the sleeps add up to 1 s
    /// after 8 attempts, 5 s after about 16); `DS_AWS_RETRY_BUDGET` changes
    /// the budget.
    fn default() -> Self {
        Self {
            attempts: 32,
            base: Duration::from_millis(10),
            cap: Duration::from_secs(1),
            budget: Duration::from_secs(5),
        }
    }
}

impl AwsConfig {
    /// Names for a local emulator, with dummy ARNs (moto stores them, never calls them).
    pub fn for_emulator() -> Self {
        Self {
            table: DEFAULT_TABLE.into(),
            bucket: DEFAULT_BUCKET.into(),
            schedule_group: DEFAULT_SCHEDULE_GROUP.into(),
            alarm_target_arn: "arn:aws:lambda:us-east-1:000000000000:function:durable-streams-alarm".into(),
            scheduler_role_arn: "arn:aws:iam::000000000000:role/durable-streams-scheduler".into(),
            schedule_dead_letter_arn: "arn:aws:sqs:us-east-1:000000000000:durable-streams-schedule-dlq".into(),
            inline_threshold: DEFAULT_INLINE_THRESHOLD,
            poll: PollConfig::default(),
            registry: RegistryConfig::default(),
            retry: RetryConfig::default(),
            touch_interval: Duration::from_secs(1),
            group_commit: true,
        }
    }

    /// Read `DS_AWS_TABLE`, `DS_AWS_BUCKET`, `DS_AWS_SCHEDULE_GROUP`,
    /// `DS_AWS_ALARM_TARGET_ARN`, `DS_AWS_SCHEDULER_ROLE_ARN`,
    /// `DS_AWS_SCHEDULE_DEAD_LETTER_ARN`, `DS_AWS_INLINE_THRESHOLD` (a
    /// size: `32768`, `32KiB`), `DS_AWS_RETRY_BUDGET` (a duration: `5s`,
    /// `1500ms`; see [`RetryConfig`]) and `DS_AWS_NO_GROUP_COMMIT` (a switch). The three ARNs are required unless
    /// `AWS_ENDPOINT_URL` points at an emulator.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_settings(&Settings::from_env())
    }

    pub fn from_settings<F: Fn(&str) -> Option<String>>(env: &Settings<F>) -> Result<Self, ConfigError> {
        let emulated = env.raw("AWS_ENDPOINT_URL").is_some();
        let mut cfg = Self::for_emulator();
        let names = [
            ("DS_AWS_TABLE", &mut cfg.table),
            ("DS_AWS_BUCKET", &mut cfg.bucket),
            ("DS_AWS_SCHEDULE_GROUP", &mut cfg.schedule_group),
        ];
        for (name, value) in names {
            if let Some(v) = env.raw(name) {
                *value = v;
            }
        }
        // Real AWS needs the alarm's target, role and dead-letter queue; the
        // emulator never calls them.
        for (name, value) in [
            ("DS_AWS_ALARM_TARGET_ARN", &mut cfg.alarm_target_arn),
            ("DS_AWS_SCHEDULER_ROLE_ARN", &mut cfg.scheduler_role_arn),
            ("DS_AWS_SCHEDULE_DEAD_LETTER_ARN", &mut cfg.schedule_dead_letter_arn),
        ] {
            match env.raw(name) {
                Some(v) => *value = v,
                None if !emulated => return Err(ConfigError::Missing { name: name.to_owned() }),
                None => {}
            }
        }
        if let Some(n) = env.size("DS_AWS_INLINE_THRESHOLD")? {
            if n > MAX_INLINE_THRESHOLD {
                let most = MAX_INLINE_THRESHOLD / 1024;
                return Err(ConfigError::invalid(
                    "DS_AWS_INLINE_THRESHOLD",
                    format!("{n} is above the most, {most}KiB"),
                ));
            }
            cfg.inline_threshold = n;
        }
        if let Some(budget) = env.duration("DS_AWS_RETRY_BUDGET")? {
            cfg.retry.budget = budget;
        }
        cfg.group_commit = !env.switch("DS_AWS_NO_GROUP_COMMIT")?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> Result<AwsConfig, ConfigError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        AwsConfig::from_settings(&Settings::new(move |k: &str| m.get(k).cloned()))
    }

    #[test]
    fn real_aws_requires_the_arns_and_the_emulator_does_not() {
        assert_eq!(lookup(&[]).err(), Some(ConfigError::Missing { name: "DS_AWS_ALARM_TARGET_ARN".into() }));
        let cfg = lookup(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), ("DS_AWS_TABLE", "t")]);
        assert_eq!(cfg.map(|c| c.table).ok().as_deref(), Some("t"));
    }

    #[test]
    fn group_commit_is_on_unless_switched_off() {
        let emulated = ("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        assert_eq!(lookup(&[emulated]).map(|c| c.group_commit).ok(), Some(true));
        let off = lookup(&[emulated, ("DS_AWS_NO_GROUP_COMMIT", "1")]);
        assert_eq!(off.map(|c| c.group_commit).ok(), Some(false));
    }

    #[test]
    fn the_inline_threshold_is_a_size_within_its_cap() {
        let emulated = ("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        let cfg = lookup(&[emulated, ("DS_AWS_INLINE_THRESHOLD", "16KiB")]);
        assert_eq!(cfg.map(|c| c.inline_threshold).ok(), Some(16 * 1024));
        let too_big = (MAX_INLINE_THRESHOLD + 1).to_string();
        let err = lookup(&[emulated, ("DS_AWS_INLINE_THRESHOLD", &too_big)]).err();
        assert!(
            matches!(err, Some(ConfigError::Invalid { ref name, .. }) if name == "DS_AWS_INLINE_THRESHOLD"),
            "{err:?}"
        );
        let err = lookup(&[emulated, ("DS_AWS_INLINE_THRESHOLD", "32 KB")]).err();
        assert!(matches!(err, Some(ConfigError::Value { .. })), "{err:?}");
    }

    #[test]
    fn the_retry_budget_is_a_duration() {
        let emulated = ("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        assert_eq!(lookup(&[emulated]).map(|c| c.retry.budget).ok(), Some(Duration::from_secs(5)));
        let cfg = lookup(&[emulated, ("DS_AWS_RETRY_BUDGET", "1500ms")]);
        assert_eq!(cfg.map(|c| c.retry.budget).ok(), Some(Duration::from_millis(1500)));
        let err = lookup(&[emulated, ("DS_AWS_RETRY_BUDGET", "soon")]).err();
        assert!(matches!(err, Some(ConfigError::Value { .. })), "{err:?}");
    }
}
