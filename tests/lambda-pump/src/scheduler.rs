//! [`SchedulePump`]: EventBridge Scheduler firing revival schedules into
//! the processor function (moto stores schedules but never fires them).
//! Scheduler invokes a Lambda target asynchronously: with an [`AsyncInvoke`]
//! the pump plays that too (retries of a failing function, then the
//! on-failure destination), as a deployment's function does with the
//! template's `EventInvokeConfig`.

use super::asynchronous::{AsyncInvoke, AsyncOutcome};
use super::env::ProcessorEnv;
use super::Invoke;

/// See the module docs.
pub struct SchedulePump {
    scheduler: aws_sdk_scheduler::Client,
    group: String,
    lambda: Option<AsyncInvoke>,
}

/// The epoch ms of an `at(yyyy-mm-ddThh:mm:ss)` expression (UTC).
fn at_ms(expression: &str) -> Option<i64> {
    let inner = expression.strip_prefix("at(")?.strip_suffix(')')?;
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let t = time::PrimitiveDateTime::parse(inner, fmt).ok()?.assume_utc();
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

impl SchedulePump {
    /// The test's revival schedules, invoked asynchronously (failures end
    /// on the test's failed-invocations queue).
    pub fn new(env: &ProcessorEnv) -> Self {
        Self::for_group(&env.conf, &env.revival_group).asynchronous(env.async_invoke())
    }

    /// A pump of the schedules in `group`, invoking synchronously (a failed
    /// invocation leaves its schedule, fired again next time).
    pub fn for_group(conf: &aws_config::SdkConfig, group: &str) -> Self {
        Self { scheduler: aws_sdk_scheduler::Client::new(conf), group: group.to_owned(), lambda: None }
    }

    /// Invokes as Lambda's asynchronous invocation does (see module docs).
    #[must_use]
    pub fn asynchronous(mut self, lambda: AsyncInvoke) -> Self {
        self.lambda = Some(lambda);
        self
    }

    /// `(name, input, at_ms)` of every pending revival schedule.
    pub async fn pending(&self) -> Vec<(String, String, i64)> {
        let listed = self.scheduler.list_schedules().group_name(&self.group).send().await.expect("list schedules");
        let mut out = Vec::new();
        for s in listed.schedules() {
            let Some(name) = s.name() else { continue };
            let got = self.scheduler.get_schedule().name(name).group_name(&self.group).send().await;
            let Ok(got) = got else { continue };
            let input = got.target().and_then(|t| t.input()).unwrap_or_default().to_owned();
            let at = got.schedule_expression().and_then(at_ms).unwrap_or(i64::MAX);
            out.push((name.to_owned(), input, at));
        }
        out
    }

    /// Fires every schedule due by `now_ms` into `function` (the time
    /// argument lets a test fire an alarm without waiting for it). A fired
    /// schedule is deleted once Lambda took the event
    /// (`ActionAfterCompletion=DELETE`): asynchronously, at once (a failure
    /// then ends on the destination); synchronously, once the invocation
    /// succeeded (a failed one stays). Returns how many invocations
    /// succeeded.
    pub async fn fire_due(&self, function: &impl Invoke, now_ms: i64, deadline_ms: u64) -> usize {
        let mut fired = 0;
        for (name, input, at) in self.pending().await {
            if at > now_ms {
                continue;
            }
            let payload: serde_json::Value = serde_json::from_str(&input).expect("schedule input is JSON");
            let (succeeded, delivered) = match &self.lambda {
                Some(lambda) => {
                    let outcome = lambda.invoke(function, payload, deadline_ms).await;
                    (matches!(outcome, AsyncOutcome::Succeeded(_)), true)
                }
                None => {
                    let ok = function.invoke(payload, deadline_ms).await.is_ok();
                    (ok, ok)
                }
            };
            if delivered {
                let _ = self.scheduler.delete_schedule().name(&name).group_name(&self.group).send().await;
            }
            fired += usize::from(succeeded);
        }
        fired
    }
}
