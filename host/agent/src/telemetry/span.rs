//! The spans a run makes and what they carry. Names and attributes follow
//! the GenAI semantic conventions (v1.41); what the conventions have no
//! name for is under `reson.`.

use super::{Exporter, Telemetry, content};
use crate::provider::{ChatRequest, ChatResponse, ProviderError};
use crate::tools::ToolResult;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{ToolCall, Usage};
use std::sync::Arc;
use std::time::Instant;

const OPERATION: &str = "gen_ai.operation.name";
const PROVIDER: &str = "gen_ai.provider.name";
const REQUEST_MODEL: &str = "gen_ai.request.model";
const RESPONSE_MODEL: &str = "gen_ai.response.model";
const ERROR_TYPE: &str = "error.type";

/// One span in flight, or nothing when telemetry is off. Clones are the
/// same span; ending it twice ends it once.
#[derive(Clone, Default)]
pub(crate) struct Span(Option<Arc<Live>>);

struct Live {
    exporter: Arc<Exporter>,
    /// The span, as the parent of its children.
    cx: Context,
    started: Instant,
    /// What the metrics recorded at its end are keyed by (a `chat` span's).
    metric: Vec<KeyValue>,
}

impl Telemetry {
    /// The `invoke_agent` span of a run: under `parent` (the tool call
    /// that started a sub-agent), or a root.
    pub(crate) fn invoke_agent(
        &self,
        parent: &Span,
        agent: &str,
        provider: &str,
        model: &str,
    ) -> Span {
        let Some(exporter) = &self.on else { return Span::default() };
        let mut attributes = vec![
            KeyValue::new(OPERATION, "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", agent.to_owned()),
            KeyValue::new(PROVIDER, provider.to_owned()),
        ];
        // The provider's default model, when the run names none: unknown here.
        if !model.is_empty() {
            attributes.push(KeyValue::new(REQUEST_MODEL, model.to_owned()));
        }
        let cx = parent.0.as_ref().map_or_else(Context::new, |p| p.cx.clone());
        let name = format!("invoke_agent {agent}");
        Span::start(exporter, &cx, name, SpanKind::Internal, attributes, Vec::new())
    }
}

impl Span {
    fn start(
        exporter: &Arc<Exporter>,
        parent: &Context,
        name: String,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
        metric: Vec<KeyValue>,
    ) -> Self {
        let span = exporter
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&exporter.tracer, parent);
        let live = Live {
            exporter: exporter.clone(),
            cx: parent.with_span(span),
            started: Instant::now(),
            metric,
        };
        Self(Some(Arc::new(live)))
    }

    /// A child of this span.
    fn child(&self, name: String, kind: SpanKind, attributes: Vec<KeyValue>) -> Self {
        let Some(live) = &self.0 else { return Self::default() };
        Self::start(&live.exporter, &live.cx, name, kind, attributes, Vec::new())
    }

    fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(live) = &self.0 {
            live.cx.span().set_attributes(attributes());
        }
    }

    /// Whether contents go on this span.
    fn captures(&self) -> bool {
        self.0.as_ref().is_some_and(|l| l.exporter.capture_content)
    }

    fn fail(&self, kind: &str, description: String) {
        if let Some(live) = &self.0 {
            live.cx.span().set_attribute(KeyValue::new(ERROR_TYPE, kind.to_owned()));
            live.cx.span().set_status(Status::error(description));
        }
    }

    fn end(&self) {
        if let Some(live) = &self.0 {
            live.cx.span().end();
        }
    }

    /// The trace the run writes, once it is known.
    pub(crate) fn conversation(&self, trace_id: &str) {
        self.set(|| vec![KeyValue::new("gen_ai.conversation.id", trace_id.to_owned())]);
    }

    /// Ends an `invoke_agent` span with how the run went and what it used.
    pub(crate) fn end_run(&self, status: &str, error: Option<&str>, usage: &Usage) {
        self.set(|| {
            let mut attributes = usage_attributes(usage);
            attributes.push(KeyValue::new("reson.run.status", status.to_owned()));
            attributes
        });
        if let Some(error) = error {
            self.fail(status, content::redacted(error));
        }
        self.end();
    }

    /// A `chat` span for one request to the model: the conventions'
    /// request attributes, and the messages sent when contents are on.
    pub(crate) fn chat(&self, provider: &str, request: &ChatRequest) -> Self {
        let Some(live) = &self.0 else { return Self::default() };
        let model = &request.params.model;
        let mut metric =
            vec![KeyValue::new(OPERATION, "chat"), KeyValue::new(PROVIDER, provider.to_owned())];
        if !model.is_empty() {
            metric.push(KeyValue::new(REQUEST_MODEL, model.clone()));
        }
        let mut attributes = metric.clone();
        let params = &request.params;
        if let Some(t) = params.temperature {
            attributes.push(KeyValue::new("gen_ai.request.temperature", f64::from(t)));
        }
        if let Some(p) = params.top_p {
            attributes.push(KeyValue::new("gen_ai.request.top_p", f64::from(p)));
        }
        if let Some(n) = params.max_tokens {
            attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(n)));
        }
        if !params.stop.is_empty() {
            attributes.push(KeyValue::new("gen_ai.request.stop_sequences", strings(&params.stop)));
        }
        attributes.push(KeyValue::new("gen_ai.request.stream", params.stream));
        if live.exporter.capture_content {
            attributes.extend(content::request(request));
        }
        let name = if model.is_empty() { "chat".to_owned() } else { format!("chat {model}") };
        Self::start(&live.exporter, &live.cx, name, SpanKind::Client, attributes, metric)
    }

    /// Ends a `chat` span with the answer (or the error), and records the
    /// request's duration and tokens in the metrics.
    pub(crate) fn end_chat(&self, result: Result<&ChatResponse, &ProviderError>) {
        let Some(live) = &self.0 else { return };
        let mut metric = live.metric.clone();
        match result {
            Ok(response) => {
                metric.push(KeyValue::new(RESPONSE_MODEL, response.model.clone()));
                self.set(|| {
                    let mut attributes = usage_attributes(&response.usage);
                    attributes.push(KeyValue::new(RESPONSE_MODEL, response.model.clone()));
                    let reasons = strings(std::slice::from_ref(&response.finish_reason));
                    attributes.push(KeyValue::new("gen_ai.response.finish_reasons", reasons));
                    if self.captures() {
                        attributes.extend(content::response(response));
                    }
                    attributes
                });
                let usage = &response.usage;
                for (kind, count) in
                    [("input", usage.prompt_tokens), ("output", usage.completion_tokens)]
                {
                    let mut keys = metric.clone();
                    keys.push(KeyValue::new("gen_ai.token.type", kind));
                    live.exporter.tokens.record(count, &keys);
                }
            }
            Err(e) => {
                let kind = error_kind(e);
                metric.push(KeyValue::new(ERROR_TYPE, kind));
                self.fail(kind, content::redacted(&e.to_string()));
            }
        }
        live.exporter.duration.record(live.started.elapsed().as_secs_f64(), &metric);
        self.end();
    }

    /// Ends a span whose work a stop cut.
    pub(crate) fn end_stopped(&self) {
        self.fail("cancelled", "the run was stopped".into());
        self.end();
    }

    /// Ends a span whose work failed.
    pub(crate) fn end_failed(&self, description: &str) {
        self.fail("error", content::redacted(description));
        self.end();
    }

    /// A `compaction` span: the history was compacted at `level` (1 or 2)
    /// before a model call; a level-2 summary's `chat` span is its child.
    pub(crate) fn compaction(&self, level: u8) -> Self {
        let attributes = vec![KeyValue::new("reson.compaction.level", i64::from(level))];
        self.child("compaction".into(), SpanKind::Internal, attributes)
    }

    /// Ends a `compaction` span with the request's size before and after.
    pub(crate) fn end_compaction(&self, tokens_before: u64, tokens_after: u64) {
        self.set(|| {
            vec![
                KeyValue::new("reson.compaction.tokens_before", tokens(tokens_before)),
                KeyValue::new("reson.compaction.tokens_after", tokens(tokens_after)),
            ]
        });
        self.end();
    }

    /// An `execute_tool` span for one call of the model's, naming the
    /// plugin that serves the tool (`builtin` for the host's own).
    pub(crate) fn execute_tool(&self, call: &ToolCall, offered: &[ToolSpec]) -> Self {
        let Some(live) = &self.0 else { return Self::default() };
        let plugin = offered.iter().find(|t| t.name == call.name).map(|t| t.plugin.as_str());
        let mut attributes = vec![
            KeyValue::new(OPERATION, "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ];
        if let Some(plugin) = plugin {
            attributes.push(KeyValue::new("reson.tool.plugin", plugin.to_owned()));
        }
        if live.exporter.capture_content {
            let arguments = content::redacted(&call.arguments);
            attributes.push(KeyValue::new("gen_ai.tool.call.arguments", arguments));
        }
        self.child(format!("execute_tool {}", call.name), SpanKind::Internal, attributes)
    }

    /// The permission rules' decision on a call (`allow`, `deny`,
    /// `ask-once`, ...), with the rule that made it.
    pub(crate) fn permission(&self, decision: &str, rule: Option<&str>) {
        self.set(|| {
            let mut attributes =
                vec![KeyValue::new("reson.permission.decision", decision.to_owned())];
            if let Some(rule) = rule {
                attributes.push(KeyValue::new("reson.permission.rule", rule.to_owned()));
            }
            attributes
        });
    }

    /// Ends an `execute_tool` span with the call's result: a failure, and
    /// the limit that stopped it, if one did.
    pub(crate) fn end_tool(&self, result: &ToolResult) {
        if self.0.is_none() {
            return;
        }
        if let Some(limit) = &result.limit {
            self.set(|| vec![KeyValue::new("reson.tool.limit", limit.to_string())]);
        }
        if self.captures() {
            self.set(|| {
                vec![KeyValue::new("gen_ai.tool.call.result", content::redacted(&result.text))]
            });
        }
        if !result.ok {
            let kind = if result.limit.is_some() { "limit_exceeded" } else { "tool_error" };
            self.fail(kind, content::redacted(&result.text));
        }
        self.end();
    }
}

/// The conventions' usage attributes.
fn usage_attributes(usage: &Usage) -> Vec<KeyValue> {
    vec![
        KeyValue::new("gen_ai.usage.input_tokens", tokens(usage.prompt_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", tokens(usage.completion_tokens)),
        KeyValue::new("gen_ai.usage.cache_read.input_tokens", tokens(usage.cache_read_tokens)),
        KeyValue::new("gen_ai.usage.cache_creation.input_tokens", tokens(usage.cache_write_tokens)),
        KeyValue::new("gen_ai.usage.reasoning.output_tokens", tokens(usage.reasoning_tokens)),
    ]
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn strings(values: &[String]) -> Value {
    Value::Array(Array::String(values.iter().map(|s| StringValue::from(s.clone())).collect()))
}

/// The `error.type` of a failed model request.
fn error_kind(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Auth(_) => "auth",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Timeout(_) => "timeout",
        ProviderError::BadRequest(_) => "bad_request",
        ProviderError::Server { .. } => "server",
        ProviderError::Network(_) => "network",
        ProviderError::InvalidResponse(_) => "invalid_response",
        ProviderError::ContentFiltered(_) => "content_filter",
        ProviderError::Other(_) => "other",
        ProviderError::Plugin(_) => "plugin",
    }
}
