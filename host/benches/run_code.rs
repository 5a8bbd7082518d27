//! What `run_code` costs: a `print(1)` and a compute loop of about 10 ms
//! (native CPython on this machine), each in a fresh interpreter and in one
//! kept for the trace, beside the same Python run as a jailed `python3 -c`
//! through the `shell` plugin, the other way to run code a model wrote.
//!
//! `cargo bench -p reson --bench run_code` installs componentize-py under
//! target/toolchains/python if needed, builds the bundled run-code plugin,
//! prints criterion's figures and, last, a `== figures ==` summary of
//! interleaved rounds measured in the same run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

const PRINT: &str = "print(1)";
/// About 10 ms in native CPython 3.11 on this machine; it prints its own
/// time, so the summary can set the interpreters side by side.
const LOOP: &str = "import time\nstart = time.perf_counter()\ntotal = 0\nfor i in range(150_000):\n    total += i * i\nprint(round((time.perf_counter() - start) * 1e3, 2))";

#[derive(Clone, Copy)]
enum Way {
    Fresh,
    Kept,
    Jailed,
}

/// Runs `code` one way; what it printed.
async fn run(runtime: &Runtime, ws: &Path, way: Way, code: &str) -> String {
    let (tool, args, trace) = match way {
        Way::Fresh => ("run_code", serde_json::json!({ "code": code }), None),
        Way::Kept => ("run_code", serde_json::json!({ "code": code, "keep": true }), Some("bench")),
        Way::Jailed => (
            "shell",
            serde_json::json!({ "command": format!("python3 -c {}", shell_quote(code)), "cwd": ws }),
            None,
        ),
    };
    let context = CallContext { trace_id: trace.map(str::to_owned), ..CallContext::default() };
    let out = runtime.call_tool(tool, &args.to_string(), &context).await.unwrap().text;
    let printed = match way {
        Way::Jailed => out
            .strip_prefix("exit code 0")
            .map(str::trim)
            .map(|o| o.trim_start_matches("stdout:").trim_start_matches('\n').trim().to_owned()),
        _ => out.rsplit("stdout:\n").next().map(|o| o.trim().to_owned()),
    };
    printed.unwrap_or_else(|| panic!("unexpected output: {out}"))
}

fn shell_quote(code: &str) -> String {
    format!("'{}'", code.replace('\'', r"'\''"))
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = support::TestDir::new();
    dir.install(support::plugins_with_python(), "run-code").install(support::plugins(), "shell");
    let ws = dir.workspace();
    let runtime = rt.block_on(dir.open(
        "[plugins.run-code]\ndirs = [{ path = \"workspace\", access = \"read\" }]\n\
         [plugins.shell]\ndirs = [{ path = \"workspace\", access = \"read\" }]\n\
         process = [\"python3 *\"]\nexec_vectors = [\"python\"]\n",
    ));
    let ways = [("fresh", Way::Fresh), ("kept", Way::Kept), ("jailed python3 -c", Way::Jailed)];
    for (label, way) in ways {
        assert_eq!(rt.block_on(run(&runtime, &ws, way, PRINT)), "1", "{label}");
    }

    for (name, code) in [("print(1)", PRINT), ("10 ms loop", LOOP)] {
        let mut group = c.benchmark_group(format!("run_code {name}"));
        group.sample_size(if code == LOOP { 20 } else { 50 });
        for (label, way) in ways {
            let (runtime, ws) = (&runtime, &ws);
            group.bench_function(label, |b| {
                b.to_async(&rt).iter(|| async move { black_box(run(runtime, ws, way, code).await) })
            });
        }
        group.finish();
    }

    // Interleaved rounds, so a busy spell of the machine hits every way alike.
    let rounds = 30;
    let mut took = [[Vec::new(), Vec::new(), Vec::new()], [Vec::new(), Vec::new(), Vec::new()]];
    let mut inside = [Vec::new(), Vec::new(), Vec::new()];
    rt.block_on(async {
        for _ in 0..rounds {
            for (row, code) in [PRINT, LOOP].into_iter().enumerate() {
                for (column, (_, way)) in ways.iter().enumerate() {
                    let start = Instant::now();
                    let printed = run(&runtime, &ws, *way, code).await;
                    took[row][column].push(start.elapsed().as_secs_f64() * 1e3);
                    if code == LOOP {
                        inside[column].push(printed.parse::<f64>().expect("the loop's own ms"));
                    }
                }
            }
        }
    });
    let size = std::fs::metadata(dir.plugins().join("run-code.wasm")).unwrap().len() as f64;
    println!("\n== figures == (medians of {rounds} interleaved rounds)");
    println!("run-code component: {:.1} MB", size / 1e6);
    println!("{:<26}{:>14}{:>14}{:>20}", "", "fresh", "kept", "jailed python3 -c");
    for (row, name) in ["print(1)", "10 ms loop"].into_iter().enumerate() {
        let [fresh, kept, jailed] = took[row].clone().map(support::median);
        println!("{name:<26}{fresh:>11.2} ms{kept:>11.2} ms{jailed:>17.2} ms");
    }
    let [fresh, kept, jailed] = inside.map(support::median);
    println!("{:<26}{fresh:>11.2} ms{kept:>11.2} ms{jailed:>17.2} ms", "  the loop, timed inside");
    let [fresh_print, _, jailed_print] = took[0].clone().map(support::median);
    println!("a fresh print(1) costs {:.2}x a jailed python3 -c", fresh_print / jailed_print);
}

criterion_group!(benches, bench);
criterion_main!(benches);
