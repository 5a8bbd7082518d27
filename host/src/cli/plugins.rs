//! `reson plugins ...`

use super::exit;
use super::term::{one_line, say};
use clap::Subcommand;
use reson::plugin::{PluginInfo, PluginStatus, Runtime};
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Every plugin found: version, world, tools, digest, grants, status.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Accept a plugin that changed and now requests more capabilities.
    Accept {
        /// Plugin name.
        name: String,
    },
}

pub(crate) fn run(runtime: &Runtime, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { json: true } => {
            say!("{}", serde_json::to_string_pretty(&runtime.plugins())?);
        }
        Command::List { json: false } => print_table(&runtime.plugins()),
        Command::Accept { name } => {
            runtime.accept(name)?;
            let info = runtime.plugins().into_iter().find(|p| &p.name == name);
            match info.map(|p| p.status) {
                Some(PluginStatus::Ready) => say!("accepted {name}; it is loaded"),
                Some(PluginStatus::Failed(e) | PluginStatus::Stale(e)) => {
                    say!("accepted {name}, but it does not load: {e}");
                    return Ok(ExitCode::from(exit::HOST));
                }
                _ => say!("accepted {name}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(plugins: &[PluginInfo]) {
    if plugins.is_empty() {
        say!("no plugins found");
        return;
    }
    for p in plugins {
        let status = match &p.status {
            PluginStatus::Ready => "ready".to_owned(),
            PluginStatus::Disabled => "disabled".to_owned(),
            PluginStatus::Failed(e) => format!("FAILED: {}", one_line(e)),
            PluginStatus::Stale(e) => {
                format!("STALE (previous version serving): {}", one_line(e))
            }
        };
        let world = p.world.map(|w| w.to_string()).unwrap_or_else(|| "-".into());
        let version = one_line(p.version.as_deref().unwrap_or("?"));
        say!("{} {version}  [{world}]  {status}", p.name);
        if let Some(sha) = &p.sha256 {
            say!("    sha256  {sha}");
        }
        if !p.tools.is_empty() {
            say!("    tools   {}", p.tools.join(", "));
        }
        for refused in &p.refused_tools {
            say!("    refused {}: {}", refused.name, one_line(&refused.reason));
        }
        if let Some(g) = &p.grants {
            let dirs: Vec<String> =
                g.dirs.iter().map(|d| format!("{} ({:?})", d.host.display(), d.access)).collect();
            let none = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
            say!("    dirs    {}", none(&dirs));
            say!("    http    {}", none(&g.http));
            say!("    process {}", none(&g.process));
            say!("    secrets {}", none(&g.secrets));
            say!(
                "    limits  timeout {} ms, memory {} MiB, output {} bytes{}",
                g.limits.timeout.as_millis(),
                g.limits.memory_bytes >> 20,
                g.limits.output_bytes,
                g.limits.fuel.map(|f| format!(", fuel {f}")).unwrap_or_default()
            );
        }
    }
}
