//! Starting one server: a child process in its own process group with a
//! scrubbed environment (in the command jail when its config names grants),
//! or an HTTP client that goes to its URL only.

use super::ServerConfig;
use reson_agent::policy::SearchPath;
use reson_sandbox::config::Access;
use reson_sandbox::jail::{
    DEFAULT_MAX_PROCESSES, Jail, JailDir, JailGuard, JailSpec, NetworkRule, PRIVATE_TMP,
};
use reson_text::text::{Lines, escape_controls};
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::Notify;

/// What every start of a stdio server needs from the config.
#[derive(Clone)]
pub(super) struct Launch {
    pub(super) search_path: SearchPath,
    pub(super) cwd: PathBuf,
    /// The command jail; `None` when `[sandbox] jail = "off"`.
    pub(super) jail: Option<Jail>,
}

/// Reson's side of a connection: it says who it is and re-lists the tools
/// when the server says they changed.
pub(super) struct Handler {
    relist: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = crate::PROTOCOL_VERSION;
        info.client_info = Implementation::new("reson", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }
}

/// A running connection to one server.
pub(super) type Connection = RunningService<RoleClient, Handler>;

/// How Reson meets a server: `server/discover` first, for the stateless
/// revision; a server that does not know it (an error, or no answer within
/// rmcp's 10 s) gets the `initialize` handshake of [`crate::LEGACY_VERSION`].
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![crate::PROTOCOL_VERSION],
        legacy_version: Some(crate::LEGACY_VERSION),
    }
}

/// Starts `config` and meets the server (see [`lifecycle`]); a jailed
/// server's guard must live as long as the connection.
pub(super) async fn connect(
    name: &str,
    config: &ServerConfig,
    launch: &Launch,
    relist: Arc<Notify>,
) -> Result<(Connection, Option<JailGuard>), String> {
    let handler = Handler { relist };
    match (&config.command, &config.url) {
        (Some(argv), _) => {
            let (transport, guard) = spawn(name, argv, config, launch).await?;
            let running = handler
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|e| format!("handshake failed: {e}"))?;
            Ok((running, guard))
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
            let running = handler
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|e| format!("handshake failed: {e}"))?;
            Ok((running, None))
        }
        (None, None) => Err("neither `command` nor `url` is set".into()),
    }
}

/// Spawns a stdio server: the program resolved on the fixed search path,
/// only the listed variables in its environment, its own process group
/// (killed whole when the connection drops), stderr to the log; in the
/// command jail when its config names grants.
async fn spawn(
    name: &str,
    argv: &[String],
    config: &ServerConfig,
    launch: &Launch,
) -> Result<(TokioChildProcess, Option<JailGuard>), String> {
    let (program, args) = argv.split_first().ok_or("`command` is empty")?;
    // A path runs as written (a venv's interpreter must keep its own path
    // to find the venv), relative to the config; a bare name is looked up
    // on the fixed search path, never on `PATH`.
    let executable = if program.contains('/') {
        launch.cwd.join(program)
    } else {
        reson_agent::policy::resolve(program, args, &launch.search_path, &[])
            .map_err(|e| format!("cannot run `{program}`: {e}"))?
            .executable
    };
    let env: Vec<(String, String)> =
        config.env.iter().filter_map(|var| Some((var.clone(), std::env::var(var).ok()?))).collect();
    let (command, guard) = match (&launch.jail, config.jailed()) {
        (Some(jail), true) => {
            let spec = jail_spec(config, launch)?;
            let (command, guard) = jail
                .command(&spec, &executable, args, &env)
                .await
                .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            (command, Some(guard))
        }
        (jail, jailed) => {
            if jail.is_none() && jailed {
                tracing::warn!(
                    server = %name,
                    "MCP server runs unjailed: [sandbox] jail = \"off\""
                );
            }
            let mut command = tokio::process::Command::new(&executable);
            command.args(args).env_clear().envs(env).current_dir(&launch.cwd);
            (command, None)
        }
    };
    let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
    // Whatever the server starts goes with it: its process group on Unix,
    // its Job object on Windows.
    #[cfg(unix)]
    wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
    #[cfg(windows)]
    wrapped.wrap(process_wrap::tokio::JobObject);
    wrapped.wrap(process_wrap::tokio::KillOnDrop);
    let spawned = TokioChildProcess::builder(wrapped).stderr(std::process::Stdio::piped()).spawn();
    let (transport, stderr) = spawned.map_err(|e| match &guard {
        Some(guard) => format!("cannot start `{program}`: {}", guard.spawn_error(e)),
        None => format!("cannot start `{program}`: {e}"),
    })?;
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
    Ok((transport, guard))
}

/// What a jailed server may reach: its `dirs` (resolved against the
/// config's directory), the search path, its `network`; it starts in its
/// first directory, or in its private `/tmp`.
fn jail_spec(config: &ServerConfig, launch: &Launch) -> Result<JailSpec, String> {
    let mut dirs = Vec::new();
    for dir in config.dirs.iter().filter(|d| d.access != Access::None) {
        let path = launch.cwd.join(&dir.path);
        let path = path
            .canonicalize()
            .map_err(|e| format!("granted directory {}: {e}", path.display()))?;
        dirs.push(JailDir {
            path,
            writable: dir.access == Access::ReadWrite,
            metadata_writable: dir.access == Access::ReadWrite && dir.metadata == Access::ReadWrite,
        });
    }
    let network = config
        .network
        .iter()
        .map(|rule| NetworkRule::parse(rule).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let cwd = dirs.first().map_or_else(|| PathBuf::from(PRIVATE_TMP), |d| d.path.clone());
    Ok(JailSpec {
        dirs,
        search_path: launch.search_path.entries().to_vec(),
        network,
        max_processes: config.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES),
        cwd,
    })
}
