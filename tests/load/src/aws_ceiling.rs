//! The AWS emulator's own ceiling: DynamoDB calls per second it answers
//! with no modeled delay, driven by the lean HTTP driver (`raw`) straight
//! at its endpoint — `GetItem`, and `TransactWriteItems` of 2 and of 25
//! items shaped like an append's (one conditional meta update plus chunk
//! puts, `ClientRequestToken` set). Each connection works on a partition
//! key of its own, as independent streams do. A figure of an AWS bench
//! near these rates measures the emulator, not the server: every AWS bench
//! report prints this line first (`ds-load aws-ceiling`).

use crate::raw::{self, Reply, Template};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::Duration;

/// A SigV4-shaped header: the emulator reads the account, region and
/// service from it and checks no signature.
const AUTHORIZATION: &str =
    "AWS4-HMAC-SHA256 Credential=ceiling/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0";
const TARGET_PREFIX: &str = "DynamoDB_20120810.";
/// Patched with each request's sequence number (`raw::Template`).
const MARKER: &str = "999999999999";

/// One measured call shape.
#[derive(Clone, Debug)]
pub struct Shape {
    pub name: &'static str,
    /// Calls per second at 1 connection and at `Ceiling::concurrency`.
    pub serial: f64,
    pub parallel: f64,
}

#[derive(Clone, Debug)]
pub struct Ceiling {
    pub concurrency: usize,
    pub secs: f64,
    pub shapes: Vec<Shape>,
}

impl Ceiling {
    /// The report's calibration line.
    pub fn markdown(&self) -> String {
        let mut line =
            String::from("**Emulator calibration** (its own ceiling, no modeled delay, DynamoDB calls/s at ");
        let _ =
            write!(line, "{} connections on distinct partition keys; 1 connection in brackets): ", self.concurrency);
        let cells: Vec<String> =
            self.shapes.iter().map(|s| format!("{} {:.0}/s ({:.0}/s)", s.name, s.parallel, s.serial)).collect();
        line.push_str(&cells.join(", "));
        let _ = write!(line, "; {} s per point.", self.secs);
        line
    }

    /// Calls per second of a shape at the top concurrency.
    pub fn rate(&self, name: &str) -> Option<f64> {
        self.shapes.iter().find(|s| s.name == name).map(|s| s.parallel)
    }
}

/// A DynamoDB JSON call over reqwest (setup and teardown only).
async fn call(http: &reqwest::Client, endpoint: &str, op: &str, body: &Value) -> Result<Value> {
    let resp = http
        .post(format!("{}/", endpoint.trim_end_matches('/')))
        .header("x-amz-target", format!("{TARGET_PREFIX}{op}"))
        .header("content-type", "application/x-amz-json-1.0")
        .header("authorization", AUTHORIZATION)
        .body(body.to_string())
        .send()
        .await
        .with_context(|| format!("{op} at {endpoint}"))?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        bail!("{op}: HTTP {status}: {text}");
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Where one connection of one run works: its partition key, and the
/// start of its `ClientRequestToken`s (unique on this emulator: tokens are
/// remembered across tables for 10 minutes, and at most 36 characters).
struct Slot {
    table: String,
    pk: String,
    token: String,
}

impl Slot {
    fn new(table: &str, run: &str, conn: usize) -> Self {
        Self { table: table.into(), pk: format!("{run}#{conn}"), token: format!("{run}-{conn}") }
    }

    fn key(&self) -> Value {
        json!({"pk": {"S": self.pk}, "sk": {"S": "meta"}})
    }
}

/// The request body of each shape for one connection; every `MARKER`
/// becomes the request's sequence number.
fn body(shape: &str, slot: &Slot) -> Value {
    let (table, pk) = (slot.table.as_str(), slot.pk.as_str());
    let chunk = |i: usize| {
        json!({"Put": {"TableName": table,
            "Item": {"pk": {"S": pk}, "sk": {"S": format!("c#{MARKER}-{i:02}")}, "start": {"N": "0"}, "fmt": {"N": "1"},
                     "data": {"B": "eHh4".repeat(33)}},
            "ConditionExpression": "attribute_not_exists(pk)"}})
    };
    let meta = json!({"Update": {"TableName": table, "Key": slot.key(),
        "UpdateExpression": "SET #v = :v, tail = :t",
        "ConditionExpression": "attribute_exists(pk) AND #v <> :v",
        "ExpressionAttributeNames": {"#v": "ver"},
        "ExpressionAttributeValues": {":v": {"N": MARKER}, ":t": {"N": MARKER}}}});
    let transact = |items: usize| {
        let mut all = vec![meta.clone()];
        all.extend((1..items).map(chunk));
        json!({"TransactItems": all, "ClientRequestToken": format!("{}-{MARKER}", slot.token)})
    };
    match shape {
        "GetItem" => json!({"TableName": table, "Key": slot.key(), "ConsistentRead": true}),
        "TransactWriteItems×2" => transact(2),
        _ => transact(25),
    }
}

fn answered_200(r: &Reply) -> Result<()> {
    if r.status != 200 {
        bail!("emulator answered HTTP {}", r.status);
    }
    Ok(())
}

/// Calls per second of `shape` over `conns` connections, each on a meta
/// item of its own (written first).
async fn rate(endpoint: &str, shape: &str, table: &str, conns: usize, secs: f64, threads: usize) -> Result<f64> {
    let http = reqwest::Client::new();
    let run = run_id();
    let slots: Vec<Slot> = (0..conns).map(|c| Slot::new(table, &run, c)).collect();
    for (c, slot) in slots.iter().enumerate() {
        let mut item = slot.key();
        item["ver"] = json!({"N": "0"});
        item["path"] = json!({"S": format!("ceiling/{run}/{c}")});
        call(&http, endpoint, "PutItem", &json!({"TableName": table, "Item": item})).await?;
    }
    let addr = raw::socket_addr(endpoint)?;
    let host = addr.to_string();
    let op = shape.split('×').next().unwrap_or(shape);
    let target = format!("{TARGET_PREFIX}{op}");
    let headers = [
        ("x-amz-target", target.as_str()),
        ("content-type", "application/x-amz-json-1.0"),
        ("authorization", AUTHORIZATION),
    ];
    let templates = slots
        .iter()
        .map(|slot| {
            let b = body(shape, slot).to_string();
            Ok((addr, Template::with_headers("POST", &host, "/", &headers, b.as_bytes(), MARKER.as_bytes())?))
        })
        .collect::<Result<Vec<_>>>()?;
    let run = raw::drive_each(templates, Duration::from_secs_f64(secs), threads, answered_200, false).await?;
    Ok(run.rate())
}

/// A short id unique to this run (keys and tokens must not repeat).
fn run_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("x{:06x}{n}", nanos & 0xff_ffff)
}

/// Measures every shape at 1 and at `concurrency` connections on a table
/// of its own (deleted at the end).
pub async fn measure(endpoint: &str, concurrency: usize, secs: f64, threads: usize) -> Result<Ceiling> {
    let http = reqwest::Client::new();
    let table = format!("ceiling-{}", crate::workloads::unique_tag());
    call(
        &http,
        endpoint,
        "CreateTable",
        &json!({"TableName": table, "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_AND_OLD_IMAGES"}}),
    )
    .await?;
    let result = async {
        let mut shapes = Vec::new();
        for name in ["GetItem", "TransactWriteItems×2", "TransactWriteItems×25"] {
            let serial = rate(endpoint, name, &table, 1, secs, 1).await?;
            let parallel = rate(endpoint, name, &table, concurrency.max(1), secs, threads).await?;
            shapes.push(Shape { name, serial, parallel });
        }
        Ok(Ceiling { concurrency, secs, shapes })
    }
    .await;
    let _ = call(&http, endpoint, "DeleteTable", &json!({"TableName": table})).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_the_marker_where_each_request_differs() {
        let slot = Slot::new("t", "r", 3);
        let tx = body("TransactWriteItems×25", &slot).to_string();
        assert_eq!(tx.matches(MARKER).count(), 24 + 2 + 1, "24 chunk keys, the meta's two values, the token");
        let items = body("TransactWriteItems×2", &slot);
        assert_eq!(items["TransactItems"].as_array().map(Vec::len), Some(2));
        assert!(!body("GetItem", &slot).to_string().contains(MARKER));
        assert!(run_id().len() + 5 + 13 <= 36, "tokens stay within DynamoDB's 36 characters");
    }

    #[test]
    fn the_line_names_every_shape() {
        let c = Ceiling {
            concurrency: 16,
            secs: 2.0,
            shapes: vec![Shape { name: "GetItem", serial: 100.0, parallel: 300.0 }],
        };
        assert!(c.markdown().contains("GetItem 300/s (100/s)"), "{}", c.markdown());
        assert_eq!(c.rate("GetItem"), Some(300.0));
    }
}
