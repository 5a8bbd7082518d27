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

mod compact;

use super::approval::{ApprovalRequest, Permissions};
use super::compaction::CompactionConfig;
use super::doom::DoomLoopDetector;
use super::error::AgentError;
use super::hooks::{HookEvent, HookPoint, Hooks};
use super::subagent::{self, Caller, SubAgentSettings, SubAgents, Update};
use crate::policy::{Budget, Meter};
use crate::provider::{self, ChatProvider, ChatRequest, ChatResponse, Delta, LlmParams};
use crate::tools::{ToolRegistry, ToolResult, goal};
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use reson_sandbox::plugin::CallContext;
use reson_trace::{
    EventKind, GoalStats, GoalTree, Message, MessageTree, Role, ToolCall, Trace, TraceMode,
    TraceStatus, TraceStore, Usage,
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

/// Key in `Trace::context.extra` under which the system prompt is kept,
/// so a continue without one reuses it.
const SYSTEM_PROMPT_KEY: &str = "system_prompt";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The text of a healed tool call's synthetic result.
pub const INTERRUPTED: &str = "Interrupted: this tool call did not finish; the run stopped or crashed before its result was recorded.";

/// The result of a call the run reached only after `stop()`: it was
/// neither asked about nor run.
pub const STOPPED_BEFORE_CALL: &str =
    "Stopped: the run was stopped before this tool call ran; it was not run.";

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
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            trace_id: None,
            new_trace_id: None,
            after_sequence: None,
            system_prompt: None,
            mode: TraceMode::Agent,
            agent_type: "default".into(),
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
    /// Shared with the runners of sub-agents, so `stop` reaches them too.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    sub_agents: Option<SubAgents>,
}

/// What a sub-agent's run gets from its caller.
pub(crate) struct Link {
    /// Carved from the caller's.
    pub(crate) meter: Arc<Meter>,
    /// Cancelled with the caller's.
    pub(crate) cancel: CancellationToken,
    /// Put in a new trace's `context.extra`.
    pub(crate) extra: serde_json::Map<String, serde_json::Value>,
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
            running: Arc::default(),
            sub_agents: None,
        };
        Self { inner: Arc::new(inner) }
    }

    /// The same runner with tool calls checked by `permissions`: a denied
    /// call never runs, an `ask` waits for the approver, and tools the
    /// rules deny outright are not offered to the model.
    pub fn with_permissions(self, permissions: Permissions) -> Self {
        self.with_shared_permissions(Arc::new(permissions))
    }

    pub(crate) fn with_shared_permissions(self, permissions: Arc<Permissions>) -> Self {
        let inner = Inner {
            permissions: Some(permissions),
            running: Arc::default(),
            ..(*self.inner).clone()
        };
        Self { inner: Arc::new(inner) }
    }

    /// The same runner offering the `agent` and `evaluate` tools: the model
    /// can hand work to sub-agents, each a trace under the calling goal,
    /// never allowed more than its caller, within `settings`' limits.
    pub fn with_sub_agents(self, settings: SubAgentSettings) -> Self {
        let sub_agents = SubAgents { settings: Arc::new(settings), depth: 0 };
        let inner = Inner { sub_agents: Some(sub_agents), ..(*self.inner).clone() };
        Self { inner: Arc::new(inner) }
    }

    /// A sub-agent's runner: one level deeper, offering only `tools`,
    /// checked by `permissions`, sharing the set of running traces.
    pub(crate) fn child(&self, tools: Vec<String>, permissions: Option<Arc<Permissions>>) -> Self {
        let inner = Inner {
            tools: self.inner.tools.clone().only(tools),
            permissions,
            sub_agents: self
                .inner
                .sub_agents
                .as_ref()
                .map(|s| SubAgents { settings: s.settings.clone(), depth: s.depth + 1 }),
            ..(*self.inner).clone()
        };
        Self { inner: Arc::new(inner) }
    }

    pub(crate) fn sub_agents(&self) -> Option<SubAgents> {
        self.inner.sub_agents.clone()
    }

    pub(crate) fn permissions(&self) -> Option<Arc<Permissions>> {
        self.inner.permissions.clone()
    }

    /// The names of the tools the model is offered.
    pub(crate) fn offered_names(&self) -> Vec<String> {
        Self::offered_tools(&self.inner).into_iter().map(|t| t.name).collect()
    }

    /// The tool specs the model is offered.
    fn offered_tools(inner: &Inner) -> Vec<reson_sandbox::plugin::ToolSpec> {
        let mut specs = inner.tools.specs();
        if inner.sub_agents.is_some() {
            let builtins = [crate::tools::agent::spec(), crate::tools::evaluate::spec()];
            specs.extend(builtins.into_iter().filter(|t| inner.tools.offered(&t.name)));
        }
        match &inner.permissions {
            Some(p) => specs.into_iter().filter(|t| p.offered(&t.name)).collect(),
            None => specs,
        }
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
        let (meter, cancel, extra) = match link {
            Some(Link { meter, cancel, extra }) => (meter, cancel, Some(extra)),
            None => {
                config.budget.validate().map_err(|e| AgentError::Config(e.to_string()))?;
                (Meter::root(config.budget), CancellationToken::new(), None)
            }
        };
        let mut claim = Claim { inner: self.inner.clone(), trace_id: None };
        // An existing trace is claimed before it is prepared: preparing
        // writes to it (heals calls, moves the head, adds messages), which
        // must never happen under a run that is still going.
        if let Some(id) = config.trace_id.as_ref().or(config.new_trace_id.as_ref()) {
            claim.take(id, &cancel)?;
        }
        let run = Run::prepare(
            self.inner.clone(),
            messages,
            config,
            (events, cancel.clone(), meter),
            extra,
        )
        .await?;
        let trace_id = run.trace.id.clone();
        if claim.trace_id.is_none() {
            claim.take(&trace_id, &cancel)?;
        }
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

/// `message` with its content replaced by `text`.
fn with_text(message: &Message, text: String) -> Message {
    let mut shown = message.clone();
    shown.content = vec![reson_trace::ContentPart::Text { text }];
    shown
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
    /// Sub-agents of this run running now.
    active: Arc<AtomicUsize>,
    /// Whether this run is a sub-agent's (started by a caller's run).
    sub_agent: bool,
    /// Compaction's state in this run.
    compaction: compact::State,
}

/// One tool call's result, kept until the results of the calls before it
/// in its message are stored: results are stored (and sent to the model)
/// in the order of the calls, as some providers pair them by position.
struct CallOutcome {
    result: ToolResult,
    took: Duration,
    /// The goal in focus when the call ran.
    goal_id: Option<String>,
    /// For a `goal` call: the tree after it.
    goals: Option<GoalTree>,
}

impl Run {
    async fn prepare(
        inner: Arc<Inner>,
        mut messages: Vec<Message>,
        config: RunConfig,
        (events, cancel, meter): (mpsc::UnboundedSender<AgentEvent>, CancellationToken, Arc<Meter>),
        extra: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Self, AgentError> {
        let sub_agent = extra.is_some();
        let store = inner.store.clone();
        let (trace, mode) = match &config.trace_id {
            None => {
                if messages.is_empty() {
                    return Err(AgentError::Config("a new run needs at least one message".into()));
                }
                let task = config.task.clone().unwrap_or_else(|| {
                    messages
                        .iter()
                        .find(|m| m.role == Role::User)
                        .map(Message::text)
                        .unwrap_or_default()
                });
                compact::add_experience(&inner, &config, &mut messages, &task, &cancel).await?;
                let mut trace = Trace::new(config.mode, task, config.agent_type.clone());
                if let Some(id) = &config.new_trace_id {
                    trace.id.clone_from(id);
                }
                trace.model = Some(config.params.model.clone()).filter(|m| !m.is_empty());
                trace.provider = Some(inner.provider.name().to_owned());
                trace.tools = Runner::offered_tools(&inner).into_iter().map(|t| t.name).collect();
                trace.llm_params = serde_json::to_value(&config.params).unwrap_or_default();
                if let Some((parent_trace, parent_goal)) = &config.parent {
                    trace.parent_trace_id = Some(parent_trace.clone());
                    trace.parent_goal_id = Some(parent_goal.clone());
                }
                trace.context.extra.extend(extra.unwrap_or_default());
                store.create_trace(&trace).await?;
                (trace, RunMode::New)
            }
            Some(id) => {
                let trace = store
                    .get_trace(id)
                    .await?
                    .ok_or_else(|| AgentError::NoSuchTrace(id.clone()))?;
                let mode = match (config.after_sequence, messages.is_empty()) {
                    (None, _) => RunMode::Continue,
                    (Some(_), false) => RunMode::Rewind,
                    (Some(_), true) => RunMode::Regenerate,
                };
                (trace, mode)
            }
        };
        let all = store.get_messages(&trace.id).await?;
        let tree = MessageTree::from_messages(&all);
        let goals = store.get_goals(&trace.id).await?;
        let system_prompt = match (mode, inner.tools.skills()) {
            (RunMode::New, Some(skills)) => Some(
                skills
                    .system_prompt(config.system_prompt.as_deref(), config.skills.as_deref())
                    .map_err(|e| AgentError::Config(e.to_string()))?,
            ),
            _ => config.system_prompt.clone(),
        };
        let system_prompt = system_prompt.or_else(|| {
            trace.context.extra.get(SYSTEM_PROMPT_KEY).and_then(|v| v.as_str()).map(str::to_owned)
        });
        let mut run = Self {
            inner,
            config,
            trace,
            tree,
            path: Vec::new(),
            goals,
            system_prompt,
            events,
            cancel,
            usage: Usage::default(),
            cost: 0.0,
            requests: 0,
            meter,
            active: Arc::default(),
            sub_agent,
            compaction: compact::State::default(),
        };
        // First on the stream, before the messages this preparation adds.
        run.emit(AgentEvent::TraceStarted { trace_id: run.trace.id.clone(), mode });
        if let Some(prompt) = &run.system_prompt {
            run.trace.context.extra.insert(SYSTEM_PROMPT_KEY.into(), prompt.clone().into());
        }
        let mut parent = run.trace.head_sequence;
        if let Some(after) = run.config.after_sequence {
            if !all.iter().any(|m| m.sequence == after) {
                return Err(AgentError::NoSuchMessage {
                    trace_id: run.trace.id.clone(),
                    sequence: after,
                    last: run.trace.last_sequence,
                });
            }
            parent = Some(run.tree.rewind_point(after));
        }
        run.load_path(&all, parent);
        // Rewind and regenerate move the head back; new messages follow it.
        if run.config.after_sequence.is_some()
            && let Some(point) = parent
        {
            run.inner.store.set_head(&mut run.trace, point).await?;
        }
        // A rewind runs on another branch, with that branch's goals; a
        // continue stays on the head's branch, whose tree goal.json holds.
        // Every message carries a goal: the task is the root goal until the
        // model plans its own.
        if run.config.after_sequence.is_some() {
            run.goals = goal::branch_tree(&run.path, &run.trace.task)
                .map_err(|e| AgentError::Other(e.to_string()))?;
            run.goal_changed().await?;
        } else if run.goals.is_empty() {
            run.goals =
                goal::initial(&run.trace.task).map_err(|e| AgentError::Other(e.to_string()))?;
            run.goal_changed().await?;
        }
        // A crash or stop may have left calls without results.
        run.heal().await?;
        for message in messages {
            run.persist(message).await?;
        }
        if run.path.last().is_none_or(|m| m.role == Role::Assistant && m.tool_calls.is_empty()) {
            return Err(AgentError::Config(
                "nothing for the model to answer: add a message, or rewind to before an answer"
                    .into(),
            ));
        }
        run.trace.status = TraceStatus::Running;
        run.trace.error_message = None;
        run.trace.finished_at_ms = None;
        run.inner.store.update_trace(&run.trace).await?;
        run.inner.store.append_event(&mut run.trace, EventKind::TraceStarted).await?;
        Ok(run)
    }

    fn load_path(&mut self, all: &[Message], head: Option<u64>) {
        let by_seq: HashMap<u64, &Message> = all.iter().map(|m| (m.sequence, m)).collect();
        self.path = head
            .map(|h| {
                self.tree
                    .main_path(h)
                    .iter()
                    .filter_map(|s| by_seq.get(s).map(|m| (*m).clone()))
                    .collect()
            })
            .unwrap_or_default();
    }

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

    /// Gives every tool call on the main path that has no result a
    /// persisted "interrupted" result.
    async fn heal(&mut self) -> Result<(), AgentError> {
        let Some(head) = self.trace.head_sequence else { return Ok(()) };
        for (_, call) in self.tree.orphaned_tool_calls(head) {
            let text = if subagent::handles(&call.name) {
                let store = self.inner.store.clone();
                subagent::healed(&*store, &mut self.trace, &call).await
            } else {
                INTERRUPTED.to_owned()
            };
            let mut result = Message::tool_result(&call, text);
            result.synthetic = true;
            self.persist(result).await?;
        }
        Ok(())
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
        let mut result = self.run_loop(&mut iterations).await;
        drop(deadline);
        if let Ok(TraceStatus::Stopped) = result
            && let Some(reason) = self.meter.exceeded()
        {
            result = Err(AgentError::LimitExceeded(reason));
        }
        let (status, error) = match &result {
            Ok(status) => (*status, None),
            Err(e) => {
                let mut event = self.hook(HookPoint::OnError, iterations);
                event.error = Some(e.to_string());
                // A failing run cannot be blocked further; the hook observes.
                let _ = self.inner.hooks.fire(&event).await;
                (TraceStatus::Failed, Some(e.to_string()))
            }
        };
        self.finish(status, error.clone()).await?;
        self.emit(AgentEvent::Finished { status, error });
        result.map(|status| RunOutcome {
            trace_id: self.trace.id.clone(),
            status,
            final_text: self.trace.result_summary.clone(),
            iterations,
            requests: self.requests,
            usage: self.usage,
            cost: self.cost,
        })
    }

    async fn finish(
        &mut self,
        status: TraceStatus,
        error: Option<String>,
    ) -> Result<(), AgentError> {
        self.trace.status = status;
        self.trace.error_message = error.clone();
        self.trace.finished_at_ms = Some(now_ms());
        self.trace.current_goal_id = self.goals.current().map(|g| g.id.clone());
        self.inner
            .store
            .commit_with_event(
                &mut self.trace,
                &self.goals,
                EventKind::TraceFinished { status, error },
            )
            .await?;
        // A sub-agent's writes are synced with its root's, at the root's
        // end: waiting for a disk flush per sub-agent would make fan-out
        // pay it once per child.
        if !self.sub_agent {
            self.inner.store.sync().await?;
        }
        Ok(())
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

    /// Every `goal_reminder_every` iterations, appends the goal tree (and
    /// collaborators) at the tail of the history; earlier messages are never
    /// rewritten, so prompt caches keep their prefix.
    async fn remind_goals(&mut self, iteration: u32) -> Result<(), AgentError> {
        let every = self.config.goal_reminder_every;
        if every == 0
            || iteration == 1
            || !(iteration - 1).is_multiple_of(every)
            || self.goals.is_empty()
        {
            return Ok(());
        }
        let mut text = format!("<goal-tree>\n{}</goal-tree>", self.goals.render());
        text.push_str(&subagent::collaborators_section(&self.trace));
        let mut reminder = Message::new(Role::User, text);
        reminder.synthetic = true;
        self.persist(reminder).await?;
        Ok(())
    }

    /// The history sent to the model. Tool results older than the last
    /// assistant message are sent as their long-term memory when they have
    /// one, or left out when they asked to be shown only once; the newest
    /// results always go in full.
    fn history(&self) -> Vec<Message> {
        let system = self.system_prompt.as_ref().map(|p| Message::new(Role::System, p.clone()));
        let last_answer = self.path.iter().rposition(|m| m.role == Role::Assistant);
        let shown = self.path.iter().enumerate().map(|(i, m)| {
            let older = last_answer.is_some_and(|a| i < a);
            match (&m.long_term_memory, m.include_output_only_once) {
                (Some(memory), _) if older && m.role == Role::Tool => with_text(m, memory.clone()),
                (None, true) if older && m.role == Role::Tool => {
                    with_text(m, "[output shown once; omitted from later history]".into())
                }
                _ => m.clone(),
            }
        });
        system.into_iter().chain(shown).collect()
    }

    /// The model's answer and the requests it took; `None` when the run was
    /// stopped meanwhile. Requests that produced no stored answer are
    /// counted in the trace's totals here; the others with their answer.
    async fn call_model(
        &mut self,
        iteration: u32,
    ) -> Result<Option<(ChatResponse, u32)>, AgentError> {
        let tools = Runner::offered_tools(&self.inner);
        let Some(messages) = self.compacted_history(iteration, &tools).await? else {
            return Ok(None);
        };
        let request = ChatRequest { messages, tools, params: self.config.params.clone() };
        let provider = self.inner.provider.clone();
        let cancel = self.cancel.clone();
        let mut attempt = 1;
        loop {
            let events = self.events.clone();
            let on_delta = move |delta: Delta| {
                let event = match delta {
                    Delta::Text { text } => AgentEvent::TextDelta { text },
                    Delta::Reasoning { text } => AgentEvent::ReasoningDelta { text },
                    Delta::ToolCall { .. } => return,
                };
                let _ = events.send(event);
            };
            self.requests += 1;
            let call = provider::complete(&*provider, request.clone(), cancel.clone(), on_delta);
            // A stop cuts the call in flight at once, even on a provider
            // slow to see its token, and wins over an answer racing it.
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                result = call => Some(result),
            };
            let result = result.map(|result| {
                result.and_then(|response| match response.filtered(provider.name()) {
                    Some(blocked) => Err(blocked),
                    None => Ok(response),
                })
            });
            match result {
                Some(Ok(response)) => return Ok(Some((response, attempt))),
                None => {
                    self.unanswered(attempt);
                    return Ok(None);
                }
                // A provider may end a cut call with an error of its own.
                Some(Err(_)) if self.stopped() => {
                    self.unanswered(attempt);
                    return Ok(None);
                }
                Some(Err(e)) if e.is_retryable() && attempt <= self.config.max_retries => {
                    let backoff = self.config.retry_base_delay * 2u32.saturating_pow(attempt - 1);
                    let jitter = backoff.mul_f64(fastrand::f64() * 0.25);
                    let delay = e.retry_after().unwrap_or(backoff + jitter);
                    attempt += 1;
                    let mut event = self.hook(HookPoint::OnRetry, iteration);
                    event.attempt = Some(attempt);
                    event.error = Some(e.to_string());
                    if let Err(blocked) = self.inner.hooks.fire(&event).await {
                        self.unanswered(attempt - 1);
                        return Err(blocked);
                    }
                    self.emit(AgentEvent::Retrying {
                        attempt,
                        error: e.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    });
                    let stopped = tokio::select! {
                        () = tokio::time::sleep(delay) => false,
                        () = cancel.cancelled() => true,
                    };
                    if stopped {
                        self.unanswered(attempt - 1);
                        return Ok(None);
                    }
                }
                Some(Err(e)) => {
                    self.unanswered(attempt);
                    return Err(AgentError::Llm(e));
                }
            }
        }
    }

    /// Counts requests that produced no answer in the trace's totals.
    fn unanswered(&mut self, requests: u32) {
        self.trace.totals.requests += u64::from(requests);
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

    /// Runs the calls of one assistant message: once the run is stopped,
    /// every call left gets a "stopped" result; a call of a tool never
    /// offered gets an error at once, then permissions decide; the built-in
    /// goal tool runs here, plugin tools concurrently. Each result is
    /// stored as soon as the results of every call before it are, so they
    /// stay in call order; `ToolFinished` goes out as each call ends.
    async fn run_tools(&mut self, calls: &[ToolCall]) -> Result<(), AgentError> {
        for call in calls {
            self.inner
                .store
                .append_event(
                    &mut self.trace,
                    EventKind::ToolStarted {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    },
                )
                .await?;
            self.emit(AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let offered: Vec<String> =
            Runner::offered_tools(&self.inner).into_iter().map(|t| t.name).collect();
        let mut done: Vec<Option<CallOutcome>> = calls.iter().map(|_| None).collect();
        let mut stored = 0;
        let mut plugin_calls = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            // A stop (perhaps given while an earlier call awaited approval)
            // ends the message here: no more prompts, nothing more runs.
            let now = if self.stopped() {
                Some(self.finished(call, ToolResult::error(STOPPED_BEFORE_CALL.into()), None))
            } else if !offered.contains(&call.name) {
                // Checked before the permissions: a name the model made up
                // must not wait for an approval no one can give.
                Some(self.finished(call, ToolResult::error(unknown_tool(call, &offered)), None))
            } else if let Some(denied) = self.permitted(call).await? {
                Some(self.finished(call, denied, None))
            } else if subagent::handles(&call.name) {
                // Sub-agents run concurrently, as plugin tools do.
                plugin_calls.push(i);
                None
            } else if ToolRegistry::is_builtin(&call.name) {
                let started = Instant::now();
                let result = match goal::apply(&mut self.goals, &call.arguments) {
                    Ok(text) => ToolResult::text(text),
                    Err(text) => ToolResult::error(text),
                };
                if result.ok {
                    self.goal_changed().await?;
                }
                let mut finished = self.finished(call, result, Some(self.goals.snapshot()));
                finished.took = started.elapsed();
                Some(finished)
            } else {
                plugin_calls.push(i);
                None
            };
            done[i] = now;
            self.store_ready(calls, &mut done, &mut stored).await?;
        }
        if self.stopped() {
            for &i in &plugin_calls {
                let stopped = ToolResult::error(STOPPED_BEFORE_CALL.into());
                done[i] = Some(self.finished(&calls[i], stopped, None));
            }
            return self.store_ready(calls, &mut done, &mut stored).await;
        }
        // The calls are futures of this task, so they end with it; each
        // gets the run's token, so a stop cuts them. While a result is
        // stored the others are not polled: a store is short next to a
        // tool call, and their deadlines run on the clock meanwhile.
        let tools = self.inner.tools.clone();
        let (updates, mut updated) = mpsc::unbounded_channel();
        let caller = Arc::new(Caller {
            runner: Runner { inner: self.inner.clone() },
            trace_id: self.trace.id.clone(),
            agent_type: self.trace.agent_type.clone(),
            goal_id: self.goals.current().map(|g| g.id.clone()),
            goals: self.goals.clone(),
            config: self.config.clone(),
            meter: self.meter.clone(),
            cancel: self.cancel.clone(),
            events: self.events.clone(),
            updates,
            active: self.active.clone(),
        });
        let (trace_id, cancel) = (&self.trace.id, &self.cancel);
        let mut running: FuturesUnordered<_> = plugin_calls
            .iter()
            .map(|&i| {
                let context = CallContext {
                    call_id: calls[i].id.clone(),
                    trace_id: Some(trace_id.clone()),
                    cancel: Some(cancel.clone()),
                };
                let (tools, caller) = (&tools, caller.clone());
                async move {
                    let started = Instant::now();
                    let result = if subagent::handles(&calls[i].name) {
                        subagent::call(caller, calls[i].clone()).await
                    } else {
                        tools.call(&calls[i], &context).await
                    };
                    (i, result, started.elapsed())
                }
            })
            .collect();
        loop {
            tokio::select! {
                next = running.next() => {
                    let Some((i, result, took)) = next else { break };
                    let mut finished = self.finished(&calls[i], result, None);
                    finished.took = took;
                    done[i] = Some(finished);
                    self.store_ready(calls, &mut done, &mut stored).await?;
                }
                Some(update) = updated.recv() => self.sub_agent_update(update).await?,
            }
        }
        while let Ok(update) = updated.try_recv() {
            self.sub_agent_update(update).await?;
        }
        Ok(())
    }

    /// Records what a sub-agent call reported in the trace and goal tree.
    async fn sub_agent_update(&mut self, update: Update) -> Result<(), AgentError> {
        subagent::apply(update, &mut self.trace, &mut self.goals);
        // The trace (its collaborators) is stored with the goal change.
        self.goal_changed().await
    }

    /// A call has its result: the live event goes out now, the result waits
    /// for its turn to be stored.
    fn finished(
        &self,
        call: &ToolCall,
        result: ToolResult,
        goals: Option<GoalTree>,
    ) -> CallOutcome {
        self.emit(AgentEvent::ToolFinished {
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok: result.ok,
            output: result.text.clone(),
        });
        CallOutcome {
            result,
            took: Duration::ZERO,
            goal_id: self.goals.current().map(|g| g.id.clone()),
            goals,
        }
    }

    /// Stores the results from `stored` on, in call order, up to the first
    /// call still running.
    async fn store_ready(
        &mut self,
        calls: &[ToolCall],
        done: &mut [Option<CallOutcome>],
        stored: &mut usize,
    ) -> Result<(), AgentError> {
        while let Some(finished) = done.get_mut(*stored).and_then(Option::take) {
            self.record_result(&calls[*stored], finished).await?;
            *stored += 1;
        }
        Ok(())
    }

    /// Checks one call against the permissions; a call that may not run
    /// gets its result (the reason). Every decision is recorded.
    async fn permitted(&mut self, call: &ToolCall) -> Result<Option<ToolResult>, AgentError> {
        let Some(permissions) = self.inner.permissions.clone() else { return Ok(None) };
        let events = self.events.clone();
        let announce = move |request: &ApprovalRequest| {
            let _ = events.send(AgentEvent::ApprovalNeeded { request: request.clone() });
        };
        let cancel = self.cancel.clone();
        let ruling = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            ruling = permissions.check(&self.trace.id, call, &announce) => Some(ruling),
        };
        // A stop ends an approval wait at once; nothing was decided, and
        // the call does not run.
        let Some(ruling) = ruling else {
            return Ok(Some(ToolResult::error(STOPPED_BEFORE_CALL.into())));
        };
        self.inner
            .store
            .append_event(
                &mut self.trace,
                EventKind::PermissionDecided {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    decision: ruling.decision.to_owned(),
                    rule: ruling.rule.clone(),
                },
            )
            .await?;
        if ruling.run {
            return Ok(None);
        }
        let why =
            ruling.rule.map_or_else(|| "no rule allows it".to_owned(), |r| format!("rule {r}"));
        let text = match ruling.decision {
            "ask-denied" => format!("Error: the user denied this call of `{}`.", call.name),
            "ask-timeout" => format!(
                "Error: no one approved this call of `{}` in time; it was denied.",
                call.name
            ),
            _ => format!("Error: permission denied for `{}` ({why}).", call.name),
        };
        Ok(Some(ToolResult::error(text)))
    }

    async fn record_result(
        &mut self,
        call: &ToolCall,
        finished: CallOutcome,
    ) -> Result<(), AgentError> {
        let CallOutcome { result, took, goal_id, goals } = finished;
        let mut message = Message::tool_result(call, result.text.clone());
        message.long_term_memory = result.long_term_memory;
        message.include_output_only_once = result.include_output_only_once;
        message.goal_id = goal_id;
        message.goals = goals;
        for image in &result.images {
            use base64::Engine as _;
            let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
            message.content.push(reson_trace::ContentPart::ImageUrl {
                url: format!("data:{};base64,{data}", image.media_type),
            });
        }
        message.duration_ms = took.as_millis() as u64;
        self.persist(message).await?;
        let summary: String = result.text.chars().take(200).collect();
        self.inner
            .store
            .append_event(
                &mut self.trace,
                EventKind::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    ok: result.ok,
                    summary,
                },
            )
            .await?;
        Ok(())
    }
}

/// The result of a call to a tool the model was not offered.
fn unknown_tool(call: &ToolCall, offered: &[String]) -> String {
    format!(
        "Error: unknown tool `{}`: no tool of that name was offered. Offered tools: {}.",
        call.name,
        offered.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{Answer, PendingApprovals};
    use crate::policy::{Decision, Rule, RuleSet};
    use crate::provider::{ChatEvent, ChatStream, ProviderError};
    use reson_trace::MemoryTraceStore;

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
        let approvals = PendingApprovals::new(Duration::from_secs(60));
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
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        assert_eq!(outcome.status, TraceStatus::Stopped);
        assert!(!approvals.answer(request.id, Answer::Once), "the request still waits");
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
        let config =
            RunConfig { retry_base_delay: Duration::from_secs(60), ..RunConfig::default() };
        let mut handle = runner.run(user("go"), config).await.unwrap();
        until(&mut handle, |e| matches!(e, AgentEvent::Retrying { .. }).then_some(())).await;
        let started = Instant::now();
        handle.stop();
        let outcome = handle.wait().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
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
}
