//! A metering proxy between a server on `--store aws` and the AWS emulator:
//! it forwards every request unchanged and bills it as AWS would on-demand —
//! DynamoDB read and write request units from the items involved, S3
//! requests by price tier, Scheduler calls counted. The server points
//! `AWS_ENDPOINT_URL` at the proxy; nothing in the server changes.
//!
//! Capacity rules (DynamoDB developer guide, "read/write capacity units"):
//! a write costs ceil(item size / 1 KB) units, the larger of the item's size
//! before and after for updates and deletes, twice that inside a
//! transaction (condition checks included); a strongly consistent read costs
//! ceil(size / 4 KB) (half for eventually consistent), a Query or Scan sums
//! the sizes of the items it returns before rounding, at least one unit per
//! request. Item sizes before and after a write the request does not carry
//! are read from the emulator directly (those reads are not billed).

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// What the metered requests cost, summed since the last `take`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bill {
    /// Calls per "service:Operation".
    pub calls: BTreeMap<String, u64>,
    pub read_units: f64,
    pub write_units: f64,
    /// S3 PUT, COPY, POST, LIST requests.
    pub s3_tier1: u64,
    /// S3 GET, HEAD (and other) requests.
    pub s3_tier2: u64,
}

impl Bill {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }
}

#[derive(Clone)]
struct Meter {
    upstream: String,
    http: reqwest::Client,
    bill: Arc<Mutex<Bill>>,
}

/// A running proxy.
pub struct MeterProxy {
    pub addr: SocketAddr,
    bill: Arc<Mutex<Bill>>,
    task: tokio::task::JoinHandle<()>,
}

impl MeterProxy {
    /// Listens on 127.0.0.1 (free port) and forwards to `upstream`.
    pub async fn start(upstream: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let bill = Arc::new(Mutex::new(Bill::default()));
        let meter = Meter {
            upstream: upstream.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder().build()?,
            bill: bill.clone(),
        };
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let m = meter.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let m = m.clone();
                        async move { Ok::<_, Infallible>(m.forward(req).await) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Self { addr, bill, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bill since the last call, and a fresh one.
    pub fn take(&self) -> Bill {
        self.bill.lock().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default()
    }
}

impl Drop for MeterProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Meter {
    async fn forward(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        match self.try_forward(req).await {
            Ok(r) => r,
            Err(e) => {
                let mut r = Response::new(Full::new(Bytes::from(format!("metering proxy: {e:#}"))));
                *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                r
            }
        }
    }

    async fn try_forward(&self, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        let target = header(&parts.headers, "x-amz-target");
        let ddb_op = target.as_deref().and_then(|t| t.strip_prefix("DynamoDB_20120810.")).map(str::to_string);
        let request_json: Value =
            if ddb_op.is_some() { serde_json::from_slice(&body).unwrap_or(Value::Null) } else { Value::Null };
        let auth = AuthHeaders::from(&parts.headers);
        // Writes the request does not carry the item of: sizes before.
        let before = match &ddb_op {
            Some(op) => self.sizes_of_written_keys(op, &request_json, &auth).await,
            None => Vec::new(),
        };
        let path_q = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut fwd = self.http.request(parts.method.clone(), format!("{}{path_q}", self.upstream));
        for (k, v) in &parts.headers {
            if !matches!(k.as_str(), "host" | "content-length" | "transfer-encoding" | "connection" | "expect") {
                fwd = fwd.header(k, v);
            }
        }
        let resp = fwd.body(body).send().await.context("upstream")?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let resp_body = resp.bytes().await?;
        let ok = status.is_success();
        let mut entry = Bill::default();
        match &ddb_op {
            Some(op) => {
                entry.calls.insert(format!("dynamodb:{op}"), 1);
                if ok {
                    let resp_json: Value = serde_json::from_slice(&resp_body).unwrap_or(Value::Null);
                    let after = self.sizes_of_written_keys(op, &request_json, &auth).await;
                    let (r, w) = capacity(op, &request_json, &resp_json, &before, &after);
                    entry.read_units = r;
                    entry.write_units = w;
                }
            }
            None => {
                let (svc, op, tier) = classify_rest(parts.method.as_str(), parts.uri.path(), parts.uri.query());
                entry.calls.insert(format!("{svc}:{op}"), 1);
                match tier {
                    1 => entry.s3_tier1 = 1,
                    2 => entry.s3_tier2 = 1,
                    _ => {}
                }
            }
        }
        if let Ok(mut b) = self.bill.lock() {
            for (k, n) in entry.calls {
                *b.calls.entry(k).or_default() += n;
            }
            b.read_units += entry.read_units;
            b.write_units += entry.write_units;
            b.s3_tier1 += entry.s3_tier1;
            b.s3_tier2 += entry.s3_tier2;
        }
        let mut out = Response::new(Full::new(resp_body));
        *out.status_mut() = status;
        for (k, v) in &headers {
            if !matches!(k.as_str(), "content-length" | "transfer-encoding" | "connection") {
                out.headers_mut().append(k, v.clone());
            }
        }
        Ok(out)
    }

    /// Sizes of the stored items a write request names by key (Update,
    /// Delete, ConditionCheck, and transaction/batch members of those
    /// kinds), in request order; 0 for a missing item.
    async fn sizes_of_written_keys(&self, op: &str, req: &Value, auth: &AuthHeaders) -> Vec<usize> {
        let mut out = Vec::new();
        for (table, key) in written_keys(op, req) {
            out.push(self.item_size(&table, &key, auth).await.unwrap_or(0));
        }
        out
    }

    async fn item_size(&self, table: &str, key: &Value, auth: &AuthHeaders) -> Result<usize> {
        let body = json!({ "TableName": table, "Key": key, "ConsistentRead": true }).to_string();
        let mut req = self
            .http
            .post(format!("{}/", self.upstream))
            .header("x-amz-target", "DynamoDB_20120810.GetItem")
            .header("content-type", "application/x-amz-json-1.0");
        for (k, v) in &auth.0 {
            req = req.header(k.as_str(), v.as_str());
        }
        let bytes = req.body(body).send().await?.error_for_status()?.bytes().await?;
        let v: Value = serde_json::from_slice(&bytes)?;
        Ok(v.get("Item").map(item_size).unwrap_or(0))
    }
}

/// The signing headers of the server's request, reused for the proxy's own
/// size lookups (the emulator reads the account from them; it checks no
/// signature).
struct AuthHeaders(Vec<(String, String)>);

impl AuthHeaders {
    fn from(h: &hyper::HeaderMap) -> Self {
        let keep = ["authorization", "x-amz-date", "x-amz-security-token"];
        Self(keep.iter().filter_map(|k| header(h, k).map(|v| (k.to_string(), v))).collect())
    }
}

fn header(h: &hyper::HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// (table, key) of every item a write request changes or checks without
/// carrying the whole item.
fn written_keys(op: &str, req: &Value) -> Vec<(String, Value)> {
    let table = |v: &Value| v.get("TableName").and_then(Value::as_str).unwrap_or_default().to_string();
    match op {
        "UpdateItem" | "DeleteItem" => req.get("Key").map(|k| vec![(table(req), k.clone())]).unwrap_or_default(),
        "TransactWriteItems" => req
            .get("TransactItems")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|it| {
                ["Update", "Delete", "ConditionCheck"]
                    .iter()
                    .find_map(|kind| it.get(*kind))
                    .and_then(|x| x.get("Key").map(|k| (table(x), k.clone())))
            })
            .collect(),
        "BatchWriteItem" => req
            .get("RequestItems")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .flat_map(|(t, reqs)| {
                reqs.as_array().into_iter().flatten().filter_map(move |r| {
                    r.get("DeleteRequest").and_then(|d| d.get("Key")).map(|k| (t.clone(), k.clone()))
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn write_units(size: usize) -> f64 {
    size.div_ceil(1024).max(1) as f64
}

fn read_units(size: usize, consistent: bool) -> f64 {
    let units = size.div_ceil(4096).max(1) as f64;
    if consistent {
        units
    } else {
        units / 2.0
    }
}

/// (read units, write units) of one successful DynamoDB request. `before`
/// and `after` are the stored sizes of `written_keys`, in order.
pub fn capacity(op: &str, req: &Value, resp: &Value, before: &[usize], after: &[usize]) -> (f64, f64) {
    let consistent = req.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
    let keyed = |i: usize| before.get(i).copied().unwrap_or(0).max(after.get(i).copied().unwrap_or(0));
    match op {
        "GetItem" => (read_units(resp.get("Item").map(item_size).unwrap_or(0), consistent), 0.0),
        "Query" | "Scan" => {
            let total: usize = resp.get("Items").and_then(Value::as_array).into_iter().flatten().map(item_size).sum();
            (read_units(total, consistent), 0.0)
        }
        "PutItem" => (0.0, write_units(req.get("Item").map(item_size).unwrap_or(0).max(keyed(0)))),
        "UpdateItem" | "DeleteItem" => (0.0, write_units(keyed(0))),
        "TransactWriteItems" => {
            let mut w = 0.0;
            let mut k = 0;
            for it in req.get("TransactItems").and_then(Value::as_array).into_iter().flatten() {
                if let Some(put) = it.get("Put") {
                    w += 2.0 * write_units(put.get("Item").map(item_size).unwrap_or(0));
                } else {
                    w += 2.0 * write_units(keyed(k));
                    k += 1;
                }
            }
            (0.0, w)
        }
        "BatchWriteItem" => {
            let mut w = 0.0;
            let mut k = 0;
            for reqs in req.get("RequestItems").and_then(Value::as_object).into_iter().flat_map(|m| m.values()) {
                for r in reqs.as_array().into_iter().flatten() {
                    if let Some(item) = r.get("PutRequest").and_then(|p| p.get("Item")) {
                        w += write_units(item_size(item));
                    } else {
                        w += write_units(keyed(k));
                        k += 1;
                    }
                }
            }
            (0.0, w)
        }
        _ => (0.0, 0.0),
    }
}

/// DynamoDB's size of an item (a map of attribute name → AttributeValue):
/// names' UTF-8 length plus values' sizes.
pub fn item_size(item: &Value) -> usize {
    item.as_object().map_or(0, |m| m.iter().map(|(k, v)| k.len() + value_size(v)).sum())
}

fn value_size(v: &Value) -> usize {
    let Some((ty, x)) = v.as_object().and_then(|m| m.iter().next()) else { return 0 };
    let b64_len = |s: &str| s.trim_end_matches('=').len() * 3 / 4;
    let num_len = |s: &str| {
        let digits = s.trim_start_matches('-').replace('.', "");
        let significant = digits.trim_start_matches('0').trim_end_matches('0').len().max(1);
        significant.div_ceil(2) + 1
    };
    match (ty.as_str(), x) {
        ("S", Value::String(s)) => s.len(),
        ("N", Value::String(s)) => num_len(s),
        ("B", Value::String(s)) => b64_len(s),
        ("BOOL", _) | ("NULL", _) => 1,
        ("SS", Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::len).sum(),
        ("NS", Value::Array(a)) => a.iter().filter_map(Value::as_str).map(num_len).sum(),
        ("BS", Value::Array(a)) => a.iter().filter_map(Value::as_str).map(b64_len).sum(),
        ("L", Value::Array(a)) => 3 + a.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        ("M", Value::Object(m)) => 3 + m.iter().map(|(k, e)| 1 + k.len() + value_size(e)).sum::<usize>(),
        _ => 0,
    }
}

/// (service, operation, S3 price tier: 1 = PUT/COPY/POST/LIST, 2 = GET and
/// other, 0 = free or not S3) of a REST call. Scheduler calls live under
/// /schedules and /schedule-groups; everything else is S3 (path style).
pub fn classify_rest(method: &str, path: &str, query: Option<&str>) -> (&'static str, String, u8) {
    if path.starts_with("/schedules") || path.starts_with("/schedule-groups") {
        return ("scheduler", format!("{method} {}", path.split('/').nth(1).unwrap_or("")), 0);
    }
    let q = query.unwrap_or("");
    let object = path.trim_matches('/').contains('/');
    let (op, tier) = match method {
        "PUT" => ("PutObject", 1),
        "POST" if q.contains("delete") => ("DeleteObjects", 0),
        "POST" => ("PostObject", 1),
        "GET" if !object => ("ListObjects", 1),
        "GET" => ("GetObject", 2),
        "HEAD" => ("HeadObject", 2),
        "DELETE" => ("DeleteObject", 0),
        _ => ("Other", 2),
    };
    ("s3", op.to_string(), tier)
}

/// Starts the proxy in front of the emulator named by `AWS_ENDPOINT_URL`.
pub async fn start_from_env() -> Result<MeterProxy> {
    let upstream =
        std::env::var("AWS_ENDPOINT_URL").map_err(|_| anyhow!("AWS_ENDPOINT_URL (the emulator) is not set"))?;
    MeterProxy::start(&upstream).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_sizes_follow_dynamodb_rules() {
        let item = json!({
            "pk": {"S": "abc"},            // 2 + 3
            "n": {"N": "12345"},           // 1 + (5 digits → 3) + 1 = 1 + 4
            "b": {"B": "aGVsbG8="},         // 1 + 5
            "ok": {"BOOL": true},          // 2 + 1
            "l": {"L": [{"S": "x"}]},      // 1 + 3 + 1 + 1
            "m": {"M": {"k": {"S": "vv"}}} // 1 + 3 + 1 + 1 + 2
        });
        assert_eq!(item_size(&item), 5 + 5 + 6 + 3 + 6 + 8);
    }

    #[test]
    fn capacity_of_reads_and_writes() {
        let big = json!({"pk": {"S": "k"}, "data": {"B": "A".repeat(4 * 5000 / 3)}}); // ≈ 5 KB
        let resp = json!({"Item": big});
        assert_eq!(capacity("GetItem", &json!({"ConsistentRead": true}), &resp, &[], &[]).0, 2.0);
        assert_eq!(capacity("GetItem", &json!({}), &resp, &[], &[]).0, 1.0);
        // A missing item still costs one unit.
        assert_eq!(capacity("GetItem", &json!({"ConsistentRead": true}), &json!({}), &[], &[]).0, 1.0);
        let q = json!({"Items": [big, {"pk": {"S": "k2"}}]});
        assert_eq!(capacity("Query", &json!({"ConsistentRead": true}), &q, &[], &[]).0, 2.0);
        let txn = json!({"TransactItems": [
            {"Put": {"TableName": "t", "Item": {"pk": {"S": "x"}, "d": {"B": "A".repeat(2000)}}}},
            {"Update": {"TableName": "t", "Key": {"pk": {"S": "m"}}}},
            {"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "c"}}}}
        ]});
        // Put 1.5 KB → 2 units ×2; update max(300, 1100) → 2 units ×2; check 100 → 1 ×2.
        assert_eq!(capacity("TransactWriteItems", &txn, &json!({}), &[300, 100], &[1100, 100]), (0.0, 10.0));
        assert_eq!(written_keys("TransactWriteItems", &txn).len(), 2);
    }

    #[test]
    fn rest_calls_by_tier() {
        assert_eq!(classify_rest("PUT", "/bucket/key", None), ("s3", "PutObject".into(), 1));
        assert_eq!(classify_rest("GET", "/bucket/key", None).2, 2);
        assert_eq!(classify_rest("GET", "/bucket", Some("list-type=2")), ("s3", "ListObjects".into(), 1));
        assert_eq!(classify_rest("GET", "/bucket/", Some("list-type=2")).2, 1);
        assert_eq!(classify_rest("POST", "/bucket", Some("delete")).2, 0);
        assert_eq!(classify_rest("POST", "/schedules/x", None).0, "scheduler");
    }
}
