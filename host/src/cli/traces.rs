//! `reson traces ...`: list traces and show one as a tree.

use super::term::{say, say_err, say_part};
use clap::Subcommand;
use reson::trace::{FileTraceStore, Trace, TraceFilter, TraceStore};
use std::path::Path;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Every trace, newest first.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only root traces, not sub-agents'.
        #[arg(long)]
        roots: bool,
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
        Command::List { json, roots } => {
            let filter = TraceFilter { roots_only: *roots, ..TraceFilter::default() };
            let traces = store.list_traces(&filter).await?;
            if *json {
                say!("{}", serde_json::to_string_pretty(&traces)?);
            } else if traces.is_empty() {
                say!("no traces in {}", dir.display());
            } else {
                for t in traces {
                    let status = serde_json::to_value(t.status)?;
                    let task: String = t.task.chars().take(60).collect();
                    let sub = if t.parent_trace_id.is_some() { "↳ " } else { "" };
                    say!(
                        "{}  {:<9}  {:>4} msgs  {:>7} tokens  {sub}{task}",
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
            show_sub_traces(&store, &trace).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The sub-agents of `root`, each under the goal that started it, with its
/// status and totals, their own sub-agents indented below them; then the
/// totals of the whole tree.
async fn show_sub_traces(store: &FileTraceStore, root: &Trace) -> anyhow::Result<()> {
    /// The sub-traces of `id`, newest first, so that popping them from a
    /// stack visits the oldest first.
    async fn children(store: &FileTraceStore, id: &str) -> anyhow::Result<Vec<Trace>> {
        let filter = TraceFilter { parent_trace_id: Some(id.to_owned()), ..TraceFilter::default() };
        let mut children = store.list_traces(&filter).await?;
        children.sort_by_key(|t| std::cmp::Reverse(t.created_at_ms));
        Ok(children)
    }
    let mut stack: Vec<(Trace, usize)> =
        children(store, &root.id).await?.into_iter().map(|t| (t, 1)).collect();
    if stack.is_empty() {
        return Ok(());
    }
    say!("\nsub-agents (calling goal → trace, preset, status, totals, task):");
    let mut tree = root.totals;
    while let Some((child, depth)) = stack.pop() {
        tree += &child.totals;
        let status = serde_json::to_value(child.status)?;
        let t = child.totals;
        let task: String = child.task.chars().take(60).collect();
        say!(
            "{:indent$}{} → {}  {}  {}  {} msgs, {} tokens, ${:.4}, {} ms  {task}",
            "",
            child.parent_goal_id.as_deref().unwrap_or("-"),
            child.id,
            child.agent_type,
            status.as_str().unwrap_or(""),
            t.messages,
            t.usage.prompt_tokens + t.usage.completion_tokens,
            t.cost,
            t.duration_ms,
            indent = depth * 2
        );
        stack.extend(children(store, &child.id).await?.into_iter().map(|t| (t, depth + 1)));
    }
    let u = tree.usage;
    say!(
        "tree totals: {} messages, {} model requests, {} prompt / {} completion tokens, ${:.4}, {} ms",
        tree.messages,
        tree.requests,
        u.prompt_tokens,
        u.completion_tokens,
        tree.cost,
        tree.duration_ms
    );
    Ok(())
}
