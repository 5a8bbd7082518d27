//! The agent loop: prepare the trace (new, continue, rewind, regenerate),
//! then call the model, persist, run tools, persist, until the model stops
//! calling tools, `stop()` is called, or a limit is reached.
//!
//! Data flows one way: model → loop → tools → trace. Every message is
//! persisted before the next step starts, so a crash at any point leaves a
//! trace that a later continue picks up; tool calls left without a result
//! are healed with a synthetic "interrupted" result before the next model
//! call.
//!
//! Each run is one tokio task, stopped through its [`CancellationToken`]:
//! the model call, the tool calls, the retry wait and an approval wait in
//! flight all end when it is cancelled.
//!
//! This module holds the public types and the loop; each phase has a file
//! of its own: `prepare` (the trace a run writes), `model` (the model
//! call), `tools` (tool execution), `finish` (the end of a run), and
//! `compact` (compaction before a model call).

mod compact;
mod finish;
mod model;
mod prepare;
mod tools;

#[cfg(test)]
pub(crate) use model::collaborators_section;
pub(crate) use tools::{Caller, TraceUpdate};

use crate::agent::approval::{ApprovalRequest, Permissions};
use crate::agent::compaction::CompactionConfig;
use crate::agent::doom::DoomLoopDetector;
use crate::agent::error::AgentError;
use crate::agent::hooks::{HookEvent, HookPoint, Hooks};
use crate::policy::{Budget, Meter};
use crate::provider::{ChatProvider, LlmParams};
use crate::telemetry::{Span, Telemetry};
use crate::tools::ToolRegistry;
use futures::stream::Stream;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{
    EventKind, GoalStats, GoalTree, Message, MessageTree, Trace, TraceMode, TraceStatus,
    TraceStore, Usage,
};
use serde::Serialize;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use reson_trace::INTERRUPTED;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Continue or rewind this trace; a new trace when `None`.
    pub trace_id: Option<String>,
    /// A new trace's id, for a caller that must know it before the run is
    /// prepared (to claim it); a fresh one when `None`.
    pub new_trace_id: Option<String>,
    /// Rewind: new messages follow this sequence (extended past the tool
    /// results of an assistant message). With no messages: regenerate.
    pub after_sequence: Option<u64>,
    /// System prompt; on a continue, `None` keeps the trace's.
    pub system_prompt: Option<String>,
    /// `agent` or `task`.
    pub mode: TraceMode,
    /// Recorded in the trace.
    pub agent_type: String,
    /// The user the run belongs to; sub-agents inherit it.
    pub uid: Option<String>,
    /// A new trace's task (and root goal); the first user message when unset.
    pub task: Option<String>,
    /// Model and sampling.
    pub params: LlmParams,
    /// Most model calls in one run.
    pub max_iterations: u32,
    /// The same call (or cycle of calls) this many times ends the run.
    pub doom_loop_threshold: usize,
    /// The goal tree is appended to the history every this many iterations.
    pub goal_reminder_every: u32,
    /// Retries of a retryable model error.
    pub max_retries: u32,
    /// First retry delay; doubles each attempt (plus jitter) unless the
    /// provider says how long to wait.
    pub retry_base_delay: Duration,
    /// For a sub-agent: the calling trace and goal.
    pub parent: Option<(String, String)>,
    /// What this run and all its sub-agents may spend together. (A
    /// sub-agent's budget is carved from its caller's, whatever this says.)
    pub budget: Budget,
    /// A new trace's skills, by name, for its system prompt; every skill
    /// when `None`. Needs a registry with skills.
    pub skills: Option<Vec<String>>,
    /// When and how the history is compacted.
    pub compaction: CompactionConfig,
    /// The largest image a tool result may carry to the model, in bytes
    /// (5 MiB by default, what Anthropic takes per image); a larger one is
    /// left out and the model told why.
    pub max_image_bytes: u64,
    /// Record each plugin tool call's effects with the trace, for
    /// [`replay`](crate::replay) (on by default).
    pub record_effects: bool,
    /// Workspace checkpoints around calls that can write (`[checkpoints]`).
    pub checkpoints: crate::config::CheckpointsConfig,
    /// With `after_sequence`: put the files the trace's calls changed back
    /// as they were at the message the rewind starts from, before the run
    /// goes on. Files changed outside Reson since make the run fail to
    /// start, with their list and nothing written, unless `force_restore`.
    pub restore_files: bool,
    /// Restore over files changed outside Reson.
    pub force_restore: bool,
}

const DEFAULT_MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            trace_id: None,
            new_trace_id: None,
            after_sequence: None,
            system_prompt: None,
            mode: TraceMode::Agent,
            agent_type: "default".into(),
            uid: None,
            task: None,
            params: LlmParams::default(),
            max_iterations: 50,
            doom_loop_threshold: 3,
            goal_reminder_every: 10,
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
            parent: None,
            budget: Budget::default(),
            skills: None,
            compaction: CompactionConfig::default(),
            max_image_bytes: DEFAULT_MAX_IMAGE_BYTES,
            record_effects: true,
            checkpoints: crate::config::CheckpointsConfig::default(),
            restore_files: false,
            force_restore: false,
        }
    }
}

/// Which of the entry point's modes a run took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    /// A new trace.
    New,
    /// Appended after the head.
    Continue,
    /// New messages after an earlier sequence.
    Rewind,
    /// Rewind with no new message: the model answers again.
    Regenerate,
}

/// What a run reports while it goes. New kinds of events may be added.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The trace is ready.
    TraceStarted {
        /// Its id.
        trace_id: String,
        /// How it was prepared.
        mode: RunMode,
    },
    /// A message was persisted.
    MessageAdded {
        /// The message as stored.
        message: Box<Message>,
    },
    /// A model call starts.
    ModelRequest {
        /// Iteration, from 1.
        iteration: u32,
    },
    /// Streamed answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Streamed reasoning text.
    ReasoningDelta {
        /// The new text.
        text: String,
    },
    /// A model call failed and will be tried again. Text the failed
    /// attempt streamed is not part of the answer: the retry streams the
    /// answer from its start.
    Retrying {
        /// Attempt about to be made, from 2.
        attempt: u32,
        /// The error.
        error: String,
        /// The wait before it.
        delay_ms: u64,
    },
    /// A tool call waits for approval: answer it through the run's
    /// approver (for example [`PendingApprovals::answer`](super::PendingApprovals::answer)).
    ApprovalNeeded {
        /// The request.
        request: ApprovalRequest,
    },
    /// An `ask_human` call waits for a person: answer it through the run's
    /// asker (for example [`PendingQuestions::answer`](super::PendingQuestions::answer)).
    QuestionAsked {
        /// The question.
        question: super::question::Question,
    },
    /// A tool call starts.
    ToolStarted {
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: String,
    },
    /// A tool call ended. These go out as calls end; the results are
    /// stored (`MessageAdded`) in the order of the calls.
    ToolFinished {
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// Whether it succeeded.
        ok: bool,
        /// What the model will see.
        output: String,
    },
    /// The goal tree changed.
    GoalChanged {
        /// The tree, rendered.
        tree: String,
    },
    /// A rewind put the workspace back as it was at its point
    /// (`RunConfig::restore_files`).
    FilesRestored {
        /// Files and links written back.
        written: Vec<std::path::PathBuf>,
        /// Files and links removed.
        removed: Vec<std::path::PathBuf>,
        /// Files whose bytes the trace does not keep, left as they are.
        not_restorable: Vec<std::path::PathBuf>,
    },
    /// The history was compacted (see [`EventKind::Compacted`]).
    Compacted {
        /// 1 or 2.
        level: u8,
        /// Closed goals whose messages were left out (level 1).
        goals: Vec<String>,
        /// The sequences left out (level 1) or summarised (level 2).
        sequences: Vec<u64>,
        /// The summary message (level 2).
        summary_sequence: Option<u64>,
        /// Tokens of the request before.
        tokens_before: u64,
        /// Tokens of the request after.
        tokens_after: u64,
    },
    /// The run ended.
    Finished {
        /// How.
        status: TraceStatus,
        /// Why it failed, if it did.
        error: Option<String>,
    },
    /// An event of a sub-agent started by an `agent` or `evaluate` call
    /// (nested once more per level of sub-agents).
    SubAgent {
        /// The call that started the sub-agent.
        call_id: String,
        /// The sub-agent's trace.
        sub_trace_id: String,
        /// What happened there.
        event: Box<AgentEvent>,
    },
}

impl AgentEvent {
    /// The approval request this event carries, its own or a sub-agent's
    /// (answer it through the root run's approver either way).
    pub fn approval_request(&self) -> Option<&ApprovalRequest> {
        match self {
            Self::ApprovalNeeded { request } => Some(request),
            Self::SubAgent { event, .. } => event.approval_request(),
            _ => None,
        }
    }

    /// The question this event carries, its own or a sub-agent's.
    pub fn question(&self) -> Option<&super::question::Question> {
        match self {
            Self::QuestionAsked { question } => Some(question),
            Self::SubAgent { event, .. } => event.question(),
            _ => None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The trace.
    pub trace_id: String,
    /// Completed or stopped (failures are errors).
    pub status: TraceStatus,
    /// The last assistant text.
    pub final_text: Option<String>,
    /// Model calls made.
    pub iterations: u32,
    /// Model requests sent, failed attempts included.
    pub requests: u32,
    /// Tokens used by this run.
    pub usage: Usage,
    /// Cost of this run.
    pub cost: f64,
}

/// A run in progress: its events, and its outcome when it ends. The
/// events are also a [`Stream`].
///
/// Dropping the handle stops the run, as [`stop`](Self::stop) does: the
/// model or tool call in flight is cut, the trace ends `stopped`, and a
/// later continue picks it up. [`detach`](Self::detach) lets a run go on
/// without its handle.
pub struct RunHandle {
    trace_id: String,
    events: mpsc::UnboundedReceiver<AgentEvent>,
    task: JoinHandle<Result<RunOutcome, AgentError>>,
    cancel: CancellationToken,
    stop_on_drop: DropGuard,
}

impl RunHandle {
    /// The trace this run writes.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The next event, waiting for it; `None` once the run has ended and
    /// every event was taken. Dropping this future loses no event.
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.recv().await
    }

    /// Asks the run to stop, as [`Runner::stop`] does for its trace.
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// Waits for the end, dropping events not yet taken.
    pub async fn wait(self) -> Result<RunOutcome, AgentError> {
        let Self { events, task, stop_on_drop, .. } = self;
        drop(events);
        let outcome = task.await;
        // Only now: dropping this future before the run ended must stop it.
        stop_on_drop.disarm();
        outcome.unwrap_or_else(|e| Err(task_failed(&e)))
    }

    /// Lets the run go on by itself: dropping the returned handle no longer
    /// stops it (stop it with [`Runner::stop`]), and its events are
    /// dropped.
    pub fn detach(self) -> JoinHandle<Result<RunOutcome, AgentError>> {
        self.stop_on_drop.disarm();
        self.task
    }
}

impl Stream for RunHandle {
    type Item = AgentEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        self.get_mut().events.poll_recv(cx)
    }
}

fn task_failed(e: &tokio::task::JoinError) -> AgentError {
    AgentError::Other(if e.is_panic() {
        "the run's task panicked".into()
    } else {
        "the run's task was cancelled".into()
    })
}

#[derive(Clone)]
struct Inner {
    store: Arc<dyn TraceStore>,
    provider: Arc<dyn ChatProvider>,
    tools: ToolRegistry,
    hooks: Hooks,
    permissions: Option<Arc<Permissions>>,
    /// Where spans and metrics go; sub-agents' runners share it.
    telemetry: Telemetry,
    /// Shared with the runners of sub-agents, so `stop` reaches them too.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl Inner {
    /// The tool specs the model is offered.
    fn offered_tools(&self) -> Vec<ToolSpec> {
        let specs = self.tools.specs();
        match &self.permissions {
            Some(p) => specs.into_iter().filter(|t| p.offered(&t.name)).collect(),
            None => specs,
        }
    }
}

/// What a sub-agent's run gets from its caller.
pub(crate) struct Link {
    /// Carved from the caller's.
    pub(crate) meter: Arc<Meter>,
    /// Cancelled with the caller's.
    pub(crate) cancel: CancellationToken,
    /// Put in a new trace's `context.extra`.
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
    /// How many runs are above it: its caller's depth plus one.
    pub(crate) depth: u32,
    /// The span of the call that starts it: its own span goes under it.
    pub(crate) parent_span: Span,
}

/// A trace's entry in the set of running traces, removed when this is
/// dropped: when the run ends, fails to prepare, or is dropped unprepared.
struct Claim {
    inner: Arc<Inner>,
    trace_id: Option<String>,
}

impl Claim {
    /// Claims `trace_id` for the run `cancel` stops; an error when another
    /// run has it.
    fn take(&mut self, trace_id: &str, cancel: &CancellationToken) -> Result<(), AgentError> {
        let mut running = self.inner.running.lock().expect("running map");
        if running.contains_key(trace_id) {
            return Err(AgentError::AlreadyRunning(trace_id.to_owned()));
        }
        running.insert(trace_id.to_owned(), cancel.clone());
        self.trace_id = Some(trace_id.to_owned());
        Ok(())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(id) = &self.trace_id {
            self.inner.running.lock().expect("running map").remove(id);
        }
    }
}

/// Runs agents. Cheap to clone; clones share the set of running traces, so
/// `stop` works from any clone.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

impl Runner {
    /// A runner over a trace store, a provider, tools and hooks.
    pub fn new(
        store: Arc<dyn TraceStore>,
        provider: Arc<dyn ChatProvider>,
        tools: ToolRegistry,
        hooks: Hooks,
    ) -> Self {
        let inner = Inner {
            store,
            provider,
            tools,
            hooks,
            permissions: None,
            telemetry: Telemetry::off(),
            running: Arc::default(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// The same runner with tool calls checked by `permissions`: a denied
    /// call never runs, an `ask` waits for the approver, and tools the
    /// rules deny outright are not offered to the model.
    pub fn with_permissions(self, permissions: Permissions) -> Self {
        self.with_shared_permissions(Arc::new(permissions))
    }

    /// The same runner exporting spans and metrics of its runs (and
    /// their sub-agents') to `telemetry`.
    pub fn with_telemetry(self, telemetry: Telemetry) -> Self {
        let inner = Inner { telemetry, ..(*self.inner).clone() };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn with_shared_permissions(self, permissions: Arc<Permissions>) -> Self {
        let inner = Inner {
            permissions: Some(permissions),
            running: Arc::default(),
            ..(*self.inner).clone()
        };
        Self { inner: Arc::new(inner) }
    }

    /// The same runner offering `tools` instead, sharing the set of
    /// running traces.
    pub(crate) fn with_tools(self, tools: ToolRegistry) -> Self {
        let inner = Inner { tools, ..(*self.inner).clone() };
        Self { inner: Arc::new(inner) }
    }

    /// A sub-agent's runner: offering only `tools`, checked by
    /// `permissions`, sharing the set of running traces.
    pub(crate) fn child(&self, tools: Vec<String>, permissions: Option<Arc<Permissions>>) -> Self {
        let inner = Inner {
            tools: self.inner.tools.clone().only(tools),
            permissions,
            ..(*self.inner).clone()
        };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn permissions(&self) -> Option<Arc<Permissions>> {
        self.inner.permissions.clone()
    }

    /// The names of the tools the model is offered.
    pub(crate) fn offered_names(&self) -> Vec<String> {
        self.inner.offered_tools().into_iter().map(|t| t.name).collect()
    }

    /// The one entry point. `config.trace_id` and `config.after_sequence`
    /// choose the mode: new, continue, rewind, or (rewind with no
    /// `messages`) regenerate. The trace is prepared before this returns,
    /// so a bad trace id or sequence is an error here; the loop then runs
    /// as a task of its own (`tokio::spawn`, so call this inside a tokio
    /// runtime).
    pub async fn run(
        &self,
        messages: Vec<Message>,
        config: RunConfig,
    ) -> Result<RunHandle, AgentError> {
        self.start(messages, config, None).await
    }

    /// [`run`](Self::run), for a sub-agent when `link` is given.
    pub(crate) async fn start(
        &self,
        messages: Vec<Message>,
        config: RunConfig,
        link: Option<Link>,
    ) -> Result<RunHandle, AgentError> {
        let (events, receiver) = mpsc::unbounded_channel();
        let link = match link {
            Some(link) => link,
            None => {
                config.budget.validate().map_err(|e| AgentError::Config(e.to_string()))?;
                let meter = Meter::root(config.budget);
                Link {
                    meter,
                    cancel: CancellationToken::new(),
                    extra: Default::default(),
                    depth: 0,
                    parent_span: Span::default(),
                }
            }
        };
        let cancel = link.cancel.clone();
        let mut claim = Claim { inner: self.inner.clone(), trace_id: None };
        // An existing trace is claimed before it is prepared: preparing
        // writes to it (heals calls, moves the head, adds messages), which
        // must never happen under a run that is still going.
        if let Some(id) = config.trace_id.as_ref().or(config.new_trace_id.as_ref()) {
            claim.take(id, &cancel)?;
        }
        let span = self.inner.telemetry.invoke_agent(
            &link.parent_span,
            &config.agent_type,
            self.inner.provider.name(),
            &config.params.model,
        );
        let mut run = match Run::prepare(self.inner.clone(), messages, config, events, link).await {
            Ok(run) => run,
            Err(e) => {
                span.end_run("failed", Some(&e.to_string()), &Usage::default());
                return Err(e);
            }
        };
        span.conversation(&run.trace.id);
        run.span = span;
        let trace_id = run.trace.id.clone();
        if claim.trace_id.is_none() {
            claim.take(&trace_id, &cancel)?;
        }
        self.inner.tools.run_started(&trace_id, &self.offered_names());
        let task = tokio::spawn(async move {
            let outcome = run.execute().await;
            drop(claim);
            outcome
        });
        let stop_on_drop = cancel.clone().drop_guard();
        Ok(RunHandle { trace_id, events: receiver, task, cancel, stop_on_drop })
    }

    /// Stops a running trace: the model call, tool calls, retry wait or
    /// approval wait in flight end at once, and the run ends `stopped`.
    /// Returns whether it was running.
    pub fn stop(&self, trace_id: &str) -> bool {
        match self.inner.running.lock().expect("running map").get(trace_id) {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// The tools the model is offered.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// The trace store.
    pub fn store(&self) -> &Arc<dyn TraceStore> {
        &self.inner.store
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One run's state, owned by its task.
struct Run {
    inner: Arc<Inner>,
    config: RunConfig,
    trace: Trace,
    tree: MessageTree,
    /// Messages from the root to the head, kept in step with the trace.
    path: Vec<Message>,
    goals: GoalTree,
    system_prompt: Option<String>,
    events: mpsc::UnboundedSender<AgentEvent>,
    cancel: CancellationToken,
    usage: Usage,
    cost: f64,
    /// Model requests sent by this run, failed attempts included.
    requests: u32,
    /// What this run and its sub-agents spent, against their budgets.
    meter: Arc<Meter>,
    /// Runs started by this run's calls (sub-agents), running now.
    active: Arc<AtomicUsize>,
    /// How many runs are above this one (0 for a root run).
    depth: u32,
    /// Compaction's state in this run.
    compaction: compact::State,
    /// The images of the path as `data:` URLs, by name: read from the store
    /// once per run, not once per model call.
    images: HashMap<String, String>,
    /// The checkpoints of this run, from its first call that can write.
    workspace: Option<reson_workspace::Workspace>,
    /// This run's `invoke_agent` span.
    span: Span,
}

impl Run {
    fn emit(&self, event: AgentEvent) {
        // A caller that stopped listening does not stop the run.
        let _ = self.events.send(event);
    }

    /// Persists `message` after the head and makes it the head.
    async fn persist(&mut self, message: Message) -> Result<Message, AgentError> {
        self.persist_after(message, self.trace.head_sequence).await
    }

    /// Persists `message` after `parent`, a message of the main path, and
    /// makes it the head: the main path then leaves out what followed
    /// `parent`.
    async fn persist_after(
        &mut self,
        mut message: Message,
        parent: Option<u64>,
    ) -> Result<Message, AgentError> {
        if message.goal_id.is_none() {
            message.goal_id = self.goals.current().map(|g| g.id.clone());
        }
        // The message and its event are one write: a reader (or a host
        // taking the trace over) never sees a message without its event.
        let (stored, _) =
            self.inner.store.add_message_with_event(&mut self.trace, message, parent).await?;
        self.tree.insert(&stored);
        let kept = parent
            .and_then(|p| self.path.iter().position(|m| m.sequence == p))
            .map_or(0, |i| i + 1);
        self.path.truncate(kept);
        self.path.push(stored.clone());
        // Goal stats are saved with the next goal change or when the run
        // ends, not per message: they can be rebuilt from the messages,
        // which carry their goal id and usage.
        if let Some(goal_id) = &stored.goal_id {
            let _ = self.goals.record(goal_id, &GoalStats::of(&stored));
        }
        self.emit(AgentEvent::MessageAdded { message: Box::new(stored.clone()) });
        Ok(stored)
    }

    fn stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn hook(&self, point: HookPoint, iteration: u32) -> HookEvent {
        let mut event = HookEvent::at(point);
        event.trace_id = Some(self.trace.id.clone());
        event.iteration = iteration;
        event
    }

    async fn execute(mut self) -> Result<RunOutcome, AgentError> {
        let mut iterations = 0;
        // A time budget cuts whatever is in flight, as a stop does; the
        // run then ends failed, naming the budget.
        let deadline = self.meter.deadline().map(|at| {
            let cancel = self.cancel.clone();
            let timer = tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                cancel.cancel();
            });
            AbortOnDrop(timer)
        });
        let result = self.run_loop(&mut iterations).await;
        drop(deadline);
        self.end(result, iterations).await
    }

    async fn run_loop(&mut self, iterations: &mut u32) -> Result<TraceStatus, AgentError> {
        let mut doom = DoomLoopDetector::new(self.config.doom_loop_threshold);
        loop {
            if self.stopped() {
                return Ok(TraceStatus::Stopped);
            }
            if let Some(reason) = self.meter.exceeded() {
                return Err(AgentError::LimitExceeded(reason));
            }
            if *iterations >= self.config.max_iterations {
                return Err(AgentError::LimitExceeded(format!(
                    "max_iterations ({}) reached without a final answer",
                    self.config.max_iterations
                )));
            }
            *iterations += 1;
            self.heal().await?;
            self.remind_goals(*iterations).await?;
            self.inner.hooks.fire(&self.hook(HookPoint::PreRequest, *iterations)).await?;
            self.emit(AgentEvent::ModelRequest { iteration: *iterations });
            let started = Instant::now();
            let Some((response, attempts)) = self.call_model(*iterations).await? else {
                return Ok(TraceStatus::Stopped);
            };
            self.inner.hooks.fire(&self.hook(HookPoint::PostRequest, *iterations)).await?;

            let mut message = response.message;
            message.duration_ms = started.elapsed().as_millis() as u64;
            message.attempts = attempts;
            self.usage += message.usage;
            self.cost += message.cost;
            self.meter
                .spend(message.usage.prompt_tokens + message.usage.completion_tokens, message.cost);
            let assistant = self.persist(message).await?;
            if assistant.tool_calls.is_empty() {
                self.trace.result_summary = Some(assistant.text());
            }
            // The answer is kept either way; a stop asked for during the
            // call still ends the run here.
            if self.stopped() {
                return Ok(TraceStatus::Stopped);
            }
            if assistant.tool_calls.is_empty() {
                return Ok(TraceStatus::Completed);
            }
            if let Some(description) = doom.record(&assistant.tool_calls) {
                return Err(AgentError::LimitExceeded(description));
            }
            self.run_tools(&assistant.tool_calls).await?;
        }
    }

    async fn goal_changed(&mut self) -> Result<(), AgentError> {
        self.trace.current_goal_id = self.goals.current().map(|g| g.id.clone());
        // The tree, the trace (with the goal in focus) and the event are
        // one write: a host taking the trace over sees all or none.
        let changed = EventKind::GoalChanged { tree: self.goals.clone() };
        self.inner.store.commit_with_event(&mut self.trace, &self.goals, changed).await?;
        self.emit(AgentEvent::GoalChanged { tree: self.goals.render() });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runner::tools::STOPPED_BEFORE_CALL;
    use crate::agent::{Answer, PendingApprovals};
    use crate::policy::{Decision, Rule, RuleSet};
    use crate::provider::{ChatEvent, ChatRequest, ChatResponse, ChatStream, ProviderError};
    use crate::tools::{ToolContext, ToolResult, ToolSource, goal};
    use futures::StreamExt;
    use reson_trace::{MemoryTraceStore, Role, ToolCall};

    /// What the fake model does on one call.
    enum Turn {
        /// Answers with these tool calls, or with text when there are none.
        Answer(Vec<ToolCall>),
        /// Never answers, and ignores its token: only the run can cut it.
        Hang,
        /// Fails with a retryable error.
        Fail,
    }

    /// A model playing `turns` in order, then answering "done".
    struct Fake {
        turns: Mutex<Vec<Turn>>,
    }

    impl Fake {
        fn new(mut turns: Vec<Turn>) -> Arc<Self> {
            turns.reverse();
            Arc::new(Self { turns: Mutex::new(turns) })
        }
    }

    impl ChatProvider for Fake {
        fn name(&self) -> &str {
            "fake"
        }

        fn chat(&self, _: ChatRequest, _: CancellationToken) -> ChatStream {
            let turn = self.turns.lock().unwrap().pop().unwrap_or(Turn::Answer(Vec::new()));
            let calls = match turn {
                Turn::Answer(calls) => calls,
                Turn::Hang => return Box::pin(futures::stream::pending()),
                Turn::Fail => {
                    let error = ProviderError::Network("connection reset".into());
                    return Box::pin(futures::stream::iter([Err(error)]));
                }
            };
            let text = if calls.is_empty() { "done" } else { "" };
            let mut message = Message::new(Role::Assistant, text);
            message.tool_calls = calls;
            let response = ChatResponse {
                message,
                usage: Usage::default(),
                finish_reason: "stop".into(),
                model: "fake".into(),
                cost: None,
            };
            Box::pin(futures::stream::iter([Ok(ChatEvent::Done(Box::new(response)))]))
        }
    }

    fn goal_call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: goal::NAME.into(),
            arguments: r#"{"action":"add","description":"more"}"#.into(),
        }
    }

    fn runner(provider: Arc<Fake>) -> (Runner, Arc<MemoryTraceStore>) {
        let store = Arc::new(MemoryTraceStore::new());
        let tools = ToolRegistry::builtins_only();
        (Runner::new(store.clone(), provider, tools, Hooks::none()), store)
    }

    fn user(text: &str) -> Vec<Message> {
        vec![Message::new(Role::User, text)]
    }

    /// Waits for the first event `wanted` picks; panics when the run ends.
    async fn until<T>(handle: &mut RunHandle, wanted: impl Fn(&AgentEvent) -> Option<T>) -> T {
        let wait = async {
            while let Some(event) = handle.next_event().await {
                if let Some(found) = wanted(&event) {
                    return found;
                }
            }
            panic!("the run ended first");
        };
        tokio::time::timeout(Duration::from_secs(10), wait).await.expect("the event in time")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_are_a_stream_ending_with_finished() {
        let (runner, _) = runner(Fake::new(vec![Turn::Answer(vec![goal_call("a")])]));
        let handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        let events: Vec<AgentEvent> = handle.collect().await;
        assert!(matches!(
            events.first(),
            Some(AgentEvent::TraceStarted { mode: RunMode::New, .. })
        ));
        assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolFinished { ok: true, .. })));
        let Some(AgentEvent::Finished { status, error: None }) = events.last() else {
            panic!("{:?}", events.last())
        };
        assert_eq!(*status, TraceStatus::Completed);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_ends_a_waiting_approval_at_once() {
        let (runner, store) = runner(Fake::new(vec![Turn::Answer(vec![goal_call("a")])]));
        let rule = Rule {
            decision: Decision::Ask,
            tool: goal::NAME.into(),
            pattern: None,
            examples: Vec::new(),
            counter_examples: Vec::new(),
        };
        let rules = RuleSet::compile(&[rule]).unwrap().with_default(Decision::Allow);
        let timeout = Duration::from_secs(60);
        let approvals = PendingApprovals::new(timeout);
        let runner = runner.with_permissions(Permissions::new(rules, approvals.clone()));
        let mut handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        let request = until(&mut handle, |e| match e {
            AgentEvent::ApprovalNeeded { request } => Some(request.clone()),
            _ => None,
        })
        .await;
        let started = Instant::now();
        assert!(runner.stop(handle.trace_id()));
        let outcome = handle.wait().await.unwrap();
        assert!(started.elapsed() < timeout, "the approval's timeout ended the wait, not the stop");
        assert_eq!(outcome.status, TraceStatus::Stopped);
        assert!(!approvals.answer(&request.id, Answer::Once), "the request still waits");
        let messages = store.get_messages(&outcome.trace_id).await.unwrap();
        let result = messages.iter().find(|m| m.role == Role::Tool).expect("a result");
        assert_eq!(result.text(), STOPPED_BEFORE_CALL);
        let events = store.events_after(&outcome.trace_id, 0).await.unwrap();
        assert!(
            !events.iter().any(|e| matches!(e.kind, EventKind::PermissionDecided { .. })),
            "a stopped wait decided nothing"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_the_handle_stops_the_run_and_cuts_the_model_call() {
        let fake = Fake::new(vec![Turn::Hang]);
        let (runner, store) = runner(fake.clone());
        let mut handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        let id = handle.trace_id().to_owned();
        until(&mut handle, |e| matches!(e, AgentEvent::ModelRequest { .. }).then_some(())).await;
        drop(handle);
        let ended = async {
            while runner.stop(&id) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), ended).await.expect("the run ended");
        let trace = store.get_trace(&id).await.unwrap().unwrap();
        assert_eq!(trace.status, TraceStatus::Stopped);
        // The stop may have won before the model was even asked: the hang
        // was then never played, and must not be played to the continue.
        fake.turns.lock().unwrap().clear();
        // A later continue picks the trace up.
        let handle =
            runner.run(user("again"), RunConfig { trace_id: Some(id), ..RunConfig::default() });
        let outcome = handle.await.unwrap().wait().await.unwrap();
        assert_eq!(outcome.status, TraceStatus::Completed);
        assert_eq!(outcome.final_text.as_deref(), Some("done"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_detached_run_goes_on_without_its_handle() {
        let (runner, _) = runner(Fake::new(vec![Turn::Answer(vec![goal_call("a")])]));
        let handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        let outcome = handle.detach().await.unwrap().unwrap();
        assert_eq!(outcome.status, TraceStatus::Completed);
        assert_eq!(outcome.iterations, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_cuts_the_retry_wait() {
        let (runner, _) = runner(Fake::new(vec![Turn::Fail]));
        let delay = Duration::from_secs(60);
        let config = RunConfig { retry_base_delay: delay, ..RunConfig::default() };
        let mut handle = runner.run(user("go"), config).await.unwrap();
        until(&mut handle, |e| matches!(e, AgentEvent::Retrying { .. }).then_some(())).await;
        let started = Instant::now();
        handle.stop();
        let outcome = handle.wait().await.unwrap();
        assert!(started.elapsed() < delay, "the retry waited its delay out");
        assert_eq!(outcome.status, TraceStatus::Stopped);
        assert_eq!(outcome.requests, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_trace_cannot_be_run_twice() {
        let (runner, _) = runner(Fake::new(vec![Turn::Hang]));
        let mut handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        until(&mut handle, |e| matches!(e, AgentEvent::ModelRequest { .. }).then_some(())).await;
        let again = RunConfig { trace_id: Some(handle.trace_id().into()), ..RunConfig::default() };
        let Err(err) = runner.run(user("again"), again).await else { panic!("ran twice") };
        assert!(matches!(&err, AgentError::AlreadyRunning(id) if id == handle.trace_id()), "{err}");
        handle.stop();
        assert_eq!(handle.wait().await.unwrap().status, TraceStatus::Stopped);
    }

    /// A source the runner has never heard of: `shout` answers its
    /// `text` argument in capitals, and names the trace it ran for.
    struct Shout;

    #[async_trait::async_trait]
    impl ToolSource for Shout {
        fn specs(&self) -> Vec<ToolSpec> {
            let spec = ToolSpec {
                name: "shout".into(),
                description: "Say it louder.".into(),
                input_schema: serde_json::json!({ "type": "object" }).into(),
                plugin: "test".into(),
            };
            vec![spec]
        }

        async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
            let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
            let text = args["text"].as_str().unwrap_or_default().to_uppercase();
            ToolResult::text(format!("{text} ({})", context.trace_id.as_deref().unwrap_or("?")))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_tool_source_is_offered_called_recorded_and_checked() {
        let shout = |id: &str, text: &str| ToolCall {
            id: id.into(),
            name: "shout".into(),
            arguments: serde_json::json!({ "text": text }).to_string(),
        };
        let fake = Fake::new(vec![Turn::Answer(vec![shout("a", "hi"), shout("b", "secret")])]);
        let store = Arc::new(MemoryTraceStore::new());
        let tools = ToolRegistry::builtins_only().with_source(Arc::new(Shout));
        let rule = Rule {
            decision: Decision::Ask,
            tool: "shout".into(),
            pattern: None,
            examples: Vec::new(),
            counter_examples: Vec::new(),
        };
        let rules = RuleSet::compile(&[rule]).unwrap().with_default(Decision::Allow);
        let timeout = Duration::from_secs(60);
        let approvals = PendingApprovals::new(timeout);
        let runner = Runner::new(store.clone(), fake, tools, Hooks::none())
            .with_permissions(Permissions::new(rules, approvals.clone()));
        let mut handle = runner.run(user("go"), RunConfig::default()).await.unwrap();
        for answer in [Answer::Once, Answer::Deny] {
            let request = until(&mut handle, |e| match e {
                AgentEvent::ApprovalNeeded { request } => Some(request.id.clone()),
                _ => None,
            })
            .await;
            assert!(approvals.answer(&request, answer));
        }
        let outcome = handle.wait().await.unwrap();
        assert_eq!(outcome.status, TraceStatus::Completed);
        let trace = store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
        assert_eq!(trace.tools, ["goal", "shout"], "offered after the built-ins");
        let messages = store.get_messages(&outcome.trace_id).await.unwrap();
        let results: Vec<String> =
            messages.iter().filter(|m| m.role == Role::Tool).map(Message::text).collect();
        assert_eq!(results[0], format!("HI ({})", outcome.trace_id));
        assert_eq!(results[1], "Error: the user denied this call of `shout`.");
        let events = store.events_after(&outcome.trace_id, 0).await.unwrap();
        let decided: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::PermissionDecided { decision, .. } => Some(decision.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(decided, ["ask-once", "ask-denied"]);
        assert!(events.iter().any(|e| matches!(
            &e.kind,
            EventKind::ToolFinished { name, ok: true, .. } if name == "shout"
        )));
    }
}
