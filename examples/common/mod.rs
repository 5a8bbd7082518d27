//! Setup shared by the examples: the bundled plugins built into
//! `target/plugins`, and a throwaway directory holding a `reson.toml` that
//! grants the `scripted` provider its script and `fs` a workspace.

#![allow(dead_code, reason = "each example uses a different part of the setup")]

use anyhow::{Context as _, Result, ensure};
use reson::config::Config;
use reson::plugin::{Options, Runtime};
use reson::provider::PluginProvider;
use reson::trace::{Durability, FileTraceStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// A runtime over the bundled plugins, granted a fresh workspace.
pub struct Setup {
    /// Holds `reson.toml`, the lock file, the workspace and the traces;
    /// deleted on drop.
    pub dir: tempfile::TempDir,
    /// The workspace `fs` may read and write, canonical: that is the path
    /// the guest sees, and the one its messages name.
    pub workspace: PathBuf,
    /// The plugin runtime.
    pub runtime: Runtime,
    /// `reson.toml`, every section of it.
    pub config: Config,
}

impl Setup {
    /// Builds the bundled plugins and opens a runtime on them. With a
    /// `script` (the name of a file in `examples/scripts/`, without
    /// `.json`), the `scripted` provider replays it.
    pub async fn open(script: Option<&str>) -> Result<Self> {
        let root = root();
        let plugins = root.join("target/plugins");
        let status = Command::new("bash")
            .arg(root.join("plugins/build.sh"))
            .arg(&plugins)
            // The Rust plugins only: what the examples use, the same on
            // every machine (see plugins/build.sh).
            .env("RESON_PYTHON_PLUGINS", "skip")
            .status()
            .await
            .context("running plugins/build.sh")?;
        ensure!(status.success(), "plugins/build.sh failed ({status})");

        let dir = tempfile::tempdir()?;
        std::fs::create_dir(dir.path().join("workspace"))?;
        let workspace = dir.path().join("workspace").canonicalize()?;
        let mut toml = format!(
            "[plugins.fs]\ndirs = [{{ path = {}, access = \"read-write\" }}]\n",
            toml_string(&workspace)
        );
        if let Some(name) = script {
            let script = root.join(format!("examples/scripts/{name}.json"));
            let script =
                script.canonicalize().with_context(|| format!("script {}", script.display()))?;
            let scripts_dir = script.parent().expect("a file has a parent");
            toml += &format!(
                "[plugins.scripted]\ndirs = [{{ path = {}, access = \"read\" }}]\n\
                 config = {{ script = {} }}\n",
                toml_string(scripts_dir),
                toml_string(&script)
            );
        }
        let config_path = dir.path().join("reson.toml");
        std::fs::write(&config_path, toml)?;

        let config = Config::load(&config_path)?;
        let mut options = Options::from_config(config.clone());
        options.plugins_dir = plugins;
        // The cache the system tests share, so each plugin compiles once.
        options.cache_dir = root.join("target/test-cache");
        options.lock_file = dir.path().join("reson.lock");
        let runtime = Runtime::open(options).await?;
        Ok(Self { dir, workspace, runtime, config })
    }

    /// The `scripted` provider of this runtime.
    pub fn provider(&self) -> Arc<PluginProvider> {
        Arc::new(PluginProvider::new(self.runtime.clone(), "scripted"))
    }

    /// A trace store in the temp directory.
    pub fn trace_store(&self) -> Result<Arc<FileTraceStore>> {
        Ok(Arc::new(FileTraceStore::open(self.dir.path().join("traces"), Durability::Batched)?))
    }
}

/// `path` as a TOML string, quoted and escaped.
fn toml_string(path: &Path) -> String {
    toml::Value::String(path.to_string_lossy().into_owned()).to_string()
}

/// Prints a section heading.
pub fn heading(title: &str) {
    println!("\n== {title} ==");
}
