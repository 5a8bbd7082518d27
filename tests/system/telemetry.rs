//! OpenTelemetry end to end: runs on the real `scripted` provider and `echo`
//! tool components export GenAI spans and metrics over OTLP/HTTP to a
//! receiver on 127.0.0.1 that decodes the official protobuf messages
//! (`opentelemetry-proto`). Span names, nesting (sub-agents under their
//! caller's tool span), attributes, opt-in redacted contents, the metrics,
//! and a collector that is down or silent costing the run nothing.

use crate::support;
use crate::support::api as api_support;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{HistogramDataPoint, metric};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{Span, Status, status};
use prost::Message as _;
use reson::agent::{
    AgentEvent, Answer, Hooks, PendingApprovals, Permissions, RunConfig, RunOutcome, Runner,
    SubAgentSettings,
};
use reson::config::Config;
use reson::policy::{Decision, Rule, RuleSet};
use reson::provider::{LlmParams, PluginProvider};
use reson::telemetry::Telemetry;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStatus};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::TestDir;

const MODEL: &str = "gpt-test";

/// What the receiver got: every span and every histogram data point, by
/// metric name (cumulative: the latest export holds the totals).
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// The `service.name` of each export's resource.
    services: Vec<Option<String>>,
    histograms: Vec<(String, String, HistogramDataPoint)>,
}

/// An OTLP/HTTP receiver on 127.0.0.1.
struct Receiver {
    url: String,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    async fn start() -> Self {
        let got = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(got.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, got }
    }

    /// Waits until `ready` holds for what was received; panics after 20 s.
    async fn until(&self, what: &str, ready: impl Fn(&Received) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready(&self.got.lock().unwrap()) {
            assert!(Instant::now() < deadline, "the receiver never got {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn spans(&self) -> Vec<Span> {
        self.got.lock().unwrap().spans.clone()
    }

    /// The latest data points of histogram `name` (one per attribute set).
    fn histogram(&self, name: &str) -> Vec<(String, HistogramDataPoint)> {
        let got = self.got.lock().unwrap();
        let mut latest: Vec<(String, HistogramDataPoint)> = Vec::new();
        for (metric, unit, point) in got.histograms.iter().filter(|(n, ..)| n == name) {
            let _ = metric;
            latest.retain(|(_, p)| p.attributes != point.attributes);
            latest.push((unit.clone(), point.clone()));
        }
        latest
    }
}

async fn traces(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("a protobuf trace export");
    let mut got = got.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource.resource.and_then(|r| string(&r.attributes, "service.name"));
        got.services.push(service);
        got.spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
    }
    Vec::new()
}

async fn metrics(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> Vec<u8> {
    let request = ExportMetricsServiceRequest::decode(body).expect("a protobuf metrics export");
    let mut got = got.lock().unwrap();
    for metric in
        request.resource_metrics.into_iter().flat_map(|r| r.scope_metrics).flat_map(|s| s.metrics)
    {
        if let Some(metric::Data::Histogram(histogram)) = metric.data {
            for point in histogram.data_points {
                got.histograms.push((metric.name.clone(), metric.unit.clone(), point));
            }
        }
    }
    Vec::new()
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()
}

fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attribute(attributes, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match attribute(attributes, key)? {
        any_value::Value::IntValue(n) => Some(*n),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

fn strings(attributes: &[KeyValue], key: &str) -> Option<Vec<String>> {
    match attribute(attributes, key)? {
        any_value::Value::ArrayValue(array) => Some(
            array
                .values
                .iter()
                .map(|v| match &v.value {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    other => panic!("{key} holds a non-string: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("{key} is not an array: {other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    string(&span.attributes, key)
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.parent_span_id == parent.span_id).collect()
}

/// A scripted run's setup: plugins, a config with `telemetry` appended,
/// and a runner exporting to what that section says.
struct Setup {
    _dir: TestDir,
    runner: Runner,
    telemetry: Telemetry,
}

impl Setup {
    async fn new(script: Value, extra: &str) -> Self {
        Self::with_permissions(script, extra, None).await
    }

    async fn with_permissions(
        script: Value,
        extra: &str,
        permissions: Option<Permissions>,
    ) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
        let runtime = dir.open_scripted(&script, extra).await;
        let config = Config::load(&dir.path().join("reson.toml")).unwrap();
        let telemetry = Telemetry::from_config(&config.agent.telemetry).unwrap();
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        let (_, rules) = config.preset("default").unwrap();
        let permissions = permissions.unwrap_or_else(|| {
            Permissions::new(rules, PendingApprovals::new(Duration::from_secs(30)))
        });
        let runner = Runner::new(
            store,
            Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
            ToolRegistry::new(runtime),
            Hooks::none(),
        )
        .with_permissions(permissions)
        .with_sub_agents(SubAgentSettings::from_config(&config).unwrap())
        .with_telemetry(telemetry.clone());
        Self { _dir: dir, runner, telemetry }
    }

    /// Runs `task` to its end, answering approval requests with `answers`
    /// in order.
    async fn run(
        &self,
        task: &str,
        approvals: Option<(&PendingApprovals, &[Answer])>,
    ) -> RunOutcome {
        let config = RunConfig {
            params: LlmParams { model: MODEL.into(), ..LlmParams::default() },
            ..RunConfig::default()
        };
        let mut handle =
            self.runner.run(vec![Message::new(Role::User, task)], config).await.unwrap();
        let mut asked = 0;
        let drive = async {
            while let Some(event) = handle.next_event().await {
                if let (AgentEvent::ApprovalNeeded { request }, Some((pending, answers))) =
                    (&event, approvals)
                {
                    assert!(pending.answer(&request.id, answers[asked]));
                    asked += 1;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), drive).await.expect("the run ended in time");
        let outcome = handle.wait().await.unwrap();
        assert_eq!(outcome.status, TraceStatus::Completed);
        outcome
    }
}

fn endpoint(url: &str) -> String {
    format!("[telemetry]\notlp_endpoint = \"{url}\"\n")
}

fn echo(text: &str) -> Value {
    json!({ "name": "echo", "arguments": { "text": text } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_genai_spans_nested_under_their_callers_and_the_metrics() {
    let receiver = Receiver::start().await;
    let usage =
        |input: u64, output: u64| json!({ "prompt_tokens": input, "completion_tokens": output });
    let script = json!({
        "turns": [
            { "tool_calls": [echo("hello")], "usage": usage(12, 4) },
            { "tool_calls": [{ "name": "agent", "arguments": { "task": "survey alpha" } }], "usage": usage(20, 6) },
            { "text": "all done", "usage": usage(30, 2) }
        ],
        "agents": [
            { "match": "survey alpha", "turns": [{ "text": "alpha is fine", "usage": usage(7, 3) }] }
        ]
    });
    let s = Setup::new(script, &endpoint(&receiver.url)).await;
    assert!(s.telemetry.is_on());
    let outcome = s.run("say hello, then survey", None).await;
    receiver
        .until("both runs' spans", |got| {
            got.spans.iter().filter(|s| s.name.starts_with("invoke_agent")).count() == 2
        })
        .await;
    let spans = receiver.spans();
    let services = receiver.got.lock().unwrap().services.clone();
    assert!(services.iter().all(|s| s.as_deref() == Some("reson")), "{services:?}");

    // The root run.
    let roots: Vec<&Span> = named(&spans, "invoke_agent default")
        .into_iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(
        roots.len(),
        1,
        "one root run: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = roots[0];
    assert_eq!(attr(root, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    assert_eq!(attr(root, "gen_ai.agent.name").as_deref(), Some("default"));
    assert_eq!(attr(root, "gen_ai.conversation.id"), Some(outcome.trace_id.clone()));
    assert_eq!(attr(root, "gen_ai.provider.name").as_deref(), Some("scripted"));
    assert_eq!(attr(root, "gen_ai.request.model").as_deref(), Some(MODEL));
    assert_eq!(int(&root.attributes, "gen_ai.usage.input_tokens"), Some(62));
    assert_eq!(int(&root.attributes, "gen_ai.usage.output_tokens"), Some(12));
    assert_eq!(root.kind, SpanKind::Internal as i32);

    // Its three model calls and two tool calls, all its children, all in
    // one trace.
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id), "one trace");
    let mine = children(&spans, root);
    let chats: Vec<&&Span> = mine.iter().filter(|s| s.name == format!("chat {MODEL}")).collect();
    assert_eq!(chats.len(), 3);
    let first = chats.iter().min_by_key(|s| s.start_time_unix_nano).unwrap();
    assert_eq!(first.kind, SpanKind::Client as i32);
    assert_eq!(attr(first, "gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(attr(first, "gen_ai.provider.name").as_deref(), Some("scripted"));
    assert_eq!(attr(first, "gen_ai.request.model").as_deref(), Some(MODEL));
    assert_eq!(attr(first, "gen_ai.response.model").as_deref(), Some(MODEL));
    assert_eq!(int(&first.attributes, "gen_ai.usage.input_tokens"), Some(12));
    assert_eq!(int(&first.attributes, "gen_ai.usage.output_tokens"), Some(4));
    assert_eq!(
        strings(&first.attributes, "gen_ai.response.finish_reasons"),
        Some(vec!["tool_calls".into()])
    );
    let last = chats.iter().max_by_key(|s| s.start_time_unix_nano).unwrap();
    assert_eq!(
        strings(&last.attributes, "gen_ai.response.finish_reasons"),
        Some(vec!["stop".into()])
    );

    let tool = mine.iter().find(|s| s.name == "execute_tool echo").expect("the echo call's span");
    assert_eq!(attr(tool, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
    assert_eq!(attr(tool, "gen_ai.tool.name").as_deref(), Some("echo"));
    assert_eq!(attr(tool, "gen_ai.tool.call.id").as_deref(), Some("call_0_0"));
    assert_eq!(attr(tool, "reson.tool.plugin").as_deref(), Some("echo"));
    assert_eq!(attr(tool, "reson.permission.decision").as_deref(), Some("allow"));
    assert_ne!(tool.status.as_ref().map(|s| s.code), Some(status::StatusCode::Error as i32));

    // The sub-agent: under the `agent` call's span, its model call under it.
    let agent_call = mine.iter().find(|s| s.name == "execute_tool agent").expect("the agent call");
    assert_eq!(attr(agent_call, "reson.tool.plugin").as_deref(), Some("builtin"));
    let sub = children(&spans, agent_call);
    assert_eq!(sub.len(), 1, "one sub-agent run under the call");
    let sub = sub[0];
    assert!(sub.name.starts_with("invoke_agent "), "{}", sub.name);
    assert_ne!(
        attr(sub, "gen_ai.conversation.id"),
        Some(outcome.trace_id.clone()),
        "its own trace"
    );
    let sub_chats = children(&spans, sub);
    assert_eq!(sub_chats.len(), 1);
    assert_eq!(int(&sub_chats[0].attributes, "gen_ai.usage.input_tokens"), Some(7));

    // Contents stay home unless the user opts in.
    for span in &spans {
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(attribute(&span.attributes, key).is_none(), "{key} on {}", span.name);
        }
    }

    // The metrics: tokens by type, and one duration per model call.
    receiver
        .until("the metrics of the four model calls", |got| {
            got.histograms
                .iter()
                .any(|(n, _, p)| n == "gen_ai.client.operation.duration" && p.count == 4)
        })
        .await;
    let tokens = receiver.histogram("gen_ai.client.token.usage");
    let sum = |kind: &str| -> f64 {
        tokens
            .iter()
            .filter(|(_, p)| string(&p.attributes, "gen_ai.token.type").as_deref() == Some(kind))
            .map(|(_, p)| p.sum.unwrap_or_default())
            .sum()
    };
    assert_eq!(sum("input"), 69.0);
    assert_eq!(sum("output"), 15.0);
    assert!(tokens.iter().all(|(unit, p)| {
        unit == "{token}"
            && string(&p.attributes, "gen_ai.operation.name").as_deref() == Some("chat")
            && string(&p.attributes, "gen_ai.provider.name").as_deref() == Some("scripted")
            && string(&p.attributes, "gen_ai.request.model").as_deref() == Some(MODEL)
    }));
    let durations = receiver.histogram("gen_ai.client.operation.duration");
    assert_eq!(durations.len(), 1, "one attribute set");
    let (unit, point) = &durations[0];
    assert_eq!(unit, "s");
    assert_eq!(point.count, 4);
    assert!(point.sum.unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contents_go_out_only_when_opted_in_and_then_redacted() {
    const SECRET: &str = "otel-Secret-9f3Kq27xZ";
    reson::redact::register(SECRET).unwrap();
    let receiver = Receiver::start().await;
    let script = json!({
        "turns": [
            { "tool_calls": [echo(&format!("the key is {SECRET}"))] },
            { "text": "echoed" }
        ]
    });
    let config = format!("{}capture_content = true\n", endpoint(&receiver.url));
    let s = Setup::new(script, &config).await;
    s.run(&format!("echo the key {SECRET}"), None).await;
    receiver
        .until("the run's spans", |got| {
            got.spans.iter().any(|s| s.name.starts_with("invoke_agent"))
        })
        .await;
    let spans = receiver.spans();

    let chats = named(&spans, &format!("chat {MODEL}"));
    let second = chats.iter().max_by_key(|s| s.start_time_unix_nano).unwrap();
    let input: Value =
        serde_json::from_str(&attr(second, "gen_ai.input.messages").unwrap()).unwrap();
    let input = input.as_array().unwrap();
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[0]["parts"][0]["type"], "text");
    assert_eq!(input[0]["parts"][0]["content"], "echo the key [REDACTED]");
    assert_eq!(input[1]["role"], "assistant");
    assert_eq!(input[1]["parts"][0]["type"], "tool_call");
    assert_eq!(input[1]["parts"][0]["name"], "echo");
    assert_eq!(input[2]["role"], "tool");
    assert_eq!(input[2]["parts"][0]["type"], "tool_call_response");
    assert_eq!(input[2]["parts"][0]["response"], "the key is [REDACTED]");
    let output: Value =
        serde_json::from_str(&attr(second, "gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "echoed");
    assert_eq!(output[0]["finish_reason"], "stop");

    let tool = named(&spans, "execute_tool echo")[0];
    let arguments = attr(tool, "gen_ai.tool.call.arguments").unwrap();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap()["text"], "the key is [REDACTED]");
    assert_eq!(attr(tool, "gen_ai.tool.call.result").as_deref(), Some("the key is [REDACTED]"));

    for span in &spans {
        let all = format!("{:?}", span.attributes);
        assert!(!all.contains(SECRET), "the secret leaked on {}: {all}", span.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_spans_carry_the_permission_decision_and_the_limit_hit() {
    let receiver = Receiver::start().await;
    let long = "x".repeat(400);
    let script = json!({
        "turns": [
            { "tool_calls": [echo("ok"), echo(&long), echo("no")] },
            { "text": "done" }
        ]
    });
    let rule = Rule {
        decision: Decision::Ask,
        tool: "echo".into(),
        pattern: None,
        examples: Vec::new(),
        counter_examples: Vec::new(),
    };
    let rules = RuleSet::compile(&[rule]).unwrap().with_default(Decision::Allow);
    let pending = PendingApprovals::new(Duration::from_secs(30));
    let permissions = Permissions::new(rules, pending.clone());
    let config =
        format!("[plugins.echo]\nlimits = {{ output_bytes = 256 }}\n{}", endpoint(&receiver.url));
    let s = Setup::with_permissions(script, &config, Some(permissions)).await;
    s.run("echo three times", Some((&pending, &[Answer::Once, Answer::Once, Answer::Deny]))).await;
    receiver
        .until("the run's spans", |got| {
            got.spans.iter().any(|s| s.name.starts_with("invoke_agent"))
        })
        .await;
    let spans = receiver.spans();
    let mut tools = named(&spans, "execute_tool echo");
    tools.sort_by_key(|s| attr(s, "gen_ai.tool.call.id"));
    assert_eq!(tools.len(), 3);
    let decisions: Vec<Option<String>> =
        tools.iter().map(|s| attr(s, "reson.permission.decision")).collect();
    assert_eq!(
        decisions,
        [Some("ask-once".into()), Some("ask-once".into()), Some("ask-denied".into())]
    );

    let ok = tools[0];
    assert_eq!(attr(ok, "reson.tool.limit"), None);
    assert_ne!(ok.status.as_ref().map(|s| s.code), Some(status::StatusCode::Error as i32));
    let limited = tools[1];
    let limit = attr(limited, "reson.tool.limit").expect("the limit hit");
    assert!(limit.starts_with("output limit of 256 bytes"), "{limit}");
    assert_eq!(attr(limited, "error.type").as_deref(), Some("limit_exceeded"));
    assert!(
        matches!(&limited.status, Some(Status { code, .. }) if *code == status::StatusCode::Error as i32)
    );
    let denied = tools[2];
    assert_eq!(attr(denied, "error.type").as_deref(), Some("tool_error"));
    assert_eq!(attr(denied, "reson.tool.limit"), None);
}

/// The scripted run of the down-collector test, timed.
async fn timed_run(s: &Setup) -> Duration {
    let started = Instant::now();
    s.run("echo once", None).await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_silent_neither_fails_nor_slows_the_run() {
    let script = json!({ "turns": [{ "tool_calls": [echo("hi")] }, { "text": "done" }] });
    // Down: nothing listens on the port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    // Silent: accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });

    let off = Setup::new(script.clone(), "").await;
    // The standard variables would turn it on; without them nothing is built.
    let env_endpoint = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    assert!(env_endpoint || !off.telemetry.is_on(), "no endpoint, no exporter");
    let down = Setup::new(script.clone(), &endpoint(&down)).await;
    let silent = Setup::new(script, &endpoint(&silent_url)).await;
    // A run that waited for the collector would wait out the exporter's
    // 10 s timeout; what exporting costs a run is the agent_loop bench's.
    for (what, s) in [("down", &down), ("silent", &silent)] {
        let took = timed_run(s).await;
        assert!(took < support::MARGIN, "a {what} collector held the run for {took:?}");
    }
    // Shutting down waits for neither longer than it is told to.
    for s in [&down, &silent] {
        let started = Instant::now();
        let result = s.telemetry.shutdown(Duration::from_millis(500)).await;
        assert!(result.is_err(), "nothing reached a collector");
        let bound = Duration::from_millis(500) + support::MARGIN;
        assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    }
}

#[test]
fn a_bad_telemetry_section_is_refused_with_its_reason() {
    let err = Config::parse("[telemetry]\notlp_endpoint = \"ftp://collector\"\n").unwrap_err();
    assert!(err.contains("[telemetry]") && err.contains("http or https"), "{err}");
    let err = Config::parse("[telemetry]\notlp_endpoint = \"not a url\"\n").unwrap_err();
    assert!(err.contains("not a URL"), "{err}");
    let err = Config::parse("[telemetry]\ncapture_contents = true\n").unwrap_err();
    assert!(err.contains("capture_contents"), "{err}");
    let config =
        Config::parse("[telemetry]\notlp_endpoint = \"https://collector:4318\"\n").unwrap();
    assert_eq!(config.agent.telemetry.otlp_endpoint.as_deref(), Some("https://collector:4318"));
    assert!(!config.agent.telemetry.capture_content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_exports_a_short_run_before_it_exits_to_the_standard_endpoint() {
    let receiver = Receiver::start().await;
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
    dir.config("[permissions]\ndefault = \"allow\"\n");
    let script = dir.path().join("script.json");
    let turns = json!({ "turns": [{ "tool_calls": [echo("hi")] }, { "text": "done" }] });
    std::fs::write(&script, turns.to_string()).unwrap();
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &path(dir.path().join("reson.toml"))])
        .args(["--plugins-dir", &path(dir.plugins())])
        .args(["--cache-dir", &path(support::cache_dir())])
        .args(["--traces-dir", &path(dir.path().join("traces"))])
        .args(["run", "--json", "--script", &path(script), "say hi"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Already there when the process has exited: nothing waited for a batch.
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let root = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent "))
        .unwrap_or_else(|| panic!("no run span before exit: {names:?}"));
    assert_eq!(children(&spans, root).len(), 3, "two model calls and the echo call: {names:?}");
    assert!(named(&spans, "execute_tool echo").len() == 1, "{names:?}");
    let got = receiver.got.lock().unwrap();
    assert!(
        got.histograms.iter().any(|(n, ..)| n == "gen_ai.client.operation.duration"),
        "the metrics went out too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_is_a_span_with_its_summary_call_under_it() {
    const WINDOW: u64 = 8_000;
    let receiver = Receiver::start().await;
    let long = |n: usize| json!({ "tool_calls": [echo(&format!("step {n}: {}", "lorem ipsum ".repeat(150)))] });
    let mut turns: Vec<Value> = (1..=10).map(long).collect();
    turns.push(json!({ "text": "all echoed" }));
    let script = json!({
        "turns": turns,
        "models": { "summarizer": { "turns": [{ "text": "Echoed the steps so far." }] } }
    });
    let s = Setup::new(script, &endpoint(&receiver.url)).await;
    let config = RunConfig {
        params: LlmParams { model: MODEL.into(), ..LlmParams::default() },
        compaction: reson::agent::compaction::CompactionConfig {
            // Room for the sub-agent tools' specs, which no compaction shrinks.
            context_window: Some(WINDOW),
            model: Some("summarizer".into()),
            ..Default::default()
        },
        ..RunConfig::default()
    };
    let handle =
        s.runner.run(vec![Message::new(Role::User, "echo ten times")], config).await.unwrap();
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("all echoed"));
    receiver
        .until("the run's spans", |got| {
            got.spans.iter().any(|s| s.name.starts_with("invoke_agent"))
        })
        .await;
    let spans = receiver.spans();
    let root = named(&spans, "invoke_agent default")[0];
    let compactions = named(&spans, "compaction");
    assert!(!compactions.is_empty(), "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    for compaction in &compactions {
        assert_eq!(compaction.parent_span_id, root.span_id);
        assert_eq!(int(&compaction.attributes, "reson.compaction.level"), Some(2));
        let before = int(&compaction.attributes, "reson.compaction.tokens_before").unwrap();
        let after = int(&compaction.attributes, "reson.compaction.tokens_after").unwrap();
        assert!(after < before && before > WINDOW as i64 * 8 / 10, "{before} -> {after}");
        let summary = children(&spans, compaction);
        assert_eq!(summary.len(), 1);
        assert_eq!(summary[0].name, "chat summarizer");
        assert_eq!(attr(summary[0], "gen_ai.request.model").as_deref(), Some("summarizer"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reson_serve_exports_each_run_it_starts_over_http() {
    let receiver = Receiver::start().await;
    let dir = api_support::dir_with(&["scripted", "echo"]);
    let turns = json!([api_support::echo_turn("hello"), api_support::text_turn("done")]);
    let script = api_support::set_script(dir.path(), turns);
    dir.config(&api_support::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\n\
         config = {{ script = \"{}\" }}\n{}",
        script.display(),
        endpoint(&receiver.url)
    )));
    let mut server = api_support::ServerProcess::start(dir.path(), &[]).await;
    let first = server.api.start("say hello", json!({})).await;
    server.api.finish(&first, 0).await;
    let second = server.api.start("say hello again", json!({})).await;
    server.api.finish(&second, 0).await;

    // Each run is its own OpenTelemetry trace, exported while the server
    // keeps serving: nothing waits for it to exit.
    receiver
        .until("two whole runs", |got| {
            got.spans.iter().filter(|s| s.name.starts_with("invoke_agent ")).count() == 2
                && got.spans.iter().filter(|s| s.name == "execute_tool echo").count() == 2
        })
        .await;
    let spans = receiver.spans();
    let roots: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("invoke_agent ")).collect();
    assert_eq!(roots.len(), 2, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    assert_ne!(roots[0].trace_id, roots[1].trace_id, "one OpenTelemetry trace per run");
    for root in &roots {
        let names: Vec<&str> = children(&spans, root).iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), 3, "two model calls and the echo call: {names:?}");
        assert!(names.contains(&"execute_tool echo"), "{names:?}");
    }
    let ours: Vec<String> = [first, second].into();
    let conversations: Vec<String> =
        roots.iter().filter_map(|s| attr(s, "gen_ai.conversation.id")).collect();
    assert!(ours.iter().all(|id| conversations.contains(id)), "{conversations:?} vs {ours:?}");
    server.signal("TERM");
    assert_eq!(server.exit_code().await, Some(0), "{:?}", server.output.lock().unwrap());
}
