//! The effective grants of one plugin.

use super::command::{self, CommandError, ResolvedCommand, SearchPath};
use super::patterns::{CommandPattern, PatternError, UrlPattern};
use crate::config::{Access, JailMode, Limits, PluginGrant, SandboxConfig};
use crate::jail::{DEFAULT_MAX_PROCESSES, Jail, JailDir, JailSpec, NetworkRule, NetworkRuleError};
use crate::manifest::Manifest;
use reqwest::Url;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_MEMORY_MB: u64 = 64;
const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;

/// A directory preopened for the plugin.
#[derive(Debug, Clone, Serialize)]
pub struct MountedDir {
    /// Host path (canonical).
    pub host: PathBuf,
    /// Path the guest sees.
    pub guest: String,
    /// The lesser of the requested and the granted access.
    pub access: Access,
    /// What commands may do to `.git` and `.reson` in it.
    pub metadata: Access,
}

/// Limits in force for every call of the plugin.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EffectiveLimits {
    /// Wall-clock deadline of one call.
    pub timeout: Duration,
    /// Linear memory cap in bytes.
    pub memory_bytes: u64,
    /// Fuel per call, when fuel is on.
    pub fuel: Option<u64>,
    /// Cap on returned bytes.
    pub output_bytes: u64,
    /// Processes and threads a call's commands may hold at once.
    pub max_processes: u32,
}

/// What one plugin may do: requested ∩ granted. Deny by default: an empty
/// grant yields no directories, hosts, commands or secrets.
#[derive(Debug, Clone, Serialize)]
pub struct Grants {
    /// Preopened directories.
    pub dirs: Vec<MountedDir>,
    /// URL patterns both requested and granted (a URL must match one of each).
    pub http: Vec<String>,
    /// Browser URL patterns both requested and granted.
    pub browser: Vec<String>,
    /// Command patterns both requested and granted.
    pub process: Vec<String>,
    /// Environment variables a command may be given beyond the safe
    /// built-in set (locale, time zone, display hints).
    pub env: Vec<String>,
    /// Programs whose exec-vector invocations (`git -c`, `find -exec`, ...)
    /// may run when a granted pattern matches them.
    pub exec_vectors: Vec<String>,
    /// `host:port` pairs the plugin's commands may reach through the
    /// jail's proxy.
    pub command_network: Vec<String>,
    /// Whether commands run jailed.
    pub jail: JailMode,
    /// Secret names both requested and granted.
    pub secrets: Vec<String>,
    /// Tools offered; all when `None`.
    pub tools: Option<Vec<String>>,
    /// Limits per call.
    pub limits: EffectiveLimits,
    /// Non-secret settings.
    pub config: BTreeMap<String, String>,
    #[serde(skip)]
    url_requested: Vec<UrlPattern>,
    #[serde(skip)]
    url_granted: Vec<UrlPattern>,
    #[serde(skip)]
    browser_requested: Vec<UrlPattern>,
    #[serde(skip)]
    browser_granted: Vec<UrlPattern>,
    #[serde(skip)]
    cmd_requested: Vec<CommandPattern>,
    #[serde(skip)]
    cmd_granted: Vec<CommandPattern>,
    #[serde(skip)]
    search_path: SearchPath,
    #[serde(skip)]
    network_rules: Vec<NetworkRule>,
    #[serde(skip)]
    bwrap: PathBuf,
    #[serde(skip)]
    spare_jails: bool,
}

/// The path a guest sees for the host directory `host` granted at its own
/// path: the same string on Unix. WASI paths are `/`-separated from one
/// root, so on Windows `C:\Users\me` (or `\\?\C:\Users\me`, the
/// verbatim form `canonicalize` gives) is `/C:/Users/me`.
pub fn guest_path(host: &std::path::Path) -> String {
    guest_path_of(&host.to_string_lossy(), cfg!(windows))
}

fn guest_path_of(host: &str, windows: bool) -> String {
    if !windows {
        return host.to_owned();
    }
    let plain = match host.strip_prefix(r"\\?\UNC\") {
        Some(share) => format!(r"\\{share}"),
        None => host.strip_prefix(r"\\?\").unwrap_or(host).to_owned(),
    };
    let slashed = plain.replace('\\', "/");
    if slashed.starts_with('/') { slashed } else { format!("/{slashed}") }
}

impl Grants {
    /// Intersects a manifest's requests with the user's grant. `resolve`
    /// turns a granted path into a host path (relative to the config file).
    pub fn intersect(
        manifest: &Manifest,
        grant: &PluginGrant,
        sandbox: &SandboxConfig,
        resolve: impl Fn(&std::path::Path) -> PathBuf,
    ) -> Result<Self, GrantError> {
        let requests = &manifest.requests;
        let mut dirs = Vec::new();
        for dir in &grant.dirs {
            let access = dir.access.min(requests.dirs);
            if access == Access::None {
                continue;
            }
            let host = resolve(&dir.path);
            let host = host
                .canonicalize()
                .map_err(|e| GrantError::Dir { path: host.clone(), reason: e.to_string() })?;
            let guest = dir.mount.clone().unwrap_or_else(|| guest_path(&host));
            let metadata = dir.metadata.min(access);
            dirs.push(MountedDir { host, guest, access, metadata });
        }
        let both = |req: &[String], granted: &[String]| -> Vec<String> {
            if req.is_empty() || granted.is_empty() { Vec::new() } else { granted.to_vec() }
        };
        let parse_urls = |list: &[String]| -> Result<Vec<UrlPattern>, PatternError> {
            list.iter().map(|p| UrlPattern::parse(p)).collect()
        };
        let parse_cmds = |list: &[String]| -> Result<Vec<CommandPattern>, PatternError> {
            list.iter().map(|p| CommandPattern::parse(p)).collect()
        };
        Ok(Self {
            dirs,
            http: both(&requests.http, &grant.http),
            browser: both(&requests.browser, &grant.browser),
            process: both(&requests.process, &grant.process),
            env: grant.env.clone(),
            exec_vectors: grant.exec_vectors.clone(),
            command_network: grant.command_network.clone(),
            jail: sandbox.jail,
            secrets: grant
                .secrets
                .iter()
                .filter(|s| requests.secrets.contains(s))
                .cloned()
                .collect(),
            tools: grant.tools.clone(),
            limits: effective_limits(&manifest.limits, &granted_limits(grant), sandbox),
            config: grant.config.clone(),
            url_requested: parse_urls(&requests.http)?,
            url_granted: parse_urls(&grant.http)?,
            browser_requested: parse_urls(&requests.browser)?,
            browser_granted: parse_urls(&grant.browser)?,
            cmd_requested: parse_cmds(&requests.process)?,
            cmd_granted: parse_cmds(&grant.process)?,
            search_path: sandbox.search_path()?,
            network_rules: grant
                .command_network
                .iter()
                .map(|rule| NetworkRule::parse(rule))
                .collect::<Result<_, _>>()?,
            bwrap: sandbox.bwrap.clone(),
            spare_jails: sandbox.spare_jails,
        })
    }

    /// Whether the grant lets the plugin start any command.
    pub fn runs_commands(&self) -> bool {
        !self.cmd_granted.is_empty()
    }

    /// The jail commands run in, or `None` when `[sandbox] jail = "off"`.
    pub fn jail(&self) -> Option<Jail> {
        (self.jail == JailMode::On).then(|| Jail::new(&self.bwrap).spares(self.spare_jails))
    }

    /// What the plugin's commands may touch, in words, for `plugins list`.
    pub fn command_reach(&self) -> String {
        if self.jail == JailMode::Off {
            return "UNJAILED ([sandbox] jail = \"off\"): all of the host's rights".into();
        }
        let dirs: Vec<String> = self
            .dirs
            .iter()
            .map(|d| match (d.access, d.metadata) {
                (Access::ReadWrite, Access::ReadWrite) => {
                    format!("{} (read-write)", d.host.display())
                }
                (Access::ReadWrite, _) => {
                    format!("{} (read-write; .git, .reson read-only)", d.host.display())
                }
                _ => format!("{} (read)", d.host.display()),
            })
            .collect();
        let dirs =
            if dirs.is_empty() { "no granted directory".to_owned() } else { dirs.join(", ") };
        let network = if self.command_network.is_empty() {
            "no network".to_owned()
        } else {
            format!("network to {} only (proxy)", self.command_network.join(", "))
        };
        format!(
            "jailed: {dirs}; system programs and /etc read-only; a private /tmp; {network}; at \
             most {} processes",
            self.limits.max_processes
        )
    }

    /// What a command started in `cwd` may reach inside the jail: the
    /// granted directories as granted, the search path, the granted hosts.
    pub fn jail_spec(&self, cwd: PathBuf) -> JailSpec {
        JailSpec {
            dirs: self
                .dirs
                .iter()
                .map(|d| JailDir {
                    path: d.host.clone(),
                    writable: d.access == Access::ReadWrite,
                    metadata_writable: d.metadata == Access::ReadWrite,
                })
                .collect(),
            search_path: self.search_path.entries().to_vec(),
            network: self.network_rules.clone(),
            max_processes: self.limits.max_processes,
            cwd,
        }
    }

    /// Whether the plugin may send a request to `url`.
    pub fn allows_url(&self, url: &Url) -> bool {
        self.url_requested.iter().any(|p| p.matches(url))
            && self.url_granted.iter().any(|p| p.matches(url))
    }

    /// Whether the host's browser may load `url` for the plugin, or why
    /// not. Only `http`, `https`, `ws` and `wss` URLs are ever loaded (a
    /// WebSocket URL matches the patterns of its HTTP scheme), and a
    /// loopback host only when a granted pattern names that host exactly:
    /// `*` is not taken to mean the host's own services.
    pub fn browser_allows(&self, url: &Url) -> Result<(), String> {
        let as_http = match url.scheme() {
            "http" | "https" => url.clone(),
            // `ws://` becomes `http://`, `wss://` `https://`.
            "ws" | "wss" => {
                Url::parse(&url.as_str().replacen("ws", "http", 1)).map_err(|e| e.to_string())?
            }
            scheme => return Err(format!("the `{scheme}:` scheme is never loaded")),
        };
        let requested = self.browser_requested.iter().any(|p| p.matches(&as_http));
        let granted = self.browser_granted.iter().filter(|p| p.matches(&as_http));
        let mut granted = granted.peekable();
        if !requested || granted.peek().is_none() {
            return Err("not in the plugin's browser grant".into());
        }
        if as_http.host_str().is_some_and(is_loopback) && !granted.any(UrlPattern::names_one_host) {
            return Err("a loopback host is loaded only when a grant names it exactly".into());
        }
        Ok(())
    }

    /// Whether the host's browser may connect to `host:port` at all: the
    /// check of a proxy that sees a `CONNECT` and no URL.
    pub fn browser_allows_authority(&self, host: &str, port: u16) -> bool {
        let loopback = is_loopback(host);
        self.browser_requested.iter().any(|p| p.matches_authority(host, port))
            && self
                .browser_granted
                .iter()
                .any(|p| p.matches_authority(host, port) && (!loopback || p.names_one_host()))
    }

    /// Whether `url` is granted by a pattern that names its host exactly:
    /// where a secret bound to no URL of its own may go.
    pub fn grants_host_exactly(&self, url: &Url) -> bool {
        self.allows_url(url)
            && self.url_granted.iter().any(|p| p.names_one_host() && p.matches(url))
    }

    /// The command `program args...` as it will run, if the plugin may run
    /// it: the program resolves on the fixed search path (or is an absolute
    /// path outside every granted directory), its canonical line matches a
    /// pattern both requested and granted, and it is no exec vector unless
    /// `exec_vectors` names its program.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
    ) -> Result<ResolvedCommand, CommandDenial> {
        let confined: Vec<PathBuf> = self.dirs.iter().map(|d| d.host.clone()).collect();
        let resolved = command::resolve(program, args, &self.search_path, &confined)?;
        let line = resolved.line();
        if !(self.cmd_requested.iter().any(|p| p.matches(&line))
            && self.cmd_granted.iter().any(|p| p.matches(&line)))
        {
            return Err(CommandDenial::NoPattern { line });
        }
        if let Some(vector) = command::exec_vector(&resolved) {
            let invoked = std::path::Path::new(&resolved.argv[0])
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            let allowed = self.allows_exec_vector(vector.program)
                || invoked.is_some_and(|name| self.allows_exec_vector(&name));
            if !allowed {
                return Err(CommandDenial::ExecVector {
                    line,
                    program: vector.program,
                    reason: vector.reason,
                });
            }
        }
        Ok(resolved)
    }

    /// Whether `exec_vectors` names `program`.
    pub fn allows_exec_vector(&self, program: &str) -> bool {
        self.exec_vectors.iter().any(|p| p == program)
    }

    /// Whether a command may be given the environment variable `name`.
    pub fn allows_env(&self, name: &str) -> bool {
        command::env_allowed(name, &self.env)
    }

    /// The fixed search path programs are resolved against.
    pub fn search_path(&self) -> &SearchPath {
        &self.search_path
    }

    /// Whether the plugin may reference the secret `name`.
    pub fn allows_secret(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s == name)
    }

    /// Whether `tool` is offered.
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.iter().any(|t| t == tool))
    }
}

/// Whether `host` names this machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// The grant's limits, with its top-level `max_processes` folded in.
fn granted_limits(grant: &PluginGrant) -> Limits {
    let max_processes = match (grant.limits.max_processes, grant.max_processes) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Limits { max_processes, ..grant.limits.clone() }
}

fn effective_limits(
    requested: &Limits,
    granted: &Limits,
    sandbox: &SandboxConfig,
) -> EffectiveLimits {
    let pick = |r: Option<u64>, g: Option<u64>, d: Option<u64>| match (r, g) {
        (Some(r), Some(g)) => Some(r.min(g)),
        (r, g) => r.or(g).or(d),
    };
    let defaults = &sandbox.defaults;
    let memory_mb = pick(requested.memory_mb, granted.memory_mb, defaults.memory_mb)
        .unwrap_or(DEFAULT_MEMORY_MB)
        .min(sandbox.max_memory_mb);
    EffectiveLimits {
        timeout: Duration::from_millis(
            pick(requested.timeout_ms, granted.timeout_ms, defaults.timeout_ms)
                .unwrap_or(DEFAULT_TIMEOUT_MS),
        ),
        memory_bytes: memory_mb << 20,
        fuel: pick(requested.fuel, granted.fuel, defaults.fuel).filter(|_| sandbox.fuel),
        output_bytes: pick(requested.output_bytes, granted.output_bytes, defaults.output_bytes)
            .unwrap_or(DEFAULT_OUTPUT_BYTES),
        max_processes: pick(
            requested.max_processes.map(u64::from),
            granted.max_processes.map(u64::from),
            defaults.max_processes.map(u64::from),
        )
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(DEFAULT_MAX_PROCESSES),
    }
}

/// A grant that cannot be applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GrantError {
    /// A granted directory does not exist or cannot be resolved.
    #[error("granted directory {path} cannot be used: {reason}")]
    Dir {
        /// The path as resolved.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A pattern is malformed.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// The sandbox's command search path is unusable.
    #[error("[sandbox] {0}")]
    SearchPath(#[from] CommandError),
    /// A `command_network` entry is malformed.
    #[error("command_network: {0}")]
    Network(#[from] NetworkRuleError),
}

/// Why a plugin may not run a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandDenial {
    /// The program does not resolve to one the host would run.
    #[error(transparent)]
    Unresolved(#[from] CommandError),
    /// No pattern both requested and granted matches the command.
    #[error("`{line}` matches no command pattern both requested and granted")]
    NoPattern {
        /// The canonical command line.
        line: String,
    },
    /// The command can run a program of the caller's choosing.
    #[error(
        "`{line}` is refused: {program}: {reason}; a grant allows that only with \
         `exec_vectors = [\"{program}\"]`"
    )]
    ExecVector {
        /// The canonical command line.
        line: String,
        /// The program family, as `exec_vectors` names it.
        program: &'static str,
        /// What would run another program.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DirGrant;
    use crate::manifest::Requests;

    fn manifest(requests: Requests, limits: Limits) -> Manifest {
        Manifest {
            name: "p".into(),
            version: "1".into(),
            description: String::new(),
            requests,
            limits,
            instance: Default::default(),
        }
    }

    #[test]
    fn guest_paths_are_host_paths_on_unix_and_slashed_from_one_root_on_windows() {
        assert_eq!(guest_path_of("/home/me/ws", false), "/home/me/ws");
        assert_eq!(guest_path_of(r"\\?\C:\Users\me\ws", true), "/C:/Users/me/ws");
        assert_eq!(guest_path_of(r"C:\Users\me", true), "/C:/Users/me");
        assert_eq!(guest_path_of(r"\\?\UNC\server\share\ws", true), "//server/share/ws");
    }

    fn grants(requests: Requests, grant: PluginGrant) -> Grants {
        Grants::intersect(
            &manifest(requests, Limits::default()),
            &grant,
            &SandboxConfig::default(),
            |p| p.to_path_buf(),
        )
        .unwrap()
    }

    fn allows(g: &Grants, line: &str) -> bool {
        let words = command::split(line).unwrap();
        g.command(&words[0], &words[1..]).is_ok()
    }

    #[test]
    fn nothing_granted_means_nothing_allowed() {
        let g = grants(
            Requests {
                dirs: Access::ReadWrite,
                http: vec!["example.com".into()],
                process: vec!["*".into()],
                secrets: vec!["KEY".into()],
                ..Requests::default()
            },
            PluginGrant::default(),
        );
        assert!(g.dirs.is_empty());
        assert!(!g.allows_url(&Url::parse("https://example.com/").unwrap()));
        assert!(!allows(&g, "ls"));
        assert!(!g.allows_secret("KEY"));
    }

    #[test]
    fn granted_but_not_requested_is_not_allowed() {
        let tmp = tempfile::tempdir().unwrap();
        let grant = PluginGrant {
            dirs: vec![DirGrant {
                path: tmp.path().into(),
                access: Access::ReadWrite,
                mount: None,
                metadata: Access::Read,
            }],
            http: vec!["example.com".into()],
            process: vec!["*".into()],
            secrets: vec!["KEY".into()],
            ..PluginGrant::default()
        };
        let g = grants(Requests::default(), grant);
        assert!(g.dirs.is_empty());
        assert!(!g.allows_url(&Url::parse("https://example.com/").unwrap()));
        assert!(!allows(&g, "ls"));
        assert!(!g.allows_secret("KEY"));
    }

    #[test]
    fn intersection_takes_the_narrower_side() {
        let tmp = tempfile::tempdir().unwrap();
        let grant = PluginGrant {
            dirs: vec![DirGrant {
                path: tmp.path().into(),
                access: Access::ReadWrite,
                mount: None,
                metadata: Access::Read,
            }],
            http: vec!["*.example.com".into()],
            process: vec!["git *".into()],
            secrets: vec!["KEY".into(), "OTHER".into()],
            ..PluginGrant::default()
        };
        let requests = Requests {
            dirs: Access::Read,
            http: vec!["api.example.com/v1".into()],
            process: vec!["*".into()],
            secrets: vec!["KEY".into()],
            ..Requests::default()
        };
        let g = grants(requests, grant);
        assert_eq!(g.dirs[0].access, Access::Read);
        assert!(g.allows_url(&Url::parse("https://api.example.com/v1/x").unwrap()));
        assert!(!g.allows_url(&Url::parse("https://api.example.com/v2").unwrap()));
        assert!(!g.allows_url(&Url::parse("https://www.example.com/v1").unwrap()));
        // Windows has no default search path to find git on.
        #[cfg(unix)]
        assert!(allows(&g, "git status") && !allows(&g, "ls"));
        assert!(g.allows_secret("KEY") && !g.allows_secret("OTHER"));
    }

    #[test]
    fn max_processes_is_granted_in_limits_or_beside_them_and_the_tighter_holds() {
        let top = PluginGrant { max_processes: Some(8), ..PluginGrant::default() };
        assert_eq!(grants(Requests::default(), top.clone()).limits.max_processes, 8);
        let both =
            PluginGrant { limits: Limits { max_processes: Some(4), ..Limits::default() }, ..top };
        assert_eq!(grants(Requests::default(), both).limits.max_processes, 4);
        let none = grants(Requests::default(), PluginGrant::default());
        assert_eq!(none.limits.max_processes, DEFAULT_MAX_PROCESSES);
    }

    #[test]
    fn limits_take_the_tighter_value_then_defaults() {
        let sandbox = SandboxConfig { max_memory_mb: 128, ..SandboxConfig::default() };
        let requested =
            Limits { timeout_ms: Some(5_000), memory_mb: Some(512), ..Limits::default() };
        let granted = Limits { timeout_ms: Some(1_000), ..Limits::default() };
        let l = effective_limits(&requested, &granted, &sandbox);
        assert_eq!(l.timeout, Duration::from_secs(1));
        assert_eq!(l.memory_bytes, 128 << 20);
        assert_eq!(l.output_bytes, DEFAULT_OUTPUT_BYTES);
        assert_eq!(l.fuel, None);
    }

    #[test]
    fn browser_grants_check_scheme_pattern_and_loopback() {
        let requests = Requests { browser: vec!["*".into()], ..Requests::default() };
        let grant = PluginGrant {
            browser: vec![
                "https://docs.example.org/guide/*".into(),
                "http://127.0.0.1:8080/*".into(),
                "*.wide.example".into(),
            ],
            ..PluginGrant::default()
        };
        let g = grants(requests.clone(), grant);
        let ok = |u: &str| g.browser_allows(&Url::parse(u).unwrap());
        assert!(ok("https://docs.example.org/guide/intro").is_ok());
        assert!(ok("wss://docs.example.org/guide/socket").is_ok(), "a WebSocket URL as https");
        assert!(ok("https://docs.example.org/other").is_err());
        assert!(ok("http://docs.example.org/guide/intro").is_err(), "the scheme is part of it");
        assert!(ok("http://127.0.0.1:8080/form").is_ok(), "loopback named exactly");
        assert!(ok("http://127.0.0.1:8081/").is_err());
        assert!(ok("file:///etc/passwd").unwrap_err().contains("file:"));
        assert!(ok("data:text/html,hi").is_err());
        assert!(ok("https://a.wide.example/").is_ok());
        assert!(g.browser_allows_authority("docs.example.org", 443));
        assert!(!g.browser_allows_authority("other.example.org", 443));
        assert!(g.browser_allows_authority("127.0.0.1", 8080));
        assert!(!g.browser_allows_authority("127.0.0.1", 9));

        let any = PluginGrant { browser: vec!["*".into()], ..PluginGrant::default() };
        let g = grants(requests, any);
        assert!(g.browser_allows(&Url::parse("https://example.com/").unwrap()).is_ok());
        let local = g.browser_allows(&Url::parse("http://localhost:3000/").unwrap());
        assert!(local.unwrap_err().contains("loopback"), "`*` does not reach the host itself");
        assert!(!g.browser_allows_authority("127.0.0.1", 80));

        let g = grants(
            Requests::default(),
            PluginGrant { browser: vec!["*".into()], ..PluginGrant::default() },
        );
        assert!(
            g.browser_allows(&Url::parse("https://example.com/").unwrap()).is_err(),
            "not requested"
        );
    }
}
