//! `reson tool ...`: how tool authors try a tool without a model.

use super::exit;
use super::term::{one_line, say, say_err};
use anyhow::Context as _;
use clap::Subcommand;
use reson::plugin::{CallContext, CallError, Runtime, ToolFailure};
use std::io::Read as _;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The tools on offer, with their argument schemas.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its output.
    Call {
        /// Tool name.
        tool: String,
        /// Arguments as a JSON object; `-` reads them from stdin.
        #[arg(default_value = "{}")]
        args: String,
        /// Print the whole result (or error) as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn run(runtime: &Runtime, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { json: true } => {
            say!("{}", serde_json::to_string_pretty(&runtime.tools())?);
        }
        Command::List { json: false } => {
            for tool in runtime.tools() {
                let description = one_line(&tool.description);
                say!("{:<12} {:<10} {description}", tool.name, format!("[{}]", tool.plugin));
            }
            for plugin in runtime.plugins() {
                for refused in &plugin.refused_tools {
                    say!(
                        "not served: {} of plugin `{}`: {}",
                        refused.name,
                        plugin.name,
                        one_line(&refused.reason)
                    );
                }
            }
        }
        Command::Call { tool, args, json } => {
            let args = if args == "-" {
                tokio::task::spawn_blocking(|| {
                    let mut buf = String::new();
                    std::io::stdin().read_to_string(&mut buf).map(|_| buf)
                })
                .await?
                .context("reading arguments from stdin")?
            } else {
                args.clone()
            };
            return Ok(call(runtime, tool, &args, *json).await);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(runtime: &Runtime, tool: &str, args: &str, json: bool) -> ExitCode {
    match runtime.call_tool(tool, args, &CallContext::default()).await {
        Ok(out) if json => {
            say!("{}", serde_json::to_string_pretty(&out).expect("tool output serialises"));
            ExitCode::SUCCESS
        }
        Ok(out) => {
            say!("{}", out.text);
            for image in &out.images {
                say!("[image {} ({} bytes)]", image.media_type, image.data.len());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            if json {
                say!("{}", serde_json::to_string_pretty(&err).expect("errors serialise"));
            }
            say_err!("error: {err}");
            ExitCode::from(exit_code(&err))
        }
    }
}

fn exit_code(err: &CallError) -> u8 {
    match err {
        CallError::UnknownTool { .. } | CallError::InvalidArguments { .. } => exit::USAGE,
        CallError::Denied { .. } | CallError::Tool { failure: ToolFailure::Denied(_), .. } => {
            exit::DENIED
        }
        CallError::Tool { .. } => exit::TOOL_FAILED,
        CallError::LimitExceeded { .. } => exit::LIMIT,
        CallError::Trapped { .. } => exit::TRAPPED,
        CallError::Internal { .. } | CallError::Cancelled { .. } => exit::HOST,
    }
}
