//! The built-in `lsp_diagnostics` tool: a language server configured per
//! language (`[lsp.python] command = ["pylsp"]`), started in the command
//! jail with read-only access to its directories, opens the files the
//! model names and reports their diagnostics (file, line, severity,
//! message). A server lives as long as the run of its trace.

mod client;

use crate::config::LspServerConfig;
use crate::tools::{ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use client::Client;
use reson_sandbox::config::JailMode;
use reson_sandbox::jail::{DEFAULT_MAX_PROCESSES, Jail, JailDir, JailGuard, JailSpec};
use reson_sandbox::plugin::{Runtime, ToolSpec};
use reson_sandbox::policy::SearchPath;
use reson_trace::ToolCall;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// The tool's name.
pub const NAME: &str = "lsp_diagnostics";

/// The most files one call names.
const MAX_FILES: usize = 20;
/// The largest file sent to a server.
const MAX_FILE: u64 = 1 << 20;
/// How long a server has to start.
const START: Duration = Duration::from_secs(30);
/// How long a server has to end once asked, before it is killed.
const END: Duration = Duration::from_secs(5);

/// Arguments of `lsp_diagnostics`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The files to check: absolute, or relative to the language server's
    /// workspace.
    files: Vec<String>,
}

/// A configured server, its paths resolved.
struct Server {
    name: String,
    command: Vec<String>,
    extensions: Vec<String>,
    /// Canonical; the first is its workspace.
    dirs: Vec<PathBuf>,
    env: Vec<String>,
    timeout: Duration,
}

/// One running server and what it holds.
struct Running {
    client: Client,
    root: PathBuf,
    /// Each opened document's version.
    versions: Mutex<HashMap<String, i64>>,
    child: Mutex<tokio::process::Child>,
    _guard: Option<JailGuard>,
}

/// The tool: the servers of the config, started per trace on first use.
pub(crate) struct LanguageServers {
    servers: Vec<Server>,
    search_path: SearchPath,
    jail: Option<Jail>,
    running: Mutex<BTreeMap<(String, String), Arc<Running>>>,
}

impl LanguageServers {
    /// The servers `lsp` configures (paths relative to `base`), jailed as
    /// `runtime`'s sandbox says; `None` when none is configured.
    pub(crate) fn configured(
        runtime: &Runtime,
        lsp: &BTreeMap<String, LspServerConfig>,
        base: &Path,
        search_path: Option<&SearchPath>,
    ) -> Option<Self> {
        if lsp.is_empty() {
            return None;
        }
        let servers = lsp
            .iter()
            .map(|(name, c)| Server {
                name: name.clone(),
                command: c.command.clone(),
                extensions: c
                    .extensions
                    .iter()
                    .map(|e| e.trim_start_matches('.').to_owned())
                    .collect(),
                dirs: if c.dirs.is_empty() {
                    vec![base.to_path_buf()]
                } else {
                    c.dirs.iter().map(|d| base.join(d)).collect()
                }
                .into_iter()
                .map(|d| d.canonicalize().unwrap_or(d))
                .collect(),
                env: c.env.clone(),
                timeout: Duration::from_millis(c.timeout_ms.unwrap_or(20_000)),
            })
            .collect();
        let sandbox = &runtime.options().config.sandbox;
        Some(Self {
            servers,
            search_path: search_path.cloned().unwrap_or_default(),
            jail: (sandbox.jail == JailMode::On).then(|| Jail::new(&sandbox.bwrap)),
            running: Mutex::default(),
        })
    }

    fn server_for(&self, path: &Path) -> Result<&Server, String> {
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        self.servers.iter().find(|s| s.extensions.iter().any(|e| e == extension)).ok_or_else(|| {
            let served: Vec<String> = self
                .servers
                .iter()
                .map(|s| format!("{} ({})", s.name, s.extensions.join(", ")))
                .collect();
            format!(
                "no language server is configured for `.{extension}` files; [lsp] has {}",
                served.join("; ")
            )
        })
    }

    /// The running server `server` of `trace`, started if need be.
    async fn running(&self, trace: &str, server: &Server) -> Result<Arc<Running>, String> {
        let mut running = self.running.lock().await;
        let key = (trace.to_owned(), server.name.clone());
        // A server that ended (it crashed, say) is started again.
        if let Some(found) = running.get(&key).filter(|r| !r.client.ended()) {
            return Ok(found.clone());
        }
        let started = Arc::new(self.start(server).await?);
        running.insert(key, started.clone());
        Ok(started)
    }

    async fn start(&self, server: &Server) -> Result<Running, String> {
        let name = &server.name;
        let (program, args) =
            server.command.split_first().ok_or(format!("[lsp.{name}]: `command` is empty"))?;
        let executable = reson_sandbox::policy::resolve(program, args, &self.search_path, &[])
            .map_err(|e| format!("[lsp.{name}]: cannot run `{program}`: {e}"))?
            .executable;
        let root = server.dirs.first().cloned().ok_or(format!("[lsp.{name}]: no directory"))?;
        let mut env: Vec<(String, String)> =
            server.env.iter().filter_map(|v| Some((v.clone(), std::env::var(v).ok()?))).collect();
        let (mut command, guard) = match &self.jail {
            Some(jail) => {
                // Caches go to the jail's private temporary directory.
                env.push(("HOME".into(), reson_sandbox::jail::PRIVATE_TMP.into()));
                let spec = JailSpec {
                    dirs: server
                        .dirs
                        .iter()
                        .map(|d| JailDir {
                            path: d.clone(),
                            writable: false,
                            metadata_writable: false,
                        })
                        .collect(),
                    search_path: self.search_path.entries().to_vec(),
                    network: Vec::new(),
                    max_processes: DEFAULT_MAX_PROCESSES,
                    cwd: root.clone(),
                };
                let (command, guard) = jail
                    .command(&spec, &executable, args, &env)
                    .await
                    .map_err(|e| format!("[lsp.{name}]: cannot start `{program}`: {e}"))?;
                (command, Some(guard))
            }
            None => {
                tracing::warn!(server = %name, "language server runs unjailed: [sandbox] jail = \"off\"");
                let mut command = tokio::process::Command::new(&executable);
                command.args(args).env_clear().envs(env).current_dir(&root);
                (command, None)
            }
        };
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| match &guard {
            Some(guard) => {
                format!("[lsp.{name}]: cannot start `{program}`: {}", guard.spawn_error(e))
            }
            None => format!("[lsp.{name}]: cannot start `{program}`: {e}"),
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("[lsp.{name}]: no pipes to `{program}`"));
        };
        let said = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(keep_last_lines(stderr, said.clone(), name.clone()));
        }
        let client = Client::new(stdin, tokio::io::BufReader::new(stdout));
        let root_uri = uri(&root);
        let params = json!({
            "processId": null,
            "rootUri": root_uri,
            "workspaceFolders": [{ "uri": root_uri, "name": name }],
            "capabilities": { "textDocument": { "publishDiagnostics": { "relatedInformation": false } } },
            "clientInfo": { "name": "reson", "version": env!("CARGO_PKG_VERSION") },
        });
        if let Err(e) = client.request("initialize", params, START).await {
            // Its last words, for the one who has to fix the setup.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let said: Vec<String> = said.lock().expect("stderr").iter().cloned().collect();
            let said = if said.is_empty() {
                String::new()
            } else {
                format!("; it said: {}", said.join(" / "))
            };
            return Err(format!("[lsp.{name}]: `{program}` did not start: {e}{said}"));
        }
        client.notify("initialized", json!({})).await?;
        Ok(Running {
            client,
            root,
            versions: Mutex::default(),
            child: Mutex::new(child),
            _guard: guard,
        })
    }

    /// The diagnostics of `file` (a path the model gave), as lines.
    async fn check(&self, trace: &str, file: &str) -> Result<String, String> {
        let given = Path::new(file);
        let server = self.server_for(given)?;
        let root = server.dirs.first().cloned().unwrap_or_default();
        let path = root.join(given);
        let path = path.canonicalize().map_err(|e| format!("{file}: {e}"))?;
        if !server.dirs.iter().any(|d| path.starts_with(d)) {
            return Err(format!(
                "{file} is outside the directories of [lsp.{}] ({})",
                server.name,
                server.dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ));
        }
        let size = std::fs::metadata(&path).map_err(|e| format!("{file}: {e}"))?.len();
        if size > MAX_FILE {
            return Err(format!("{file} is over {} KiB", MAX_FILE >> 10));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let running = self.running(trace, server).await?;
        let uri = uri(&path);
        let before = running.client.published(&uri).times;
        let mut versions = running.versions.lock().await;
        match versions.get_mut(&uri) {
            Some(version) => {
                *version += 1;
                let params = json!({
                    "textDocument": { "uri": uri, "version": *version },
                    "contentChanges": [{ "text": text }],
                });
                running.client.notify("textDocument/didChange", params).await?;
                running
                    .client
                    .notify("textDocument/didSave", json!({ "textDocument": { "uri": uri } }))
                    .await?;
            }
            None => {
                versions.insert(uri.clone(), 1);
                let language = server.name.as_str();
                let params = json!({ "textDocument": { "uri": uri, "languageId": language, "version": 1, "text": text } });
                running.client.notify("textDocument/didOpen", params).await?;
            }
        }
        drop(versions);
        let shown = path.strip_prefix(&running.root).unwrap_or(&path).display().to_string();
        let Some(published) = running.client.published_after(&uri, before, server.timeout).await
        else {
            if running.client.ended() {
                return Err(format!(
                    "{shown}: [lsp.{}] ended before it published diagnostics; it is started \
                     again at the next call",
                    server.name
                ));
            }
            return Err(format!(
                "{shown}: [lsp.{}] published no diagnostics within {} ms",
                server.name,
                server.timeout.as_millis()
            ));
        };
        if published.diagnostics.is_empty() {
            return Ok(format!("{shown}: no diagnostics"));
        }
        Ok(published.diagnostics.iter().map(|d| line(&shown, d)).collect::<Vec<_>>().join("\n"))
    }
}

/// Logs a server's stderr and keeps its last lines.
async fn keep_last_lines(
    stderr: tokio::process::ChildStderr,
    last: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    name: String,
) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(300).collect();
        tracing::info!(server = %name, "language server stderr: {}", line.escape_debug());
        let mut last = last.lock().expect("stderr");
        if last.len() == 5 {
            last.pop_front();
        }
        last.push_back(line);
    }
}

/// One diagnostic: `file:line:column: severity: message [source code]`,
/// line and column from 1.
fn line(file: &str, d: &Value) -> String {
    let start = &d["range"]["start"];
    let at = |key: &str| start[key].as_u64().unwrap_or(0) + 1;
    let severity = match d["severity"].as_u64() {
        Some(1) => "error",
        Some(2) => "warning",
        Some(3) => "information",
        Some(4) => "hint",
        _ => "diagnostic",
    };
    let message = d["message"].as_str().unwrap_or_default().replace('\n', " ");
    let source = [
        d["source"].as_str().map(str::to_owned),
        d["code"].as_str().map(str::to_owned).or_else(|| d["code"].as_u64().map(|c| c.to_string())),
    ];
    let source: Vec<String> = source.into_iter().flatten().collect();
    let tail = if source.is_empty() { String::new() } else { format!(" [{}]", source.join(" ")) };
    format!("{file}:{}:{}: {severity}: {message}{tail}", at("line"), at("character"))
}

/// A `file://` URI of an absolute path.
fn uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for byte in path.to_string_lossy().bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(char::from(byte));
            }
            _ => uri.push_str(&format!("%{byte:02X}")),
        }
    }
    uri
}

/// The tool's spec, built once.
pub fn spec() -> ToolSpec {
    static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        super::builtin_spec::<Args>(
            NAME,
            "Checks files with the language server configured for their language and returns \
             its diagnostics, one per line: `file:line:column: severity: message [source \
             code]`. Call it again after an edit to see what is left.",
        )
    })
    .clone()
}

#[async_trait]
impl ToolSource for LanguageServers {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec()]
    }

    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        let Some(trace) = context.trace_id.clone() else {
            return ToolResult::error(format!("Error: `{NAME}` works only inside a run"));
        };
        let args: Args = match serde_json::from_str(&call.arguments) {
            Ok(args) => args,
            Err(e) => return ToolResult::error(format!("Error: invalid {NAME} arguments: {e}")),
        };
        if args.files.is_empty() || args.files.len() > MAX_FILES {
            return ToolResult::error(format!("Error: name 1 to {MAX_FILES} files"));
        }
        let mut out = Vec::new();
        let mut failed = 0;
        for file in &args.files {
            match self.check(&trace, file).await {
                Ok(lines) => out.push(lines),
                Err(e) => {
                    failed += 1;
                    out.push(format!("Error: {e}"));
                }
            }
        }
        let text = out.join("\n");
        if failed == args.files.len() { ToolResult::error(text) } else { ToolResult::text(text) }
    }

    fn needs_run(&self) -> bool {
        true
    }

    async fn run_ended(&self, trace_id: &str) {
        let ended: Vec<Arc<Running>> = {
            let mut running = self.running.lock().await;
            let keys: Vec<_> = running.keys().filter(|(t, _)| t == trace_id).cloned().collect();
            keys.iter().filter_map(|k| running.remove(k)).collect()
        };
        for server in ended {
            // A polite end first, then a kill; the run ends once the
            // server is gone (dropping the jail's guard kills the rest).
            let _ = server.client.request("shutdown", Value::Null, END).await;
            let _ = server.client.notify("exit", Value::Null).await;
            let mut child = server.child.lock().await;
            if tokio::time::timeout(END, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_read_as_lines_and_paths_as_uris() {
        let d = json!({ "range": { "start": { "line": 0, "character": 4 } }, "severity": 2,
            "message": "'os' imported but unused", "source": "pyflakes" });
        assert_eq!(line("a.py", &d), "a.py:1:5: warning: 'os' imported but unused [pyflakes]");
        let e = json!({ "range": { "start": { "line": 9, "character": 0 } }, "severity": 1, "message": "bad\nthing", "code": 12 });
        assert_eq!(line("b.rs", &e), "b.rs:10:1: error: bad thing [12]");
        assert_eq!(uri(Path::new("/a b/c#d.py")), "file:///a%20b/c%23d.py");
    }
}
