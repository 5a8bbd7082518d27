//! `reson traces ...`: list traces and show one as a tree.

use super::term::{say, say_err, say_part};
use clap::Subcommand;
use reson::trace::{FileTraceStore, TraceFilter, TraceStore};
use std::path::Path;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Every trace, newest first.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One trace: its message tree (branches visible) and goal tree.
    Show {
        /// Trace id.
        id: String,
        /// Print JSON (trace, messages, goals) instead of trees.
        #[arg(long)]
        json: bool,
        /// Show the goal tree of the branch ending at this sequence instead
        /// of the main path's.
        #[arg(long)]
        at: Option<u64>,
    },
    /// Reflect on a finished trace: the model writes what it learnt into
    /// experiences.md, on a side branch of the trace (its head stays).
    Reflect(super::learn::ReflectArgs),
}

pub(crate) async fn run(dir: &Path, command: &Command) -> anyhow::Result<ExitCode> {
    let store = FileTraceStore::open(dir, reson::trace::Durability::Batched)?;
    match command {
        Command::Reflect(_) => unreachable!("reflect needs a provider: cli::command runs it"),
        Command::List { json } => {
            let traces = store.list_traces(&TraceFilter::default()).await?;
            if *json {
                say!("{}", serde_json::to_string_pretty(&traces)?);
            } else if traces.is_empty() {
                say!("no traces in {}", dir.display());
            } else {
                for t in traces {
                    let status = serde_json::to_value(t.status)?;
                    let task: String = t.task.chars().take(60).collect();
                    say!(
                        "{}  {:<9}  {:>4} msgs  {:>7} tokens  {task}",
                        t.id,
                        status.as_str().unwrap_or(""),
                        t.totals.messages,
                        t.totals.usage.prompt_tokens + t.totals.usage.completion_tokens
                    );
                }
            }
        }
        Command::Show { id, json, at } => {
            let Some(trace) = store.get_trace(id).await? else {
                say_err!("error: no trace {id} in {}", dir.display());
                return Ok(ExitCode::from(super::exit::USAGE));
            };
            let messages = store.get_messages(id).await?;
            // goal.json is the main path's tree (runs keep it for the branch
            // they run on); another branch's comes from its own messages.
            let goals = match at {
                None => store.get_goals(id).await?,
                Some(sequence) if messages.iter().any(|m| m.sequence == *sequence) => {
                    let path = store.get_main_path_messages(id, *sequence).await?;
                    reson::tools::goal::branch_tree(&path, &trace.task)?
                }
                Some(sequence) => {
                    say_err!(
                        "error: trace {id} has no message {sequence} (last sequence {})",
                        trace.last_sequence
                    );
                    return Ok(ExitCode::from(super::exit::USAGE));
                }
            };
            if *json {
                let all =
                    serde_json::json!({ "trace": trace, "messages": messages, "goals": goals });
                say!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(ExitCode::SUCCESS);
            }
            let status = serde_json::to_value(trace.status)?;
            say!("trace {}  {}  task: {}", trace.id, status.as_str().unwrap_or(""), trace.task);
            let u = trace.totals.usage;
            say!(
                "{} messages, {} model requests, {} prompt / {} completion / {} reasoning / {} cache-read / {} cache-write tokens, ${:.4}, {} ms",
                trace.totals.messages,
                trace.totals.requests,
                u.prompt_tokens,
                u.completion_tokens,
                u.reasoning_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                trace.totals.cost,
                trace.totals.duration_ms
            );
            if let Some(error) = &trace.error_message {
                say!("error: {error}");
            }
            say!("\nmessages (* = main path):");
            say_part!("{}", reson::trace::render_tree(&messages, trace.head_sequence));
            match at {
                Some(sequence) => say!("\ngoals (branch ending at {sequence}):"),
                None => say!("\ngoals:"),
            }
            say_part!("{}", goals.render());
        }
    }
    Ok(ExitCode::SUCCESS)
}
