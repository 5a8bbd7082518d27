//! What a command line really runs. Process grants and `shell` permission
//! rules both match the argv produced here, never the text a guest or a
//! model wrote: the line is split as the `shell` plugin splits it
//! (shell_words), the program is resolved against a fixed search path the
//! host chose, and the result is joined back in one canonical quoting.
//!
//! It also knows which invocations of common tools run other programs
//! (exec vectors: `git -c`, `find -exec`, `xargs`, `python3 -c`, ...), and
//! which environment variables a guest may set.

use crate::jail::is_executable;
use std::path::{Component, Path, PathBuf};

pub use crate::config::DEFAULT_COMMAND_PATH;

/// Why a command cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The command line has an unbalanced quote.
    #[error("the command line has an unbalanced quote")]
    Unbalanced,
    /// The command line names no program.
    #[error("the command line is empty")]
    Empty,
    /// A program path that is not absolute (`./git`, `bin/x`).
    #[error(
        "`{0}` is a relative path: programs are named (found on the host's fixed search path) or \
         given as absolute paths"
    )]
    Relative(String),
    /// No such executable on the search path, or at the absolute path.
    #[error("`{0}` is not an executable on the host's fixed search path")]
    NotFound(String),
    /// The program lies in, or is reached through, a directory granted to
    /// a plugin, where a guest could have planted it.
    #[error("`{0}` lies inside a directory granted to a plugin; programs there never run")]
    Confined(String),
    /// A search-path entry that is not an absolute path.
    #[error("command_path entry `{0}` is not an absolute path")]
    RelativeSearchPath(String),
}

/// The fixed list of directories programs are looked up in. It never comes
/// from the host's or the guest's `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPath(Vec<PathBuf>);

impl Default for SearchPath {
    fn default() -> Self {
        Self(DEFAULT_COMMAND_PATH.iter().map(PathBuf::from).collect())
    }
}

impl SearchPath {
    /// A search path from its entries, each of which must be absolute.
    pub fn new(entries: &[PathBuf]) -> Result<Self, CommandError> {
        if let Some(bad) = entries.iter().find(|e| !e.is_absolute()) {
            return Err(CommandError::RelativeSearchPath(bad.display().to_string()));
        }
        Ok(Self(entries.to_vec()))
    }

    /// The directories, in order.
    pub fn entries(&self) -> &[PathBuf] {
        &self.0
    }

    /// The value of `PATH` given to every child.
    pub fn env_value(&self) -> String {
        self.0.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join(":")
    }

    /// The first executable file named `name` in the search path.
    fn find(&self, name: &str) -> Option<PathBuf> {
        self.0.iter().map(|dir| dir.join(name)).find(|p| is_executable(p))
    }
}

/// A command as it will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCommand {
    /// The absolute path spawned: an entry of the search path when the
    /// program is one of its programs.
    pub executable: PathBuf,
    /// The canonical argv: the program's name when it is the file the
    /// search path gives for that name (`/bin/rm` is `rm`), else its
    /// canonical absolute path; then the arguments as given.
    pub argv: Vec<String>,
    /// The file that really runs, all symlinks resolved.
    target: PathBuf,
}

impl ResolvedCommand {
    /// The canonical command line that patterns match: the argv joined
    /// with shell quoting, so that no quoting of the original line can
    /// change what matches.
    pub fn line(&self) -> String {
        join(&self.argv)
    }

    /// The arguments after the program.
    pub fn args(&self) -> &[String] {
        &self.argv[1..]
    }
}

/// Joins words into one line with canonical quoting: a word holding a
/// control character (a carriage return, a tab, a newline) is always put in
/// single quotes, so that the line holds no bare control character, which
/// a terminal would act on and the rules read as the end of a command.
pub fn join(words: &[String]) -> String {
    let quoted = words.iter().map(|word| {
        if word.contains(char::is_control) {
            format!("'{}'", word.replace('\'', r"'\''"))
        } else {
            shell_words::quote(word).into_owned()
        }
    });
    quoted.collect::<Vec<_>>().join(" ")
}

/// Splits a command line into words exactly as the `shell` plugin does.
pub fn split(line: &str) -> Result<Vec<String>, CommandError> {
    let words = shell_words::split(line).map_err(|_| CommandError::Unbalanced)?;
    if words.is_empty() { Err(CommandError::Empty) } else { Ok(words) }
}

/// Resolves `program` against `path` and returns what will run. Programs
/// inside (or reached through) any of `confined` are refused.
pub fn resolve(
    program: &str,
    args: &[String],
    path: &SearchPath,
    confined: &[PathBuf],
) -> Result<ResolvedCommand, CommandError> {
    let inside = |p: &Path| confined.iter().any(|dir| p.starts_with(dir));
    let (name, executable) = if program.contains('/') {
        let given = Path::new(program);
        if !given.is_absolute() {
            return Err(CommandError::Relative(program.to_owned()));
        }
        if inside(&normalize(given)) {
            return Err(CommandError::Confined(program.to_owned()));
        }
        let target = given
            .canonicalize()
            .ok()
            .filter(|t| is_executable(t))
            .ok_or_else(|| CommandError::NotFound(program.to_owned()))?;
        // The name the path was given under, then the name of the file it
        // leads to: either may be the search path's program of that name.
        let names = [given.file_name(), target.file_name()];
        let on_path = names.into_iter().flatten().find_map(|n| {
            let n = n.to_str()?;
            let found = path.find(n)?;
            (found.canonicalize().ok()? == target).then(|| (n.to_owned(), found))
        });
        on_path.unwrap_or_else(|| (target.to_string_lossy().into_owned(), target.clone()))
    } else {
        let found = path.find(program).ok_or_else(|| CommandError::NotFound(program.to_owned()))?;
        (program.to_owned(), found)
    };
    let target =
        executable.canonicalize().map_err(|_| CommandError::NotFound(program.to_owned()))?;
    if inside(&target) || inside(&normalize(&executable)) {
        return Err(CommandError::Confined(program.to_owned()));
    }
    let argv = std::iter::once(name).chain(args.iter().cloned()).collect();
    Ok(ResolvedCommand { executable, argv, target })
}

/// The canonical line for a permission rule: resolved when the program
/// resolves, else the words as split (such a command cannot run anyway).
pub fn canonical_line(line: &str, path: &SearchPath) -> Result<String, CommandError> {
    let words = split(line)?;
    Ok(match resolve(&words[0], &words[1..], path, &[]) {
        Ok(resolved) => resolved.line(),
        Err(_) => join(&words),
    })
}

/// Lexical normalization of an absolute path (`/usr/bin/../bin` is `/usr/bin`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// An invocation that can make the program run another program of the
/// caller's choosing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecVector {
    /// The program family, as named in `exec_vectors` (`git`, `find`,
    /// `python`, `sh`, ...).
    pub program: &'static str,
    /// What runs another program, for the message.
    pub reason: String,
}

/// Programs whose whole job is to run other programs (or commands given as
/// text): any invocation is an exec vector.
const RUNNERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "ash",
    "rbash",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "xargs",
    "nice",
    "nohup",
    "timeout",
    "setsid",
    "sudo",
    "su",
    "doas",
    "runuser",
    "stdbuf",
    "chroot",
    "strace",
    "ltrace",
    "gdb",
    "flock",
    "watch",
    "unshare",
    "nsenter",
    "chrt",
    "ionice",
    "taskset",
    "script",
    "parallel",
    "expect",
    "time",
    "systemd-run",
    "setarch",
    "prlimit",
    "start-stop-daemon",
    "run-parts",
    "npx",
    "ld.so",
    "qemu",
    "valgrind",
    "perf",
    "fakeroot",
    "faketime",
    "unbuffer",
    "firejail",
    "bwrap",
    "proot",
    "catchsegv",
    "crontab",
    "at",
    "batch",
];

/// Git subcommands that are builtins and run nothing configurable by
/// themselves; anything else is an alias or an external `git-*` program.
/// Left out on purpose: `difftool`, `mergetool`, `filter-branch`,
/// `credential`, `hook`, `merge-index`, `send-email`, and `submodule`
/// (`foreach`, and `update` runs `submodule.*.update = !cmd` from the
/// repository's config).
const GIT_BUILTINS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "checkout-index",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-graph",
    "commit-tree",
    "config",
    "count-objects",
    "describe",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "fetch",
    "for-each-ref",
    "format-patch",
    "fsck",
    "gc",
    "grep",
    "hash-object",
    "help",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "maintenance",
    "merge",
    "merge-base",
    "merge-file",
    "merge-tree",
    "mv",
    "name-rev",
    "notes",
    "prune",
    "pull",
    "push",
    "range-diff",
    "read-tree",
    "rebase",
    "reflog",
    "remote",
    "repack",
    "replace",
    "rerere",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "show-branch",
    "show-ref",
    "sparse-checkout",
    "stash",
    "status",
    "stripspace",
    "switch",
    "symbolic-ref",
    "tag",
    "update-index",
    "update-ref",
    "var",
    "verify-commit",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// The exec vector in `command`, if it has one.
pub fn exec_vector(command: &ResolvedCommand) -> Option<ExecVector> {
    let names = [Path::new(&command.argv[0]).file_name(), command.target.file_name()];
    names.into_iter().flatten().filter_map(|n| n.to_str()).find_map(|name| {
        let family = family(name);
        vector_of(family, command.args())
            .map(|(program, reason)| ExecVector { program, reason: reason.to_owned() })
    })
}

/// `python3.11` is `python`, `perl5.36` is `perl`, `nodejs` is `node`.
fn family(name: &str) -> &str {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match base {
        "nodejs" => "node",
        "luajit" => "lua",
        "vi" | "vim" | "nvim" | "view" | "ex" | "rvim" => "vim",
        "gawk" | "mawk" | "nawk" | "busybox-awk" => "awk",
        "scp" | "sftp" | "slogin" => "ssh",
        "gmake" | "bmake" => "make",
        "pnpm" | "yarn" => "npm",
        // The dynamic loader runs any file it is given, planted ones too.
        _ if base.starts_with("ld-linux") || base.starts_with("ld-musl") || base == "ld.so" => {
            "ld.so"
        }
        _ if base.starts_with("qemu-") => "qemu",
        "" => name,
        _ => base,
    }
}

fn vector_of(family: &str, args: &[String]) -> Option<(&'static str, &'static str)> {
    if let Some(runner) = RUNNERS.iter().find(|r| **r == family) {
        return Some((runner, "it runs other programs or commands given as text"));
    }
    let has = |pred: &dyn Fn(&str) -> bool| args.iter().any(|a| pred(a));
    // A short-option cluster such as `-lne`: single dash, letters.
    let cluster_has = |a: &str, letters: &str| {
        a.len() > 1
            && a.starts_with('-')
            && !a.starts_with("--")
            && a[1..].chars().any(|c| letters.contains(c))
    };
    match family {
        "git" => git_vector(args).map(|r| ("git", r)),
        "find" => has(&|a| matches!(a, "-exec" | "-execdir" | "-ok" | "-okdir"))
            .then_some(("find", "`-exec`, `-execdir`, `-ok` and `-okdir` run programs")),
        "python" => interpreter_vector(args, &PYTHON).map(|r| ("python", r)),
        "perl" => interpreter_vector(args, &PERL).map(|r| ("perl", r)),
        "ruby" => interpreter_vector(args, &RUBY).map(|r| ("ruby", r)),
        "lua" => interpreter_vector(args, &LUA).map(|r| ("lua", r)),
        "node" | "deno" | "bun" if interpreter_vector(args, &NODE).is_some() => {
            Some(("node", "it reads the program from stdin"))
        }
        "node" | "deno" | "bun" => has(&|a| {
            matches!(a, "-e" | "-p" | "--eval" | "--print" | "-pe")
                || a.starts_with("--eval=")
                || a.starts_with("--print=")
                || a == "eval"
        })
        .then_some(("node", "`-e`/`--eval`/`-p` run code given as text")),
        "php" => has(&|a| matches!(a, "-r" | "-B" | "-R" | "-E" | "-F"))
            .then_some(("php", "`-r`, `-B`, `-R`, `-E` and `-F` run code given as text")),
        "Rscript" => has(&|a| a == "-e").then_some(("Rscript", "`-e` runs code given as text")),
        "tar" => {
            let first_cluster = args
                .first()
                .is_some_and(|a| !a.starts_with('-') && a.chars().any(|c| matches!(c, 'I' | 'F')));
            let checkpoint = |a: &str| a == "--checkpoint" || a.starts_with("--checkpoint=");
            (first_cluster
                || has(&|a| {
                    cluster_has(a, "IF")
                        || (!checkpoint(a)
                            && [
                                "to-command",
                                "use-compress-program",
                                "checkpoint-action",
                                "info-script",
                                "new-volume-script",
                                "rsh-command",
                                "rmt-command",
                            ]
                            .iter()
                            .any(|o| long_option(a, o)))
                }))
            .then_some((
                "tar",
                "`--to-command`, `-I`/`--use-compress-program`, `--checkpoint-action`, `-F` \
                 and `--rsh-command` run programs",
            ))
        }
        "rsync" => {
            has(&|a| cluster_has(a, "e") || long_option(a, "rsh") || long_option(a, "rsync-path"))
                .then_some(("rsync", "`-e`/`--rsh` and `--rsync-path` run programs"))
        }
        "ssh" => ssh_vector(args).then_some((
            "ssh",
            "`-o ProxyCommand`/`LocalCommand`/`KnownHostsCommand`/`Match`, `-F` and `-S` run \
             programs",
        )),
        "zip" => has(&|a| a == "-TT" || long_option(a, "unzip-command"))
            .then_some(("zip", "`-TT`/`--unzip-command` runs a program")),
        "vim" => has(&|a| {
            a.starts_with('+') || matches!(a, "-c" | "--cmd" | "-S") || cluster_has(a, "cS")
        })
        .then_some(("vim", "`-c`, `--cmd`, `+cmd` and `-S` run editor commands")),
        "emacs" => has(&|a| {
            // Emacs takes its long options after one dash too (`-eval`).
            let single = a.strip_prefix('-').filter(|r| !r.starts_with('-'));
            let single = single.map(|r| r.split('=').next().unwrap_or(r));
            ["eval", "execute", "load", "funcall", "batch", "script"].iter().any(|o| {
                long_option(a, o)
                    || single.is_some_and(|r| r == *o || (r.len() == 1 && o.starts_with(r)))
            })
        })
        .then_some(("emacs", "`--eval`, `--load`, `--funcall` and `--script` run code")),
        "awk" => has(&|a| {
            a.contains("system")
                || a.contains('|')
                || a.contains("getline")
                || a.contains("@load")
                || a.contains("@include")
                || ["-f", "-E", "-i", "-l"].iter().any(|o| a.starts_with(o))
                || ["file", "exec", "include", "load"].iter().any(|o| long_option(a, o))
        })
        .then_some((
            "awk",
            "`system()`, pipes, `getline`, program files and loaded extensions run commands",
        )),
        "cargo" => has(&|a| long_option(a, "config"))
            .then_some(("cargo", "`--config` sets runners and wrappers cargo runs")),
        "make" => has(&|a| {
            long_option(a, "eval")
                || a.starts_with("-E")
                || ["SHELL=", ".SHELLFLAGS=", "MAKESHELL="].iter().any(|v| a.starts_with(v))
                || matches!(a, "-" | "/dev/stdin" | "--file=-" | "--makefile=-")
        })
        .then_some((
            "make",
            "`--eval`, `SHELL=` and a makefile on stdin run commands given as text",
        )),
        "npm" => {
            let sub = args.iter().find(|a| !a.starts_with('-')).map(String::as_str);
            (matches!(sub, Some("exec" | "x" | "dlx" | "explore"))
                || has(&|a| long_option(a, "script-shell") || long_option(a, "call")))
            .then_some(("npm", "`exec`, `x`, `dlx`, `explore` and `--script-shell` run commands"))
        }
        "man" => has(&|a| {
            a.starts_with("-P")
                || a.starts_with("-H")
                || long_option(a, "pager")
                || long_option(a, "html")
        })
        .then_some(("man", "`-P`/`--pager` and `-H`/`--html` run programs")),
        _ => None,
    }
}

/// How an interpreter's command line names its program.
struct Interpreter {
    /// Short options whose value is the program text (`-c`, `-e`).
    code: &'static str,
    /// Short options whose value names the program (`python -m module`).
    program: &'static str,
    /// Short options whose value may be the next word (`-W ignore`, `-I dir`).
    value: &'static str,
    /// Long options whose value may be the next word.
    long_value: &'static [&'static str],
    /// Invocations that print and exit, reading no program.
    info: &'static [&'static str],
}

const PYTHON: Interpreter = Interpreter {
    code: "c",
    program: "m",
    value: "WX",
    long_value: &["--check-hash-based-pycs"],
    info: &["-V", "-VV", "--version", "-h", "--help"],
};
const PERL: Interpreter =
    Interpreter { code: "eE", program: "", value: "I", long_value: &[], info: &["-v", "-V", "-h"] };
const RUBY: Interpreter = Interpreter {
    code: "e",
    program: "",
    value: "IrCEx",
    long_value: &[],
    info: &["-v", "--version", "-h", "--help"],
};
const LUA: Interpreter =
    Interpreter { code: "e", program: "", value: "l", long_value: &[], info: &["-v"] };
const NODE: Interpreter = Interpreter {
    code: "",
    program: "",
    value: "rC",
    long_value: &["--require", "--import", "--loader", "--experimental-loader", "--conditions"],
    info: &["-v", "--version", "-h", "--help"],
};

/// Whether an interpreter runs code given as text or read from stdin: a
/// code option among its own options, or no program file at all. An
/// option's value is skipped only when it cannot be another option, so
/// `python3 -W ignore -c code` is still `-c`.
fn interpreter_vector(args: &[String], interpreter: &Interpreter) -> Option<&'static str> {
    let mut words = args.iter().peekable();
    let mut script = None;
    'words: while let Some(word) = words.next() {
        if word == "--" {
            script = words.next().map(String::as_str);
            break;
        }
        let Some(cluster) = word.strip_prefix('-').filter(|c| !c.is_empty()) else {
            script = Some(word.as_str());
            break;
        };
        if cluster.starts_with('-') {
            if interpreter.long_value.contains(&word.as_str())
                && words.peek().is_some_and(|v| !v.starts_with('-'))
            {
                words.next();
            }
            continue;
        }
        for (i, c) in cluster.char_indices() {
            if interpreter.code.contains(c) {
                return Some("`-c`/`-e` runs code given as text");
            }
            let rest = &cluster[i + c.len_utf8()..];
            if interpreter.program.contains(c) {
                script =
                    if rest.is_empty() { words.next().map(String::as_str) } else { Some(rest) };
                break 'words;
            }
            if interpreter.value.contains(c) {
                if rest.is_empty() && words.peek().is_some_and(|v| !v.starts_with('-')) {
                    words.next();
                }
                break;
            }
        }
    }
    let from_stdin = |s: &str| matches!(s, "-" | "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0");
    let informational = !args.is_empty() && args.iter().all(|a| interpreter.info.contains(&&**a));
    match script {
        Some(s) if !from_stdin(s) => None,
        _ if informational => None,
        _ => Some("with no program file it runs the program read from stdin"),
    }
}

/// Whether `word` is the long option `--name` (with or without `=value`)
/// or an abbreviation of it: git's parse-options and getopt_long accept
/// any unambiguous prefix, so `--upload-p=x` is `--upload-pack=x`.
fn long_option(word: &str, name: &str) -> bool {
    word.strip_prefix("--")
        .map(|given| given.split('=').next().unwrap_or(given))
        .is_some_and(|given| !given.is_empty() && name.starts_with(given))
}

/// Whether the short-option cluster `word` (`-qu`, `-ix`) uses `letter`:
/// letters count up to the first one that takes a value (in
/// `takes_value`), which takes the rest of the word.
fn short_flag(word: &str, letter: char, takes_value: &str) -> bool {
    let Some(cluster) = word.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
        return false;
    };
    for c in cluster.chars() {
        if c == letter {
            return true;
        }
        if takes_value.contains(c) {
            return false;
        }
    }
    false
}

fn ssh_vector(args: &[String]) -> bool {
    const OPTIONS: [&str; 5] =
        ["proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match"];
    let dangerous = |option: &str| {
        let option = option.trim().to_ascii_lowercase();
        OPTIONS.iter().any(|o| option.starts_with(o))
    };
    let mut words = args.iter();
    while let Some(a) = words.next() {
        match a.as_str() {
            "-o" if words.next().is_some_and(|o| dangerous(o)) => return true,
            "-F" | "-S" | "-D" => return true,
            a if a.starts_with("-o") && dangerous(&a[2..]) => return true,
            a if a.starts_with("-F") || a.starts_with("-S") => return true,
            _ => {}
        }
    }
    false
}

/// Git's own options before the subcommand that take no value.
const GIT_FLAGS: &[&str] = &[
    "-v",
    "--version",
    "--html-path",
    "--man-path",
    "--info-path",
    "-p",
    "--paginate",
    "-P",
    "--no-pager",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--no-optional-locks",
    "--no-advice",
    "--bare",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
];

/// Git's own options whose value is the next word or follows `=`.
const GIT_VALUED: &[&str] =
    &["--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source"];

/// Where git's own options end: the index of the subcommand. Read the way
/// git reads them (exact names, `-C` and the valued options taking the
/// next word); an option git does not know, or one that makes git run a
/// program of the caller's choosing, is the reason to refuse instead, so
/// that no unknown option can shift which word is the subcommand.
fn git_globals(args: &[String]) -> Result<usize, &'static str> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        i += match a {
            _ if a == "-c" || a.starts_with("-c") => {
                return Err("`-c` sets configuration, and configuration can run programs");
            }
            _ if a.starts_with("--config-env") => {
                return Err("`--config-env` sets configuration, which can run programs");
            }
            _ if a.starts_with("--exec-path=") => {
                return Err("`--exec-path` chooses where git finds the programs it runs");
            }
            "-h" | "--help" => return Err("`--help` runs a manual viewer the config can name"),
            "-C" => 2,
            _ if GIT_VALUED.contains(&a) => 2,
            _ if GIT_VALUED.contains(&name) || GIT_FLAGS.contains(&a) || a == "--exec-path" => 1,
            _ if a.starts_with("--list-cmds=") => 1,
            _ if a.starts_with('-') => {
                return Err("an option git does not take before its subcommand");
            }
            _ => break,
        };
    }
    Ok(i)
}

/// Git subcommands that reach a remote, where a transport option runs a program.
const GIT_TRANSPORT: &[&str] =
    &["fetch", "pull", "push", "clone", "ls-remote", "archive", "remote"];

/// What makes a git invocation run a program of the caller's choosing.
fn git_vector(args: &[String]) -> Option<&'static str> {
    let i = match git_globals(args) {
        Ok(i) => i,
        Err(reason) => return Some(reason),
    };
    let sub = args.get(i)?.as_str();
    let rest = &args[i + 1..];
    if !GIT_BUILTINS.contains(&sub) {
        return Some(
            "the subcommand is not a git builtin: git would run an alias or an external \
             `git-*` program",
        );
    }
    let has = |pred: &dyn Fn(&str) -> bool| rest.iter().any(|a| pred(a));
    let transport_options = ["upload-pack", "receive-pack", "exec"];
    let transport = |a: &str| {
        transport_options.iter().any(|o| a.starts_with(&format!("--{o}")))
            || (GIT_TRANSPORT.contains(&sub) && transport_options.iter().any(|o| long_option(a, o)))
            || a.starts_with("ext::")
    };
    if has(&transport) {
        return Some("`--upload-pack`, `--receive-pack`, `--exec` and `ext::` URLs run programs");
    }
    let recurse = |a: &str| {
        let off = a.ends_with("=no") || a.ends_with("=false");
        !off && (long_option(a, "recurse-submodules") || (sub == "clone" && a == "--recursive"))
    };
    if has(&recurse) {
        return Some(
            "`--recurse-submodules` runs git in submodules, whose own config (drivers, \
             uploadpack) is not pinned",
        );
    }
    match sub {
        "help" => Some("`help` runs a manual viewer or browser the config can name"),
        _ if has(&|a| a == "--help") => {
            Some("`--help` runs a manual viewer or browser the config can name")
        }
        "clone" | "init" if has(&|a| long_option(a, "template") || long_option(a, "config")) => {
            Some(
                "`--template` and `--config` give the new repository configuration (filters, \
                 drivers) that can run programs",
            )
        }
        "clone" if has(&|a| short_flag(a, 'u', "obucj") || short_flag(a, 'c', "obucj")) => {
            Some("`-u` runs a program, and `-c` writes configuration that can run programs")
        }
        "ls-remote" if has(&|a| short_flag(a, 'u', "uo")) => Some("`-u` runs a program"),
        "rebase" if has(&|a| long_option(a, "exec") || short_flag(a, 'x', "xsXCS")) => {
            Some("`rebase --exec` runs commands")
        }
        "bisect" if rest.first().is_some_and(|a| a == "run") => Some("`bisect run` runs commands"),
        "maintenance"
            if rest.first().is_some_and(|a| matches!(a.as_str(), "start" | "register")) =>
        {
            Some(
                "`maintenance start/register` schedules git runs (fetches, hooks) outside the \
                 call, where no pin holds",
            )
        }
        "grep"
            if has(&|a| long_option(a, "open-files-in-pager") || short_flag(a, 'O', "efABCm")) =>
        {
            Some("`grep -O` runs a pager")
        }
        "config" if !git_config_reads(rest) => Some(
            "`git config` writes configuration, and configuration (core.*, alias.*, \
             diff.*, ...) can run programs",
        ),
        _ => None,
    }
}

/// Whether `git config <rest>` only reads.
fn git_config_reads(rest: &[String]) -> bool {
    const READS: [&str; 7] = ["--get", "--get-all", "--get-regexp", "--list", "-l", "get", "list"];
    const WRITES: [&str; 9] = [
        "--add",
        "--unset",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "--edit",
        "-e",
        "set",
        "edit",
    ];
    rest.iter().any(|a| READS.contains(&a.as_str()))
        && !rest.iter().any(|a| WRITES.iter().any(|w| a == w || a.starts_with(&format!("{w}-"))))
}

/// Variables any guest may set: locale, time zone and display hints.
const SAFE_ENV: [&str; 6] = ["LANG", "LANGUAGE", "TZ", "NO_COLOR", "TERM", "COLUMNS"];

/// Whether a guest may set variable `name`: a safe built-in (`LANG`,
/// `LC_*`, `TZ`, `NO_COLOR`, `TERM`, `COLUMNS`) or one the grant names
/// exactly. Control variables (`PATH`, `LD_*`, `GIT_*`, ...) pass only when
/// named.
pub fn env_allowed(name: &str, granted: &[String]) -> bool {
    let well_formed = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let locale = name.strip_prefix("LC_").is_some_and(|rest| {
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    });
    well_formed && (SAFE_ENV.contains(&name) || locale || granted.iter().any(|g| g == name))
}

/// Configuration pinned for every git a child runs, whatever the
/// repository's own `.git/config` says: a guest with a writable workspace
/// can write that file directly. Command-line scope (`GIT_CONFIG_COUNT`)
/// wins over every config file.
pub const GIT_PINS: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.hooksPath", "/dev/null"),
    ("core.sshCommand", "ssh"),
    ("core.editor", "false"),
    ("core.askPass", ""),
    ("core.attributesFile", "/dev/null"),
    ("sequence.editor", "false"),
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("protocol.ext.allow", "never"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.ssh.defaultKeyCommand", "false"),
    ("interactive.diffFilter", "cat"),
    ("core.alternateRefsCommand", "true"),
    ("diff.external", DIFF_WRAPPER),
    // A submodule's own config is never probed, so git must not go there.
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
];

/// An external diff can only be pinned to a program, not unset: this one
/// is git's own diff, with the exit status an external diff must have.
const DIFF_WRAPPER: &str =
    "f() { git diff --no-index --no-ext-diff -- \"$2\" \"$5\"; test $? -le 1; }; f";

/// Keys that name a command per remote, driver, submodule or URL, which a
/// fixed pin cannot reach, with the inert value each gets when a
/// repository's own config sets it: (section, variable, value).
const GIT_NAMED_PINS: &[(&str, &str, &str)] = &[
    ("diff", "command", DIFF_WRAPPER),
    ("diff", "textconv", "cat"),
    ("filter", "clean", "cat"),
    ("filter", "smudge", "cat"),
    ("filter", "process", "false"),
    ("merge", "driver", "false"),
    ("submodule", "update", "checkout"),
    ("credential", "helper", ""),
    ("trailer", "cmd", "true"),
    ("trailer", "command", "true"),
];

/// Keys git reads first-wins, so no pin can override them: a repository
/// that sets one of them is refused instead. (section, variable)
const GIT_REFUSED_KEYS: &[(&str, &str)] = &[("remote", "uploadpack"), ("remote", "receivepack")];

/// What a [`git_probe`] found in a repository's own config files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitRepositoryConfig {
    /// Pins for the command-naming keys it sets.
    pub pins: Vec<(String, String)>,
    /// A key it sets that no pin can override (`remote.origin.uploadpack`).
    pub refused: Option<String>,
}

/// For a git command, the same git with the same global options (`-C`,
/// `--git-dir`, ...) listing which [`GIT_NAMED_PINS`] keys its
/// repository sets, with their scopes: `git config` reads and runs
/// nothing. Its output goes to [`git_repository_config`].
pub fn git_probe(command: &ResolvedCommand) -> Option<ResolvedCommand> {
    let names = [Path::new(&command.argv[0]).file_name(), command.target.file_name()];
    if !names.into_iter().flatten().any(|n| n == "git") {
        return None;
    }
    let args = command.args();
    let end = git_globals(args).ok()?;
    let globals = args[..end.min(args.len())].iter().cloned();
    let named = GIT_NAMED_PINS.iter().map(|(s, v, _)| (*s, *v));
    let keys: Vec<(&str, &str)> = named.chain(GIT_REFUSED_KEYS.iter().copied()).collect();
    let mut sections: Vec<&str> = keys.iter().map(|(s, _)| *s).collect();
    sections.sort_unstable();
    sections.dedup();
    let variables: Vec<&str> = keys.iter().map(|(_, v)| *v).collect();
    let pattern = format!(r"^({})\..+\.({})$", sections.join("|"), variables.join("|"));
    let probe = [
        "config",
        "--show-scope",
        "--show-origin",
        "--null",
        "--name-only",
        "--get-regexp",
        &pattern,
    ];
    let argv = std::iter::once(command.argv[0].clone())
        .chain(globals)
        .chain(probe.iter().map(|a| (*a).to_owned()))
        .collect();
    Some(ResolvedCommand {
        executable: command.executable.clone(),
        argv,
        target: command.target.clone(),
    })
}

/// Reads a [`git_probe`]'s output: keys from the repository's own files
/// (`local` and `worktree` scope) count, and so do keys from any other
/// file `guest_writable` says a guest may have written (a global
/// `~/.gitconfig` inside a granted directory, or a file it includes from
/// one); the user's other config files keep their drivers.
pub fn git_repository_config(
    probe_output: &[u8],
    guest_writable: &dyn Fn(&Path) -> bool,
) -> GitRepositoryConfig {
    let text = String::from_utf8_lossy(probe_output);
    let fields: Vec<&str> = text.split('\0').collect();
    let mut found = GitRepositoryConfig::default();
    for record in fields.chunks(3) {
        let [scope, origin, key] = record else { continue };
        let written = origin
            .strip_prefix("file:")
            .is_some_and(|f| Path::new(f).is_absolute() && guest_writable(Path::new(f)));
        if *scope != "local" && *scope != "worktree" && !written {
            continue;
        }
        let Some((section, variable)) =
            key.split_once('.').and_then(|(s, rest)| Some((s, rest.rsplit_once('.')?.1)))
        else {
            continue;
        };
        let is =
            |s: &str, v: &str| section.eq_ignore_ascii_case(s) && variable.eq_ignore_ascii_case(v);
        if GIT_REFUSED_KEYS.iter().any(|(s, v)| is(s, v)) {
            found.refused.get_or_insert_with(|| (*key).to_owned());
        } else if let Some((_, _, value)) = GIT_NAMED_PINS.iter().find(|(s, v, _)| is(s, v)) {
            found.pins.push(((*key).to_owned(), (*value).to_owned()));
        }
    }
    found
}

/// The variables that pin every git a child runs, set after everything
/// else so that they win: the fixed pins, then `named` ones (from
/// [`git_repository_config`]).
pub fn pinned_env(named: &[(String, String)]) -> Vec<(String, String)> {
    let pins: Vec<(&str, &str)> = GIT_PINS
        .iter()
        .copied()
        .chain(named.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    let mut env = vec![
        ("GIT_CONFIG_NOSYSTEM".to_owned(), "1".to_owned()),
        ("GIT_ATTR_NOSYSTEM".to_owned(), "1".to_owned()),
        ("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()),
        ("GIT_PAGER".to_owned(), "cat".to_owned()),
        // Set, even empty, it stands for every `core.gitProxy`: no proxy runs.
        ("GIT_PROXY_COMMAND".to_owned(), String::new()),
        ("GIT_CONFIG_COUNT".to_owned(), pins.len().to_string()),
    ];
    for (i, (key, value)) in pins.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), key.to_owned()));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), value.to_owned()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_quoting_leaves_no_bare_control_character() {
        let words: Vec<String> =
            ["ls", "\r", "a b", "it's\n", "plain"].iter().map(|w| (*w).to_owned()).collect();
        let line = join(&words);
        assert_eq!(line, "ls '\r' 'a b' 'it'\\''s\n' plain");
        assert_eq!(split(&line).unwrap(), words);
    }

    fn argv(line: &str) -> Vec<String> {
        split(line).unwrap()
    }

    #[cfg(unix)]
    fn canonical(line: &str) -> String {
        canonical_line(line, &SearchPath::default()).unwrap()
    }

    /// The vector as if the program were installed under its own name,
    /// so the table is tested whatever this machine has.
    fn vector(line: &str) -> Option<&'static str> {
        let words = argv(line);
        let target = Path::new("/usr/bin").join(&words[0]);
        let resolved = ResolvedCommand { executable: target.clone(), argv: words, target };
        exec_vector(&resolved).map(|v| v.program)
    }

    // Command lines here name Unix paths (`/bin/rm`), which are relative on Windows.
    #[cfg(unix)]
    #[test]
    fn quoting_and_paths_do_not_change_the_canonical_line() {
        for line in [
            "rm -f x",
            "'rm' -f x",
            r"r\m -f x",
            "\"rm\" -f x",
            "/bin/rm -f x",
            "/usr/bin/../bin/rm -f x",
            "/usr/bin/rm  -f   'x'",
        ] {
            assert_eq!(canonical(line), "rm -f x", "{line}");
        }
        assert_eq!(canonical("echo 'a b' c"), "echo 'a b' c");
        assert_eq!(canonical("no-such-program-here x"), "no-such-program-here x");
        assert_eq!(split("echo 'oops"), Err(CommandError::Unbalanced));
        assert_eq!(split("  "), Err(CommandError::Empty));
    }

    // The fixed search path and the programs on it are Unix's.
    #[cfg(unix)]
    #[test]
    fn programs_resolve_only_from_the_fixed_path() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/bin/sh", ws_path.join("git")).unwrap();
        let path = SearchPath::default();
        let confined = [ws_path.clone()];
        let git = resolve("git", &[], &path, &confined).unwrap();
        assert!(git.executable.starts_with("/usr"), "{:?}", git.executable);
        let planted = ws_path.join("git").to_string_lossy().into_owned();
        assert_eq!(
            resolve(&planted, &[], &path, &confined),
            Err(CommandError::Confined(planted.clone()))
        );
        // Without a confinement, the symlink is the program it leads to.
        let unconfined = resolve(&planted, &[], &path, &[]).unwrap();
        assert_ne!(unconfined.argv[0], "git");
        assert!(matches!(resolve("./git", &[], &path, &[]), Err(CommandError::Relative(_))));
        assert!(matches!(resolve("bin/git", &[], &path, &[]), Err(CommandError::Relative(_))));
        let only_ws = SearchPath::new(std::slice::from_ref(&ws_path)).unwrap();
        assert_eq!(
            resolve("git", &[], &only_ws, &confined),
            Err(CommandError::Confined("git".into()))
        );
        assert!(SearchPath::new(&[PathBuf::from("bin")]).is_err());
        assert_eq!(
            resolve("/etc/passwd", &[], &path, &[]),
            Err(CommandError::NotFound("/etc/passwd".into()))
        );
    }

    #[test]
    fn exec_vectors_are_found() {
        let vectors = [
            "git -c alias.x=!touch status",
            "git -calias.x=y status",
            "git --exec-path=/tmp status",
            "git --config-env=core.pager=X log",
            "git x",
            "git st",
            "git config core.pager cat",
            "git config --add alias.x !y",
            "git -C /tmp fetch --upload-pack=touch origin",
            "git clone -u touch a b",
            "git clone -c core.fsmonitor=x a b",
            "git rebase -x ls",
            "git bisect run ls",
            "git submodule foreach ls",
            "git ls-remote ext::sh",
            "git difftool",
            "find . -exec touch x ;",
            "find . -okdir rm {} +",
            "xargs touch",
            "env touch x",
            "sh -c id",
            "bash x.sh",
            "nohup true",
            "timeout 1 true",
            "setsid true",
            "python3 -c print(1)",
            "python3 -Ic x",
            "perl -e 1",
            "perl -lne print",
            "node -e 1",
            "tar -xf a --to-command=sh",
            "tar -cIsh -f a .",
            "tar xIf sh a",
            "rsync -avze sh a b",
            "ssh -o ProxyCommand=sh h",
            "ssh -oProxyCommand=sh h",
            "awk BEGIN{system(\"id\")}",
            // Abbreviated long options and short clusters.
            "git fetch --upload-p=touch origin",
            "git ls-remote --upl=touch .",
            "git push --e=touch origin",
            "git push --receive-p=touch origin",
            "git rebase --exe ls",
            "git rebase -ix ls",
            "git clone -qutouch a b",
            "git clone -qccore.fsmonitor=x a b",
            "git clone --conf core.fsmonitor=x a b",
            "git clone --template=/ws/tpl a b",
            "git init --templ=/ws/tpl",
            "git ls-remote -qu touch .",
            "git grep -nO x",
            "git grep --open-files x",
            // Global options read as git reads them.
            "git --attr-source log -c alias.x=!touch x",
            "git --no-such-option status",
            // Manual viewers the config names.
            "git help status",
            "git status --help",
            "git --help status",
            "git -h log",
            // Options with a value before the code option; stdin programs.
            "python3 -W ignore -c 1",
            "python3 -X dev -c 1",
            "python3 --check-hash-based-pycs always -c 1",
            "python3",
            "python3 -",
            "python3 -u /dev/stdin",
            "perl -I /tmp -e 1",
            "perl",
            "ruby -r x -e 1",
            "node",
            "node --require x",
            "tar -x --to-com=sh -f a",
            "tar -c --checkpoint-a=exec=sh -f a .",
            "rsync --rs=sh a b",
            "emacs -eval (x)",
            "awk -fprog.awk",
            "man -Pcat ls",
            "git fetch --recurse-submodules origin",
            "git clone --recursive a b",
            "git pull --recurse-submodules=yes",
            "cargo test --config target.x.runner=sh",
            "cargo --config=build.rustc-wrapper=/ws/x build",
            "make --eval=$(shell id)",
            "make SHELL=/ws/x all",
            "make -f - all",
            "npm exec -- touch x",
            "npx touch x",
            "yarn dlx touch",
            "ld-linux-x86-64.so.2 /ws/touch x",
            "ld-musl-x86_64.so.1 /ws/touch x",
            "qemu-x86_64 /ws/touch x",
            "valgrind /ws/touch x",
            "git maintenance start",
            "git maintenance register",
            "crontab /ws/jobs",
            "at now",
        ];
        for line in vectors {
            assert!(vector(line).is_some(), "{line}");
        }
        let fine = [
            "git status",
            "git log -p",
            "git -C /tmp diff --stat",
            "git config --get user.name",
            "git commit -m x",
            "git add -u",
            "find . -name x",
            "python3 script.py -c",
            "python3 -W ignore script.py -c x",
            "python3 -m pytest -c x",
            "python3 -- script.py -c",
            "python3 --version",
            "perl script.pl -e",
            "perl -I lib script.pl",
            "node --version",
            "git --git-dir=.git --work-tree . status",
            "git --no-pager --literal-pathspecs log",
            "git -C /tmp --attr-source HEAD status",
            "git fetch --update-shallow origin",
            "git status --untracked-files",
            "git rebase -Xours main",
            "git clone -b main a b",
            "tar -c --checkpoint=10 -f a .",
            "git fetch --no-recurse-submodules origin",
            "git fetch --recurse-submodules=no origin",
            "cargo test --release",
            "make -j4 all",
            "npm test",
            "git maintenance run --task=gc",
            "tar -xzf a.tgz",
            "rsync -av a b",
            "ssh -o Port=22 h",
            "awk {print}",
            "ls -la",
        ];
        for line in fine {
            assert_eq!(vector(line), None, "{line}");
        }
        assert_eq!(vector("python3 -c 1"), Some("python"));
        assert_eq!(vector("/usr/bin/env x"), Some("env"));
        // A link's target counts too: busybox applets are busybox.
        let words = argv("ls -l");
        let busybox = PathBuf::from("/usr/bin/busybox");
        let applet = ResolvedCommand { executable: "/bin/ls".into(), argv: words, target: busybox };
        assert_eq!(exec_vector(&applet).map(|v| v.program), Some("busybox"));
    }

    // git reports Unix paths (`/home/u/.gitconfig`) here, which are relative on Windows.
    #[cfg(unix)]
    #[test]
    fn repository_drivers_are_pinned_but_global_ones_kept() {
        let probe = b"local\0file:.git/config\0remote.origin.uploadpack\0\
                      global\0file:/home/u/.gitconfig\0filter.lfs.process\0\
                      global\0file:/ws/.gitconfig\0filter.evil.smudge\0\
                      worktree\0file:.git/config.worktree\0diff.Evil.textconv\0\
                      local\0file:.git/config\0core.pager\0";
        let in_ws = |p: &Path| p.starts_with("/ws");
        let found = git_repository_config(probe, &in_ws);
        assert_eq!(
            found.pins,
            [
                ("filter.evil.smudge".to_owned(), "cat".to_owned()),
                ("diff.Evil.textconv".to_owned(), "cat".to_owned())
            ]
        );
        assert_eq!(found.refused.as_deref(), Some("remote.origin.uploadpack"));
        assert_eq!(git_repository_config(b"", &in_ws), GitRepositoryConfig::default());
        let words = argv("git -C /repo --no-pager fetch origin");
        let target = PathBuf::from("/usr/bin/git");
        let git = ResolvedCommand { executable: target.clone(), argv: words, target };
        let probe = git_probe(&git).unwrap();
        assert_eq!(probe.argv[..6], ["git", "-C", "/repo", "--no-pager", "config", "--show-scope"]);
        let ls_path = PathBuf::from("/usr/bin/ls");
        let ls = ResolvedCommand { executable: ls_path.clone(), argv: argv("ls"), target: ls_path };
        assert_eq!(git_probe(&ls), None);
    }

    #[test]
    fn only_safe_or_granted_variables_pass() {
        let granted = ["RUST_LOG".to_owned(), "GIT_DIR".to_owned()];
        for ok in ["LANG", "LC_ALL", "LC_CTYPE", "TZ", "NO_COLOR", "RUST_LOG", "GIT_DIR"] {
            assert!(env_allowed(ok, &granted), "{ok}");
        }
        for bad in [
            "PATH",
            "LD_PRELOAD",
            "GIT_CONFIG_COUNT",
            "PYTHONPATH",
            "JAVA_TOOL_OPTIONS",
            "BASH_ENV",
            "LC_",
            "lc_all",
            "A=B",
            "",
            "DYLD_INSERT_LIBRARIES",
            "HOME",
        ] {
            assert!(!env_allowed(bad, &granted), "{bad}");
        }
    }
}
