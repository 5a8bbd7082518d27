//! Tool components called directly, without a model: the host lists what
//! the plugins serve, validates arguments against each tool's schema, and
//! runs every call in a fresh sandbox that holds only what `reson.toml`
//! granted.
//!
//! ```sh
//! cargo run -p reson --example custom_tool
//! ```
//!
//! Builds the bundled plugins, then calls `echo` and the `fs` tools `write`
//! and `read` on a temporary workspace, and shows the two ways a call is
//! refused: arguments that fail the schema (the plugin never runs) and a path
//! outside the grant (the sandbox refuses it).

#[path = "common/mod.rs"]
mod common;

use anyhow::{Result, ensure};
use common::{Setup, heading};
use reson::plugin::{CallContext, CallError, ToolFailure};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(None).await?;
    let runtime = &setup.runtime;
    let context = CallContext::default();

    heading("tools on offer");
    let tools = runtime.tools();
    for tool in &tools {
        let summary = tool.description.split(". ").next().unwrap_or_default().trim_end_matches('.');
        println!("{:<8} ({:<8}) {summary}", tool.name, tool.plugin);
    }
    for name in ["echo", "read", "write"] {
        ensure!(tools.iter().any(|t| t.name == name), "no `{name}` tool");
    }

    heading("echo");
    let out = runtime.call_tool("echo", r#"{"text": "hello from the host"}"#, &context).await?;
    println!("echo → {}", out.text);
    assert_eq!(out.text, "hello from the host");

    heading("fs write and read, inside the granted workspace");
    println!("workspace: {}", setup.workspace.display());
    let content = "Tools are components; the host decides what they may touch.\n";
    let args = json!({ "path": "notes/hello.txt", "content": content }).to_string();
    println!("write → {}", runtime.call_tool("write", &args, &context).await?.text);
    let read = runtime.call_tool("read", r#"{"path": "notes/hello.txt"}"#, &context).await?;
    println!("read →\n{}", read.text);
    // The write really landed in the granted directory on the host.
    assert_eq!(std::fs::read_to_string(setup.workspace.join("notes/hello.txt"))?, content);

    heading("invalid arguments: refused before the plugin runs");
    match runtime.call_tool("echo", r#"{"text": 42}"#, &context).await {
        Err(err @ CallError::InvalidArguments { .. }) => println!("echo {{\"text\": 42}} → {err}"),
        other => anyhow::bail!("expected invalid arguments, got {other:?}"),
    }

    heading("a path outside the grant: refused by the sandbox");
    match runtime.call_tool("read", r#"{"path": "/etc/passwd"}"#, &context).await {
        Err(err @ CallError::Tool { failure: ToolFailure::Denied(_), .. }) => {
            println!("read /etc/passwd → {err}")
        }
        other => anyhow::bail!("expected a denial, got {other:?}"),
    }

    heading("writing your own tool");
    let root = common::root();
    println!(
        "A tool is a Rust function over an argument struct, exported with reson-sdk and built\n\
         for wasm32-wasip2 (plugins/build.sh builds the bundled ones). A complete tool in about\n\
         20 lines, with its manifest and how to install it, is in the crate docs of\n  {}\n\
         and the echo tool called above is\n  {}",
        root.join("sdk/src/lib.rs").display(),
        root.join("plugins/echo/src/lib.rs").display()
    );
    Ok(())
}
