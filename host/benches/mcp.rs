//! Per-call latency of `echo` served over MCP — `reson mcp serve` over
//! stdio, called by an rmcp client in this process — against the direct
//! `Runtime::call_tool` path of the same plugin (what `reson tool call`
//! runs). The difference is MCP's cost: JSON-RPC framing both ways, the
//! pipe, and the serving session's permission check.
//!
//! `cargo bench -p reson --bench mcp` prints criterion's figures and, last,
//! both latencies and their ratio, measured interleaved in one run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};
use std::hint::black_box;
use support::{median, ns_per_call};

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;

/// A plugins dir with echo, and a config that allows it (an `ask` would
/// have no one to answer over MCP).
fn setup() -> (support::TestDir, std::path::PathBuf) {
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "echo");
    let config = dir.path().join("reson.toml");
    let toml = format!(
        "plugins_dir = \"plugins\"\nlock_file = \"reson.lock\"\ncache_dir = \"{}\"\n\
         [permissions]\nrules = [{{ decision = \"allow\", tool = \"echo\" }}]\n",
        support::cache_dir().display()
    );
    std::fs::write(&config, toml).unwrap();
    (dir, config)
}

async fn mcp_client(config: &std::path::Path) -> RunningService<RoleClient, ClientConfig> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reson"));
    command.arg("--config").arg(config).args(["mcp", "serve"]);
    let transport = TokioChildProcess::new(command).unwrap();
    let mut info = ClientConfig::default();
    info.protocol_version = reson::mcp::PROTOCOL_VERSION;
    info.serve(transport).await.unwrap()
}

fn request() -> CallToolRequestParams {
    let args: JsonObject = serde_json::from_str(ARGS).unwrap();
    CallToolRequestParams::new("echo").with_arguments(args)
}

async fn over_mcp(client: &RunningService<RoleClient, ClientConfig>) -> String {
    let result = client.peer().call_tool(request()).await.unwrap();
    result.content[0].as_text().unwrap().text.clone()
}

async fn direct(runtime: &Runtime) -> String {
    runtime.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (dir, config) = setup();
    let runtime = rt.block_on(async {
        let options =
            reson::plugin::Options::from_config(reson::config::Config::load(&config).unwrap());
        Runtime::open(options).await.unwrap()
    });
    let client = rt.block_on(mcp_client(&config));
    assert_eq!(rt.block_on(over_mcp(&client)), rt.block_on(direct(&runtime)));

    let (client_ref, runtime_ref) = (&client, &runtime);
    let mut group = c.benchmark_group("mcp");
    group.bench_function("echo over MCP stdio (reson mcp serve, rmcp client)", |b| {
        b.to_async(&rt).iter(|| async move { black_box(over_mcp(client_ref).await) })
    });
    group.bench_function("echo direct (Runtime::call_tool)", |b| {
        b.to_async(&rt).iter(|| async move { black_box(direct(runtime_ref).await) })
    });
    group.finish();

    // Interleaved rounds, so drift on a shared machine hits both alike.
    let (mut mcp, mut local) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..15 {
            mcp.push(ns_per_call(async || drop(over_mcp(client_ref).await), 200).await);
            local.push(ns_per_call(async || drop(direct(runtime_ref).await), 200).await);
        }
    });
    let (mcp, local) = (median(mcp), median(local));
    println!("\n== figures ==");
    println!("echo over MCP stdio:         {:>9.1} µs", mcp / 1e3);
    println!("echo direct call_tool:       {:>9.1} µs", local / 1e3);
    println!(
        "MCP / direct:                {:>9.2}x  (+{:.1} µs per call)",
        mcp / local,
        (mcp - local) / 1e3
    );
    drop(dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
