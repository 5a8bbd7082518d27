//! `shell`: runs one program with its arguments through the host's `process`
//! capability. The host runs only command lines matching the patterns the
//! user granted, in a granted directory, with a scrubbed environment; this
//! tool splits the model's command line into words without a shell and
//! shapes the output for the model. The host's permission rules split the
//! line the same way (shell_words), so what they match is what runs.

mod command;
mod output;

use reson_sdk::host::process::{self, ProcessError};
use reson_sdk::{Context, Output, ToolError, Toolbox};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// How long a command may run when the call does not say.
const DEFAULT_TIMEOUT_MS: u32 = 30_000;
/// The longest a call may let a command run.
const MAX_TIMEOUT_MS: u32 = 600_000;

/// Arguments of `shell`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    /// The command line: one program and its arguments, split into words
    /// like a POSIX shell does (single quotes, double quotes and backslashes
    /// work). No shell runs it: pipes, redirections, `;`, `&&`, `||`, `&`,
    /// backticks and `$(...)` are refused, and `*`, `~` and `$VAR` are not
    /// expanded. The program is a name looked up on the host's fixed search
    /// path, or an absolute path; relative paths such as `./x` are refused.
    command: String,
    /// Working directory: absolute, or relative to the first granted
    /// directory (default: the first granted directory). It must lie inside
    /// a granted directory.
    cwd: Option<String>,
    /// Milliseconds after which the command is killed (default 30000, at
    /// most 600000).
    #[schemars(range(min = 1, max = 600_000))]
    timeout_ms: Option<u32>,
}

fn shell(args: ShellArgs, ctx: &Context) -> Result<Output, ToolError> {
    let line = command::parse(&args.command)?;
    let timeout_ms = timeout(args.timeout_ms)?;
    let cwd = working_dir(args.cwd.as_deref(), ctx);
    let request = process::Command {
        program: line.program,
        args: line.args,
        cwd: cwd.as_ref().map(|dir| dir.to_string_lossy().into_owned()),
        // The host sets PATH to its fixed search path and passes HOME and
        // LANG; the model adds nothing.
        env: Vec::new(),
        stdin: None,
        timeout_ms: Some(timeout_ms),
    };
    match process::run(&request) {
        Ok(finished) => Ok(Output::text(output::render(&finished))),
        Err(err) => Err(run_error(err, timeout_ms, cwd.as_deref())),
    }
}

/// The timeout argument, defaulted and checked against its range.
fn timeout(requested: Option<u32>) -> Result<u32, ToolError> {
    let ms = requested.unwrap_or(DEFAULT_TIMEOUT_MS);
    if (1..=MAX_TIMEOUT_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(ToolError::invalid(format!("timeout_ms must be between 1 and {MAX_TIMEOUT_MS}")))
    }
}

/// The directory to run in: `cwd` resolved against the call's working
/// directory, or that directory itself. `None` leaves the choice to the host.
fn working_dir(cwd: Option<&str>, ctx: &Context) -> Option<PathBuf> {
    let dir = match cwd {
        Some(cwd) => ctx.resolve(cwd),
        None => PathBuf::from(ctx.cwd.as_deref()?),
    };
    // Rebuilt from its components so `.` and doubled slashes vanish; the host
    // matches the result against the granted directories.
    Some(dir.components().collect())
}

/// The tool error for a command the host did not run to completion in `cwd`.
fn run_error(err: ProcessError, timeout_ms: u32, cwd: Option<&Path>) -> ToolError {
    match err {
        ProcessError::Denied(message) => ToolError::Denied(message),
        ProcessError::Spawn(message) => match cwd.filter(|dir| !dir.is_dir()) {
            // The host accepted the directory as granted, so the guest sees
            // it too. Without this check the model would read the host's
            // error as if the program were missing.
            Some(dir) => ToolError::failed(format!(
                "cannot start: the working directory {} does not exist or is not a directory",
                dir.display()
            )),
            None => ToolError::failed(format!("cannot start: {message}")),
        },
        ProcessError::Timeout => {
            ToolError::failed(format!("command timed out after {timeout_ms} ms"))
        }
    }
}

fn tools() -> Toolbox {
    Toolbox::new().tool(
        "shell",
        "Runs one program with its arguments, without a shell (so no pipes, redirections, \
         `$VARIABLES`, globs or `~`: put such characters in single quotes to pass them as they \
         stand), and returns `exit code N`, then \
         its stdout, then its stderr after a `--- stderr ---` line. A non-zero exit code is \
         reported, not an error. Only the command lines the user granted can run. Long output \
         keeps its beginning and end.",
        shell,
    )
}

reson_sdk::export_tools!(tools);

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(cwd: Option<&str>) -> Context {
        Context { cwd: cwd.map(str::to_owned), ..Context::default() }
    }

    #[test]
    fn timeouts_default_and_stay_in_range() {
        assert_eq!(timeout(None).unwrap(), 30_000);
        assert_eq!(timeout(Some(600_000)).unwrap(), 600_000);
        assert!(matches!(timeout(Some(0)), Err(ToolError::InvalidArguments(_))));
        assert!(matches!(timeout(Some(600_001)), Err(ToolError::InvalidArguments(_))));
    }

    #[test]
    fn the_working_directory_resolves_against_the_call_cwd() {
        let granted = ctx(Some("/work/ws/"));
        assert_eq!(working_dir(None, &granted).unwrap(), Path::new("/work/ws"));
        assert_eq!(
            working_dir(Some("./src//bin"), &granted).unwrap(),
            Path::new("/work/ws/src/bin")
        );
        assert_eq!(working_dir(Some("/tmp/x/"), &granted).unwrap(), Path::new("/tmp/x"));
        assert_eq!(working_dir(None, &ctx(None)), None);
    }

    #[test]
    fn host_errors_become_tool_errors() {
        assert_eq!(
            run_error(ProcessError::Denied("process denied: `rm x`".into()), 1, None),
            ToolError::Denied("process denied: `rm x`".into())
        );
        assert_eq!(
            run_error(ProcessError::Timeout, 2500, None),
            ToolError::Failed("command timed out after 2500 ms".into())
        );
        let spawn = || ProcessError::Spawn("nope: No such file or directory".into());
        let started_in = std::env::temp_dir();
        assert_eq!(
            run_error(spawn(), 1, Some(&started_in)),
            ToolError::Failed("cannot start: nope: No such file or directory".into())
        );
        assert_eq!(
            run_error(spawn(), 1, Some(Path::new("/no/such/dir"))),
            ToolError::Failed(
                "cannot start: the working directory /no/such/dir does not exist or is not a \
                 directory"
                    .into()
            )
        );
    }
}

/// Entry points for the fuzz targets (tests/fuzz).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// The words this tool would run for `line` (the program first), or
    /// why it refuses the line.
    pub fn parse(line: &str) -> Result<Vec<String>, String> {
        match crate::command::parse(line) {
            Ok(parsed) => Ok(std::iter::once(parsed.program).chain(parsed.args).collect()),
            Err(e) => Err(format!("{e:?}")),
        }
    }
}
