//! Reson's sandbox on its own, as one would embed Extism: no agent, no
//! model, no trace, only `reson-sandbox`. It loads the bundled plugins,
//! grants the `fs` plugin one directory read-only, calls tools, and shows
//! the host holding each plugin to its grant and its limits.
//!
//! Run it with `cargo run -p reson-sandbox --example sandbox_embed`.

use anyhow::{Context as _, Result, ensure};
use reson_sandbox::config::PluginsConfig;
use reson_sandbox::plugin::{CallContext, CallError, Limit, Options, Runtime};
use std::path::{Path, PathBuf};

/// The repository root: this crate is `host/sandbox`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::main]
async fn main() -> Result<()> {
    let root = root();
    let plugins = root.join("target/plugins");
    let built = std::process::Command::new("bash")
        .arg(root.join("plugins/build.sh"))
        .arg(&plugins)
        // The Rust plugins only: the same on every machine (see plugins/build.sh).
        .env("RESON_PYTHON_PLUGINS", "skip")
        .status()
        .context("running plugins/build.sh")?;
    ensure!(built.success(), "plugins/build.sh failed ({built})");

    let dir = tempfile::tempdir()?;
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared)?;
    let shared = shared.canonicalize()?;
    std::fs::write(shared.join("notes.txt"), "hello from the host\n")?;
    let private = dir.path().join("private.txt");
    std::fs::write(&private, "not granted\n")?;

    // What the user grants, in `reson.toml`'s words: `fs` may read one
    // directory; `echo` may return at most 64 bytes a call.
    let config: PluginsConfig = toml::from_str(&format!(
        "[plugins.fs]\ndirs = [{{ path = {:?}, access = \"read\" }}]\n\
         [plugins.echo]\nlimits = {{ output_bytes = 64 }}\n",
        shared.display().to_string()
    ))?;
    let mut options = Options::from_config(config);
    options.plugins_dir = plugins;
    // The compiled-code cache the repository's tests share.
    options.cache_dir = root.join("target/test-cache");
    options.lock_file = dir.path().join("reson.lock");
    let runtime = Runtime::open(options).await?;
    let cx = CallContext::default();

    let path = shared.join("notes.txt").display().to_string();
    let inside = serde_json::json!({ "path": path }).to_string();
    let read = runtime.call_tool("read", &inside, &cx).await?;
    println!("read inside the grant: {}", read.text.trim());
    ensure!(read.text.contains("hello from the host"));

    let outside = serde_json::json!({ "path": private.display().to_string() }).to_string();
    let refused = runtime.call_tool("read", &outside, &cx).await;
    println!("read outside the grant: {}", describe(&refused));
    ensure!(refused.is_err(), "a file outside the grant was read");

    let write = serde_json::json!({ "path": path, "content": "changed" }).to_string();
    let refused = runtime.call_tool("write", &write, &cx).await;
    println!("write into a read-only grant: {}", describe(&refused));
    ensure!(refused.is_err(), "a read-only grant was written");
    ensure!(std::fs::read_to_string(shared.join("notes.txt"))?.starts_with("hello"));

    let long = serde_json::json!({ "text": "x".repeat(1000) }).to_string();
    let capped = runtime.call_tool("echo", &long, &cx).await;
    println!("echo past its output limit: {}", describe(&capped));
    ensure!(
        matches!(capped, Err(CallError::LimitExceeded { limit: Limit::Output { .. }, .. })),
        "the output limit did not hold"
    );
    Ok(())
}

fn describe<T>(result: &Result<T, CallError>) -> String {
    match result {
        Ok(_) => "it ran".into(),
        Err(e) => format!("refused: {e}"),
    }
}
