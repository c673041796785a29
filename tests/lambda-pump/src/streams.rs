//! [`StreamPump`]: Lambda's DynamoDB Stream event source, played against
//! the emulator (see the crate docs).

use std::collections::{HashSet, VecDeque};

use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use base64::Engine;
use serde_json::{json, Map, Value};

use super::env::ProcessorEnv;
use super::template::{table_stream_source, TableStreamSource};
use super::Invoke;
use ds_processor_aws::filter;
use ds_processor_aws::record::TTL_PRINCIPAL;

/// What one delivery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StreamDelivery {
    /// Records handed to the function (retries included).
    pub delivered: usize,
    /// Records the filter dropped.
    pub filtered_out: usize,
    /// Sequence numbers the function reported failed.
    pub failed: Vec<String>,
}

/// See the module docs.
pub struct StreamPump {
    streams: aws_sdk_dynamodbstreams::Client,
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    stream_arn: String,
    iterator: Option<String>,
    source: TableStreamSource,
    /// Filtered records not yet acknowledged by the function, in order.
    pending: VecDeque<Value>,
    /// Attempts of the record at the head of `pending`.
    head_attempts: u32,
    /// Keys (`pk`, `sk`) of items the played TTL deleted.
    ttl_deleted: HashSet<(String, String)>,
}

fn attr_json(v: &AttributeValue) -> Value {
    let b64 =
        |b: &aws_sdk_dynamodbstreams::primitives::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(n) => json!({ "NULL": n }),
        AttributeValue::M(m) => json!({ "M": image_json(m) }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(attr_json).collect::<Vec<_>>() }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::Bs(v) => json!({ "BS": v.iter().map(b64).collect::<Vec<_>>() }),
        other => panic!("unexpected attribute value {other:?}"),
    }
}

fn image_json(image: &std::collections::HashMap<String, AttributeValue>) -> Value {
    Value::Object(image.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect::<Map<_, _>>())
}

fn key_string(keys: &Value, name: &str) -> String {
    keys.get(name).and_then(|k| k.get("S")).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl StreamPump {
    /// A pump from the start of the table's stream (the test's own table:
    /// every record is the test's).
    pub async fn new(env: &ProcessorEnv) -> Self {
        Self::for_table(&env.conf, &env.cfg.table).await
    }

    /// A pump from the start of `table`'s stream.
    pub async fn for_table(conf: &aws_config::SdkConfig, table_name: &str) -> Self {
        let ddb = aws_sdk_dynamodb::Client::new(conf);
        let table = ddb.describe_table().table_name(table_name).send().await.expect("describe table");
        let stream_arn = table.table().and_then(|t| t.latest_stream_arn()).expect("the table has a stream").to_owned();
        Self {
            streams: aws_sdk_dynamodbstreams::Client::new(conf),
            ddb,
            table: table_name.to_owned(),
            stream_arn,
            iterator: None,
            source: table_stream_source(),
            pending: VecDeque::new(),
            head_attempts: 0,
            ttl_deleted: HashSet::new(),
        }
    }

    pub fn source(&self) -> &TableStreamSource {
        &self.source
    }

    async fn iterator(&mut self) -> String {
        if let Some(it) = &self.iterator {
            return it.clone();
        }
        let described =
            self.streams.describe_stream().stream_arn(&self.stream_arn).send().await.expect("describe stream");
        let shard = described
            .stream_description()
            .and_then(|d| d.shards().first())
            .and_then(|s| s.shard_id())
            .expect("the stream has a shard")
            .to_owned();
        let it = self
            .streams
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("shard iterator");
        let it = it.shard_iterator().expect("iterator").to_owned();
        self.iterator = Some(it.clone());
        it
    }

    /// Reads every new record into the pending queue, filtered as the
    /// template says; returns how many the filter dropped.
    pub async fn fetch(&mut self) -> usize {
        let mut dropped = 0;
        loop {
            let it = self.iterator().await;
            let out = self.streams.get_records().shard_iterator(it).limit(1000).send().await.expect("get records");
            self.iterator = out.next_shard_iterator().map(str::to_owned);
            if out.records().is_empty() {
                return dropped;
            }
            for record in out.records() {
                let event = self.lambda_record(record);
                if filter::passes(&self.source.patterns, &event) {
                    self.pending.push_back(event);
                } else {
                    dropped += 1;
                }
            }
        }
    }

    /// The record as Lambda hands it to a function.
    fn lambda_record(&self, r: &aws_sdk_dynamodbstreams::types::Record) -> Value {
        let change = r.dynamodb().expect("record has a change");
        let mut dynamodb = json!({
            "Keys": image_json(change.keys().expect("keys")),
            "SequenceNumber": change.sequence_number().unwrap_or_default(),
            "SizeBytes": change.size_bytes().unwrap_or_default(),
            "StreamViewType": change.stream_view_type().map(|v| v.as_str().to_owned()).unwrap_or_default(),
        });
        if let Some(image) = change.new_image() {
            dynamodb["NewImage"] = image_json(image);
        }
        if let Some(image) = change.old_image() {
            dynamodb["OldImage"] = image_json(image);
        }
        let event_name = r.event_name().map(|n| n.as_str().to_owned()).unwrap_or_default();
        let mut record = json!({
            "eventID": r.event_id().unwrap_or_default(),
            "eventName": event_name,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": r.aws_region().unwrap_or("us-east-1"),
            "dynamodb": dynamodb,
            "eventSourceARN": self.stream_arn,
        });
        let keys = &record["dynamodb"]["Keys"];
        let key = (key_string(keys, "pk"), key_string(keys, "sk"));
        if event_name == "REMOVE" && self.ttl_deleted.contains(&key) {
            record["userIdentity"] = json!({ "type": "Service", "principalId": TTL_PRINCIPAL });
        }
        record
    }

    /// Filtered records waiting for delivery.
    pub fn pending(&self) -> &VecDeque<Value> {
        &self.pending
    }

    /// The next batch as the Lambda event (without consuming it).
    pub fn next_event(&self) -> Value {
        let batch: Vec<Value> = self.pending.iter().take(self.source.batch_size.max(1)).cloned().collect();
        json!({ "Records": batch })
    }

    /// Fetches, then delivers one batch. Records up to the first reported
    /// failure are acknowledged; that record and the ones after it stay
    /// for the next delivery (Lambda's `ReportBatchItemFailures`), until the
    /// template's `MaximumRetryAttempts` drops them.
    pub async fn deliver(&mut self, function: &impl Invoke, deadline_ms: u64) -> StreamDelivery {
        let filtered_out = self.fetch().await;
        let event = self.next_event();
        let n = event["Records"].as_array().map_or(0, Vec::len);
        let mut report = StreamDelivery { filtered_out, ..StreamDelivery::default() };
        if n == 0 {
            return report;
        }
        report.delivered = n;
        let answer = function.invoke(event.clone(), deadline_ms).await;
        let failed: Vec<String> = match &answer {
            Ok(v) => v["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                .collect(),
            // A failed invocation fails the whole batch.
            Err(_) => vec![event["Records"][0]["dynamodb"]["SequenceNumber"].as_str().unwrap_or_default().to_owned()],
        };
        let first_failed = event["Records"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|r| r["dynamodb"]["SequenceNumber"].as_str().is_some_and(|s| failed.iter().any(|f| f == s)));
        let acked = first_failed.unwrap_or(n);
        self.pending.drain(..acked);
        if first_failed.is_some() {
            self.head_attempts = if acked == 0 { self.head_attempts + 1 } else { 1 };
            if self.head_attempts > self.source.maximum_retry_attempts {
                self.pending.pop_front();
                self.head_attempts = 0;
            }
        } else {
            self.head_attempts = 0;
        }
        report.failed = failed;
        report
    }

    /// Delivers until nothing is pending or `rounds` deliveries ran.
    pub async fn deliver_all(&mut self, function: &impl Invoke, deadline_ms: u64, rounds: usize) -> StreamDelivery {
        let mut total = StreamDelivery::default();
        for _ in 0..rounds {
            let d = self.deliver(function, deadline_ms).await;
            total.filtered_out += d.filtered_out;
            total.failed.extend(d.failed);
            if d.delivered == 0 {
                break;
            }
            total.delivered += d.delivered;
        }
        total
    }

    /// Forgets everything pending (a crashed invocation's batch is still
    /// pending: this is for records a test chose to drop).
    pub fn skip_pending(&mut self) {
        self.pending.clear();
        self.head_attempts = 0;
    }

    /// Plays the table's TTL: deletes every item whose `ttl` (epoch
    /// seconds) is below `now_s`; their REMOVE records will carry the
    /// DynamoDB service as `userIdentity`, as TTL deletions do.
    pub async fn expire_ttl(&mut self, now_s: i64) -> usize {
        use aws_sdk_dynamodb::types::AttributeValue as Av;
        let out = self
            .ddb
            .scan()
            .table_name(&self.table)
            .filter_expression("#ttl < :now")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now", Av::N(now_s.to_string()))
            .send()
            .await
            .expect("scan");
        let mut deleted = 0;
        for item in out.items() {
            let (Some(Av::S(pk)), Some(Av::S(sk))) = (item.get("pk"), item.get("sk")) else { continue };
            self.ddb
                .delete_item()
                .table_name(&self.table)
                .key("pk", Av::S(pk.clone()))
                .key("sk", Av::S(sk.clone()))
                .send()
                .await
                .expect("delete expired item");
            self.ttl_deleted.insert((pk.clone(), sk.clone()));
            deleted += 1;
        }
        deleted
    }
}
