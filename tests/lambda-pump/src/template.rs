//! The processor function's event sources as template.yaml declares them,
//! so the pumps apply the very settings a deployment gets.

use serde_yaml::Value;

use ds_processor_aws::filter::Pattern;

/// The settings of the table-stream event source mapping.
#[derive(Debug, Clone)]
pub struct TableStreamSource {
    pub patterns: Vec<Pattern>,
    pub batch_size: usize,
    pub maximum_retry_attempts: u32,
    pub bisect_on_error: bool,
    pub report_batch_item_failures: bool,
}

/// The repository's template.yaml.
pub fn template_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml")
}

fn resources(template: &Value) -> impl Iterator<Item = (&str, &Value)> {
    template
        .get("Resources")
        .and_then(Value::as_mapping)
        .into_iter()
        .flat_map(|m| m.iter())
        .filter_map(|(k, v)| Some((k.as_str()?, v)))
}

/// The event source mapping whose source is the table's stream (its
/// `EventSourceArn` is `!GetAtt StreamsTable.StreamArn`).
pub fn table_stream_source() -> TableStreamSource {
    let path = template_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_table_stream_source(&text)
}

/// See [`table_stream_source`].
pub fn parse_table_stream_source(text: &str) -> TableStreamSource {
    let template: Value = serde_yaml::from_str(text).expect("template.yaml parses");
    let (name, props) = resources(&template)
        .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some("AWS::Lambda::EventSourceMapping"))
        .filter_map(|(n, r)| Some((n, r.get("Properties")?)))
        .find(|(_, p)| {
            let arn = p.get("EventSourceArn").map(|a| serde_yaml::to_string(a).unwrap_or_default()).unwrap_or_default();
            arn.contains("StreamsTable.StreamArn")
        })
        .expect("template.yaml has an event source mapping on StreamsTable.StreamArn");
    let patterns = props
        .get("FilterCriteria")
        .and_then(|f| f.get("Filters"))
        .and_then(Value::as_sequence)
        .unwrap_or_else(|| panic!("{name} declares no FilterCriteria.Filters"))
        .iter()
        .map(|f| {
            let text =
                f.get("Pattern").and_then(Value::as_str).unwrap_or_else(|| panic!("{name}: a filter without Pattern"));
            Pattern::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    let number = |key: &str, default: u64| props.get(key).and_then(Value::as_u64).unwrap_or(default);
    let responses = props.get("FunctionResponseTypes").and_then(Value::as_sequence).cloned().unwrap_or_default();
    TableStreamSource {
        patterns,
        batch_size: usize::try_from(number("BatchSize", 100)).unwrap_or(100),
        // Lambda's default for stream sources is -1 (retry until the record expires).
        maximum_retry_attempts: u32::try_from(number("MaximumRetryAttempts", u64::from(u32::MAX))).unwrap_or(u32::MAX),
        bisect_on_error: props.get("BisectBatchOnFunctionError").and_then(Value::as_bool).unwrap_or(false),
        report_batch_item_failures: responses.iter().any(|v| v.as_str() == Some("ReportBatchItemFailures")),
    }
}

/// `EventInvokeConfig.MaximumRetryAttempts` of the function `logical_id`
/// (Lambda's default, 2, when the template leaves it out). Panics when the
/// function declares no on-failure destination: a failure would vanish.
pub fn async_retry_attempts(logical_id: &str) -> u32 {
    let path = template_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_async_retry_attempts(&text, logical_id)
}

/// See [`async_retry_attempts`].
pub fn parse_async_retry_attempts(text: &str, logical_id: &str) -> u32 {
    let template: Value = serde_yaml::from_str(text).expect("template.yaml parses");
    let config = resources(&template)
        .find(|(n, _)| *n == logical_id)
        .and_then(|(_, r)| r.get("Properties")?.get("EventInvokeConfig"))
        .unwrap_or_else(|| panic!("{logical_id} declares no EventInvokeConfig"));
    let destination =
        config.get("DestinationConfig").and_then(|d| d.get("OnFailure")).and_then(|o| o.get("Destination"));
    assert!(destination.is_some(), "{logical_id} has no on-failure destination");
    config.get("MaximumRetryAttempts").and_then(Value::as_u64).map_or(2, |n| u32::try_from(n).unwrap_or(2))
}
