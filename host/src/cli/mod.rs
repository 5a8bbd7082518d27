//! Argument parsing and the commands. Errors become messages and exit
//! codes here, at the edge.

mod attach;
mod author;
mod checks;
mod grants;
mod init;
mod knowledge;
mod learn;
mod mcp;
mod plugins;
mod run;
mod sandbox;
mod serve;
mod signals;
mod task;
mod term;
mod tool;
mod traces;
mod users;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum as _};
use reson::config::Config;
use reson::plugin::{Options, Runtime};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Reson: an agent host whose tools and providers are sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "reson", version, about)]
struct Cli {
    /// Configuration file [default: ./reson.toml if it exists]
    #[arg(long, global = true, env = "RESON_CONFIG")]
    config: Option<PathBuf>,
    /// Plugins directory [default: from the config, else ./plugins]
    #[arg(long, global = true, env = "RESON_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Compiled-code cache directory
    #[arg(long, global = true, env = "RESON_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Trace directory [default: from the config, else ./.reson/traces]
    #[arg(long, global = true, env = "RESON_TRACES_DIR")]
    traces_dir: Option<PathBuf>,
    /// Log to stderr: -v warnings, -vv what plugins do, -vvv everything
    /// (`RESON_LOG` overrides). Without it, `run` and `task` log nothing
    /// (they say what matters in their own output), servers log warnings
    /// and plugin reloads, other commands warnings.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Colour statuses, diffs and errors: auto (when the output is a
    /// terminal and NO_COLOR is unset), always or never
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    color: clap::ColorChoice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Set up DIR to run agents: the bundled plugins (built into this
    /// binary), a reson.toml granting DIR/workspace, and a script for the
    /// offline provider.
    Init(init::InitArgs),
    /// Inspect and manage plugins.
    #[command(subcommand)]
    Plugins(plugins::Command),
    /// List or call tools directly, without a model.
    #[command(subcommand)]
    Tool(tool::Command),
    /// Run an agent: a new task, a continue (--trace), a rewind (--after).
    Run(run::RunArgs),
    /// Plan a goal (or take a plan with --plan) and execute it step by step.
    Task(task::TaskArgs),
    /// Write the plugin contract (WIT) into DIR, for guests in any language.
    Wit {
        /// Where to write it.
        #[arg(default_value = "wit")]
        dir: PathBuf,
    },
    /// List traces, show one with its message and goal trees, or reflect on one.
    #[command(subcommand)]
    Traces(traces::Command),
    /// Serve the HTTP + WebSocket API and the trace viewer page.
    Serve(serve::ServeArgs),
    /// The skills an agent can use: built-in and the project's.
    #[command(subcommand)]
    Skills(learn::SkillsCommand),
    /// Lessons learnt from past runs (experiences.md, or the database).
    #[command(subcommand)]
    Experiences(learn::ExperiencesCommand),
    /// Notes runs save and search (`knowledge_save`, `knowledge_search`).
    #[command(subcommand)]
    Knowledge(knowledge::Command),
    /// Serve Reson's tools over MCP, or list the MCP servers Reson uses.
    #[command(subcommand)]
    Mcp(mcp::Command),
    /// The command jail on this machine: check that it holds.
    #[command(subcommand)]
    Sandbox(sandbox::Command),
    /// The users of `reson serve` and their tokens (the token file).
    #[command(subcommand)]
    Users(users::Command),
}

/// Exit codes, so scripts can tell failures apart.
pub(crate) mod exit {
    pub const TOOL_FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const DENIED: u8 = 3;
    pub const LIMIT: u8 = 4;
    pub const TRAPPED: u8 = 5;
    pub const HOST: u8 = 6;
    /// `traces migrate` left traces alone: they differ from the target's;
    /// or a restore refused to overwrite files changed outside Reson.
    pub const CONFLICT: u8 = 7;
}

/// The stores `[store]` names, or why not, in one line.
pub(crate) async fn open_stores(config: &Config) -> anyhow::Result<reson::store::Stores> {
    reson::store::Stores::open(config).await.context("cannot open the [store]")
}

pub async fn main() -> ExitCode {
    let color = color_flag(std::env::args_os().map(|a| a.to_string_lossy().into_owned()));
    term::choose_colours(color);
    let matches = Cli::command().color(color).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A server's log also says what its plugins do: loads, compiles that
    // take a while (the previous version serving meanwhile), reloads. A
    // run says what matters in its own output: a log line would land in
    // the middle of a streamed answer.
    let server =
        matches!(&cli.command, Command::Serve(_) | Command::Mcp(mcp::Command::Serve { .. }));
    let streams = matches!(&cli.command, Command::Run(_) | Command::Task(_));
    let default = match cli.verbose {
        0 if server => "warn,reson_server=info,reson_sandbox::plugin=info",
        0 if streams => "off",
        0 => "warn",
        1 => "warn",
        2 => "info",
        _ => "debug",
    };
    // The DevTools client warns of every Chromium event it cannot parse and
    // errs when Chromium closes at exit: noise to all but its own authors.
    let default =
        if cli.verbose >= 3 { default.to_owned() } else { format!("{default},chromiumoxide=off") };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RESON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(|| LogLine(Vec::new()))
        // Colour codes would be escaped by `term::clean` into noise.
        .with_ansi(false)
        .init();
    match command(&cli).await {
        Ok(code) => code,
        Err(err) => {
            term::say_error!("{err:#}");
            ExitCode::from(exit::HOST)
        }
    }
}

/// `--color` as the command line gives it (the last one), read ahead of
/// clap so that its own help and usage errors follow it too; `auto` when
/// absent or unreadable (clap then says what is wrong with it).
fn color_flag(args: impl Iterator<Item = String>) -> clap::ColorChoice {
    let args: Vec<String> = args.take_while(|a| a != "--").collect();
    let mut choice = clap::ColorChoice::Auto;
    for (i, arg) in args.iter().enumerate() {
        let value = match arg.strip_prefix("--color") {
            Some("") => args.get(i + 1).map(String::as_str),
            Some(value) => value.strip_prefix('='),
            None => None,
        };
        if let Some(value) = value.and_then(|v| clap::ColorChoice::from_str(v, false).ok()) {
            choice = value;
        }
    }
    choice
}

/// Runs the command given, opening the plugin runtime if it needs one.
async fn command(cli: &Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Init(args) => init::run(args, cli.cache_dir.as_deref()).await,
        Command::Plugins(cmd) if cmd.needs_runtime() => {
            let host = open(cli, Checks::Report, |_, _| Ok(())).await?;
            plugins::run(&host.runtime, cmd, cli.verbose > 0).await
        }
        // Making, building and installing only write files and run the
        // toolchain; nothing else is on the runtime to be held up meanwhile.
        Command::Plugins(cmd) => plugins::run_offline(cmd, &options(cli, &config(cli)?)?).await,
        Command::Wit { dir } => {
            author::write_wit(dir)?;
            term::say!("wrote the reson:plugin contract into {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Tool(cmd) => {
            tool::run(&open(cli, Checks::Report, |_, _| Ok(())).await?, cmd).await
        }
        Command::Run(args) => {
            run::run(&open(cli, Checks::Refuse, |o, _| run::prepare_options(o, args)).await?, args)
                .await
        }
        Command::Task(args) => {
            task::run(
                &open(cli, Checks::Refuse, |o, _| task::prepare_options(o, args)).await?,
                args,
            )
            .await
        }
        Command::Traces(traces::Command::Reflect(args)) => {
            let host = open(cli, Checks::Refuse, |o, _| learn::prepare_reflect(o, args)).await?;
            learn::reflect(&host, args).await
        }
        Command::Traces(traces::Command::Replay(args)) => {
            // Declared first, so it outlives the runtime working in it.
            let mut scratch = None;
            let host =
                open(cli, Checks::Refuse, |o, _| traces::prepare_replay(o, args, &mut scratch))
                    .await?;
            traces::replay(&host, scratch.as_ref(), args).await
        }
        Command::Traces(cmd) => traces::run(&config(cli)?, cmd).await,
        Command::Serve(args) => {
            let host = open(cli, Checks::Refuse, |o, c| serve::prepare_options(o, c, args)).await?;
            serve::run(&host, args).await
        }
        Command::Skills(cmd) => learn::skills_command(&config(cli)?, cmd),
        Command::Experiences(cmd) => learn::experiences_command(&config(cli)?, cmd).await,
        Command::Knowledge(cmd) => knowledge::run(&config(cli)?, cmd).await,
        Command::Mcp(cmd) => {
            let checks = match cmd {
                mcp::Command::Serve { .. } => Checks::Refuse,
                _ => Checks::Report,
            };
            mcp::run(&open(cli, checks, |_, _| Ok(())).await?, cmd).await
        }
        Command::Users(cmd) => users::run(&config(cli)?, cmd),
        Command::Sandbox(cmd) => sandbox::run(&config(cli)?, cmd).await,
    }
}

/// One log record, buffered so that it reaches stderr through
/// [`term::clean`] whole: a secret cannot be split across writes, and a
/// guest's log message cannot drive the terminal.
struct LogLine(Vec<u8>);

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let line = term::clean(&String::from_utf8_lossy(&self.0));
        // Nowhere is left to report a failed write to stderr.
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// The config file in use: `--config`, else `./reson.toml` if it exists.
fn config_path(cli: &Cli) -> Option<PathBuf> {
    cli.config.clone().or_else(|| {
        let here = PathBuf::from("reson.toml");
        here.exists().then_some(here)
    })
}

/// `reson.toml` (or `--config`), with the command line's directories over
/// it.
fn config(cli: &Cli) -> anyhow::Result<Config> {
    let mut config = match config_path(cli) {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    if let Some(dir) = &cli.traces_dir {
        config.traces.traces_dir = Some(std::path::absolute(dir)?);
        config.agent.checkpoints.skip = vec![config.traces.traces_dir()];
    }
    Ok(config)
}

/// The plugin runtime's options from `config` and the command line.
fn options(cli: &Cli, config: &Config) -> anyhow::Result<Options> {
    let mut options = Options::from_config(config.plugins.clone());
    if let Some(dir) = &cli.plugins_dir {
        options.plugins_dir = dir.clone();
        if options.config.lock_file.is_none() {
            options.lock_file = dir.join("reson.lock");
        }
    }
    if let Some(dir) = &cli.cache_dir {
        options.cache_dir = dir.clone();
    }
    Ok(options)
}

/// The configuration and the plugin runtime it opened; it derefs to the
/// runtime.
pub(crate) struct Host {
    /// Every section of `reson.toml`; its plugin section is the runtime's.
    pub(crate) config: Config,
    runtime: Runtime,
    /// What is wrong with the config's grants, each naming the file, the
    /// line and the fix (commands that go on despite them say why a tool
    /// is missing).
    pub(crate) problems: Vec<String>,
    /// The slow work the runtime reports (compiles, browser starts), when
    /// stderr is a terminal.
    pub(crate) work: Option<std::sync::Arc<term::Spinner>>,
}

/// What a command does about a config whose grants cannot be met.
#[derive(Clone, Copy, PartialEq)]
enum Checks {
    /// Stop before anything runs: a run must not start without tools its
    /// config meant to give it.
    Refuse,
    /// Go on (listing plugins, calling one tool): the command says what did
    /// not load when it matters.
    Report,
}

impl std::ops::Deref for Host {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

async fn open(
    cli: &Cli,
    checks: Checks,
    adjust: impl FnOnce(&mut Options, &Config) -> anyhow::Result<()>,
) -> anyhow::Result<Host> {
    let mut config = config(cli)?;
    let mut options = options(cli, &config)?;
    let path = config_path(cli);
    let source = path.as_deref().and_then(checks::Source::read);
    for warning in checks::unknown_plugins(&config, &options.plugins_dir, source.as_ref()) {
        term::say_warning!("{warning}");
    }
    // Checked before the command line adds its own grants: those name
    // what exists (a script's directory).
    let problems = checks::missing_dirs(&config, source.as_ref());
    if checks == Checks::Refuse && !problems.is_empty() {
        anyhow::bail!("{}", problems.join("\n"));
    }
    adjust(&mut options, &config)?;
    config.plugins = options.config.clone();
    let spinner = term::Spinner::for_terminal();
    options.observer = spinner.clone().map(|s| s as _);
    let runtime = Runtime::open(options).await.context("cannot start the plugin runtime")?;
    // Reloads later (a server's) are for its log, not a spinner; what the
    // runtime does for a run (starting a browser) the run draws itself,
    // between its own lines.
    if let Some(spinner) = &spinner {
        spinner.finish();
    }
    Ok(Host { config, runtime, problems, work: spinner })
}

#[cfg(test)]
mod tests {
    use super::color_flag;
    use clap::ColorChoice;

    #[test]
    fn the_color_flag_is_read_ahead_of_clap_the_last_one_winning() {
        let flag = |args: &str| color_flag(args.split(' ').map(str::to_owned));
        assert_eq!(flag("reson traces list"), ColorChoice::Auto);
        assert_eq!(flag("reson --color never traces list"), ColorChoice::Never);
        assert_eq!(flag("reson --color=never run --color=always hi"), ColorChoice::Always);
        // After `--` it is the task's text, not a flag.
        assert_eq!(flag("reson run -- --color never"), ColorChoice::Auto);
    }
}
