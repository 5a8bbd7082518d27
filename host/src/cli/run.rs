//! `reson run`: run an agent and print it as it happens.

use super::term::{
    Stream, clean, labelled, one_line, paint, plural, say, say_err, say_error, say_json,
    status_style, style,
};
use super::{Host, exit};
use anyhow::Context as _;
use clap::Args;
use reson::agent::human::{AnnounceQuestion, Asker, NoOneToAsk, Question};
use reson::agent::{
    AgentError, AgentEvent, Announce, Answer, ApprovalRequest, Approver, Hooks, Permissions,
    RunConfig, Runner, SubAgentSettings, Unattended,
};
use reson::config::{Access, DirGrant};
use reson::contract::World;
use reson::plugin::{Options, PluginStatus, Runtime};
use reson::policy::Preset;
use reson::provider::{LlmParams, PluginProvider};
use reson::telemetry::Telemetry;
use reson::trace::{Message, Role, TraceStatus};
use reson::workspace::WorkspaceError;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::MissedTickBehavior;

/// Which model answers, under which permissions; shared by `run` and `task`.
#[derive(Args)]
pub(crate) struct ModelArgs {
    /// Replay this script of assistant turns (the offline `scripted` provider).
    #[arg(long)]
    pub(crate) script: Option<PathBuf>,
    /// Provider plugin [default: scripted]
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Model name passed to the provider [default: `[plugins.PROVIDER]
    /// config = { model = "..." }`]
    #[arg(long, default_value = "")]
    pub(crate) model: String,
    /// Permission preset: default, explore, analyst, browser, or one from the config.
    #[arg(long, default_value = "default")]
    pub(crate) preset: String,
}

impl ModelArgs {
    /// Naming a bundled provider on the command line is the user granting
    /// it its vendor's endpoint and key variable, unless the config
    /// already says what it may reach (for a compatible server elsewhere),
    /// and binding the key to the vendor's host, or to the host of the
    /// configured `base_url`, unless the config binds it itself.
    pub(crate) fn grant_vendor(&self, options: &mut Options) -> anyhow::Result<()> {
        let Some((name, host, key)) =
            VENDORS.iter().find(|(n, ..)| Some(*n) == self.provider.as_deref())
        else {
            return Ok(());
        };
        let grant = options.config.plugins.entry((*name).to_owned()).or_default();
        if grant.http.is_empty() {
            grant.http.push((*host).to_owned());
        }
        if grant.secrets.is_empty() {
            grant.secrets.push((*key).to_owned());
        }
        let key = match grant.config.get("api_key_secret") {
            Some(configured) if configured.is_empty() => return Ok(()),
            Some(configured) => configured.clone(),
            None => (*key).to_owned(),
        };
        let endpoint = match grant.config.get("base_url") {
            Some(base) => {
                let url = reqwest::Url::parse(base)
                    .with_context(|| format!("[plugins.{name}] base_url `{base}`"))?;
                let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
                format!("{}://{}{port}", url.scheme(), url.host_str().unwrap_or_default())
            }
            None => format!("https://{host}"),
        };
        let secret = options.config.secrets.entry(key).or_default();
        if secret.urls.is_none() {
            secret.urls = Some(vec![endpoint]);
        }
        Ok(())
    }

    pub(crate) fn provider_name(&self) -> &str {
        self.provider.as_deref().unwrap_or("scripted")
    }

    /// The model: `--model`, else the provider's `model` setting.
    pub(crate) fn model_name(&self, runtime: &Runtime) -> String {
        if !self.model.is_empty() {
            return self.model.clone();
        }
        let grant = runtime.options().config.grant(self.provider_name());
        grant.config.get("model").cloned().unwrap_or_default()
    }

    /// The provider to call.
    pub(crate) fn provider(&self, runtime: &Runtime) -> PluginProvider {
        PluginProvider::new(runtime.clone(), self.provider_name().to_owned())
    }

    /// Checks, before any trace exists, that the provider can answer: its
    /// plugin is there, loaded and a provider, and the scripted provider has
    /// a script. Each failure says what to do.
    pub(crate) fn preflight(&self, runtime: &Runtime) -> anyhow::Result<()> {
        let name = self.provider_name();
        let plugins = runtime.plugins();
        let dir = runtime.options().plugins_dir.display();
        let Some(plugin) = plugins.iter().find(|p| p.name == name) else {
            let providers: Vec<&str> = plugins
                .iter()
                .filter(|p| p.world == Some(World::ProviderPlugin))
                .map(|p| p.name.as_str())
                .collect();
            let there = if providers.is_empty() { "none".to_owned() } else { providers.join(", ") };
            anyhow::bail!(
                "no provider plugin `{name}` in {dir} (providers there: {there}); `reson init` \
                 sets up the bundled plugins, or pick one with --provider"
            );
        };
        match (&plugin.status, plugin.world) {
            (PluginStatus::Failed(e), _) => {
                anyhow::bail!("provider plugin `{name}` did not load: {e}")
            }
            (PluginStatus::Disabled, _) => {
                anyhow::bail!("provider plugin `{name}` is disabled in the config")
            }
            (_, Some(world)) if world != World::ProviderPlugin => {
                anyhow::bail!(
                    "plugin `{name}` implements the {world} world, not a provider; pick one \
                     with --provider"
                )
            }
            _ => {}
        }
        let grant = runtime.options().config.grant(name);
        if name == "scripted" {
            anyhow::ensure!(
                grant.config.contains_key("script"),
                "the scripted provider replays a script of answers: pass --script FILE (a JSON \
                 file of turns: {{\"turns\": [{{\"text\": \"...\"}}]}}), or use a model with \
                 --provider openai|anthropic|gemini"
            );
            return Ok(());
        }
        anyhow::ensure!(
            !self.model_name(runtime).is_empty(),
            "provider `{name}` needs a model: pass --model NAME, or set it in reson.toml as \
             [plugins.{name}] config = {{ model = \"NAME\" }}"
        );
        if let Some(base) = grant.config.get("base_url") {
            check_base_url(name, base, &grant.http)?;
        }
        // Found before a trace exists: the first model call would fail with
        // an authentication error otherwise, leaving a failed trace behind.
        let key = match grant.config.get("api_key_secret") {
            Some(key) if key.is_empty() => None,
            Some(key) => Some(key.clone()),
            None => VENDORS.iter().find(|(n, ..)| *n == name).map(|(.., key)| (*key).to_owned()),
        };
        if let Some(key) = key {
            let in_env = std::env::var_os(&key).is_some_and(|v| !v.is_empty());
            let in_config =
                runtime.options().config.secrets.get(&key).is_some_and(|s| s.value.is_some());
            anyhow::ensure!(in_env || in_config, "{key} is not set: export {key}=... first");
        }
        Ok(())
    }
}

#[derive(Args)]
pub(crate) struct RunArgs {
    /// The task, or the next message when continuing. Omit it with --after
    /// to regenerate the answer that followed that message.
    message: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    /// Continue this trace.
    #[arg(long)]
    trace: Option<String>,
    /// With --trace: rewind, so the new message follows this sequence.
    #[arg(long, requires = "trace")]
    after: Option<u64>,
    /// With --after: put the files the trace's tool calls changed back as
    /// they were at that message first. Refuses, listing them, when files
    /// changed outside Reson since its last checkpoint.
    #[arg(long, requires = "after")]
    restore_files: bool,
    /// With --restore-files: overwrite files changed outside Reson too.
    #[arg(long, requires = "restore_files")]
    force: bool,
    /// Attach an image (PNG, JPEG, GIF, WebP) or a PDF to the message;
    /// repeat for several. A PDF is read inside the sandbox by the `pdf`
    /// plugin: its text and images join the message.
    #[arg(long, value_name = "FILE")]
    attach: Vec<PathBuf>,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// The user the run belongs to: its trace carries it, and it sees that
    /// user's experiences. With --trace: only that user's trace.
    #[arg(long, value_name = "UID")]
    user: Option<String>,
    /// Most model calls in this run.
    #[arg(long, default_value_t = 50)]
    max_iterations: u32,
    /// Print events as JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Budget of the whole run, sub-agents included: most tokens (prompt +
    /// completion) [default: `[budget] max_tokens`]
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Budget: most cost in USD [default: `[budget] max_cost_usd`]
    #[arg(long)]
    max_cost: Option<f64>,
    /// Budget: most wall-clock seconds [default: `[budget] max_duration_ms`]
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// With no terminal to ask at: answer every `ask` at once with never
    /// (deny), once (allow the call) or all (allow what its rule asks
    /// about for the rest of the run) [default: `[permissions] unattended`,
    /// else never]
    #[arg(long, value_name = "never|once|all")]
    pub(crate) approve: Option<Unattended>,
}

impl RunArgs {
    /// The config's budget with the command line's limits over it.
    fn budget(&self, config: &reson::config::AgentConfig) -> anyhow::Result<reson::policy::Budget> {
        let mut budget = config.budget;
        budget.max_tokens = self.max_tokens.or(budget.max_tokens);
        budget.max_cost_usd = self.max_cost.or(budget.max_cost_usd);
        if let Some(seconds) = self.timeout {
            anyhow::ensure!(
                seconds.is_finite() && seconds > 0.0,
                "--timeout must be a positive number of seconds (got {seconds})"
            );
            budget.max_duration_ms = Some((seconds * 1000.0).ceil() as u64);
        }
        budget.validate().map_err(|e| anyhow::anyhow!("--max-cost: {e}"))?;
        Ok(budget)
    }
}

pub(crate) const SYSTEM_PROMPT: &str = "You are a careful software agent. Use the tools to inspect and change \
                             files in the workspace, then answer briefly.";

/// How long the end of a run waits for the OpenTelemetry collector.
pub(crate) const TELEMETRY_WAIT: Duration = Duration::from_secs(5);

/// What the command line grants, applied before the runtime loads plugins.
pub(crate) fn prepare_options(options: &mut Options, args: &RunArgs) -> anyhow::Result<()> {
    args.model.grant_vendor(options)?;
    super::attach::grant(options, &args.attach)?;
    grant_script(options, args.model.script.as_deref())
}

/// The public endpoint and key variable of each bundled provider plugin.
const VENDORS: [(&str, &str, &str); 3] = [
    ("openai", "api.openai.com", "OPENAI_API_KEY"),
    ("anthropic", "api.anthropic.com", "ANTHROPIC_API_KEY"),
    ("gemini", "generativelanguage.googleapis.com", "GEMINI_API_KEY"),
];

/// A provider's `base_url` must be on a host its `http` grant names: the
/// host would refuse every request, which reads like a bad key.
fn check_base_url(name: &str, base: &str, http: &[String]) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(base).with_context(|| format!("[plugins.{name}] base_url"))?;
    let granted = http
        .iter()
        .filter_map(|p| reson_sandbox::policy::UrlPattern::parse(p).ok())
        .any(|p| p.matches(&url));
    if granted {
        return Ok(());
    }
    let host = url.host_str().unwrap_or_default();
    let entry = match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let twin = match host {
        "localhost" => Some("127.0.0.1"),
        "127.0.0.1" => Some("localhost"),
        _ => None,
    };
    let why = match twin.filter(|t| http.iter().any(|p| p.contains(t))) {
        Some(twin) => format!(
            " (the grant names {twin}: a grant is matched against the name as written, and \
             `localhost` is whatever the resolver says, so the two are not one host)"
        ),
        None => String::new(),
    };
    anyhow::bail!(
        "[plugins.{name}] base_url {base} is on a host the plugin is not granted: add \"{entry}\" \
         to [plugins.{name}] http{why}"
    )
}

/// Grants the scripted provider read access to `script` and tells it where
/// the script is. Without one, a `script` setting in the config (as
/// `reson init` writes it) is taken relative to the config file.
pub(crate) fn grant_script(options: &mut Options, script: Option<&Path>) -> anyhow::Result<()> {
    let configured = options.config.grant("scripted").config.get("script").map(PathBuf::from);
    let script = match (script, configured) {
        (Some(script), _) => script.to_path_buf(),
        (None, Some(configured)) => options.config.resolve(&configured),
        (None, None) => return Ok(()),
    };
    let script = script.canonicalize().with_context(|| format!("script {}", script.display()))?;
    let dir = script.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
    // A config that already grants the directory keeps its one grant; its
    // paths are relative to the config file.
    let base = options.config.base_dir.clone();
    let granted = |path: &Path| base.join(path).canonicalize().is_ok_and(|p| p == dir);
    let grant = options.config.plugins.entry("scripted".into()).or_default();
    if !grant.dirs.iter().any(|d| granted(&d.path) && d.access >= Access::Read && d.mount.is_none())
    {
        grant.dirs.push(DirGrant {
            path: dir,
            access: Access::Read,
            mount: None,
            metadata: Access::Read,
        });
    }
    grant.config.insert("script".into(), reson::policy::guest_path(&script));
    Ok(())
}

/// The preset `name`, its permissions, and, with no one at a terminal,
/// the approver that answered for them. Someone at a terminal (the
/// question goes to stderr, the key comes from stdin) answers `ask`; with
/// no one there, `approve` (or `[permissions] unattended`) answers at once.
pub(crate) fn permissions(
    host: &Host,
    name: &str,
    approve: Option<Unattended>,
) -> anyhow::Result<(Preset, Permissions, Option<Arc<UnattendedApprover>>)> {
    let config = &host.config.agent;
    let (preset, rules) = config.preset(name).map_err(anyhow::Error::msg)?;
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        return Ok((preset, Permissions::new(rules, terminal()?), None));
    }
    let policy = approve.unwrap_or(config.permissions.unattended);
    let approver = Arc::new(UnattendedApprover::new(policy));
    Ok((preset, Permissions::new(rules, approver.clone()), Some(approver)))
}

/// Answers every `ask` at once by the user's policy when no one is at a
/// terminal, saying so in one line each (on stderr), and counts the calls
/// it denied: a run that lost calls for want of an answer must not look
/// like one that did its work.
pub(crate) struct UnattendedApprover {
    policy: Unattended,
    denied: AtomicUsize,
}

impl UnattendedApprover {
    fn new(policy: Unattended) -> Self {
        Self { policy, denied: AtomicUsize::new(0) }
    }

    /// How many calls it denied.
    pub(crate) fn denied(&self) -> usize {
        self.denied.load(Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl Approver for UnattendedApprover {
    async fn approve(&self, request: &ApprovalRequest, announce: &Announce) -> Option<Answer> {
        announce(request);
        let rule = match &request.rule {
            Some(rule) => format!("rule `{rule}`"),
            None => "the default decision (`[permissions] default = \"ask\"`)".to_owned(),
        };
        let call = format!("{}({})", one_line(&request.tool), short(&request.arguments, 120));
        let answer = self.policy.answer();
        match answer {
            None => {
                self.denied.fetch_add(1, Ordering::Relaxed);
                labelled(
                    "denied",
                    style::BAD,
                    &format!(
                        "{call}: {rule} asks, and no one is at a terminal to answer; pass \
                         --approve once|all (or set [permissions] unattended) to allow it"
                    ),
                );
            }
            Some(_) => labelled(
                "allowed",
                style::PENDING,
                &format!("{call}: {rule} asks; --approve {}", self.policy),
            ),
        }
        answer
    }

    fn unattended(&self) -> bool {
        true
    }

    fn answerer(&self) -> &str {
        "the unattended policy"
    }
}

/// `text` on one line, cut to about `max` characters.
pub(crate) fn short(text: &str, max: usize) -> String {
    let line = one_line(text);
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

pub(crate) async fn run(runtime: &Host, args: &RunArgs) -> anyhow::Result<ExitCode> {
    args.model.preflight(runtime)?;
    let stores = super::open_stores(&runtime.config).await?;
    let provider = Arc::new(args.model.provider(runtime));
    let (preset, permissions, unattended) = permissions(runtime, &args.model.preset, args.approve)?;
    let config = &runtime.config.agent;
    let budget = args.budget(config)?;
    let sub_agents = SubAgentSettings::from_config(config).map_err(anyhow::Error::msg)?;
    let tools =
        reson::tools::ToolRegistry::configured(runtime, config, stores.experiences.clone())?
            .with_configured_knowledge(stores.knowledge.clone(), config);
    let tools = reson::mcp::client::with_configured(
        tools,
        &runtime.config.mcp,
        &runtime.config.plugins,
        super::mcp::START_WAIT,
    )
    .await;
    let telemetry = Telemetry::from_config(&config.telemetry)?;
    let runner = Runner::new(stores.traces, provider, tools, Hooks::none())
        .with_permissions(permissions)
        .with_sub_agents(sub_agents)
        .with_asker(asker(runtime)?)
        .with_telemetry(telemetry.clone());

    let mut messages: Vec<Message> =
        args.message.iter().map(|m| Message::new(Role::User, m.clone())).collect();
    if !args.attach.is_empty() {
        let parts = super::attach::parts(&args.attach, runner.tools()).await?;
        match messages.last_mut() {
            Some(message) => message.content.extend(parts),
            None => anyhow::bail!("--attach needs a message to attach the files to"),
        }
    }
    let config = RunConfig {
        trace_id: args.trace.clone(),
        after_sequence: args.after,
        system_prompt: args
            .system
            .clone()
            .or_else(|| args.trace.is_none().then(|| SYSTEM_PROMPT.to_owned())),
        params: LlmParams {
            model: args.model.model_name(runtime),
            stream: true,
            temperature: preset.temperature,
            ..LlmParams::default()
        },
        max_iterations: preset.max_iterations.unwrap_or(args.max_iterations),
        agent_type: preset.name.clone(),
        uid: args.user.clone(),
        budget,
        skills: (!preset.skills.is_empty()).then(|| preset.skills.clone()),
        compaction: config.compaction.clone(),
        checkpoints: config.checkpoints.clone(),
        restore_files: args.restore_files,
        force_restore: args.force,
        ..RunConfig::default()
    };
    let mut handle = match runner.run(messages, config).await {
        Ok(handle) => handle,
        Err(AgentError::Checkpoint(e @ WorkspaceError::Conflicts { .. })) => {
            say_error!("{e}; --force overwrites them");
            return Ok(ExitCode::from(exit::CONFLICT));
        }
        Err(e) => return Err(e.into()),
    };
    let trace_id = handle.trace_id().to_owned();

    let mut interrupts = super::signals::Interrupts::new()?;
    let mut interrupted = false;
    let mut spinner = tokio::time::interval(Duration::from_millis(100));
    spinner.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut printer = Printer::new(args.json, runtime.work.clone());
    let mut final_status = TraceStatus::Failed;
    while printer.alive {
        tokio::select! {
            event = handle.next_event() => {
                let Some(event) = event else { break };
                if let AgentEvent::Finished { status, .. } = &event {
                    final_status = *status;
                }
                printer.print(&event);
            }
            Some(()) = interrupts.recv() => {
                if interrupted {
                    // A second Ctrl-C: leave now; the trace is already durable.
                    std::process::exit(130);
                }
                interrupted = true;
                say_err!("\nstopping… (Ctrl-C again to quit at once)");
                handle.stop();
            }
            _ = spinner.tick() => printer.tick(),
        }
    }
    let outcome = handle.wait().await;
    printer.clear_spinner();
    // The run's spans and metrics leave before the process does.
    if let Err(e) = telemetry.shutdown(TELEMETRY_WAIT).await {
        tracing::warn!("{e}");
    }
    match outcome {
        Ok(outcome) => {
            let cost = if outcome.cost > 0.0 {
                format!(", {}", reson::policy::dollars(outcome.cost))
            } else {
                String::new()
            };
            let status =
                paint(Stream::Err, status_style(outcome.status), status_word(outcome.status));
            let totals = clean(&format!(
                "({}, {}, {} prompt + {} completion tokens{cost})",
                plural(outcome.iterations as usize, "model call", "model calls"),
                plural(outcome.requests as usize, "request", "requests"),
                outcome.usage.prompt_tokens,
                outcome.usage.completion_tokens
            ));
            eprintln!("trace {} {status} {totals}", clean(&outcome.trace_id));
            let denied = unattended.as_ref().map_or(0, |u| u.denied());
            Ok(if final_status == TraceStatus::Stopped {
                ExitCode::from(130)
            } else if denied > 0 {
                say_err!(
                    "{} denied for want of an answer (no terminal): see --approve",
                    plural(denied, "call was", "calls were")
                );
                ExitCode::from(exit::DENIED)
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(e) => {
            say_error!("{e}");
            let recoverable =
                if e.is_recoverable() { " (recoverable: continue it with --trace)" } else { "" };
            let failed = paint(Stream::Err, style::BAD, "failed");
            eprintln!("trace {} {failed}{recoverable}", clean(&trace_id));
            Ok(ExitCode::from(exit::TOOL_FAILED))
        }
    }
}

/// One key read from the terminal (none at the end of input), or why not.
type Key = std::io::Result<Option<char>>;

/// One line read from the terminal (none at the end of input), or why not.
type Line = std::io::Result<Option<String>>;

/// What the terminal thread is asked to read.
enum Read {
    /// The next key: an approval's `y`, `a` or `n`.
    Key(oneshot::Sender<Key>),
    /// The next line: an answer to a question.
    Line(oneshot::Sender<Line>),
}

/// The person at the terminal: approvals take one key, `y`, `a` or `n`;
/// questions (`ask_human`) a line.
pub(crate) struct Terminal {
    /// Asks the terminal thread for the next key or line.
    reads: mpsc::Sender<Read>,
}

/// The process's terminal, one reader for approvals and questions alike,
/// so that two asks at once never read stdin side by side.
pub(crate) fn terminal() -> anyhow::Result<Arc<Terminal>> {
    static TERMINAL: std::sync::OnceLock<Arc<Terminal>> = std::sync::OnceLock::new();
    if let Some(terminal) = TERMINAL.get() {
        return Ok(terminal.clone());
    }
    let terminal = Arc::new(Terminal::reading(BufReader::new(std::io::stdin()))?);
    Ok(TERMINAL.get_or_init(|| terminal).clone())
}

impl Terminal {
    /// Starts the thread that reads `input`. A plain thread, not
    /// `spawn_blocking` or `tokio::io::stdin`: a read cannot be cancelled,
    /// and one left waiting by a run stopped mid-question would keep the
    /// runtime from shutting down until someone pressed a key. It reads only
    /// when asked, so the terminal's input is not taken ahead of a question.
    fn reading(mut input: impl BufRead + Send + 'static) -> anyhow::Result<Self> {
        let (reads, asked) = mpsc::channel::<Read>();
        std::thread::Builder::new()
            .name("reson-terminal".into())
            .spawn(move || {
                // A question may have been dropped (the run stopped): its
                // reply goes nowhere.
                for read in asked {
                    match read {
                        Read::Key(reply) => {
                            let key = {
                                let _keys = super::term::KeyMode::on();
                                next_key(&mut input)
                            };
                            let _ = reply.send(key);
                        }
                        Read::Line(reply) => {
                            let _ = reply.send(next_line(&mut input));
                        }
                    }
                }
            })
            .context("starting the terminal reader")?;
        Ok(Self { reads })
    }
}

/// Questions (`ask_human`) put to the person at the terminal, each
/// waiting up to `timeout` for a line.
pub(crate) struct AtTerminal {
    terminal: Arc<Terminal>,
    timeout: Duration,
}

#[async_trait::async_trait]
impl Asker for AtTerminal {
    async fn ask(
        &self,
        question: &Question,
        announce: &AnnounceQuestion,
    ) -> Option<(String, String)> {
        announce(question);
        let mut text = format!("\n? the agent asks: {}", question.question.trim());
        for (i, choice) in question.choices.iter().enumerate() {
            text.push_str(&format!("\n  {}. {}", i + 1, choice.trim()));
        }
        let hint = if question.choices.is_empty() { "" } else { " (a number picks a choice)" };
        eprint!("{}\n  answer{hint}: ", clean(&text));
        let (reply, read) = oneshot::channel();
        self.terminal.reads.send(Read::Line(reply)).ok()?;
        let line = tokio::time::timeout(self.timeout, read).await.ok()?.ok()?.ok()??;
        Some((line.trim_end_matches(['\r', '\n']).to_owned(), "the terminal".to_owned()))
    }
}

/// Who answers `ask_human` in `reson run` and `reson task`: the person at
/// the terminal (question on stderr, answer on stdin); with no terminal,
/// no one, and the tool says so at once.
pub(crate) fn asker(host: &Host) -> anyhow::Result<Arc<dyn Asker>> {
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        let timeout = host.config.agent.human.timeout();
        return Ok(Arc::new(AtTerminal { terminal: terminal()?, timeout }));
    }
    Ok(Arc::new(NoOneToAsk))
}

/// The next key that is not white space (an Enter after a key, typed out
/// of habit, is not the next answer).
fn next_key(input: &mut impl BufRead) -> Key {
    let mut byte = [0u8; 1];
    loop {
        if input.read(&mut byte)? == 0 {
            return Ok(None);
        }
        if !byte[0].is_ascii_whitespace() {
            return Ok(Some(char::from(byte[0])));
        }
    }
}

/// The next line with some text: an Enter left over from a key answer,
/// or pressed alone, is no answer.
fn next_line(input: &mut impl BufRead) -> Line {
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if !line.trim().is_empty() {
            return Ok(Some(line));
        }
    }
}

/// What a call would do, as the person answering needs to see it: the
/// command as it will run (program resolved, canonical quoting), the path
/// a file tool touches and the size it writes, else the arguments.
fn call_for_people(tool: &str, arguments: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let subject = reson::policy::subject_of(tool, &args).map(|s| one_line(&s));
    let size =
        |key: &str| args.get(key).and_then(|v| v.as_str()).map(|s| super::term::size_text(s.len()));
    let tool = one_line(tool);
    match (tool.to_ascii_lowercase().as_str(), subject) {
        ("shell", Some(command)) => format!("{tool}: run `{command}`"),
        ("write", Some(path)) => match size("content") {
            Some(size) => format!("{tool}: {path} ({size})"),
            None => format!("{tool}: {path}"),
        },
        ("edit", Some(path)) => match (size("old_string"), size("new_string")) {
            (Some(old), Some(new)) => format!("{tool}: {path} (replacing {old} with {new})"),
            _ => format!("{tool}: {path}"),
        },
        (_, Some(subject)) => format!("{tool}: {subject}  {}", short(arguments, 200)),
        (_, None) => format!("{tool}({})", short(arguments, 200)),
    }
}

#[async_trait::async_trait]
impl Approver for Terminal {
    async fn approve(&self, request: &ApprovalRequest, announce: &Announce) -> Option<Answer> {
        announce(request);
        let rule = request.rule.as_ref().map(|r| format!(" (rule: {r})")).unwrap_or_default();
        eprint!(
            "{}",
            clean(&format!(
                "\n? allow {}{rule}\n  [y] once  [a] always for this rule  [n] deny: ",
                call_for_people(&request.tool, &request.arguments)
            ))
        );
        let (reply, read) = oneshot::channel();
        self.reads.send(Read::Key(reply)).ok()?;
        let key = read.await.ok()?.ok()?;
        let (answer, word, style) = match key {
            Some('y' | 'Y') => (Answer::Once, "allowed once", style::GOOD),
            Some('a' | 'A') => (Answer::Always, "allowed for this rule", style::GOOD),
            _ => (Answer::Deny, "denied", style::BAD),
        };
        // The key was not echoed: the answer stands on the question's line.
        eprintln!("{}", paint(Stream::Err, style, word));
        Some(answer)
    }

    fn answerer(&self) -> &str {
        "the terminal"
    }
}

pub(crate) fn status_word(status: TraceStatus) -> &'static str {
    match status {
        TraceStatus::Running => "running",
        TraceStatus::Completed => "completed",
        TraceStatus::Failed => "failed",
        TraceStatus::Stopped => "stopped",
        TraceStatus::Waiting => "waiting",
    }
}

/// Printed after the partial text of a model call that failed and is
/// tried again.
const DISCARDED: &str =
    "[discarded: the model call failed before its answer was complete; retrying]";

/// Prints events for a person (or as JSON lines), with a spinner on stderr
/// while the model is thinking or the runtime does slow work for the run
/// (starting a browser). The spinner is drawn and cleared here, between the
/// run's own lines, never in the middle of one.
struct Printer {
    json: bool,
    /// The model is being waited for.
    waiting: bool,
    frame: usize,
    /// A spinner line is on stderr.
    drawn: bool,
    streamed: bool,
    /// Streamed text has not ended its line yet.
    mid_line: bool,
    alive: bool,
    tty: bool,
    /// The runtime's slow work, when stderr is a terminal.
    work: Option<Arc<super::term::Spinner>>,
}

impl Printer {
    fn new(json: bool, work: Option<Arc<super::term::Spinner>>) -> Self {
        Self {
            json,
            waiting: false,
            frame: 0,
            drawn: false,
            streamed: false,
            mid_line: false,
            alive: true,
            tty: std::io::stderr().is_terminal(),
            work,
        }
    }

    /// Advances the spinner: the model being waited for, else the
    /// runtime's work, else nothing.
    fn tick(&mut self) {
        if self.json || !self.tty || self.mid_line {
            return;
        }
        let what = if self.waiting {
            Some("waiting for the model".to_owned())
        } else {
            self.work.as_ref().and_then(|work| work.current())
        };
        match what {
            Some(what) => {
                self.frame += 1;
                self.drawn = true;
                eprint!(
                    "\r\x1b[2K{} {what}",
                    super::term::FRAMES[self.frame % super::term::FRAMES.len()]
                );
            }
            None => self.clear_line(),
        }
    }

    /// The model answered (or the run ended): its spinner goes.
    fn clear_spinner(&mut self) {
        self.waiting = false;
        self.clear_line();
    }

    fn clear_line(&mut self) {
        if std::mem::take(&mut self.drawn) {
            eprint!("\r\x1b[2K");
        }
    }

    /// A sub-agent's event, indented under the call that started it and
    /// tagged with the end of its trace id: its start, answers, tool calls
    /// and end (streamed text shows whole).
    fn print_sub(&mut self, depth: usize, sub_trace_id: &str, event: &AgentEvent) {
        // Children of one call run at once, so each line names its own.
        let tag = sub_trace_id.get(sub_trace_id.len().saturating_sub(4)..).unwrap_or_default();
        let indent = format!("{}[…{}] ", "  │ ".repeat(depth), clean(tag));
        let line = |text: &str| {
            for l in text.lines() {
                say!("{indent}{}", clean(l));
            }
        };
        match event {
            AgentEvent::SubAgent { sub_trace_id, event, .. } => {
                self.print_sub(depth + 1, sub_trace_id, event);
            }
            AgentEvent::TraceStarted { mode, .. } => line(&format!(
                "┌ sub-agent {sub_trace_id} ({})",
                serde_json::to_value(mode).unwrap_or_default().as_str().unwrap_or("")
            )),
            AgentEvent::MessageAdded { message } if message.role == Role::Assistant => {
                let text = message.text();
                if !text.is_empty() {
                    line(&text);
                }
                for call in &message.tool_calls {
                    line(&format!("→ {}({})", one_line(&call.name), one_line(&call.arguments)));
                }
            }
            AgentEvent::ToolFinished { name, ok, output, .. } => {
                let mark = if *ok { "←" } else { "✗" };
                let first = output.lines().next().unwrap_or_default();
                line(&format!("{mark} {} {}", one_line(name), one_line(first)));
            }
            AgentEvent::Finished { status, error } => {
                let error = error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                line(&format!("└ sub-agent {sub_trace_id} {}{error}", status_word(*status)));
            }
            _ => {}
        }
    }

    fn print(&mut self, event: &AgentEvent) {
        if self.json {
            say_json(&serde_json::to_string(event).expect("events serialise"));
            if matches!(event, AgentEvent::Finished { .. }) {
                self.alive = false;
            }
            return;
        }
        if !matches!(event, AgentEvent::ModelRequest { .. }) {
            self.clear_spinner();
        }
        if let AgentEvent::SubAgent { sub_trace_id, event, .. } = event {
            self.print_sub(1, sub_trace_id, event);
            return;
        }
        let mut out = std::io::stdout().lock();
        match event {
            AgentEvent::TraceStarted { trace_id, mode } => {
                say_err!(
                    "trace {trace_id} ({})",
                    serde_json::to_value(mode).unwrap_or_default().as_str().unwrap_or("")
                );
            }
            AgentEvent::ModelRequest { .. } => {
                self.waiting = true;
                self.streamed = false;
            }
            AgentEvent::TextDelta { text } => {
                self.streamed = true;
                self.mid_line = !text.ends_with('\n');
                let _ = write!(out, "{}", clean(text));
                let _ = out.flush();
            }
            AgentEvent::ReasoningDelta { .. } | AgentEvent::GoalChanged { .. } => {}
            AgentEvent::MessageAdded { message } if message.role == Role::Assistant => {
                let text = message.text();
                if !self.streamed && !text.is_empty() {
                    let _ = write!(out, "{}", clean(&text));
                }
                if self.streamed || !text.is_empty() {
                    let _ = writeln!(out);
                }
                self.mid_line = false;
                for call in &message.tool_calls {
                    let call = format!("{}({})", one_line(&call.name), one_line(&call.arguments));
                    let _ =
                        writeln!(out, "{} {}", paint(Stream::Out, style::PLACE, "→"), clean(&call));
                }
            }
            AgentEvent::MessageAdded { .. } | AgentEvent::ToolStarted { .. } => {}
            AgentEvent::FilesRestored { written, removed, not_restorable } => {
                let changed = written.len() + removed.len();
                say_err!("restored {}:", plural(changed, "file", "files"));
                for path in written {
                    say_err!("  wrote   {}", path.display());
                }
                for path in removed {
                    say_err!("  removed {}", path.display());
                }
                for path in not_restorable {
                    say_err!("  kept    {} (its bytes were not recorded)", path.display());
                }
            }
            AgentEvent::Compacted { level, sequences, tokens_before, tokens_after, .. } => {
                say_err!(
                    "[compacted at level {level}: {} messages, {tokens_before} → {tokens_after} tokens]",
                    sequences.len()
                );
            }
            AgentEvent::Retrying { attempt, error, delay_ms } => {
                // The failed attempt's text is not part of the answer: say
                // so where it was printed, so the retry's text starts afresh.
                if std::mem::take(&mut self.streamed) {
                    let _ = writeln!(out, "\n{DISCARDED}");
                    let _ = out.flush();
                }
                self.mid_line = false;
                say_err!("model call failed ({error}); attempt {attempt} in {delay_ms} ms");
            }
            AgentEvent::ToolFinished { name, ok, output, .. } => {
                let mark = if *ok {
                    paint(Stream::Out, style::GOOD, "←")
                } else {
                    paint(Stream::Out, style::BAD, "✗")
                };
                let lines: Vec<&str> = output.lines().collect();
                let shown =
                    lines.iter().take(8).map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n");
                let _ = writeln!(out, "{mark} {}", clean(&format!("{}\n{shown}", one_line(name))));
                if lines.len() > 8 {
                    let _ = writeln!(out, "  … {} more lines", lines.len() - 8);
                }
            }
            AgentEvent::Finished { error, .. } => {
                // The error itself is said once, on stderr, when the run
                // returns it; text cut short by it ends its line first.
                if error.is_some() && std::mem::take(&mut self.streamed) {
                    let _ = writeln!(out);
                }
                self.mid_line = false;
                self.alive = false;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Terminal, call_for_people};
    use reson::agent::{Answer, ApprovalRequest, Approver};
    use std::io::{BufReader, Read};
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::Duration;

    fn request(id: u64) -> ApprovalRequest {
        ApprovalRequest {
            id: format!("ap_{id}"),
            trace_id: "tr_test".into(),
            call_id: format!("call_{id}"),
            tool: "write".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
            rule: None,
        }
    }

    #[tokio::test]
    async fn each_question_takes_the_next_key_and_announces_first() {
        // An Enter after a key is not the next answer.
        let input = BufReader::new("y\na\nnx".as_bytes());
        let approver = Terminal::reading(input).unwrap();
        let announced = Arc::new(Mutex::new(Vec::new()));
        let seen = announced.clone();
        let announce = move |r: &ApprovalRequest| seen.lock().unwrap().push(r.id.clone());
        let mut answers = Vec::new();
        for id in 1..=5 {
            answers.push(approver.approve(&request(id), &announce).await);
        }
        // Any other key denies; so does the end of the input.
        let expected = [Answer::Once, Answer::Always, Answer::Deny, Answer::Deny, Answer::Deny];
        assert_eq!(answers, expected.map(Some));
        assert_eq!(*announced.lock().unwrap(), ["ap_1", "ap_2", "ap_3", "ap_4", "ap_5"]);
    }

    #[tokio::test]
    async fn a_question_to_the_terminal_takes_a_line_and_the_end_of_input_is_no_answer() {
        use reson::agent::human::{Asker, Question};
        let terminal =
            Arc::new(Terminal::reading(BufReader::new("y\n  blue, please \n".as_bytes())).unwrap());
        let approver = terminal.clone();
        let asker = super::AtTerminal { terminal, timeout: Duration::from_secs(30) };
        let question = Question {
            id: "tr_q".into(),
            trace_id: "tr_a".into(),
            call_id: "c".into(),
            question: "Which colour?".into(),
            choices: vec!["red".into(), "blue".into()],
            asked_at_ms: 0,
        };
        // An approval and a question share the one reader, in turn.
        assert_eq!(approver.approve(&request(1), &|_| {}).await, Some(Answer::Once));
        let announced = Arc::new(Mutex::new(0));
        let seen = announced.clone();
        let answer = asker.ask(&question, &move |_| *seen.lock().unwrap() += 1).await;
        assert_eq!(answer, Some(("  blue, please ".into(), "the terminal".into())));
        assert_eq!(*announced.lock().unwrap(), 1);
        assert_eq!(asker.ask(&question, &|_| {}).await, None, "no more input: no answer");
    }

    #[test]
    fn a_question_shows_the_command_as_it_runs_and_the_path_and_size_written() {
        let shell = call_for_people("shell", r#"{"command":"'/bin/rm' -f x"}"#);
        assert_eq!(shell, "shell: run `rm -f x`");
        let write = call_for_people("write", r#"{"path":"src/../a.txt","content":"hello"}"#);
        assert_eq!(write, "write: a.txt (5 bytes)");
        assert_eq!(call_for_people("echo", r#"{"text":"hi"}"#), r#"echo({"text":"hi"})"#);
    }

    /// Input that keeps its reader waiting until its sender is dropped, or
    /// at most 5 s (so a question that blocked on it would end, answered).
    struct Stuck(mpsc::Receiver<()>);

    impl Read for Stuck {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            let _ = self.0.recv_timeout(Duration::from_secs(5));
            Ok(0)
        }
    }

    #[tokio::test]
    async fn waiting_for_the_terminal_leaves_the_runtime_free() {
        let (release, stuck) = mpsc::channel();
        let approver = Terminal::reading(BufReader::new(Stuck(stuck))).unwrap();
        // On this single-threaded runtime the timer only fires if the
        // question waits without holding the thread.
        let asked = request(1);
        let question = approver.approve(&asked, &|_| {});
        let waited = tokio::time::timeout(Duration::from_millis(100), question).await;
        assert!(waited.is_err(), "no answer came, so the question was still waiting: {waited:?}");
        drop(release);
    }
}
