//! `reson traces ...`: list traces, show one as a tree, diff its workspace
//! between two messages, replay its plugin calls offline, copy them between
//! the file store and PostgreSQL.

use super::run::status_word;
use super::term::{
    Stream, clean, diff_text, paint, say, say_err, say_error, say_json, say_part, status_style,
    style, write_out,
};
use anyhow::Context as _;
use clap::{Subcommand, ValueEnum};
use reson::config::{Config, StoreKind};
use reson::database::Database;
use reson::plugin::Options;
use reson::replay::{ReplayError, Scratch};
use reson::store::database_options;
use reson::trace::{
    Durability, FileTraceStore, PgTraceStore, Trace, TraceError, TraceFilter, TraceStatus,
    TraceStore,
};
use reson::workspace::WorkspaceError;
use std::path::PathBuf;
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
        /// Only this user's traces.
        #[arg(long, value_name = "UID")]
        user: Option<String>,
    },
    /// One trace: its message tree (branches visible, tool calls with
    /// their arguments) and goal tree.
    Show {
        /// Trace id [default: the latest trace]
        id: Option<String>,
        /// Print JSON (trace, messages, goals) instead of trees.
        #[arg(long)]
        json: bool,
        /// Show the goal tree of the branch ending at this sequence instead
        /// of the main path's.
        #[arg(long)]
        at: Option<u64>,
    },
    /// What the trace's tool calls changed in the workspace between two
    /// messages (from their checkpoints).
    Diff {
        /// Trace id [default: the latest trace]
        id: Option<String>,
        /// The earlier message [default: 1, the task]
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// The later message [default: the trace's last]
        #[arg(long)]
        to: Option<u64>,
        /// Only the changed paths and sizes, no text diffs.
        #[arg(long)]
        stat: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reflect on a finished trace: the model writes what it learnt into
    /// the experiences, on a side branch of the trace (its head stays).
    Reflect(super::learn::ReflectArgs),
    /// Run a trace's plugin tool calls again, offline, against the effects
    /// recorded with them (no network, no commands, the recorded clock and
    /// randomness), on a scratch copy of the workspace; model answers come
    /// from the trace. Prints "identical" (exit 0) or the first divergence
    /// (exit 1).
    Replay(ReplayArgs),
    /// Copy every trace from the file store into PostgreSQL, or back.
    /// Traces already in the target are compared, never overwritten.
    Migrate {
        /// Where the traces go: `postgres` (from the trace directory) or
        /// `file` (from the database into the trace directory).
        #[arg(long)]
        to: Target,
        /// The database [default: [store] url]
        #[arg(long)]
        url: Option<String>,
        /// The trace directory [default: --traces-dir, else traces_dir of the config]
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `traces replay`.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// Trace id.
    id: String,
    /// Run the calls with the plugins of this directory (a new build)
    /// instead of the configured ones.
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Replay the calls of messages from this sequence on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    from: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Points the runtime of a replay at a scratch copy of the workspace, a
/// throwaway copy of the lock file (a replay accepts nothing for the user)
/// and the plugins of `--plugins`; `scratch` keeps the copy.
pub(crate) fn prepare_replay(
    options: &mut Options,
    args: &ReplayArgs,
    scratch: &mut Option<Scratch>,
) -> anyhow::Result<()> {
    let made = reson::replay::scratch(&options.config)?;
    if let Some(dir) = &args.plugins {
        options.plugins_dir = dir.clone();
    }
    let lock = made.path().join("reson.lock");
    if options.lock_file.exists() {
        std::fs::copy(&options.lock_file, &lock)
            .with_context(|| format!("copying {}", options.lock_file.display()))?;
    }
    options.lock_file = lock;
    options.config = made.config.clone();
    *scratch = Some(made);
    Ok(())
}

/// `traces replay`: the report, and exit 0 when identical, 1 when not.
pub(crate) async fn replay(
    host: &super::Host,
    scratch: Option<&Scratch>,
    args: &ReplayArgs,
) -> anyhow::Result<ExitCode> {
    let stores = super::open_stores(&host.config).await?;
    let report =
        match reson::replay::replay(&*stores.traces, &args.id, host, scratch, args.from).await {
            Ok(report) => report,
            Err(e @ ReplayError::NoSuchTrace(_)) => {
                say_error!("{e}");
                return Ok(ExitCode::from(super::exit::USAGE));
            }
            Err(e) => return Err(e.into()),
        };
    if args.json {
        say_json(&serde_json::to_string_pretty(&report)?);
    } else {
        say!("{report}");
    }
    Ok(if report.identical() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::exit::TOOL_FAILED)
    })
}

/// Where `traces migrate` copies to.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Target {
    Postgres,
    File,
}

pub(crate) async fn run(config: &Config, command: &Command) -> anyhow::Result<ExitCode> {
    if let Command::Migrate { to, url, dir } = command {
        return migrate(config, *to, url.as_deref(), dir.clone()).await;
    }
    let store = super::open_stores(config).await?.traces;
    let store = &*store;
    let place = match config.traces.store.kind {
        StoreKind::File => config.traces.traces_dir().display().to_string(),
        StoreKind::Postgres => database_options(&config.traces, &config.plugins)?.display_url(),
    };
    match command {
        Command::Reflect(_) | Command::Replay(_) | Command::Migrate { .. } => {
            unreachable!(
                "reflect needs a provider, replay a runtime and migrate two stores: handled apart"
            )
        }
        Command::List { json, roots, user } => {
            let filter =
                TraceFilter { roots_only: *roots, uid: user.clone(), ..TraceFilter::default() };
            let traces = store.list_traces(&filter).await?;
            if *json {
                say_json(&serde_json::to_string_pretty(&traces)?);
            } else if traces.is_empty() {
                say!("no traces in {place}");
            } else {
                for t in traces {
                    let task: String = t.task.chars().take(60).collect();
                    let sub = if t.parent_trace_id.is_some() { "↳ " } else { "" };
                    // Padded before it is painted: the codes take no room.
                    let status = format!("{:<9}", status_word(t.status));
                    let status = paint(Stream::Out, status_style(t.status), &status);
                    let rest = clean(&format!(
                        "{:>4} msgs  {:>7} tokens  {sub}{task}",
                        t.totals.messages,
                        t.totals.usage.prompt_tokens + t.totals.usage.completion_tokens
                    ));
                    write_out(&format!("{}  {status}  {rest}\n", clean(&t.id)));
                }
            }
        }
        Command::Show { id, json, at } => {
            let Some(id) = trace_or_latest(store, id.as_deref(), &place).await? else {
                return Ok(ExitCode::from(super::exit::USAGE));
            };
            let id = &id;
            let Some(trace) = store.get_trace(id).await? else {
                say_error!("no trace {id} in {place}");
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
                    say_error!(
                        "trace {id} has no message {sequence} (last sequence {})",
                        trace.last_sequence
                    );
                    return Ok(ExitCode::from(super::exit::USAGE));
                }
            };
            if *json {
                let all =
                    serde_json::json!({ "trace": trace, "messages": messages, "goals": goals });
                say_json(&serde_json::to_string_pretty(&all)?);
                return Ok(ExitCode::SUCCESS);
            }
            let status = paint(Stream::Out, status_style(trace.status), status_word(trace.status));
            write_out(&format!(
                "trace {}  {status}  {}\n",
                clean(&trace.id),
                clean(&format!("task: {}", trace.task))
            ));
            let u = trace.totals.usage;
            say!(
                "{}, {}, {} prompt / {} completion / {} reasoning / {} cache-read / {} cache-write tokens, {}, {} ms",
                super::term::plural(trace.totals.messages as usize, "message", "messages"),
                super::term::plural(
                    trace.totals.requests as usize,
                    "model request",
                    "model requests"
                ),
                u.prompt_tokens,
                u.completion_tokens,
                u.reasoning_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                reson::policy::dollars(trace.totals.cost),
                trace.totals.duration_ms
            );
            if let Some(error) = &trace.error_message {
                let label = paint(Stream::Out, style::ERROR, "error:");
                write_out(&format!("{label} {}\n", clean(error)));
            }
            say!("\nmessages (* = main path):");
            // A path that works from anywhere, to open the image with.
            let dir = config.traces.traces_dir();
            let dir = std::path::absolute(&dir).unwrap_or(dir);
            let image = |image: &reson::trace::ImageRef| match config.traces.store.kind {
                StoreKind::File => {
                    dir.join(&trace.id).join("messages").join(&image.name).display().to_string()
                }
                StoreKind::Postgres => {
                    format!("<{} stored in postgres, {} bytes>", image.name, image.bytes)
                }
            };
            say_part!("{}", reson::trace::render_tree(&messages, trace.head_sequence, &image));
            match at {
                Some(sequence) => say!("\ngoals (branch ending at {sequence}):"),
                None => say!("\ngoals:"),
            }
            // Only a running trace has a goal being worked on.
            let goals = if trace.status == TraceStatus::Running { goals } else { goals.settled() };
            say_part!("{}", goals.render());
            show_checkpoints(store, &trace.id).await?;
            show_sub_traces(store, &trace).await?;
        }
        Command::Diff { id, from, to, stat, json } => {
            let Some(id) = trace_or_latest(store, id.as_deref(), &place).await? else {
                return Ok(ExitCode::from(super::exit::USAGE));
            };
            let to = match to {
                Some(to) => *to,
                None => store.get_trace(&id).await?.map_or(*from, |t| t.last_sequence),
            };
            let files = match reson::workspace::diff(store, &id, *from, to).await {
                Ok(files) => files,
                Err(e @ WorkspaceError::NoSuchMessage { .. })
                | Err(e @ WorkspaceError::Store(TraceError::NotFound(_))) => {
                    say_error!("{e}");
                    return Ok(ExitCode::from(super::exit::USAGE));
                }
                Err(e) => return Err(e.into()),
            };
            if *json {
                say_json(&serde_json::to_string_pretty(&files)?);
            } else if files.is_empty() {
                say!("no files changed between {from} and {to}");
            } else {
                print_diff(&files, *stat);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `id`, or the newest trace (saying which on stderr); `None`, said, when
/// there is none.
async fn trace_or_latest(
    store: &dyn TraceStore,
    id: Option<&str>,
    place: &str,
) -> anyhow::Result<Option<String>> {
    if let Some(id) = id {
        return Ok(Some(id.to_owned()));
    }
    let filter = TraceFilter { roots_only: true, ..TraceFilter::default() };
    match store.list_traces(&filter).await?.into_iter().next() {
        Some(latest) => {
            say_err!("(the latest trace, {})", latest.id);
            Ok(Some(latest.id))
        }
        None => {
            say_error!("no traces in {place}");
            Ok(None)
        }
    }
}

/// The checkpoints of trace `id`, one a line: key, cause, paths changed.
async fn show_checkpoints(store: &dyn TraceStore, id: &str) -> anyhow::Result<()> {
    let checkpoints = reson::workspace::checkpoints(store, id).await?;
    if checkpoints.is_empty() {
        return Ok(());
    }
    say!("\nworkspace checkpoints (after message: cause, files):");
    for (key, checkpoint) in checkpoints {
        say!("  {key}  {}: {} files", checkpoint.cause, checkpoint.paths());
    }
    Ok(())
}

/// `traces diff` as text: per file its change and sizes, then (unless
/// `stat`) its unified diff.
fn print_diff(files: &[reson::workspace::FileDiff], stat: bool) {
    use reson::workspace::Change;
    let size = |s: Option<u64>| s.map_or_else(|| "-".to_owned(), |s| s.to_string());
    for file in files {
        let (mark, mark_style) = match file.change {
            Change::Added => ("A", style::GOOD),
            Change::Removed => ("D", style::BAD),
            Change::Modified => ("M", style::PENDING),
        };
        let mark = paint(Stream::Out, mark_style, mark);
        let what = clean(&format!(
            "{}  ({} -> {} bytes)",
            file.root.join(&file.path).display(),
            size(file.old_size),
            size(file.new_size)
        ));
        write_out(&format!("{mark} {what}\n"));
        if !stat {
            match &file.patch {
                Some(patch) => write_out(&diff_text(patch, Stream::Out)),
                None if file.change != Change::Removed => say!("  (binary, or bytes not kept)"),
                None => {}
            }
        }
    }
}

/// The sub-agents of `root`, each under the goal that started it, with its
/// status and totals, their own sub-agents indented below them; then the
/// totals of the whole tree.
async fn show_sub_traces(store: &dyn TraceStore, root: &Trace) -> anyhow::Result<()> {
    /// The sub-traces of `id`, newest first, so that popping them from a
    /// stack visits the oldest first.
    async fn children(store: &dyn TraceStore, id: &str) -> anyhow::Result<Vec<Trace>> {
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
        let t = child.totals;
        let task: String = child.task.chars().take(60).collect();
        say!(
            "{:indent$}{} → {}  {}  {}  {} msgs, {} tokens, {}, {} ms  {task}",
            "",
            child.parent_goal_id.as_deref().unwrap_or("-"),
            child.id,
            child.agent_type,
            status_word(child.status),
            t.messages,
            t.usage.prompt_tokens + t.usage.completion_tokens,
            reson::policy::dollars(t.cost),
            t.duration_ms,
            indent = depth * 2
        );
        stack.extend(children(store, &child.id).await?.into_iter().map(|t| (t, depth + 1)));
    }
    let u = tree.usage;
    say!(
        "tree totals: {}, {}, {} prompt / {} completion tokens, {}, {} ms",
        super::term::plural(tree.messages as usize, "message", "messages"),
        super::term::plural(tree.requests as usize, "model request", "model requests"),
        u.prompt_tokens,
        u.completion_tokens,
        reson::policy::dollars(tree.cost),
        tree.duration_ms
    );
    Ok(())
}

/// `traces migrate`: copies between the trace directory and the database,
/// whatever `[store] kind` says, so that a host can move either way.
async fn migrate(
    config: &Config,
    to: Target,
    url: Option<&str>,
    dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let mut config = config.clone();
    if let Some(url) = url {
        config.traces.store.url = Some(url.to_owned());
    }
    if config.traces.store.url.is_none() {
        anyhow::bail!("traces migrate needs a database: give --url or set [store] url");
    }
    let options = database_options(&config.traces, &config.plugins)?;
    let database = Database::connect_with(&options).await.context("cannot open the database")?;
    let database_store = PgTraceStore::new(database.clone());
    let dir = dir.unwrap_or_else(|| config.traces.traces_dir());
    let file_store = FileTraceStore::open(&dir, Durability::Batched)?;
    let (from, into, from_name, into_name): (&dyn TraceStore, &dyn TraceStore, String, String) =
        match to {
            Target::Postgres => {
                (&file_store, &database_store, dir.display().to_string(), options.display_url())
            }
            Target::File => {
                (&database_store, &file_store, options.display_url(), dir.display().to_string())
            }
        };
    let done = reson::trace::copy_traces(from, into).await?;
    into.sync().await?;
    database.close().await;
    for id in &done.differing {
        say_err!("{id}: differs from the copy already in {into_name}: left alone");
    }
    for (id, e) in &done.failed {
        say_err!("{id}: not copied: {e}");
    }
    say!(
        "{} traces copied from {from_name} to {into_name}, {} already there, {} differing, {} failed",
        done.copied.len(),
        done.identical.len(),
        done.differing.len(),
        done.failed.len()
    );
    Ok(if done.is_complete() {
        ExitCode::SUCCESS
    } else if done.failed.is_empty() {
        ExitCode::from(super::exit::CONFLICT)
    } else {
        ExitCode::from(super::exit::HOST)
    })
}
