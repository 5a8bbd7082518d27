//! `reson mcp ...`: serve Reson's tools to MCP clients, and look at the MCP
//! servers the config names.

use super::Host;
use super::term::{one_line, plural, say, say_json};
use anyhow::Context as _;
use clap::Subcommand;
use reson::mcp::client::with_configured;
use reson::mcp::client::{McpTools, Status};
use reson::mcp::server::http::HttpOptions;
use reson::mcp::server::{McpServer, ServeError};
use reson::tools::ToolRegistry;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// How long a command waits for the configured MCP servers to start.
pub(crate) const START_WAIT: Duration = Duration::from_secs(20);

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the tools on offer over MCP: stdio, or streamable HTTP at /mcp with --http.
    Serve {
        /// Serve streamable HTTP on this address instead of stdio (e.g. 127.0.0.1:8765).
        #[arg(long)]
        http: Option<SocketAddr>,
        /// The environment variable holding the bearer token HTTP clients must send
        /// (required when --http is not a loopback address).
        #[arg(long, default_value = "RESON_MCP_TOKEN")]
        token_env: String,
        /// With --http: an origin (scheme://host[:port]) whose pages may call the server
        /// from a browser, besides its own; repeatable. Other origins get 403.
        #[arg(long = "allowed-origin", value_name = "ORIGIN")]
        allowed_origins: Vec<String>,
        /// With --http: a name (host or host:port) the server is reached by, besides the
        /// address it listens on (and localhost over loopback); repeatable. Other Host
        /// headers get 421.
        #[arg(long = "allowed-host", value_name = "HOST")]
        allowed_hosts: Vec<String>,
        /// Permission preset: default, explore, analyst, browser, or one from the config.
        #[arg(long, default_value = "default")]
        preset: String,
    },
    /// The MCP servers of the config, their status and tools.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// The tools of a run: the runtime's plugins, plus the MCP servers the
/// config names, once they have started (or failed to).
pub(crate) async fn tools(host: &Host) -> ToolRegistry {
    let registry = ToolRegistry::new(host.runtime.clone());
    with_configured(registry, &host.config.mcp, &host.config.plugins, START_WAIT).await
}

pub(crate) async fn run(runtime: &Host, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { http, token_env, allowed_origins, allowed_hosts, preset } => {
            let config = &runtime.config.agent;
            let (_, rules) = config.preset(preset).map_err(anyhow::Error::msg)?;
            let timeout = Duration::from_millis(config.permissions.approval_timeout_ms);
            let _watcher = runtime.watch()?;
            let server = McpServer::new(tools(runtime).await, rules, timeout);
            match http {
                None => server.serve_stdio().await?,
                Some(addr) => {
                    let token = std::env::var(token_env).ok().filter(|t| !t.is_empty());
                    let bound = server
                        .bind_http(HttpOptions {
                            addr: *addr,
                            token,
                            allowed_origins: allowed_origins.clone(),
                            allowed_hosts: allowed_hosts.clone(),
                        })
                        .await
                        .map_err(|e| match e {
                            ServeError::NoToken(_) => {
                                anyhow::anyhow!(
                                    "{e}: set {token_env} to the token clients must send"
                                )
                            }
                            e => e.into(),
                        })?;
                    // Stdout is free in HTTP mode: scripts read the address
                    // (the real port when 0 was asked for) from here.
                    say!("serving MCP on http://{}{}", bound.addr, reson::mcp::server::http::PATH);
                    bound
                        .serve(async {
                            let _ = tokio::signal::ctrl_c().await;
                        })
                        .await
                        .context("serving MCP over HTTP")?;
                }
            }
        }
        Command::List { json } => {
            let mcp = McpTools::start(&runtime.config.mcp, &runtime.config.plugins);
            mcp.settled(START_WAIT).await;
            let plugin_tools: Vec<String> = runtime.tools().into_iter().map(|t| t.name).collect();
            let (_, shadowed) = reson::mcp::client::shadowed(mcp.specs(), &plugin_tools);
            let mut servers = mcp.servers();
            for server in &mut servers {
                server.tools.retain(|t| !shadowed.contains_key(t));
                let prefix = format!("{}{}", server.name, reson::mcp::client::SEPARATOR);
                server
                    .refused
                    .extend(shadowed.values().filter(|r| r.name.starts_with(&prefix)).cloned());
            }
            if *json {
                say_json(&serde_json::to_string_pretty(&servers)?);
                return Ok(ExitCode::SUCCESS);
            }
            if servers.is_empty() {
                say!("no MCP servers in the config (add [mcp.NAME] with `command` or `url`)");
            }
            for server in servers {
                let status = match &server.status {
                    Status::Starting => "starting".to_owned(),
                    Status::Ready => "ready".to_owned(),
                    Status::Disabled => "disabled".to_owned(),
                    Status::Down { error, attempts } => {
                        let attempts = plural(*attempts as usize, "attempt", "attempts");
                        format!("down after {attempts}: {}", one_line(error))
                    }
                };
                say!("{}  {}  [{status}]", server.name, one_line(&server.endpoint));
                say!("    process: {}", one_line(&server.confinement));
                if let Some(protocol) = &server.protocol {
                    say!("    protocol: MCP {protocol}");
                }
                for tool in &server.tools {
                    say!("  {tool}");
                }
                for refused in &server.refused {
                    say!(
                        "  not served: {}: {}",
                        one_line(&refused.name),
                        one_line(&refused.reason)
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
