//! `reson sandbox check`: runs the command jail's escape probes on this
//! machine and says which held, so a user can trust (or not) the jail where
//! they are before a plugin's commands run there.

use super::term::{Stream, paint, say, say_warning, style};
use clap::Subcommand;
use reson::config::{Access, Config, JailMode};
use reson::jail::{Jail, probe};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Try the escapes a hostile command would (write and read beside the
    /// grant, link out, the network, outliving the call, the host's
    /// processes, .git hooks) through the jail the config sets up, and
    /// print what held. Exits non-zero if any escape got through or could
    /// not be tried.
    Check,
}

pub(crate) async fn run(config: &Config, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check => check(config).await,
    }
}

async fn check(config: &Config) -> anyhow::Result<ExitCode> {
    let sandbox = &config.plugins.sandbox;
    let jail = (sandbox.jail == JailMode::On)
        .then(|| Jail::new(&sandbox.bwrap).spares(sandbox.spare_jails));
    match &jail {
        Some(_) => say!("the command jail on {}:", std::env::consts::OS),
        None => say_warning!(
            "[sandbox] jail = \"off\": commands run unjailed, with all of your rights; the probes \
             show what that lets through"
        ),
    }
    let findings = match probe::run(jail.as_ref()).await {
        Ok(findings) => findings,
        Err(e) => {
            super::term::say_error!("the jail does not come up here: {e}");
            return Ok(ExitCode::from(super::exit::TOOL_FAILED));
        }
    };
    let width = probe::Probe::ALL.iter().map(|p| p.name().len()).max().unwrap_or(0);
    for finding in &findings {
        let (word, colour, detail) = match &finding.verdict {
            probe::Verdict::Held => ("held", style::GOOD, String::new()),
            probe::Verdict::Escaped(what) => ("ESCAPED", style::BAD, format!(": {what}")),
            probe::Verdict::NotRun(why) => ("not run", style::BAD, format!(": {why}")),
        };
        let word = paint(Stream::Out, colour, &format!("{word:<7}"));
        let name = finding.probe.name();
        say!("  {word}  {name:<width$}  {}{detail}", finding.probe.attempt());
    }
    let held = findings.iter().filter(|f| f.verdict == probe::Verdict::Held).count();
    if held == findings.len() {
        say!("{held} of {} probes held: commands run jailed here.", findings.len());
        if let Some(jail) = &jail {
            say_cost(config, jail).await;
        }
        Ok(ExitCode::SUCCESS)
    } else {
        let failed: Vec<&str> = findings
            .iter()
            .filter(|f| f.verdict != probe::Verdict::Held)
            .map(|f| f.probe.name())
            .collect();
        say!("{held} of {} probes held; not held: {}.", findings.len(), failed.join(", "));
        Ok(ExitCode::from(super::exit::TOOL_FAILED))
    }
}

/// What a jailed command costs here, and in each directory the config
/// grants read-write to a plugin that may run commands (the jail looks for
/// repositories in those before every command, so a large one adds to
/// each).
async fn say_cost(config: &Config, jail: &Jail) {
    let mut dirs: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    for (plugin, grant) in config.plugins.plugins.iter() {
        if !grant.enabled || grant.process.is_empty() {
            continue;
        }
        let scanned = grant.dirs.iter().filter(|d| d.access == Access::ReadWrite);
        for dir in scanned.filter(|d| d.metadata == Access::Read) {
            let Ok(path) = config.plugins.resolve(&dir.path).canonicalize() else { continue };
            match dirs.iter_mut().find(|(p, _)| *p == path) {
                Some((_, plugins)) => plugins.push(plugin),
                None => dirs.push((path, vec![plugin])),
            }
        }
    }
    let paths: Vec<PathBuf> = dirs.iter().map(|(p, _)| p.clone()).collect();
    let cost = match probe::cost(jail, &paths).await {
        Ok(cost) => cost,
        Err(e) => {
            say_warning!("could not time a jailed command: {e}");
            return;
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    say!(
        "a command here (`true`, spawn to exit, median of {}): {:.1} ms unjailed, {:.1} ms jailed",
        probe::COST_RUNS,
        ms(cost.unjailed),
        ms(cost.jailed)
    );
    if let Some(ahead) = cost.jailed_ahead {
        say!(
            "jailed in a jail made ahead (a grant's commands after its first): {:.1} ms",
            ms(ahead)
        );
    }
    if !dirs.is_empty() {
        say!(
            "in the read-write grants of plugins that run commands (the jail looks for .git and \
             .reson three levels down in each, before every command):"
        );
    }
    for ((path, plugins), (_, took)) in dirs.iter().zip(&cost.in_dirs) {
        say!("  {} ({}): {:.1} ms", path.display(), plugins.join(", "), ms(*took));
    }
}
