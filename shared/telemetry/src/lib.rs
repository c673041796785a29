//! OpenTelemetry for the existing `tracing` spans: OTLP export when the
//! standard `OTEL_*` variables ask for it, and the W3C `traceparent` read
//! from requests and written on requests we send.
//!
//! Off by default, and then free: without `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or with `OTEL_TRACES_EXPORTER=none`
//! or `OTEL_SDK_DISABLED=true`, [`Telemetry::from_env`] answers `None`, the
//! binaries install their subscriber exactly as before (no OpenTelemetry
//! layer at all), and every helper here returns at its first line on one
//! relaxed atomic load ([`enabled`]).
//!
//! On: spans go through `tracing-opentelemetry` to the SDK's batch span
//! processor (its own thread) and an OTLP/HTTP protobuf exporter. Sampling
//! is the SDK's, from `OTEL_TRACES_SAMPLER` (default: parent-based, always
//! on); the service name from `OTEL_SERVICE_NAME`, else the binary's own.
//! The exporter speaks plain `http://` (a collector beside the process — on
//! Lambda, the collector extension on localhost); `grpc` and `http/json`
//! are not built in and are refused by name.
//!
//! Which spans: `info` and above everywhere, `debug` and above in our own
//! crates (the request span is `debug`, so a plain server pays nothing for it).
//!
//! What crosses processes and time (an append's context found again by the
//! processor step and the webhook delivery it causes) is carried by the
//! core as an opaque string (`ds_core`'s trace ring); this crate only turns
//! spans into W3C `traceparent` strings and back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The W3C Trace Context header.
pub const TRACEPARENT: &str = "traceparent";

/// Set once an OpenTelemetry layer has been made: every helper checks it first.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The provider [`flush`] exports from, once one was made.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether spans are exported (an OpenTelemetry layer was made).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A setting this build cannot honour, or an exporter that could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    #[error("{name}={value:?} is not supported (use {supported})")]
    Unsupported { name: &'static str, value: String, supported: &'static str },
    #[error("OTLP exporter: {0}")]
    Exporter(String),
}

/// The tracer provider while spans are exported ([`flush`] exports what
/// has finished); dropping it shuts the provider down, which exports what
/// is left: keep it until the process ends.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The exporter the process environment asks for, or `None` (see the
    /// module docs). `service` names the process when `OTEL_SERVICE_NAME`
    /// does not.
    pub fn from_env(service: &'static str) -> Result<Option<Self>, TelemetryError> {
        Self::from_vars(service, |name| std::env::var(name).ok())
    }

    /// [`Self::from_env`] over another source of variables (tests).
    pub fn from_vars(
        service: &'static str,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TelemetryError> {
        if !requested(&var)? {
            return Ok(None);
        }
        // The exporter reads the endpoint, headers and timeout variables itself.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service);
        }
        let provider =
            SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
        let _ = PROVIDER.set(provider.clone());
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Some(Self { provider }))
    }

    /// The layer that records spans into the provider, with its own filter
    /// (see the module docs), beside whatever logs the binary writes.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("durable-streams");
        let filter = Targets::new().with_default(tracing::Level::INFO).with_targets(
            [
                "ds_http",
                "ds_core",
                "ds_processor",
                "ds_processor_host",
                "ds_processor_local",
                "ds_processor_aws",
                "ds_processors_builtin",
                "ds_subscriptions",
            ]
            .map(|t| (t, tracing::Level::DEBUG)),
        );
        tracing_opentelemetry::layer().with_tracer(tracer).with_threads(false).with_filter(filter)
    }
}

/// Export every finished span now, and wait for it: what a Lambda function
/// does before an invocation returns (then its environment is frozen, the
/// batch processor's thread with it). Blocking: call it off the async
/// workers (`spawn_blocking`). Nothing to do when export is off. Errors are
/// logged, not returned: a collector that is down must not fail the work
/// that was traced.
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(e) = provider.force_flush() {
            tracing::warn!(error = %e, "could not export spans");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "could not export the last spans");
        }
    }
}

/// The Lambda functions' subscriber: JSON logs to stdout (CloudWatch)
/// without time (CloudWatch stamps each line), filter from `RUST_LOG`
/// (default `info`); and span export beside them when the `OTEL_*`
/// variables ask for it, else no OpenTelemetry layer at all. A subscriber
/// already set (tests) is left in place. Keep the answer for the life of the
/// process, and [`flush`] before each invocation returns.
pub fn init_lambda(service: &'static str) -> Result<Option<Telemetry>, TelemetryError> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let Some(telemetry) = Telemetry::from_env(service)? else {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).json().without_time().try_init();
        return Ok(None);
    };
    let logs = tracing_subscriber::fmt::layer().json().without_time().with_filter(filter);
    let _ = tracing_subscriber::registry().with(logs).with(telemetry.layer()).try_init();
    Ok(Some(telemetry))
}

/// Whether the variables ask for OTLP trace export.
fn requested(var: &impl Fn(&str) -> Option<String>) -> Result<bool, TelemetryError> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    let endpoint = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|name| var(name).is_some_and(|v| !v.trim().is_empty()));
    let on = match var("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase()) {
        None => endpoint,
        Some(v) if v.is_empty() => endpoint,
        Some(v) if v == "none" => false,
        // Without an endpoint the exporter's default (localhost:4318) is used.
        Some(v) if v == "otlp" => true,
        Some(value) => {
            return Err(TelemetryError::Unsupported { name: "OTEL_TRACES_EXPORTER", value, supported: "otlp or none" })
        }
    };
    if on {
        for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            if let Some(value) = var(name).filter(|v| v.trim() != "http/protobuf" && !v.trim().is_empty()) {
                return Err(TelemetryError::Unsupported { name: static_name(name), value, supported: "http/protobuf" });
            }
        }
    }
    Ok(on)
}

fn static_name(name: &str) -> &'static str {
    if name == "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    } else {
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    }
}

/// The span context a W3C `traceparent` value names, if it is well formed
/// (version `00`, or a later version read as `00` as the spec asks).
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let value = value.trim();
    let mut parts = value.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !lower_hex(version, 2)
        || version == "ff"
        || !lower_hex(trace, 32)
        || !lower_hex(span, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    // Version 00 has exactly four fields; later versions may add some.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

/// The W3C `traceparent` of a span context.
pub fn format_traceparent(context: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8())
}

/// Make `span` (not yet entered) a child of the remote `traceparent`.
/// Returns whether it did: export is on, the value is well formed and
/// sampled. An unsampled or malformed value leaves the span a root.
pub fn adopt_remote_parent(span: &tracing::Span, traceparent: &str) -> bool {
    if !enabled() || span.is_disabled() {
        return false;
    }
    let Some(context) = parse_traceparent(traceparent).filter(SpanContext::is_sampled) else {
        return false;
    };
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(context)).is_ok()
}

/// Make `span` (not yet entered) a child of a context this process or
/// another one stored earlier (an append's, found again by the step or the
/// delivery it caused). [`adopt_remote_parent`] under a name that says so.
pub fn continue_from(span: &tracing::Span, traceparent: &str) -> bool {
    adopt_remote_parent(span, traceparent)
}

/// The `traceparent` of `span`, when it is exported and sampled.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    let sc = span_ref.span_context();
    (sc.is_valid() && sc.is_sampled()).then(|| format_traceparent(sc))
}

/// The `traceparent` of the current span, when it is exported and sampled:
/// what a request we send carries, and what an append made here records.
pub fn current_traceparent() -> Option<String> {
    if !enabled() {
        return None;
    }
    traceparent_of(&tracing::Span::current())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips_and_refuses_malformed_values() {
        let context = parse_traceparent(SAMPLED).unwrap();
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(format_traceparent(&context), SAMPLED);
        assert!(!parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
        // A later version may carry more fields.
        assert!(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
    }

    #[test]
    fn export_is_off_unless_asked_for() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        };
        assert!(!requested(&vars(&[])).unwrap());
        assert!(requested(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])).unwrap());
        assert!(!requested(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_EXPORTER", "none")
        ]))
        .unwrap());
        assert!(!requested(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true")
        ]))
        .unwrap());
        assert!(requested(&vars(&[("OTEL_TRACES_EXPORTER", "otlp")])).unwrap());
        assert!(requested(&vars(&[("OTEL_TRACES_EXPORTER", "zipkin")])).is_err());
        assert!(requested(&vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        ]))
        .is_err());
        // Nothing made: the helpers stay off.
        assert!(!enabled());
        assert!(current_traceparent().is_none());
    }
}
