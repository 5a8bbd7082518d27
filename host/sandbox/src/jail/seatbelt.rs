//! The macOS jail: `sandbox-exec` with a Seatbelt profile generated from
//! the grant, as Codex and Claude Code jail commands there.
//!
//! The profile denies by default and allows: running programs and forking
//! (children inherit the profile), reading the system's programs and
//! libraries and the search path, reading the granted directories and
//! writing the writable ones except any `.git` or `.reson` in them, a
//! private temporary directory, the few device files every program uses,
//! signals and process information only within the jail, and, when the
//! grant names hosts, connections to the host's proxy on loopback and
//! nowhere else. Paths reach the profile as `-D` parameters, never spliced
//! into its text, so no path can change what the profile says.
//!
//! What Seatbelt cannot do that the Linux jail does: cap the number of
//! processes, and hide the host's other processes' existence from `ps`
//! (their details and signals are refused). Nothing here can run on the
//! machines Reson is built on; `reson sandbox check` runs the escape probes
//! on the Mac itself.

use super::{JailError, JailSpec, PRIVATE_TMP, proxy};
use std::path::{Path, PathBuf};
use tokio::task::JoinSet;

/// Where macOS keeps `sandbox-exec`.
const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// System directories every program needs to read (`/etc` is
/// `/private/etc`, `/var` `/private/var` on macOS).
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/System",
    "/Library/Apple",
    "/private/etc",
    "/private/var/db/timezone",
    // `/bin/sh` is a shim that runs the shell this link names.
    "/private/var/select",
    // `make`, `git`, `cc` in /usr/bin are shims that run the developer
    // tools this link names.
    "/private/var/db/xcode_select_link",
    "/Library/Developer/CommandLineTools",
];

/// Device files programs open as a matter of course.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/tty"];

/// The fixed part of every profile.
const BASE: &str = r#"(version 1)
(deny default)
; Programs may run programs and fork; every child inherits this profile.
(allow process-exec process-fork)
; Signals and process details only within the jail.
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
; User and group names (getpwuid), which shells and git ask for.
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))
(allow file-read-metadata (literal "/") (literal "/private") (literal "/private/var"))
(allow file-read* file-write-data (literal "/dev/dtracehelper"))
(allow file-ioctl (regex #"^/dev/tty"))
"#;

/// `sandbox-exec` missing is the one thing to say before any probe.
#[cfg(target_os = "macos")]
pub(super) fn missing(_bwrap: &Path) -> Option<JailError> {
    (!super::is_executable(Path::new(SANDBOX_EXEC))).then(|| JailError::MissingLauncher {
        name: "sandbox-exec",
        path: PathBuf::from(SANDBOX_EXEC),
        fix: "it ships with macOS",
    })
}

/// What a jailed command holds on the host besides the process.
#[derive(Debug)]
pub(super) struct Guard {
    // Field order is drop order: the proxy stops before the private
    // directory is removed.
    _proxy: JoinSet<()>,
    _tmp: tempfile::TempDir,
}

#[cfg(target_os = "macos")]
impl Guard {
    pub(super) fn spawn_error(&self, error: std::io::Error) -> JailError {
        JailError::Io(error)
    }
}

/// `sandbox-exec` running `executable` under the profile for `spec`.
pub(super) fn build(
    _bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
) -> Result<(tokio::process::Command, Guard), JailError> {
    let tmp = tempfile::Builder::new().prefix("reson-jail-").tempdir()?;
    // The profile matches real paths; the temporary directory's usually
    // lies behind the `/var` link.
    let tmp_path = tmp.path().canonicalize()?;
    let mut tasks = JoinSet::new();
    let proxy_port = if spec.network.is_empty() {
        None
    } else {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let rules = std::sync::Arc::new(spec.network.clone());
        tasks.spawn(proxy::serve(listener, rules));
        Some(port)
    };
    let profile = Profile::new(spec, &tmp_path, executable, proxy_port);
    let cwd = if spec.cwd == Path::new(PRIVATE_TMP) { tmp_path.clone() } else { spec.cwd.clone() };
    let proxy_address = proxy_port.map(|port| format!("127.0.0.1:{port}"));
    let mut command = tokio::process::Command::new(SANDBOX_EXEC);
    command
        .args(profile.arguments())
        .arg("--")
        .arg(executable)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(super::jail_env(spec, env, &tmp_path, proxy_address.as_deref()));
    Ok((command, Guard { _proxy: tasks, _tmp: tmp }))
}

/// A generated profile: its text and the parameters it reads.
#[derive(Debug, PartialEq, Eq)]
struct Profile {
    text: String,
    params: Vec<(String, PathBuf)>,
}

impl Profile {
    fn new(spec: &JailSpec, tmp: &Path, executable: &Path, proxy_port: Option<u16>) -> Self {
        let mut profile = Self { text: BASE.to_owned(), params: Vec::new() };
        let system = SYSTEM_READ.iter().map(PathBuf::from);
        let search = spec.search_path.iter().cloned();
        for dir in system.chain(search).chain(std::iter::once(executable.to_path_buf())) {
            let name = profile.param("READ", dir);
            profile.rule(&format!("(allow file-read* (subpath (param \"{name}\")))"));
        }
        for device in DEVICES {
            let name = profile.param("DEVICE", PathBuf::from(device));
            profile
                .rule(&format!("(allow file-read* file-write-data (literal (param \"{name}\")))"));
        }
        let tmp_name = profile.param("TMP", tmp.to_path_buf());
        profile.rule(&format!("(allow file-read* file-write* (subpath (param \"{tmp_name}\")))"));
        let mut ancestors: Vec<PathBuf> = Vec::new();
        for dir in &spec.dirs {
            let name = profile.param("DIR", dir.path.clone());
            profile.rule(&format!("(allow file-read* (subpath (param \"{name}\")))"));
            if dir.writable {
                // Hooks and config in repository metadata run later,
                // outside any call: kept read-only at any depth unless the
                // grant says otherwise.
                let metadata = if dir.metadata_writable {
                    ""
                } else {
                    " (require-not (regex #\"/\\.(git|reson)(/|$)\"))"
                };
                profile.rule(&format!(
                    "(allow file-write* (require-all (subpath (param \"{name}\")){metadata}))"
                ));
            }
            ancestors.extend(dir.path.ancestors().skip(1).map(Path::to_path_buf));
        }
        ancestors.extend(tmp.ancestors().skip(1).map(Path::to_path_buf));
        ancestors.sort();
        ancestors.dedup();
        // Finding a granted directory means looking each of its parents
        // up, which needs their metadata, not their listing.
        for dir in ancestors {
            let name = profile.param("PARENT", dir);
            profile.rule(&format!("(allow file-read-metadata (literal (param \"{name}\")))"));
        }
        if let Some(port) = proxy_port {
            profile.rule(&format!("(allow network-outbound (remote ip \"localhost:{port}\"))"));
        }
        profile
    }

    /// Adds `path` as a new parameter and returns its name.
    fn param(&mut self, kind: &str, path: PathBuf) -> String {
        let name = format!("{kind}_{}", self.params.len());
        self.params.push((name.clone(), path));
        name
    }

    fn rule(&mut self, rule: &str) {
        self.text.push_str(rule);
        self.text.push('\n');
    }

    /// `sandbox-exec`'s arguments before the command.
    fn arguments(&self) -> Vec<std::ffi::OsString> {
        let mut args = vec!["-p".into(), self.text.clone().into()];
        for (name, path) in &self.params {
            let mut define = std::ffi::OsString::from(format!("-D{name}="));
            define.push(path);
            args.push(define);
        }
        args
    }

    /// The rules whose parameter is `path`, with the parameter written
    /// `PARAM`.
    #[cfg(test)]
    fn rules_for(&self, path: &Path) -> Vec<String> {
        let names: Vec<String> = self
            .params
            .iter()
            .filter(|(_, p)| p == path)
            .map(|(n, _)| format!("(param \"{n}\")"))
            .collect();
        self.text
            .lines()
            .filter_map(|line| {
                let name = names.iter().find(|n| line.contains(n.as_str()))?;
                Some(line.replace(name.as_str(), "PARAM"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jail::{JailDir, NetworkRule};

    fn spec(dirs: Vec<JailDir>, network: Vec<NetworkRule>) -> JailSpec {
        JailSpec {
            dirs,
            search_path: vec![PathBuf::from("/opt/homebrew/bin")],
            network,
            max_processes: 64,
            cwd: PathBuf::from("/Users/me/project"),
        }
    }

    fn dir(path: &str, writable: bool, metadata_writable: bool) -> JailDir {
        JailDir { path: PathBuf::from(path), writable, metadata_writable }
    }

    #[test]
    fn denies_by_default_and_grants_only_what_the_spec_names() {
        let spec = spec(
            vec![dir("/Users/me/project", true, false), dir("/Users/me/docs", false, false)],
            Vec::new(),
        );
        let tmp = Path::new("/private/var/folders/xy/T/reson-jail-1");
        let profile = Profile::new(&spec, tmp, Path::new("/usr/bin/make"), None);
        assert!(profile.text.starts_with("(version 1)\n(deny default)\n"), "{}", profile.text);
        assert_eq!(
            profile.rules_for(Path::new("/Users/me/project")),
            [
                r#"(allow file-read* (subpath PARAM))"#,
                r#"(allow file-write* (require-all (subpath PARAM) (require-not (regex #"/\.(git|reson)(/|$)"))))"#,
            ]
        );
        assert_eq!(
            profile.rules_for(Path::new("/Users/me/docs")),
            [r#"(allow file-read* (subpath PARAM))"#],
            "a read-only grant is never writable"
        );
        assert_eq!(profile.rules_for(tmp), [r#"(allow file-read* file-write* (subpath PARAM))"#]);
        assert_eq!(
            profile.rules_for(Path::new("/Users/me")),
            [r#"(allow file-read-metadata (literal PARAM))"#],
            "a grant's parents may be looked up, not listed or read"
        );
        assert_eq!(
            profile.rules_for(Path::new("/opt/homebrew/bin")),
            [r#"(allow file-read* (subpath PARAM))"#]
        );
        assert!(profile.rules_for(Path::new("/Users")).iter().all(|r| r.contains("metadata")));
        assert!(!profile.text.contains("network"), "no network without a rule: {}", profile.text);
        assert!(!profile.text.contains("/Users"), "paths are parameters, never profile text");
    }

    #[test]
    fn metadata_is_writable_only_where_the_grant_says() {
        let spec = spec(vec![dir("/Users/me/project", true, true)], Vec::new());
        let profile = Profile::new(&spec, Path::new("/tmp/x"), Path::new("/usr/bin/git"), None);
        let rules = profile.rules_for(Path::new("/Users/me/project"));
        assert_eq!(rules.len(), 2);
        assert!(!rules[1].contains("require-not"), "{rules:?}");
    }

    #[test]
    fn the_network_is_the_proxy_on_loopback_and_nothing_else() {
        let rules = vec![NetworkRule::parse("crates.io:443").unwrap()];
        let spec = spec(vec![dir("/Users/me/project", true, false)], rules);
        let profile =
            Profile::new(&spec, Path::new("/tmp/x"), Path::new("/usr/bin/curl"), Some(4567));
        let network: Vec<&str> = profile.text.lines().filter(|l| l.contains("network")).collect();
        assert_eq!(network, [r#"(allow network-outbound (remote ip "localhost:4567"))"#]);
    }

    #[test]
    fn a_path_cannot_rewrite_the_profile() {
        let hostile = r#"/Users/me/x")) (allow default) ; ("#;
        let spec = spec(vec![dir(hostile, true, false)], Vec::new());
        let profile = Profile::new(&spec, Path::new("/tmp/x"), Path::new("/bin/sh"), None);
        assert!(!profile.text.contains("allow default"), "{}", profile.text);
        assert_eq!(profile.rules_for(Path::new(hostile)).len(), 2);
        let args = profile.arguments();
        assert_eq!(args[0], "-p");
        assert!(args.iter().any(|a| a.to_string_lossy().ends_with(&format!("={hostile}"))));
    }

    #[test]
    fn the_command_runs_under_sandbox_exec_in_a_private_tmp() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _entered = rt.enter();
        let mut spec = spec(vec![dir("/Users/me/project", true, false)], Vec::new());
        spec.cwd = PathBuf::from(PRIVATE_TMP);
        let env = [("LANG".to_owned(), "C".to_owned())];
        let (command, guard) =
            build(Path::new("/unused"), &spec, Path::new("/usr/bin/make"), &["-s".into()], &env)
                .unwrap();
        let command = command.as_std();
        assert_eq!(command.get_program(), SANDBOX_EXEC);
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let end = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(args[end + 1..], ["/usr/bin/make", "-s"]);
        let tmp = guard._tmp.path().canonicalize().unwrap();
        assert_eq!(command.get_current_dir(), Some(tmp.as_path()));
        let envs: Vec<_> =
            command.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        assert!(envs.contains(&("TMPDIR".into(), Some(tmp.clone().into()))), "{envs:?}");
        assert!(envs.contains(&("LANG".into(), Some("C".into()))), "{envs:?}");
    }
}
