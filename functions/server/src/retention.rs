//! `--retention` (`DS_RETENTION`): retention policies by path prefix (the
//! syntax: `ds_core::retention::policy_syntax`, shared with the Lambda
//! functions), and the background task that applies them
//! (`ds_core::RetentionRunner`).
//!
//! A flag rather than a TOML table: the server is configured by flags and
//! their `DS_*` variables, and its one configuration file (the processors'
//! TOML) is about processors. A policy is one value,
//! `prefix=logs/,max-age=168h,max-bytes=1GiB`; the flag repeats, and the
//! variable separates policies with `;`.

use ds_config::ConfigError;
use ds_core::retention::policy_syntax;
use ds_core::{RetentionPolicy, RetentionRunner, StreamService};

/// The flag's name in errors.
const NAME: &str = "--retention";

/// Parse one policy (clap's value parser).
pub fn parse_policy(text: &str) -> Result<RetentionPolicy, ConfigError> {
    policy_syntax::parse_policy(NAME, text)
}

/// Refuse two policies for one prefix (which would win is not obvious).
pub fn check(policies: &[RetentionPolicy]) -> Result<(), ConfigError> {
    policy_syntax::check(NAME, policies)
}

/// Start applying `policies` every `interval` (nothing at all without one).
pub fn start(service: &StreamService, policies: Vec<RetentionPolicy>, interval: std::time::Duration) {
    if policies.is_empty() {
        return;
    }
    tracing::info!(policies = policies.len(), interval_ms = interval.as_millis() as u64, "retention policies on");
    tokio::spawn(RetentionRunner::new(service.clone(), policies).run(interval));
}
