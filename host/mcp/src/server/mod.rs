//! `reson mcp serve`: the tools on offer, served to MCP clients. A call
//! takes the path a run's call takes — the preset's permission rules, the
//! tool's schema check, the sandbox and its limits — and its result goes
//! out redacted. An `ask` becomes an elicitation when the client supports
//! one; otherwise no one can answer, and the call is denied.

mod approval;
pub mod http;
mod stdio;

use approval::{ClientApprover, InlineApprover};
use base64::Engine as _;
use reson_agent::agent::Permissions;
use reson_agent::policy::RuleSet;
use reson_agent::tools::{ToolRegistry, ToolResult};
use reson_sandbox::plugin::CallContext;
use reson_text::redact::redact;
use reson_trace::ToolCall;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, InitializeResult, InputRequiredResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP session could not start (a failed handshake, say).
    #[error("MCP session failed: {0}")]
    Session(String),
    /// The listening socket could not be set up or failed.
    #[error("MCP HTTP server: {0}")]
    Http(#[from] std::io::Error),
    /// Bound beyond loopback without a bearer token.
    #[error("serving MCP on {0}, beyond loopback, needs a bearer token")]
    NoToken(std::net::SocketAddr),
    /// An allowed host or origin that cannot be used.
    #[error("MCP HTTP server: {0}")]
    Guard(#[from] reson_origin_guard::GuardError),
}

/// What every session of one server shares: the tools, and the rules a
/// session's permissions start from.
struct Shared {
    tools: ToolRegistry,
    rules: RuleSet,
    approval_timeout: Duration,
}

/// Serves a [`ToolRegistry`] over MCP. Cheap to clone; each connection
/// (each HTTP session) gets a session of its own, with its own approvals.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl McpServer {
    /// Serves `tools` under `rules` (a preset's, from
    /// [`Config::preset`](crate::config::Config::preset)); an elicitation
    /// waits up to `approval_timeout` for the person at the client.
    pub fn new(tools: ToolRegistry, rules: RuleSet, approval_timeout: Duration) -> Self {
        Self { shared: Arc::new(Shared { tools, rules, approval_timeout }) }
    }

    /// Serves one client over stdin and stdout until it disconnects. A
    /// line over 16 MiB, rmcp's limit, is answered with an error.
    pub async fn serve_stdio(&self) -> Result<(), ServeError> {
        self.serve_lines(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves one client that writes to `read` and reads `write`, one
    /// JSON-RPC message a line, as over stdio (the fuzz target drives a
    /// session through in-memory pipes this way).
    pub async fn serve_lines<R, W>(&self, read: R, write: W) -> Result<(), ServeError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let running = self
            .session()
            .serve(stdio::LineTransport::new(read, write, stdio::MAX_LINE))
            .await
            .map_err(|e| ServeError::Session(e.to_string()))?;
        running.waiting().await.map_err(|e| ServeError::Session(e.to_string()))?;
        Ok(())
    }

    fn session(&self) -> Session {
        let approver = Arc::new(ClientApprover::new(self.shared.approval_timeout));
        let permissions = Permissions::new(self.shared.rules.clone(), approver.clone());
        Session { shared: self.shared.clone(), permissions: Arc::new(permissions), approver }
    }
}

/// One client's connection.
#[derive(Clone)]
struct Session {
    shared: Arc<Shared>,
    permissions: Arc<Permissions>,
    approver: Arc<ClientApprover>,
}

impl Session {
    /// The tools offered to the client: those the rules do not deny
    /// outright, by name (2026-07-28 asks for a deterministic order, which
    /// also keeps clients' caches keyed on the list stable). Tools that
    /// live inside a run (the goal tree) are not served.
    fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self
            .shared
            .tools
            .standalone_specs()
            .into_iter()
            .filter(|t| self.permissions.offered(&t.name))
            .map(|spec| {
                let schema = match &*spec.input_schema {
                    serde_json::Value::Object(map) => map.clone(),
                    _ => JsonObject::from_iter([("type".to_owned(), "object".into())]),
                };
                Tool::new(spec.name, spec.description, Arc::new(schema))
            })
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// Waits for the next change of what is served: a plugin added,
    /// replaced (a new build whose tool list reads the same included: its
    /// behaviour may not) or removed, an MCP server's list changed. False
    /// once nothing can change any more (the sources are gone).
    async fn next_change(changes: &mut [tokio::sync::watch::Receiver<u64>]) -> bool {
        let ticks = changes.iter_mut().map(|rx| Box::pin(rx.changed()));
        let (tick, _, _) = futures::future::select_all(ticks).await;
        tick.is_ok()
    }

    /// Sends `notifications/tools/list_changed` to a client of an older
    /// revision (which gets them on its session) on every change of what
    /// is served, until the client is gone.
    fn follow_changes(&self, peer: rmcp::Peer<RoleServer>) {
        let mut changes = self.shared.tools.changes();
        if changes.is_empty() {
            return;
        }
        tokio::spawn(async move {
            while Self::next_change(&mut changes).await {
                if peer.is_transport_closed() || peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.tools().iter().any(|t| t.name == name) {
            let offered: Vec<String> = self.tools().into_iter().map(|t| t.name.into()).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; offered tools: {}", offered.join(", ")),
                None,
            ));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall {
            id: format!("mcp-{}", context.id),
            name: name.clone(),
            arguments: arguments.to_string(),
        };
        // 2026-07-28 has no requests from server to client: its `ask` is an
        // input-required round, with permissions of this request alone.
        let stateless = context.protocol_version().is_some_and(|v| crate::is_stateless(&v));
        let askable = if stateless {
            approval::takes_forms(context.client_capabilities().as_ref())
        } else {
            approval::can_ask(&context.peer)
        };
        let ruling = if stateless {
            let inline = Arc::new(
                InlineApprover::new(request.input_responses.as_ref())
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?,
            );
            let permissions = Permissions::new(self.shared.rules.clone(), inline.clone());
            let ruling = permissions.check("mcp", &call, &|_| {}).await;
            let question = inline
                .input_requests()
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            if askable && let Some(requests) = question {
                return Ok(CallToolResponse::InputRequired(
                    InputRequiredResult::from_input_requests(requests),
                ));
            }
            ruling
        } else {
            if askable {
                self.approver.attach(&context.peer);
            }
            self.permissions.check("mcp", &call, &|_| {}).await
        };
        if !ruling.run {
            let text = match ruling.decision {
                "ask-denied" => format!("Error: the user denied this call of `{name}`."),
                "ask-timeout" if !askable => format!(
                    "Error: calling `{name}` needs approval, and this MCP client cannot be asked \
                     (it does not support elicitation): allow it with a permission rule in reson.toml."
                ),
                "ask-timeout" => {
                    format!("Error: no one approved this call of `{name}` in time; it was denied.")
                }
                _ => {
                    let why = ruling
                        .rule
                        .map_or_else(|| "no rule allows it".to_owned(), |r| format!("rule {r}"));
                    format!("Error: permission denied for `{name}` ({why}).")
                }
            };
            return Ok(CallToolResult::error(vec![ContentBlock::text(redact(&text))]).into());
        }
        let cx = CallContext {
            call_id: call.id.clone(),
            cancel: Some(context.ct),
            ..CallContext::default()
        };
        Ok(to_mcp(self.shared.tools.call(&call, &cx).await).into())
    }
}

/// A tool result as MCP has it: the text (redacted), a JSON result also
/// as `structuredContent`, images as image content, failures (limits and
/// traps named in the text) as `isError`. 2026-07-28 takes any JSON value
/// there; rmcp drops what is not an object for a client of an older
/// revision, which keeps the text.
fn to_mcp(result: ToolResult) -> CallToolResult {
    let text = redact(&result.text).into_owned();
    let structured = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) if result.ok && !value.is_null() => Some(value),
        _ => None,
    };
    let mut content = vec![ContentBlock::text(text)];
    for image in &result.images {
        let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
        content.push(ContentBlock::image(data, image.media_type.clone()));
    }
    let mut out =
        if result.ok { CallToolResult::success(content) } else { CallToolResult::error(content) };
    out.structured_content = structured;
    out
}

impl ServerHandler for Session {
    fn get_info(&self) -> InitializeResult {
        let capabilities =
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build();
        InitializeResult::new(capabilities)
            .with_protocol_version(super::PROTOCOL_VERSION)
            .with_server_info(Implementation::new("reson", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Reson's tools, each call run in a WebAssembly sandbox under the host's permission rules.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&super::PROTOCOL_VERSION))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.approver.attach(&context.peer);
        self.follow_changes(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The list can change at any moment (a plugin is replaced): no
        // client may keep it as fresh; one that wants to know listens. It is
        // what this server's rules offer, not for a shared cache to hand on.
        Ok(ListToolsResult::with_all_items(self.tools())
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    /// `subscriptions/listen` (2026-07-28): `notifications/tools/list_changed`
    /// on the listening request's stream on every change of what is
    /// served, until the client cancels it.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.shared.tools.changes();
        if context.accepted().tools_list_changed != Some(true) || changes.is_empty() {
            context.cancelled().await;
            return Ok(());
        }
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = Self::next_change(&mut changes) => {
                    if !changed || context.sink().notify_tool_list_changed().await.is_err() {
                        // Nothing more to say: the client ends the stream.
                        context.cancelled().await;
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    /// A server of no tools, under the default preset's rules.
    fn server() -> McpServer {
        let (_, rules) = reson_agent::config::AgentConfig::default().preset("default").unwrap();
        McpServer::new(ToolRegistry::builtins_only(), rules, Duration::from_secs(1))
    }

    #[tokio::test]
    async fn a_message_before_the_handshake_does_not_end_the_session() {
        let (mut client, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, answers) = tokio::io::duplex(1 << 16);
        let serving =
            tokio::spawn(async move { server().serve_lines(server_in, server_out).await });
        let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "test", "version": "1" } } });
        // Found by the mcp_server fuzz target: rmcp's handshake took each
        // of these for a broken handshake and ended the session.
        let early = [
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
            json!({ "jsonrpc": "2.0", "id": 7, "result": {} }),
            json!({ "jsonrpc": "2.0", "id": 8, "error": { "code": 1, "message": "x" } }),
        ];
        let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
        let mut input = String::new();
        for message in early.iter().chain([&initialize, &list]) {
            input.push_str(&format!("{message}\n"));
        }
        client.write_all(input.as_bytes()).await.unwrap();
        let mut answers = BufReader::new(answers).lines();
        for id in [1, 2] {
            let line = answers.next_line().await.unwrap().expect("an answer");
            let answer: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["id"], id, "{answer}");
            assert!(answer.get("result").is_some(), "{answer}");
        }
        drop(client);
        serving.await.unwrap().unwrap();
    }

    #[test]
    fn a_json_result_is_structured_and_failures_are_is_error() {
        let object = to_mcp(ToolResult::text(r#"{"a":1}"#.into()));
        assert_eq!(object.structured_content, Some(serde_json::json!({ "a": 1 })));
        assert_eq!(object.is_error, Some(false));
        assert_eq!(object.content[0].as_text().unwrap().text, r#"{"a":1}"#);
        assert_eq!(to_mcp(ToolResult::text("[1]".into())).structured_content, Some([1].into()));
        assert_eq!(to_mcp(ToolResult::text("plain words".into())).structured_content, None);
        assert_eq!(to_mcp(ToolResult::text("null".into())).structured_content, None);
        let failed = to_mcp(ToolResult::error(r#"{"a":1}"#.into()));
        assert_eq!((failed.is_error, failed.structured_content), (Some(true), None));
    }
}
