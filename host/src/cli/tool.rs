//! `reson tool ...`: how tool authors try a tool without a model. The
//! tools of the MCP servers the config names are listed and called here
//! too, as `SERVER__tool`, under the preset's permission rules as a run
//! applies them.

use super::exit;
use super::term::{one_line, say, say_err, say_error, say_json};
use super::{Host, mcp};
use anyhow::Context as _;
use clap::Subcommand;
use reson::agent::Unattended;
use reson::mcp::client::{self as mcp_client, McpConfig, McpTools};
use reson::plugin::{CallContext, CallError, PluginStatus, ToolFailure, ToolOutput, ToolSpec};
use std::io::Read as _;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The tools on offer, with their argument schemas: the plugins', and
    /// the configured MCP servers' (marked `[mcp:SERVER]`).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its output. An MCP tool (`SERVER__tool`)
    /// passes the preset's permission rules first.
    Call {
        /// Tool name.
        tool: String,
        /// Arguments as a JSON object; `-` reads them from stdin.
        #[arg(default_value = "{}")]
        args: String,
        /// Print the whole result (or error) as JSON.
        #[arg(long)]
        json: bool,
        /// Permission preset for MCP tools: default, explore, analyst, browser, or one
        /// from the config.
        #[arg(long, default_value = "default")]
        preset: String,
        /// With no terminal to ask at, an MCP tool's `ask` is answered at
        /// once: never (deny), once or all (allow) [default:
        /// `[permissions] unattended`, else never]
        #[arg(long, value_name = "never|once|all")]
        approve: Option<Unattended>,
    },
}

pub(crate) async fn run(host: &Host, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { json } => list(host, *json).await?,
        Command::Call { tool, args, json, preset, approve } => {
            let args = if args == "-" {
                tokio::task::spawn_blocking(|| {
                    let mut buf = String::new();
                    std::io::stdin().read_to_string(&mut buf).map(|_| buf)
                })
                .await?
                .context("reading arguments from stdin")?
            } else {
                args.clone()
            };
            if let Some(server) = mcp_server(host, tool) {
                let call = McpCall { server, tool, args: &args, preset, approve: *approve };
                return call_mcp(host, call, *json).await;
            }
            return Ok(call(host, tool, &args, *json).await);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The configured MCP servers of `only` (all when `None`), started and
/// settled, or `None` when there are none.
async fn start_mcp(host: &Host, only: Option<&str>) -> Option<McpTools> {
    let servers = host
        .config
        .mcp
        .servers
        .iter()
        .filter(|(name, _)| only.is_none_or(|only| only == name.as_str()))
        .map(|(name, server)| (name.clone(), server.clone()))
        .collect();
    let config = McpConfig { servers };
    if config.servers.is_empty() {
        return None;
    }
    let tools = McpTools::start(&config, &host.config.plugins);
    tools.settled(mcp::START_WAIT).await;
    Some(tools)
}

async fn list(host: &Host, json: bool) -> anyhow::Result<()> {
    let mut tools = host.tools();
    let mcp = start_mcp(host, None).await;
    let mut refused_mcp = Vec::new();
    if let Some(mcp) = &mcp {
        let served: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let (kept, shadowed) = mcp_client::shadowed(mcp.specs(), &served);
        tools.extend(kept);
        refused_mcp.extend(shadowed.into_values());
        for server in mcp.servers() {
            refused_mcp.extend(server.refused);
        }
    }
    if json {
        say_json(&serde_json::to_string_pretty(&tools)?);
        return Ok(());
    }
    for tool in &tools {
        let description = one_line(&tool.description);
        say!("{:<12} {:<10} {description}", tool.name, format!("[{}]", tool.plugin));
    }
    for plugin in host.plugins() {
        for refused in &plugin.refused_tools {
            say!(
                "not served: {} of plugin `{}`: {}",
                refused.name,
                plugin.name,
                one_line(&refused.reason)
            );
        }
    }
    for refused in refused_mcp {
        say!("not served: {}: {}", one_line(&refused.name), one_line(&refused.reason));
    }
    if let Some(mcp) = &mcp {
        for server in mcp.servers() {
            if let mcp_client::Status::Down { error, .. } = &server.status {
                say!("MCP server `{}` is down: {}", server.name, one_line(error));
            }
        }
    }
    Ok(())
}

/// The configured MCP server `tool` (`SERVER__tool`) names, unless a
/// plugin serves that name (a plugin keeps its name).
fn mcp_server<'a>(host: &Host, tool: &'a str) -> Option<&'a str> {
    let (server, _) = tool.split_once(mcp_client::SEPARATOR)?;
    let is_plugin_tool = host.tools().iter().any(|t: &ToolSpec| t.name.eq_ignore_ascii_case(tool));
    (!is_plugin_tool && host.config.mcp.servers.contains_key(server)).then_some(server)
}

/// One call of an MCP tool, as the command line names it.
struct McpCall<'a> {
    server: &'a str,
    tool: &'a str,
    args: &'a str,
    preset: &'a str,
    approve: Option<Unattended>,
}

async fn call_mcp(host: &Host, call: McpCall<'_>, json: bool) -> anyhow::Result<ExitCode> {
    let McpCall { server, tool, args, preset, .. } = call;
    // As a run's: someone at the terminal answers `ask`; without one,
    // --approve (or `[permissions] unattended`) answers at once.
    let (_, permissions, _) = super::run::permissions(host, preset, call.approve)?;
    let Some(mcp) = start_mcp(host, Some(server)).await else {
        anyhow::bail!("no MCP server `{server}` in the config");
    };
    let call = reson::trace::ToolCall {
        id: "cli".into(),
        name: tool.to_owned(),
        arguments: args.to_owned(),
    };
    if mcp.specs().iter().any(|t| t.name == tool) {
        let ruling = permissions.check("cli", &call, &|_| {}).await;
        if !ruling.run {
            let why = match ruling.decision {
                "ask-denied" => "the call was denied".to_owned(),
                "ask-unattended" => "it needs approval, and no one is at a terminal to give it \
                                     (pass --approve once|all, or allow it with a permission \
                                     rule in reson.toml)"
                    .to_owned(),
                "ask-timeout" => "no answer came from the terminal".to_owned(),
                _ => ruling
                    .rule
                    .map_or_else(|| "no rule allows it".to_owned(), |r| format!("rule {r}")),
            };
            let err = serde_json::json!({ "error": "denied", "tool": tool, "reason": why });
            if json {
                say_json(&serde_json::to_string_pretty(&err)?);
            }
            say_error!("permission denied for `{tool}` under preset `{preset}`: {why}");
            return Ok(ExitCode::from(exit::DENIED));
        }
    }
    match mcp.try_call(tool, args, &CallContext::default()).await {
        Ok(result) => {
            let out = ToolOutput {
                text: result.text,
                long_term_memory: result.long_term_memory,
                include_output_only_once: result.include_output_only_once,
                images: result.images,
            };
            print_output(&out, json);
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            if json {
                say_json(&serde_json::to_string_pretty(&err)?);
            }
            let code = mcp_exit_code(&err);
            let message = match err {
                mcp_client::CallError::UnknownTool { .. } => {
                    let offered: Vec<String> = mcp.specs().into_iter().map(|t| t.name).collect();
                    let status = mcp.servers().into_iter().next().map(|s| s.status);
                    let down = match status {
                        Some(mcp_client::Status::Down { error, .. }) => {
                            format!(" (the server is down: {})", one_line(&error))
                        }
                        _ => String::new(),
                    };
                    format!(
                        "{err}{down}; MCP server `{server}` offers: {}",
                        if offered.is_empty() { "nothing".into() } else { offered.join(", ") }
                    )
                }
                err => err.to_string(),
            };
            say_error!("{message}");
            Ok(ExitCode::from(code))
        }
    }
}

fn print_output(out: &ToolOutput, json: bool) {
    if json {
        say_json(&serde_json::to_string_pretty(out).expect("tool output serialises"));
        return;
    }
    say!("{}", out.text);
    for image in &out.images {
        say!("[image {} ({} bytes)]", image.media_type, image.data.len());
    }
}

async fn call(host: &Host, tool: &str, args: &str, json: bool) -> ExitCode {
    let context = CallContext::default();
    let called = host.call_tool(tool, args, &context);
    match super::term::drawing_while(host.work.as_deref(), called).await {
        Ok(out) => {
            print_output(&out, json);
            ExitCode::SUCCESS
        }
        Err(err) => {
            if json {
                say_json(&serde_json::to_string_pretty(&err).expect("errors serialise"));
            }
            say_error!("{err}");
            if matches!(err, CallError::UnknownTool { .. }) {
                not_loaded(host);
            }
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Why a tool may be missing: the plugins that did not load, each with its
/// reason (the config's own words when its grant is the cause).
fn not_loaded(host: &Host) {
    for plugin in host.plugins() {
        let PluginStatus::Failed(error) = &plugin.status else { continue };
        let section = format!("[plugins.{}]", plugin.name);
        let why = host.problems.iter().find(|p| p.contains(&section)).unwrap_or(error);
        say_err!("plugin `{}` failed to load: {}", plugin.name, one_line(why));
    }
}

fn exit_code(err: &CallError) -> u8 {
    match err {
        CallError::UnknownTool { .. } | CallError::InvalidArguments { .. } => exit::USAGE,
        CallError::Denied { .. } | CallError::Tool { failure: ToolFailure::Denied(_), .. } => {
            exit::DENIED
        }
        CallError::Tool { .. } => exit::TOOL_FAILED,
        CallError::LimitExceeded { .. } => exit::LIMIT,
        CallError::Trapped { .. } => exit::TRAPPED,
        CallError::Internal { .. } | CallError::Cancelled { .. } => exit::HOST,
    }
}

/// The exit codes of plugin tools, for the same kinds of failure.
fn mcp_exit_code(err: &mcp_client::CallError) -> u8 {
    use mcp_client::CallError as E;
    match err {
        E::UnknownTool { .. } | E::InvalidArguments { .. } => exit::USAGE,
        E::Failed { .. } | E::Refused { .. } => exit::TOOL_FAILED,
        E::Timeout { .. } | E::OutputLimit { .. } => exit::LIMIT,
        E::Unavailable { .. } | E::Connection { .. } | E::Cancelled { .. } => exit::HOST,
    }
}
