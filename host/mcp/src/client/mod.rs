//! MCP servers as tools. Each `[mcp.NAME]` of the config is started (and
//! only those), kept running by a supervisor that restarts it with backoff,
//! and its tools are offered as `NAME__tool`. A call is checked against the
//! tool's input schema, held to a deadline and an output cap, and fails
//! with a clear message while its server is down.
//!
//! Everything a server sends is untrusted: names outside the MCP tool-name
//! alphabet, oversized descriptions and schemas that do not compile are
//! refused; descriptions are labelled with their server and escaped.

pub mod config;
mod connect;

use async_trait::async_trait;
use base64::Engine as _;
pub use config::{McpConfig, ServerConfig};
use reson_agent::tools::{ToolContext, ToolRegistry, ToolResult, ToolSource};
use reson_sandbox::config::PluginsConfig;
use reson_sandbox::plugin::{CallContext, Image, RefusedTool, Schema, ToolSpec};
use reson_text::text::{Lines, escape_controls};
use reson_trace::ToolCall;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents, Tool};
use rmcp::{Peer, RoleClient, ServiceError};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Separates a server's name from its tool's in the names a model sees.
pub const SEPARATOR: &str = "__";
/// Longest tool description taken from a server, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 8 << 10;
/// Longest input schema taken from a server (as JSON text), in bytes.
const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// Most tools taken from one server.
const MAX_TOOLS: usize = 256;
/// First and longest wait before a restart.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(30));
/// A server up this long has its backoff reset when it next dies.
const STABLE: Duration = Duration::from_secs(60);

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Status {
    /// Starting (or restarting) and listing its tools.
    Starting,
    /// Up; calls go through.
    Ready,
    /// Down, to be restarted after a backoff; calls fail meanwhile.
    Down {
        /// Why it is down.
        error: String,
        /// Attempts so far.
        attempts: u32,
    },
    /// Turned off in the config.
    Disabled,
}

/// One server, as `reson mcp list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    /// The name in `[mcp.NAME]`.
    pub name: String,
    /// The command line or URL.
    pub endpoint: String,
    /// Its status.
    pub status: Status,
    /// Tools it serves, by the names a model sees.
    pub tools: Vec<String>,
    /// Tools it lists that are not offered, and why.
    pub refused: Vec<RefusedTool>,
    /// What its process may touch: the jail it runs in, or that it runs
    /// with the host's rights.
    pub confinement: String,
    /// The MCP revision spoken with it, once it is up: `2026-07-28` when it
    /// answered `server/discover`, an older one when it took the
    /// `initialize` handshake instead.
    pub protocol: Option<String>,
}

/// A tool taken from a server.
struct RemoteTool {
    spec: ToolSpec,
    remote_name: String,
    validator: Arc<jsonschema::Validator>,
}

#[derive(Default)]
struct State {
    status: Option<Status>,
    tools: Vec<Arc<RemoteTool>>,
    refused: Vec<RefusedTool>,
    peer: Option<Peer<RoleClient>>,
    protocol: Option<String>,
}

/// One configured server and what is known of it.
struct Server {
    name: String,
    config: ServerConfig,
    /// What its process may touch, as `reson mcp list` says it.
    confinement: String,
    /// `writes`, resolved and canonical.
    writes: Vec<PathBuf>,
    state: RwLock<State>,
}

impl Server {
    fn endpoint(&self) -> String {
        match (&self.config.command, &self.config.url) {
            (Some(argv), _) => reson_sandbox::policy::join(argv),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        }
    }

    fn set(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.write().expect("mcp server state"));
    }
}

struct Inner {
    servers: Vec<Arc<Server>>,
    changed: watch::Sender<u64>,
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The MCP servers of a config, running. Cheap to clone; the servers stop
/// when the last clone is dropped.
#[derive(Clone)]
pub struct McpTools {
    inner: Arc<Inner>,
}

impl McpTools {
    /// Starts every enabled server of `mcp` (`[mcp.*]`), each under a
    /// supervisor task, with programs found and jailed as `config`'s
    /// `[sandbox]` says. Call it inside a tokio runtime.
    pub fn start(mcp: &McpConfig, config: &PluginsConfig) -> Self {
        let search_path = config.sandbox.search_path().unwrap_or_default();
        let cwd = config.resolve(std::path::Path::new("."));
        let servers: Vec<Arc<Server>> = mcp
            .servers
            .iter()
            .map(|(name, server)| {
                Arc::new(Server {
                    name: name.clone(),
                    config: server.clone(),
                    confinement: confinement(server, config.sandbox.jail),
                    writes: server
                        .writes
                        .iter()
                        .map(|dir| {
                            let dir = config.resolve(dir);
                            dir.canonicalize().unwrap_or(dir)
                        })
                        .collect(),
                    state: RwLock::new(State {
                        status: Some(if server.enabled {
                            Status::Starting
                        } else {
                            Status::Disabled
                        }),
                        ..State::default()
                    }),
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            servers,
            changed: watch::Sender::new(0),
            stop: CancellationToken::new(),
        });
        for server in inner.servers.iter().filter(|s| s.config.enabled) {
            let launch = connect::Launch {
                search_path: search_path.clone(),
                cwd: cwd.clone(),
                jail: (config.sandbox.jail == reson_sandbox::config::JailMode::On)
                    .then(|| reson_sandbox::jail::Jail::new(&config.sandbox.bwrap)),
            };
            tokio::spawn(supervise(
                server.clone(),
                launch,
                inner.changed.clone(),
                inner.stop.child_token(),
            ));
        }
        Self { inner }
    }

    /// Ticks whenever a server's tools or status change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Waits until no server is starting, or `limit` passes.
    pub async fn settled(&self, limit: Duration) {
        let mut changes = self.changes();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let starting = self.inner.servers.iter().any(|s| {
                s.state.read().expect("mcp server state").status == Some(Status::Starting)
            });
            if !starting {
                return;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return,
            }
        }
    }

    /// Every configured server, by name.
    pub fn servers(&self) -> Vec<ServerInfo> {
        self.inner
            .servers
            .iter()
            .map(|server| {
                let state = server.state.read().expect("mcp server state");
                ServerInfo {
                    name: server.name.clone(),
                    endpoint: server.endpoint(),
                    status: state.status.clone().unwrap_or(Status::Starting),
                    tools: state.tools.iter().map(|t| t.spec.name.clone()).collect(),
                    refused: state.refused.clone(),
                    confinement: server.confinement.clone(),
                    protocol: state.protocol.clone(),
                }
            })
            .collect()
    }

    /// Specs of every tool listed by a server, down ones included (their
    /// calls fail until they are back), sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .inner
            .servers
            .iter()
            .flat_map(|s| {
                let state = s.state.read().expect("mcp server state");
                state.tools.iter().map(|t| t.spec.clone()).collect::<Vec<_>>()
            })
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    fn find(&self, name: &str) -> Option<(Arc<Server>, Arc<RemoteTool>)> {
        let (server, _) = name.split_once(SEPARATOR)?;
        let server = self.inner.servers.iter().find(|s| s.name == server)?;
        let tool = server
            .state
            .read()
            .expect("mcp server state")
            .tools
            .iter()
            .find(|t| t.spec.name == name)
            .cloned()?;
        Some((server.clone(), tool))
    }

    /// Calls the tool `name` (`SERVER__tool`); `None` when no server lists
    /// it. Every failure is a result the model can read.
    pub async fn call(&self, name: &str, args: &str, context: &CallContext) -> Option<ToolResult> {
        self.find(name)?;
        Some(self.try_call(name, args, context).await.unwrap_or_else(|e| e.into()))
    }

    /// Calls the tool `name` (`SERVER__tool`), saying why when there is no
    /// result.
    pub async fn try_call(
        &self,
        name: &str,
        args: &str,
        context: &CallContext,
    ) -> Result<ToolResult, CallError> {
        let (server, tool) =
            self.find(name).ok_or_else(|| CallError::UnknownTool { tool: name.to_owned() })?;
        call(&server, &tool, args, context).await
    }
}

#[async_trait]
impl ToolSource for McpTools {
    fn specs(&self) -> Vec<ToolSpec> {
        McpTools::specs(self)
    }

    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        self.try_call(&call.name, &call.arguments, &context.call_context())
            .await
            .unwrap_or_else(|e| e.into())
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(McpTools::changes(self))
    }

    fn writes(&self, name: &str) -> Vec<PathBuf> {
        let Some((server, _)) = name.split_once(SEPARATOR) else { return Vec::new() };
        self.inner
            .servers
            .iter()
            .find(|s| s.name == server)
            .map(|s| s.writes.clone())
            .unwrap_or_default()
    }
}

/// `registry` with the tools of the MCP servers of `mcp` (`[mcp.*]`),
/// when it names any: started here as [`McpTools::start`] does, waiting
/// up to `wait` for them to list their tools.
pub async fn with_configured(
    registry: ToolRegistry,
    mcp: &McpConfig,
    config: &PluginsConfig,
    wait: Duration,
) -> ToolRegistry {
    if mcp.servers.is_empty() {
        return registry;
    }
    let tools = McpTools::start(mcp, config);
    tools.settled(wait).await;
    registry.with_source(Arc::new(tools))
}

impl From<CallError> for ToolResult {
    fn from(error: CallError) -> Self {
        ToolResult::error(format!("Error: {error}"))
    }
}

/// Why a call of an MCP tool did not give a result. Its text is what the
/// model (or the person at `reson tool call`) reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum CallError {
    /// No configured server lists the tool now.
    #[error("no MCP server serves `{tool}` now")]
    UnknownTool {
        /// The name asked for.
        tool: String,
    },
    /// The arguments are not a JSON object that the tool's input schema
    /// accepts; nothing was sent.
    #[error("invalid arguments for `{tool}`: {why}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong with them.
        why: String,
    },
    /// The server is starting, or down and being restarted.
    #[error("MCP server `{server}` cannot take calls: {why}; try again later")]
    Unavailable {
        /// The server.
        server: String,
        /// Its state, in words.
        why: String,
    },
    /// The caller cancelled the call.
    #[error("tool `{tool}` was cancelled")]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// The server took longer than its `timeout_ms`.
    #[error("tool `{tool}` of MCP server `{server}` exceeded its time limit of {ms} ms")]
    Timeout {
        /// The tool.
        tool: String,
        /// The server.
        server: String,
        /// The limit.
        ms: u128,
    },
    /// The result was larger than the server's `max_output_bytes`.
    #[error(
        "tool `{tool}` of MCP server `{server}` exceeded its output limit of {cap} bytes (returned {returned})"
    )]
    OutputLimit {
        /// The tool.
        tool: String,
        /// The server.
        server: String,
        /// The cap.
        cap: u64,
        /// What came back.
        returned: u64,
    },
    /// The server answered with a protocol error (an unknown tool on its
    /// side, arguments it refused).
    #[error("MCP server `{server}` refused the call of `{tool}`: {message}")]
    Refused {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The server's message.
        message: String,
    },
    /// The connection broke during the call.
    #[error("MCP server `{server}` failed the call of `{tool}`: {why}")]
    Connection {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// What broke.
        why: String,
    },
    /// The tool ran and reported a failure (`isError`).
    #[error("tool `{tool}` of MCP server `{server}` failed: {text}")]
    Failed {
        /// The tool.
        tool: String,
        /// The server.
        server: String,
        /// Its output.
        text: String,
    },
}

async fn call(
    server: &Server,
    tool: &RemoteTool,
    args: &str,
    context: &CallContext,
) -> Result<ToolResult, CallError> {
    let name = &tool.spec.name;
    let invalid = |why: String| CallError::InvalidArguments { tool: name.clone(), why };
    let arguments = match serde_json::from_str::<serde_json::Value>(args) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => return Err(invalid("not a JSON object".into())),
        Err(e) => return Err(invalid(format!("not valid JSON: {e}"))),
    };
    let value = serde_json::Value::Object(arguments.clone());
    let errors: Vec<String> = tool
        .validator
        .iter_errors(&value)
        .map(|e| {
            let at = e.instance_path.to_string();
            if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
        })
        .collect();
    if !errors.is_empty() {
        return Err(invalid(errors.join("; ")));
    }
    let (peer, status) = {
        let state = server.state.read().expect("mcp server state");
        (state.peer.clone(), state.status.clone())
    };
    let Some(peer) = peer else {
        let why = match status {
            Some(Status::Down { error, .. }) => format!("it is down ({error}) and restarting"),
            _ => "it is starting".to_owned(),
        };
        return Err(CallError::Unavailable { server: server.name.clone(), why });
    };
    let request = CallToolRequestParams::new(tool.remote_name.clone()).with_arguments(arguments);
    let timeout = server.config.timeout();
    let cancel = context.cancel.clone().unwrap_or_default();
    let outcome = tokio::select! {
        () = cancel.cancelled() => return Err(CallError::Cancelled { tool: name.clone() }),
        outcome = tokio::time::timeout(timeout, peer.call_tool(request)) => outcome,
    };
    let (server_name, tool_name) = (server.name.clone(), name.clone());
    match outcome {
        Err(_) => Err(CallError::Timeout {
            tool: tool_name,
            server: server_name,
            ms: timeout.as_millis(),
        }),
        Ok(Err(ServiceError::McpError(e))) => Err(CallError::Refused {
            server: server_name,
            tool: tool_name,
            message: e.message.into_owned(),
        }),
        Ok(Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
            Err(CallError::Connection {
                server: server_name,
                tool: tool_name,
                why: format!("it stopped ({e}); it is being restarted"),
            })
        }
        Ok(Err(e)) => {
            Err(CallError::Connection { server: server_name, tool: tool_name, why: e.to_string() })
        }
        Ok(Ok(result)) => from_mcp(server, name, result),
    }
}

/// A server's result as a tool result: text blocks joined, images kept,
/// `structuredContent` as JSON text when there is no text; held to the
/// output cap.
fn from_mcp(server: &Server, name: &str, result: CallToolResult) -> Result<ToolResult, CallError> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for block in result.content {
        match block {
            ContentBlock::Text(t) => texts.push(t.text),
            ContentBlock::Image(i) => {
                match base64::engine::general_purpose::STANDARD.decode(i.data.as_bytes()) {
                    Ok(data) => images.push(Image { media_type: i.mime_type, data }),
                    Err(_) => texts.push("[an image that is not valid base64]".into()),
                }
            }
            ContentBlock::Resource(r) => match r.resource {
                ResourceContents::TextResourceContents { text, .. } => texts.push(text),
                other => texts.push(format!("[resource {}]", resource_uri(&other))),
            },
            ContentBlock::ResourceLink(link) => texts.push(format!("[resource {}]", link.uri)),
            _ => texts.push("[content of a kind Reson does not pass on]".into()),
        }
    }
    if texts.is_empty()
        && let Some(structured) = result.structured_content
    {
        texts.push(structured.to_string());
    }
    let text = texts.join("\n");
    let returned = (text.len() + images.iter().map(|i| i.data.len()).sum::<usize>()) as u64;
    let cap = server.config.output_cap();
    let (server, tool) = (server.name.clone(), name.to_owned());
    if returned > cap {
        return Err(CallError::OutputLimit { tool, server, cap, returned });
    }
    if result.is_error == Some(true) {
        return Err(CallError::Failed { tool, server, text });
    }
    Ok(ToolResult { images, ..ToolResult::text(text) })
}

fn resource_uri(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}

/// What a server's process may touch, in words.
fn confinement(config: &ServerConfig, jail: reson_sandbox::config::JailMode) -> String {
    if config.url.is_some() {
        return "remote (HTTP)".into();
    }
    if !config.jailed() {
        return "unjailed: runs with the host's rights (name `dirs`, `network` or `jail = true` \
                to jail it)"
            .into();
    }
    if jail == reson_sandbox::config::JailMode::Off {
        return "unjailed: [sandbox] jail = \"off\"".into();
    }
    let dirs: Vec<String> =
        config.dirs.iter().map(|d| format!("{} ({})", d.path.display(), d.access)).collect();
    let network =
        if config.network.is_empty() { "no network".to_owned() } else { config.network.join(", ") };
    let dirs = if dirs.is_empty() { "no directories".to_owned() } else { dirs.join(", ") };
    format!("jailed: {dirs}; {network}")
}

/// Keeps one server running: start it, list its tools, wait for it to
/// end or to say its list changed, and after an end start it again, with
/// backoff, until `stop`.
async fn supervise(
    server: Arc<Server>,
    launch: connect::Launch,
    changed: watch::Sender<u64>,
    stop: CancellationToken,
) {
    let mut backoff = BACKOFF.0;
    let mut attempts = 0u32;
    let tick = || changed.send_modify(|n| *n += 1);
    loop {
        attempts += 1;
        let relist = Arc::new(Notify::new());
        let started = Instant::now();
        let error = tokio::select! {
            () = stop.cancelled() => return,
            error = run_once(&server, &launch, relist, &tick, &stop) => error,
        };
        if stop.is_cancelled() {
            return;
        }
        if started.elapsed() > STABLE {
            backoff = BACKOFF.0;
        }
        tracing::warn!(server = %server.name, "MCP server down: {error}; restarting in {backoff:?}");
        server.set(|s| {
            s.peer = None;
            s.protocol = None;
            s.status = Some(Status::Down { error, attempts });
        });
        tick();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF.1);
        server.set(|s| s.status = Some(Status::Starting));
        tick();
    }
}

/// One life of a server; returns why it ended.
async fn run_once(
    server: &Server,
    launch: &connect::Launch,
    relist: Arc<Notify>,
    tick: &impl Fn(),
    stop: &CancellationToken,
) -> String {
    let starting = async {
        let (running, guard) =
            connect::connect(&server.name, &server.config, launch, relist.clone()).await?;
        let listed =
            running.peer().list_all_tools().await.map_err(|e| format!("tools/list: {e}"))?;
        Ok::<_, String>((running, guard, listed))
    };
    let limit = server.config.start_timeout();
    let (running, _jail, listed) = match tokio::time::timeout(limit, starting).await {
        Ok(Ok(up)) => up,
        Ok(Err(e)) => return e,
        Err(_) => {
            return format!("did not start and list its tools within {} ms", limit.as_millis());
        }
    };
    let peer = running.peer().clone();
    let protocol = peer.peer_info().map(|info| info.protocol_version.clone());
    // A stateless server says its list changed only to a listener.
    let _listening = match &protocol {
        Some(version) if crate::is_stateless(version) => {
            listen_for_changes(&server.name, &peer, relist.clone()).await
        }
        _ => None,
    };
    let take = |listed: Vec<Tool>| {
        let (tools, refused) = accept_tools(&server.name, listed);
        server.set(|s| {
            s.tools = tools;
            s.refused = refused;
            s.peer = Some(peer.clone());
            s.protocol = protocol.as_ref().map(ToString::to_string);
            s.status = Some(Status::Ready);
        });
        tick();
    };
    take(listed);
    let waiting = running.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            () = stop.cancelled() => return "stopped".into(),
            ended = &mut waiting => {
                return match ended {
                    Ok(reason) => format!("the connection ended ({reason:?})"),
                    Err(e) => format!("the connection failed: {e}"),
                };
            }
            () = relist.notified() => match peer.list_all_tools().await {
                Ok(listed) => take(listed),
                Err(e) => tracing::warn!(server = %server.name, "tools/list after list_changed: {e}"),
            },
        }
    }
}

/// Opens `subscriptions/listen` for `tools/list_changed` on a stateless
/// server that says its list can change, and wakes `relist` on each
/// notification; the listener stops when the returned guard is dropped
/// (with the connection). A server that refuses to listen only loses
/// the updates, which is logged.
async fn listen_for_changes(
    name: &str,
    peer: &Peer<RoleClient>,
    relist: Arc<Notify>,
) -> Option<tokio_util::sync::DropGuard> {
    let changing = peer
        .peer_info()
        .and_then(|info| info.capabilities.tools.as_ref().and_then(|t| t.list_changed))
        .unwrap_or(false);
    if !changing {
        return None;
    }
    let filter = rmcp::model::SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = match peer.listen(filter).await {
        Ok(subscription) => subscription,
        Err(e) => {
            tracing::warn!(server = %name, "subscriptions/listen refused, tool list changes will go unseen: {e}");
            return None;
        }
    };
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stopped.cancelled() => {
                    let _ = subscription.cancel().await;
                    return;
                }
                next = subscription.next() => match next {
                    Ok(Some(_)) => relist.notify_one(),
                    _ => return,
                },
            }
        }
    });
    Some(stop.drop_guard())
}

/// The tools of `server` that may be offered, and the rest with reasons.
fn accept_tools(server: &str, listed: Vec<Tool>) -> (Vec<Arc<RemoteTool>>, Vec<RefusedTool>) {
    let mut tools = Vec::new();
    let mut refused = Vec::new();
    let mut seen = HashSet::new();
    for tool in listed {
        let remote = tool.name.to_string();
        let full = format!("{server}{SEPARATOR}{remote}");
        let refuse = |reason: &str| RefusedTool {
            name: escape_controls(&full, Lines::Escape).into_owned(),
            reason: reason.to_owned(),
        };
        let valid_name = (1..=128).contains(&remote.len())
            && remote.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_name {
            refused.push(refuse("its name is not 1-128 letters, digits, `_`, `-` or `.`"));
            continue;
        }
        if tools.len() >= MAX_TOOLS {
            refused.push(refuse(&format!("the server lists more than {MAX_TOOLS} tools")));
            continue;
        }
        if !seen.insert(remote.to_ascii_lowercase()) {
            refused.push(refuse("the server lists this name twice"));
            continue;
        }
        let description = tool.description.as_deref().unwrap_or("");
        if description.len() > MAX_DESCRIPTION_BYTES {
            refused.push(refuse(&format!(
                "its description is longer than {MAX_DESCRIPTION_BYTES} bytes"
            )));
            continue;
        }
        let schema = Schema::from(serde_json::Value::Object((*tool.input_schema).clone()));
        if schema.text().len() > MAX_SCHEMA_BYTES {
            refused
                .push(refuse(&format!("its input schema is longer than {MAX_SCHEMA_BYTES} bytes")));
            continue;
        }
        let validator = match jsonschema::validator_for(&schema) {
            Ok(v) => v,
            Err(e) => {
                refused.push(refuse(&format!("its input schema does not compile: {e}")));
                continue;
            }
        };
        // The description is the server's text, not the host's: labelled
        // as such, and escaped so it cannot drive a terminal.
        let description =
            format!("[from MCP server `{server}`] {}", escape_controls(description, Lines::Keep));
        tools.push(Arc::new(RemoteTool {
            spec: ToolSpec {
                name: full,
                description,
                input_schema: schema,
                plugin: format!("mcp:{server}"),
            },
            remote_name: remote,
            validator: Arc::new(validator),
        }));
    }
    (tools, refused)
}

/// Drops from `specs` (MCP tools) the names a built-in or a plugin tool
/// already serves, ASCII case ignored, by the rule a registry follows;
/// the plugin or built-in keeps its name.
/// Returns the dropped ones with the reason.
pub fn shadowed(
    specs: Vec<ToolSpec>,
    served: &[String],
) -> (Vec<ToolSpec>, BTreeMap<String, RefusedTool>) {
    let (kept, dropped) = reson_agent::tools::unclaimed(specs, served);
    let dropped = dropped
        .into_iter()
        .map(|spec| {
            let refused = RefusedTool {
                name: spec.name.clone(),
                reason: "a built-in or plugin tool of that name is served instead".into(),
            };
            (spec.name, refused)
        })
        .collect();
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, schema: serde_json::Value) -> Tool {
        let serde_json::Value::Object(schema) = schema else { panic!("schema is an object") };
        Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
    }

    fn object() -> serde_json::Value {
        serde_json::json!({ "type": "object" })
    }

    #[tokio::test]
    async fn a_server_marked_as_writing_names_its_directories_for_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let server = |writes: Vec<std::path::PathBuf>| ServerConfig {
            command: Some(vec!["true".into()]),
            enabled: false,
            writes,
            ..ServerConfig::default()
        };
        let mcp = McpConfig {
            servers: [
                ("w".to_owned(), server(vec!["out".into()])),
                ("r".to_owned(), server(vec![])),
            ]
            .into(),
        };
        let config =
            PluginsConfig { base_dir: dir.path().to_path_buf(), ..PluginsConfig::default() };
        let tools = McpTools::start(&mcp, &config);
        let out = dir.path().join("out").canonicalize().unwrap();
        assert_eq!(ToolSource::writes(&tools, "w__save"), [out]);
        assert!(ToolSource::writes(&tools, "r__save").is_empty());
        assert!(ToolSource::writes(&tools, "save").is_empty());
    }

    #[test]
    fn a_servers_untrusted_tools_are_refused_with_reasons() {
        let listed = vec![
            tool("ok", "fine\u{1b}[2J", object()),
            tool("OK", "the same name in other case", object()),
            tool("sp ace", "", object()),
            tool("long", &"d".repeat(MAX_DESCRIPTION_BYTES + 1), object()),
            tool("broken", "", serde_json::json!({ "type": 7 })),
        ];
        let (tools, refused) = accept_tools("srv", listed);
        let names: Vec<&str> = tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["srv__ok"]);
        assert_eq!(tools[0].remote_name, "ok");
        assert_eq!(tools[0].spec.description, "[from MCP server `srv`] fine\\u{1b}[2J");
        let reasons: Vec<&str> = refused.iter().map(|r| r.reason.as_str()).collect();
        assert!(reasons[0].contains("twice"), "{reasons:?}");
        assert!(reasons[1].contains("not 1-128 letters"), "{reasons:?}");
        assert!(reasons[2].contains("description is longer"), "{reasons:?}");
        assert!(reasons[3].contains("does not compile"), "{reasons:?}");
    }

    #[test]
    fn a_name_a_plugin_or_builtin_serves_stays_theirs() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: object().into(),
            plugin: "mcp:x".into(),
        };
        let (kept, dropped) =
            shadowed(vec![spec("x__read"), spec("X__Echo"), spec("Goal")], &["x__echo".into()]);
        let kept: Vec<&str> = kept.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(kept, ["x__read"]);
        assert_eq!(dropped.keys().collect::<Vec<_>>(), ["Goal", "X__Echo"]);
    }
}
