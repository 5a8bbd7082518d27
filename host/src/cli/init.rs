//! `reson init [DIR]`: a working setup anywhere, from the binary alone. The
//! bundled plugins are built into the binary (`host/build.rs`); this writes
//! them out with a `reson.toml` that grants a `workspace/` directory and a
//! script for the offline `scripted` provider, then loads them once, which
//! checks the setup and fills the compiled-code cache.

use super::term::say;
use anyhow::Context as _;
use clap::Args;
use reson::config::Config;
use reson::plugin::{Options, PluginStatus, Runtime};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One plugin built into the binary.
struct Bundled {
    name: &'static str,
    component: &'static [u8],
    manifest: &'static str,
}

const BUNDLED: &[Bundled] = include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

const CONFIG: &str = r#"# Written by `reson init`. Paths are relative to this file.

# The bundled plugins are in plugins/ (the default plugins directory);
# `reson plugins list` shows each with what it may touch. Drop more
# components there, or `reson plugins install` them.
traces_dir = "traces"

# The file tools work in workspace/ and nowhere else.
[plugins.fs]
dirs = [{ path = "workspace", access = "read-write" }]

# The shell tool runs only the commands named here, in an OS jail
# (bubblewrap), inside workspace/.
[plugins.shell]
dirs = [{ path = "workspace", access = "read-write" }]
process = ["ls *", "wc *"]

# `reson run` uses the offline `scripted` provider unless told otherwise; it
# replays this script. For a real model: `reson run --provider
# openai|anthropic|gemini` with OPENAI_API_KEY, ANTHROPIC_API_KEY or
# GEMINI_API_KEY set.
[plugins.scripted]
config = { script = "scripts/first-run.json" }
"#;

const WORKSPACE_README: &str = "# Workspace\n\n\
This directory is the agent's: the file tools may read and write here and \
nowhere else. Put a project in it, or start from this file.\n";

const FIRST_RUN: &str = r#"{
  "turns": [
    {
      "text": "Let me look at the workspace first.",
      "tool_calls": [
        {"name": "glob", "arguments": {"pattern": "**/*"}},
        {"name": "read", "arguments": {"path": "README.md"}}
      ],
      "usage": {"prompt_tokens": 400, "completion_tokens": 40}
    },
    {
      "text": "The workspace holds one file, README.md, which says the directory is mine to work in. This answer came from the offline scripted provider (scripts/first-run.json); run with --provider openai, anthropic or gemini for a real model.",
      "usage": {"prompt_tokens": 520, "completion_tokens": 60}
    },
    {
      "text": "Continuing the same trace: it still holds one file. The script answers one follow-up (reson run --trace ID \"...\"); add turns to scripts/first-run.json for more.",
      "usage": {"prompt_tokens": 610, "completion_tokens": 40}
    }
  ]
}
"#;

#[derive(Args)]
pub(crate) struct InitArgs {
    /// Where to set up [default: .]
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Replace bundled plugins that differ from this binary's (after an
    /// upgrade). The config, the workspace and the script are never
    /// overwritten.
    #[arg(long)]
    force: bool,
}

/// What became of one file.
#[derive(Debug, PartialEq)]
enum Outcome {
    Written,
    Unchanged,
    /// A different file is there and was left alone.
    Differs,
}

pub(crate) async fn run(args: &InitArgs, cache_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let dir = &args.dir;
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("{} is not a directory", dir.display());
    }
    let plugins_dir = dir.join("plugins");
    for sub in [dir.as_path(), &plugins_dir, &dir.join("workspace"), &dir.join("scripts")] {
        std::fs::create_dir_all(sub).with_context(|| format!("creating {}", sub.display()))?;
    }
    let mut differs = Vec::new();
    for plugin in BUNDLED {
        for (ext, bytes) in [("wasm", plugin.component), ("toml", plugin.manifest.as_bytes())] {
            let path = plugins_dir.join(format!("{}.{ext}", plugin.name));
            if write(&path, bytes, args.force)? == Outcome::Differs {
                differs.push(path);
            }
        }
    }
    if !differs.is_empty() {
        let list: Vec<String> = differs.iter().map(|p| p.display().to_string()).collect();
        anyhow::bail!(
            "these differ from the plugins bundled with this reson, and were left alone: {}; \
             `reson init --force {}` replaces them",
            list.join(", "),
            dir.display()
        );
    }
    let config = dir.join("reson.toml");
    let mut kept = Vec::new();
    for (path, text) in [
        (config.clone(), CONFIG),
        (dir.join("workspace/README.md"), WORKSPACE_README),
        (dir.join("scripts/first-run.json"), FIRST_RUN),
    ] {
        if write(&path, text.as_bytes(), false)? == Outcome::Differs {
            kept.push(path.display().to_string());
        }
    }
    if !kept.is_empty() {
        say!("kept your own {}", kept.join(", "));
    }
    let ready = load(&config, cache_dir).await?;
    let names: Vec<&str> = BUNDLED.iter().map(|p| p.name).collect();
    say!(
        "set up {}: {ready} plugins loaded ({}), the workspace/ directory granted to the file \
         tools, traces in traces/\nnext: cd {} && reson run \"What is in the workspace?\"",
        dir.display(),
        names.join(", "),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to `path`; a different file there is replaced only when
/// `replace`. Written aside and renamed, so a host
/// watching the directory never loads half a file.
fn write(path: &Path, bytes: &[u8], replace: bool) -> anyhow::Result<Outcome> {
    match std::fs::read(path) {
        Ok(there) if there == bytes => return Ok(Outcome::Unchanged),
        Ok(_) if !replace => return Ok(Outcome::Differs),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("writing into {}", dir.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    file.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(Outcome::Written)
}

/// Loads the new setup once, so a plugin that cannot load is reported now
/// and the first run starts from compiled code. Returns how many loaded.
async fn load(config: &Path, cache_dir: Option<&Path>) -> anyhow::Result<usize> {
    let config = Config::load(config)?;
    let mut options = Options::from_config(config.plugins);
    if let Some(dir) = cache_dir {
        options.cache_dir = dir.to_path_buf();
    }
    let spinner = super::term::Spinner::for_terminal();
    options.observer = spinner.clone().map(|s| s as _);
    let runtime = Runtime::open(options).await.context("cannot start the plugin runtime")?;
    // Reloads later (a server's) are for its log, not a spinner.
    if let Some(spinner) = spinner {
        spinner.finish();
    }
    let plugins = runtime.plugins();
    let failed: Vec<String> = plugins
        .iter()
        .filter_map(|p| match &p.status {
            PluginStatus::Failed(e) => Some(format!("{}: {e}", p.name)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        anyhow::bail!("bundled plugins did not load: {}", failed.join("; "));
    }
    Ok(plugins.len())
}
