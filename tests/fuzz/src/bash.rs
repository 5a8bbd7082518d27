//! What bash itself would run for a command line: a real bash, in a jail,
//! whose every command (builtins and keywords' commands included) reports
//! its argv instead of running.
//!
//! One jailed driver reads NUL-separated lines and gives each to a fresh
//! `bash -c` whose prelude defines a function for every builtin and
//! `command_not_found_handle` (the search path is empty): each command that
//! bash would start writes `\x01`, then each argv word ended by `\x02`, on
//! fd 3. A program named by its path is caught too: in the jail every file
//! of the host's program directories is a link to a script that does the
//! same with its `$0` and arguments. The driver ends a line's answer with
//! `\x03`. The jail (bubblewrap: a read-only root, a private /tmp, no
//! network) keeps anything a line would do inside it. Its working directory
//! holds files named `a`, `b`, `a b`, `.h` and `d/`, so globs match
//! something, as in a real workspace.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The home directory bash sees, which `~` expands to.
pub const HOME: &str = "/home/fuzz";

/// The directories whose programs the jail replaces with argv printers:
/// the default search path's and their neighbours (`/bin` is a link to
/// `/usr/bin` here, and is caught through it).
const PROGRAM_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin"];

/// The argv printer every program path leads to in the jail.
const PRINTER: &str =
    "#!/opt/r/bash\nbuiltin printf '\\1' >&3\nbuiltin printf '%s\\2' \"$0\" \"$@\" >&3\n";

/// A running jailed bash driver.
pub struct Bash {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _printer: tempfile::TempPath,
}

/// Every command bash ran for one line, each as its argv.
pub type Commands = Vec<Vec<String>>;

impl Bash {
    /// Starts the driver. Panics when bash or bubblewrap is missing: the
    /// differential check means nothing without them.
    pub fn start() -> Self {
        let builtins = Command::new("bash").args(["-c", "compgen -b"]).output().expect("bash runs");
        let builtins = String::from_utf8(builtins.stdout).expect("builtin names are ASCII");
        let mut prelude = String::from(
            "__argv() { builtin printf '\\1' >&3; builtin printf '%s\\2' \"$@\" >&3; }\n\
             command_not_found_handle() { __argv \"$@\"; }\n",
        );
        // `builtin` itself stays: the prelude needs it, and no program of
        // that name exists for a rule to allow.
        for name in builtins.split_whitespace().filter(|&n| n != "builtin") {
            prelude.push_str(&format!("{name}() {{ __argv '{name}' \"$@\"; }}\n"));
        }
        prelude.push_str("PATH=/nonexistent\n");
        let printer = tempfile::NamedTempFile::new().expect("a temp file");
        std::fs::write(printer.path(), PRINTER).expect("write the argv printer");
        std::fs::set_permissions(printer.path(), std::fs::Permissions::from_mode(0o755))
            .expect("make the argv printer executable");
        let mut jail = Command::new("bwrap");
        jail.args(["--ro-bind", "/", "/", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"])
            .args([
                "--dir",
                "/tmp/w/d",
                "--tmpfs",
                "/opt",
                "--ro-bind",
                "/usr/bin/bash",
                "/opt/r/bash",
            ])
            .args(["--ro-bind", "/usr/bin/timeout", "/opt/r/timeout"])
            .arg("--ro-bind")
            .arg(printer.path())
            .arg("/opt/r/argv");
        for dir in PROGRAM_DIRS {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            jail.args(["--tmpfs", dir]);
            for entry in entries.flatten() {
                let path = entry.path();
                jail.arg("--symlink").arg("/opt/r/argv").arg(&path);
            }
        }
        // Builtins only: every program is an argv printer in there.
        let driver = "cd /tmp/w && : > a && : > b && : > 'a b' && : > .h \
            && while IFS= read -r -d '' line; do \
                 timeout 10 bash -c \"$RESON_PRELUDE$line\" 3>&1 >/dev/null 2>/dev/null </dev/null; \
                 printf '\\3'; \
               done";
        let mut child = jail
            .args(["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"])
            .args(["--setenv", "PATH", "/opt/r", "--setenv", "HOME", HOME])
            .args(["--setenv", "RESON_PRELUDE", &prelude, "--chdir", "/tmp"])
            .args(["/opt/r/bash", "-c", driver])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bubblewrap (bwrap) runs bash");
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Self { child, stdin, stdout, _printer: printer.into_temp_path() }
    }

    /// The commands bash runs for `line`, which must hold no NUL (no
    /// argv can carry one, so no command line can mean one either).
    pub fn run(&mut self, line: &str) -> Commands {
        assert!(!line.contains('\0'), "a command line never holds NUL");
        self.stdin.write_all(line.as_bytes()).expect("the driver reads");
        self.stdin.write_all(b"\0").expect("the driver reads");
        self.stdin.flush().expect("the driver reads");
        let mut answer = Vec::new();
        let read = self.stdout.read_until(3, &mut answer).expect("the driver answers");
        assert!(read > 0 && answer.last() == Some(&3), "the bash driver died on {line:?}");
        answer.pop();
        answer
            .split(|&b| b == 1)
            .skip(1)
            .map(|command| {
                let words = command.strip_suffix(&[2]).unwrap_or(command);
                if command.is_empty() {
                    return Vec::new();
                }
                words.split(|&b| b == 2).map(|w| String::from_utf8_lossy(w).into_owned()).collect()
            })
            .collect()
    }
}

impl Drop for Bash {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
