//! Starting one server: a child process in its own process group with a
//! scrubbed environment, or an HTTP client that goes to its URL only.

use super::ServerConfig;
use crate::policy::SearchPath;
use crate::text::{Lines, escape_controls};
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::Notify;

/// What every start of a stdio server needs from the config.
#[derive(Clone)]
pub(super) struct Launch {
    pub(super) search_path: SearchPath,
    pub(super) cwd: PathBuf,
}

/// Reson's side of a connection: it says who it is and re-lists the tools
/// when the server says they changed.
pub(super) struct Handler {
    relist: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = crate::mcp::PROTOCOL_VERSION;
        info.client_info = Implementation::new("reson", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }
}

/// A running connection to one server.
pub(super) type Connection = RunningService<RoleClient, Handler>;

/// Starts `config` and completes the MCP handshake.
pub(super) async fn connect(
    name: &str,
    config: &ServerConfig,
    launch: &Launch,
    relist: Arc<Notify>,
) -> Result<Connection, String> {
    let handler = Handler { relist };
    match (&config.command, &config.url) {
        (Some(argv), _) => {
            let transport = spawn(name, argv, &config.env, launch)?;
            handler.serve(transport).await.map_err(|e| format!("handshake failed: {e}"))
        }
        (None, Some(url)) => {
            // reqwest 0.13 is built without a bundled TLS provider; the
            // first caller installs ring, which the host's reqwest uses too.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest_mcp::Client::builder()
                .redirect(reqwest_mcp::redirect::Policy::none())
                .build()
                .map_err(|e| format!("HTTP client: {e}"))?;
            let transport = StreamableHttpClientTransport::with_client(
                client,
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            handler.serve(transport).await.map_err(|e| format!("handshake failed: {e}"))
        }
        (None, None) => Err("neither `command` nor `url` is set".into()),
    }
}

/// Spawns a stdio server: the program resolved on the fixed search path,
/// only the listed variables in its environment, its own process group
/// (killed whole when the connection drops), stderr to the log.
fn spawn(
    name: &str,
    argv: &[String],
    env: &[String],
    launch: &Launch,
) -> Result<TokioChildProcess, String> {
    let (program, args) = argv.split_first().ok_or("`command` is empty")?;
    // A path runs as written (a venv's interpreter must keep its own path
    // to find the venv), relative to the config; a bare name is looked up
    // on the fixed search path, never on `PATH`.
    let executable = if program.contains('/') {
        launch.cwd.join(program)
    } else {
        crate::policy::resolve(program, args, &launch.search_path, &[])
            .map_err(|e| format!("cannot run `{program}`: {e}"))?
            .executable
    };
    let mut command = tokio::process::Command::new(&executable);
    command.args(args).env_clear().current_dir(&launch.cwd);
    for var in env {
        if let Some(value) = std::env::var_os(var) {
            command.env(var, value);
        }
    }
    let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
    wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
    wrapped.wrap(process_wrap::tokio::KillOnDrop);
    let (transport, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    if let Some(stderr) = stderr {
        let name = name.to_owned();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line: String = line.chars().take(500).collect();
                tracing::info!(server = %name, "MCP server stderr: {}", escape_controls(&line, Lines::Escape));
            }
        });
    }
    Ok(transport)
}
