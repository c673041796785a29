//! The AWS emulator's counters and model, read and set over HTTP
//! (`/_emulator/calls`, `/_emulator/model`; infra/aws-emulator/README.md).

use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// DynamoDB operations that read items (what an idle reader costs).
pub const READ_OPS: [&str; 5] = ["GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"];

/// What the emulator counted between two `take`s.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Calls per "service:Operation".
    pub calls: BTreeMap<String, u64>,
    /// Error answers per "service:Operation".
    pub errors: BTreeMap<String, u64>,
    /// Error codes per "service:Operation:Code" (a cancelled transaction
    /// counts each of its cancellation reason codes once).
    pub codes: BTreeMap<String, u64>,
    pub rcu: f64,
    pub wcu: f64,
}

impl Counts {
    pub fn from_json(v: &Value) -> Self {
        let flat2 = |key: &str| -> BTreeMap<String, u64> {
            let mut out = BTreeMap::new();
            for (svc, ops) in v.get(key).and_then(Value::as_object).into_iter().flatten() {
                for (op, n) in ops.as_object().into_iter().flatten() {
                    out.insert(format!("{svc}:{op}"), n.as_u64().unwrap_or(0));
                }
            }
            out
        };
        let mut codes = BTreeMap::new();
        for (svc, ops) in v.get("error_codes").and_then(Value::as_object).into_iter().flatten() {
            for (op, by_code) in ops.as_object().into_iter().flatten() {
                for (code, n) in by_code.as_object().into_iter().flatten() {
                    codes.insert(format!("{svc}:{op}:{code}"), n.as_u64().unwrap_or(0));
                }
            }
        }
        let total = v.get("capacity_total");
        let unit = |k: &str| total.and_then(|t| t.get(k)).and_then(Value::as_f64).unwrap_or(0.0);
        Self { calls: flat2("calls"), errors: flat2("errors"), codes, rcu: unit("rcu"), wcu: unit("wcu") }
    }

    pub fn ddb(&self, op: &str) -> u64 {
        self.calls.get(&format!("dynamodb:{op}")).copied().unwrap_or(0)
    }

    pub fn ddb_errors(&self, op: &str) -> u64 {
        self.errors.get(&format!("dynamodb:{op}")).copied().unwrap_or(0)
    }

    /// DynamoDB calls of every operation.
    pub fn ddb_total(&self) -> u64 {
        self.calls.iter().filter(|(k, _)| k.starts_with("dynamodb:")).map(|(_, n)| n).sum()
    }

    /// Calls of every AWS service.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn ddb_reads(&self) -> u64 {
        READ_OPS.iter().map(|op| self.ddb(op)).sum()
    }

    /// Conditional-check failures: single conditional writes refused, and
    /// transactions cancelled for a failed condition.
    pub fn condition_failures(&self) -> u64 {
        self.codes
            .iter()
            .filter(|(k, _)| k.starts_with("dynamodb:") && k.contains(":ConditionalCheckFailed"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls refused for throughput (the model's throttling).
    pub fn throttled(&self) -> u64 {
        self.codes
            .iter()
            .filter(|(k, _)| k.ends_with(":ThrottlingError") || k.ends_with(":ProvisionedThroughputExceededException"))
            .map(|(_, n)| n)
            .sum()
    }

    /// "Op n, Op n" of the DynamoDB calls, for notes.
    pub fn ddb_breakdown(&self) -> String {
        let parts: Vec<String> =
            self.calls.iter().filter_map(|(k, n)| k.strip_prefix("dynamodb:").map(|op| format!("{op} {n}"))).collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The emulator at `url` (its AWS endpoint).
#[derive(Clone)]
pub struct Emulator {
    pub url: String,
    http: reqwest::Client,
}

impl Emulator {
    pub fn new(url: &str) -> Result<Self> {
        Ok(Self { url: url.trim_end_matches('/').to_string(), http: reqwest::Client::builder().build()? })
    }

    async fn json(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.with_context(|| format!("{path} at {}", self.url))?;
        let status = resp.status();
        let text = resp.text().await?;
        anyhow::ensure!(status.is_success(), "{path}: HTTP {status}: {text}");
        serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))
    }

    /// The counts since the last take, zeroed in the same step.
    pub async fn take(&self) -> Result<Counts> {
        Ok(Counts::from_json(&self.json(reqwest::Method::POST, "/_emulator/calls/reset", None).await?))
    }

    /// Configures the model (`{"preset": "aws"}`, `{"latency": false}`, ...).
    pub async fn model(&self, settings: &Value) -> Result<Value> {
        self.json(reqwest::Method::POST, "/_emulator/model", Some(settings)).await
    }

    pub async fn model_state(&self) -> Result<Value> {
        self.json(reqwest::Method::GET, "/_emulator/model", None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_read_the_emulator_s_answer() {
        let v = json!({
            "calls": {"dynamodb": {"TransactWriteItems": 10, "GetItem": 3, "Query": 2}, "s3": {"PutObject": 1}},
            "errors": {"dynamodb": {"TransactWriteItems": 4}},
            "error_codes": {"dynamodb": {"TransactWriteItems": {"ConditionalCheckFailed": 3, "ThrottlingError": 1},
                                         "UpdateItem": {"ConditionalCheckFailedException": 2}}},
            "capacity_total": {"rcu": 2.5, "wcu": 40.0}
        });
        let c = Counts::from_json(&v);
        assert_eq!((c.ddb("TransactWriteItems"), c.ddb_errors("TransactWriteItems")), (10, 4));
        assert_eq!((c.ddb_total(), c.total(), c.ddb_reads()), (15, 16, 5));
        assert_eq!((c.condition_failures(), c.throttled()), (5, 1));
        assert_eq!((c.rcu, c.wcu), (2.5, 40.0));
        assert_eq!(c.ddb_breakdown(), "GetItem 3, Query 2, TransactWriteItems 10");
    }
}
