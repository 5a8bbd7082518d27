//! OpenTelemetry for runs: spans and metrics after the GenAI semantic
//! conventions, exported over OTLP/HTTP (protobuf bodies).
//!
//! A run is an `invoke_agent` span; under it each model request is a
//! `chat` span, each tool call an `execute_tool` span (a sub-agent's run
//! nests under the call that started it) and each compaction a
//! `compaction` span. The metrics are the conventions' client histograms,
//! `gen_ai.client.operation.duration` and `gen_ai.client.token.usage`.
//! Message contents go on the spans only when the user opts in, and pass
//! through the host's redaction on their way.
//!
//! With no endpoint configured, [`Telemetry`] is off: every span is an
//! empty `Option`, and the loop pays a branch per step, nothing more.

mod content;
mod span;

pub(crate) use span::Span;

use crate::config::TelemetryConfig;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::Arc;
use std::time::Duration;

/// The instrumentation scope of every span and metric.
const SCOPE: &str = "reson";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The configured endpoint is unusable.
    #[error("[telemetry]: {0}")]
    Config(String),
    /// The OTLP exporter could not be built (a bad endpoint in the
    /// environment, for one).
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down failed (the collector is down, say).
    #[error("OpenTelemetry export: {0}")]
    Export(String),
}

/// Where a run's spans and metrics go: nowhere ([`Telemetry::off`], the
/// default) or an OTLP collector. Cheap to clone; clones share the
/// exporters.
#[derive(Clone, Default)]
pub struct Telemetry {
    on: Option<Arc<Exporter>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("on", &self.is_on()).finish()
    }
}

/// The live half of [`Telemetry`].
pub(crate) struct Exporter {
    tracer: SdkTracer,
    traces: SdkTracerProvider,
    meters: SdkMeterProvider,
    /// `gen_ai.client.operation.duration`, seconds.
    duration: Histogram<f64>,
    /// `gen_ai.client.token.usage`, tokens.
    tokens: Histogram<u64>,
    capture_content: bool,
}

/// The conventions' advised buckets for `gen_ai.client.operation.duration`.
const DURATION_BUCKETS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/// The conventions' advised buckets for `gen_ai.client.token.usage`.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The standard variables that name an OTLP endpoint.
const ENDPOINT_VARS: [&str; 2] =
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"];

impl Telemetry {
    /// Exports nothing, at no cost.
    pub fn off() -> Self {
        Self::default()
    }

    /// Telemetry as `config` and the environment say: on when
    /// `otlp_endpoint` is set or `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is, unless `OTEL_SDK_DISABLED`
    /// is `true`. Call it inside a tokio runtime or not: the exporters run
    /// on threads of their own.
    pub fn from_config(config: &TelemetryConfig) -> Result<Self, TelemetryError> {
        config.validate().map_err(TelemetryError::Config)?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Self::off());
        }
        let from_env = ENDPOINT_VARS.iter().any(|v| env(v).is_some());
        if config.otlp_endpoint.is_none() && !from_env {
            return Ok(Self::off());
        }
        Self::start(config.otlp_endpoint.as_deref(), config.capture_content)
    }

    /// Exports to the OTLP/HTTP collector at `endpoint` (a base URL), or
    /// where the environment says when `None`.
    fn start(endpoint: Option<&str>, capture_content: bool) -> Result<Self, TelemetryError> {
        // The exporter's reqwest is built without a TLS provider of its
        // own: it takes the process's, which the host's is.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = |path: &str| endpoint.map(|e| format!("{}/{path}", e.trim_end_matches('/')));
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary);
        if let Some(url) = url("v1/traces") {
            spans = spans.with_endpoint(url);
        }
        let mut metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary);
        if let Some(url) = url("v1/metrics") {
            metrics = metrics.with_endpoint(url);
        }
        let resource = resource();
        let traces = SdkTracerProvider::builder()
            .with_batch_exporter(spans.build()?)
            .with_resource(resource.clone())
            .build();
        let meters = SdkMeterProvider::builder()
            .with_periodic_exporter(metrics.build()?)
            .with_resource(resource)
            .build();
        let meter = meters.meter(SCOPE);
        let duration = meter
            .f64_histogram("gen_ai.client.operation.duration")
            .with_description("GenAI operation duration.")
            .with_unit("s")
            .with_boundaries(DURATION_BUCKETS.to_vec())
            .build();
        let tokens = meter
            .u64_histogram("gen_ai.client.token.usage")
            .with_description("Number of input and output tokens used.")
            .with_unit("{token}")
            .with_boundaries(TOKEN_BUCKETS.to_vec())
            .build();
        let tracer = traces.tracer(SCOPE);
        let exporter = Exporter { tracer, traces, meters, duration, tokens, capture_content };
        Ok(Self { on: Some(Arc::new(exporter)) })
    }

    /// Whether anything is exported.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Sends what is buffered now, on a thread of its own: a run's end
    /// never waits for the collector, and a process that exits meanwhile
    /// is not held up by it.
    pub(crate) fn flush_soon(&self) {
        let Some(exporter) = self.on.clone() else { return };
        let spawned =
            std::thread::Builder::new().name("reson-otel-flush".into()).spawn(move || {
                if let Err(e) = exporter.flush() {
                    tracing::debug!("OpenTelemetry flush: {e}");
                }
            });
        if let Err(e) = spawned {
            tracing::debug!("OpenTelemetry flush not started: {e}");
        }
    }

    /// Sends what is buffered and stops exporting, waiting at most
    /// `timeout` for the collector. For the end of a process: runs started
    /// later export nothing.
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), TelemetryError> {
        let Some(exporter) = self.on.clone() else { return Ok(()) };
        let (done, result) = tokio::sync::oneshot::channel();
        // A thread, not `spawn_blocking`: a runtime shutting down waits for
        // its blocking tasks, and this one may wait on a silent collector.
        std::thread::Builder::new()
            .name("reson-otel-shutdown".into())
            .spawn(move || {
                let flushed = exporter.flush();
                let _ = exporter.traces.shutdown_with_timeout(timeout);
                let _ = exporter.meters.shutdown_with_timeout(timeout);
                let _ = done.send(flushed);
            })
            .map_err(|e| TelemetryError::Export(e.to_string()))?;
        match tokio::time::timeout(timeout, result).await {
            Ok(Ok(flushed)) => flushed,
            Ok(Err(_)) => Err(TelemetryError::Export("the shutdown thread died".into())),
            Err(_) => Err(TelemetryError::Export(format!(
                "the collector did not answer within {timeout:?}"
            ))),
        }
    }
}

impl Exporter {
    fn flush(&self) -> Result<(), TelemetryError> {
        let spans = self.traces.force_flush();
        let metrics = self.meters.force_flush();
        spans.and(metrics).map_err(|e| TelemetryError::Export(e.to_string()))
    }
}

/// `service.name` is `reson` unless `OTEL_SERVICE_NAME` names it; the
/// SDK's builder reads that and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource() -> Resource {
    let builder = Resource::builder();
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty());
    let builder = if named { builder } else { builder.with_service_name(SCOPE) };
    builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build()
}
