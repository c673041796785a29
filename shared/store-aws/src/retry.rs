//! The one retry layer of the substrate's writes to DynamoDB.
//!
//! Every conditional write (the commit's transaction, [`crate::txn`]; the
//! touch's `UpdateItem`, [`crate::store`]; the seal's swap,
//! [`crate::segments`]; the path index's repair, [`crate::index`]) and the
//! cleanup's `BatchWriteItem` ([`crate::cleanup`]) is sent with the SDK's
//! retries off ([`sdk_retries_off`]) and retried by its caller's loop under
//! a [`Budget`] ([`crate::config::RetryConfig`]: full-jitter exponential
//! back-off, bounded in time). Two layers would multiply: the SDK's three
//! attempts inside each of ours. And only this layer can tell an unknown
//! outcome from a definite failure: a 500 after the write was applied,
//! retried inside the SDK and then throttled, would reach the caller as a
//! plain throttle — "not applied" — when it was.
//!
//! Reads (`GetItem`, `Query`, `BatchGetItem`) change nothing and keep the
//! SDK's retries, their one layer. S3 and EventBridge Scheduler calls too:
//! their writes are retried only by the SDK, and each is safe to retry
//! there (a write-once S3 put recognises its own earlier attempt,
//! [`crate::blobs`]; a schedule is created or replaced by name).

use std::time::Duration;

use aws_sdk_dynamodb::types::TransactWriteItem;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::{classify_commit, CommitFailure};

/// The attempts of one call: counts them and sleeps the back-off between
/// them, until the configured attempts or time run out.
#[derive(Debug)]
pub struct Budget {
    started: Instant,
    attempt: u32,
}

impl Budget {
    /// Before the first attempt.
    pub fn start() -> Self {
        Self { started: Instant::now(), attempt: 0 }
    }

    /// Attempts made so far (counting the one in progress).
    pub fn attempts(&self) -> u32 {
        self.attempt + 1
    }

    /// Sleep before the next attempt and return `true`; `false` (no sleep)
    /// once the attempts or the time are spent. The last sleep is cut
    /// short to end at the budget, so an attempt is made right there.
    pub async fn next(&mut self, b: &Backend) -> bool {
        let cfg = &b.cfg.retry;
        if self.attempt + 1 >= cfg.attempts.max(1) {
            return false;
        }
        let left = cfg.budget.saturating_sub(self.started.elapsed());
        if left.is_zero() {
            return false;
        }
        let pause = b.backoff(self.attempt).min(left);
        self.attempt += 1;
        if pause > Duration::ZERO {
            tokio::time::sleep(pause).await;
        }
        true
    }
}

/// The SDK's retries off, for a call this layer retries: every attempt's
/// answer is seen here.
pub fn sdk_retries_off() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::default().retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
}

/// Run a `TransactWriteItems` of `items` under the budget: throttling and
/// contention are retried (nothing was written), and so is an unknown
/// outcome, with the same `ClientRequestToken` (an applied attempt is
/// answered from DynamoDB's idempotency window, not applied twice). A
/// condition failure seen after an unknown outcome is reported as unknown
/// (the lost attempt may be what fails the condition). For transactions
/// whose caller has no commit id to recognise its own write by; the
/// commit path ([`crate::txn`]) has its own loop on the same budget.
pub async fn transact(b: &Backend, items: Vec<TransactWriteItem>) -> Result<(), CommitFailure> {
    let mut token = uuid::Uuid::new_v4().to_string();
    let mut ambiguous: Option<String> = None;
    let mut budget = Budget::start();
    loop {
        let sent = b
            .ddb
            .transact_write_items()
            .set_transact_items(Some(items.clone()))
            .client_request_token(&token)
            .customize()
            .config_override(sdk_retries_off())
            .send()
            .await;
        let failure = match sent.map_err(classify_commit) {
            Ok(_) => return Ok(()),
            Err(f) => f,
        };
        match failure {
            CommitFailure::Conflict { .. } if ambiguous.is_some() => {
                return Err(CommitFailure::Ambiguous(format!(
                    "a condition failed after an unknown outcome ({})",
                    ambiguous.unwrap_or_default()
                )))
            }
            CommitFailure::Conflict { .. } | CommitFailure::Rejected(_) => return Err(failure),
            CommitFailure::Throttled(_) | CommitFailure::Contended if ambiguous.is_none() => {
                token = uuid::Uuid::new_v4().to_string();
            }
            CommitFailure::Throttled(_) | CommitFailure::Contended => {}
            CommitFailure::Ambiguous(ref m) => ambiguous = Some(m.clone()),
        }
        if !budget.next(b).await {
            return Err(match ambiguous {
                Some(m) => CommitFailure::Ambiguous(m),
                None => failure,
            });
        }
    }
}
