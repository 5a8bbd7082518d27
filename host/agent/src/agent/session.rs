//! The AG Core layer on top of the runner: agents, the runtime bundle they
//! run on, and sessions that submit turns.

use super::approval::Permissions;
use super::error::AgentError;
use super::hooks::{HookEvent, HookPoint, Hooks};
use super::human::Asker;
use super::memory::SessionMemory;
use super::runner::{AgentEvent, RunConfig, Runner};
use crate::provider::{ChatProvider, LlmParams};
use crate::telemetry::Telemetry;
use crate::tools::ToolRegistry;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{Message, Role, TraceMode, TraceStore, Usage};
use std::sync::Arc;

/// An agent: a name, a system prompt, and the tools it offers the model.
pub trait Agent: Send + Sync {
    /// The agent's name, recorded as the trace's agent type.
    fn name(&self) -> &str;
    /// Its system prompt (session memory is appended to it).
    fn system_prompt(&self) -> String;
    /// Names of the tools it offers; `None` (the default) offers every
    /// registered tool.
    fn tool_names(&self) -> Option<Vec<String>> {
        None
    }
}

/// An agent defined by data.
#[derive(Debug, Clone)]
pub struct BasicAgent {
    name: String,
    system_prompt: String,
    tools: Option<Vec<String>>,
}

impl BasicAgent {
    /// An agent offering every registered tool.
    pub fn new(name: impl Into<String>, system_prompt: impl Into<String>) -> Self {
        Self { name: name.into(), system_prompt: system_prompt.into(), tools: None }
    }

    /// Offers only these tools.
    pub fn with_tools(mut self, tools: Vec<String>) -> Self {
        self.tools = Some(tools);
        self
    }
}

impl Agent for BasicAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn system_prompt(&self) -> String {
        self.system_prompt.clone()
    }

    fn tool_names(&self) -> Option<Vec<String>> {
        self.tools.clone()
    }
}

/// Everything a session runs on. Built only by [`AgentBuilder`], so a
/// bundle is always complete.
#[derive(Clone)]
pub struct RuntimeBundle {
    provider: Arc<dyn ChatProvider>,
    tools: ToolRegistry,
    hooks: Hooks,
    store: Arc<dyn TraceStore>,
    params: LlmParams,
    max_iterations: u32,
    permissions: Option<Arc<Permissions>>,
    telemetry: Telemetry,
}

impl RuntimeBundle {
    /// The tool specs an agent gets from this bundle.
    pub fn tool_specs(&self, agent: &dyn Agent) -> Vec<ToolSpec> {
        self.registry_for(agent).specs()
    }

    fn registry_for(&self, agent: &dyn Agent) -> ToolRegistry {
        match agent.tool_names() {
            Some(names) => self.tools.clone().only(names),
            None => self.tools.clone(),
        }
    }

    /// The hooks.
    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// The trace store.
    pub fn store(&self) -> &Arc<dyn TraceStore> {
        &self.store
    }
}

/// Builds a [`RuntimeBundle`]. Provider, tools, hooks and a trace store
/// must all be given; a missing one is [`AgentError::Config`].
#[derive(Default)]
pub struct AgentBuilder {
    provider: Option<Arc<dyn ChatProvider>>,
    tools: Option<ToolRegistry>,
    hooks: Option<Hooks>,
    store: Option<Arc<dyn TraceStore>>,
    params: LlmParams,
    max_iterations: Option<u32>,
    permissions: Option<Permissions>,
    telemetry: Telemetry,
    asker: Option<Arc<dyn Asker>>,
}

impl AgentBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model provider.
    pub fn provider(mut self, provider: Arc<dyn ChatProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The tools.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The hooks (use [`Hooks::none`] for none).
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Where traces go.
    pub fn store(mut self, store: Arc<dyn TraceStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Model and sampling parameters.
    pub fn params(mut self, params: LlmParams) -> Self {
        self.params = params;
        self
    }

    /// Checks every tool call against `permissions` (no checks when unset).
    pub fn permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = Some(permissions);
        self
    }

    /// Most model calls per turn (default 50).
    pub fn max_iterations(mut self, max: u32) -> Self {
        self.max_iterations = Some(max);
        self
    }

    /// Where the runs' spans and metrics go (nowhere by default).
    pub fn telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Offers `ask_human`, whose questions go to `asker` (see
    /// [`crate::agent::human`]).
    pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = Some(asker);
        self
    }

    /// The bundle, or which part is missing.
    pub fn build(self) -> Result<RuntimeBundle, AgentError> {
        let missing = |what: &str| AgentError::Config(format!("AgentBuilder: no {what} given"));
        let provider = self.provider.ok_or_else(|| missing("provider"))?;
        let tools = self.tools.ok_or_else(|| missing("tools"))?;
        Ok(RuntimeBundle {
            provider,
            // Before an agent's own list narrows them, which may leave it out.
            tools: match self.asker {
                Some(asker) => super::human::offer(tools, asker),
                None => tools,
            },
            hooks: self.hooks.ok_or_else(|| missing("hooks"))?,
            store: self.store.ok_or_else(|| missing("trace store"))?,
            params: self.params,
            max_iterations: self.max_iterations.unwrap_or(50),
            permissions: self.permissions.map(Arc::new),
            telemetry: self.telemetry,
        })
    }
}

/// What one turn produced.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// The turn's index, from 1.
    pub turn: u64,
    /// The trace holding the session's conversation.
    pub trace_id: String,
    /// The final assistant text.
    pub text: String,
    /// Tool calls made during the turn.
    pub tool_calls: usize,
    /// Tokens the turn used.
    pub usage: Usage,
}

/// A conversation with an agent: each turn continues the same trace.
pub struct AgentSession {
    id: String,
    agent: Arc<dyn Agent>,
    bundle: RuntimeBundle,
    runner: Runner,
    memory: SessionMemory,
    turn: u64,
    usage: Usage,
    cost: f64,
    trace_id: Option<String>,
    mode: TraceMode,
    task: Option<String>,
}

impl AgentSession {
    /// A session of `agent` on `bundle`, with in-memory session memory.
    pub fn new(agent: Arc<dyn Agent>, bundle: RuntimeBundle) -> Result<Self, AgentError> {
        let id = format!("session-{:08x}", fastrand::u32(..));
        let memory =
            SessionMemory::in_memory(id.clone()).map_err(|e| AgentError::Memory(e.to_string()))?;
        Ok(Self::with_memory(agent, bundle, memory))
    }

    /// A session whose memory lives in `memory` (its session id is the
    /// memory's).
    pub fn with_memory(
        agent: Arc<dyn Agent>,
        bundle: RuntimeBundle,
        memory: SessionMemory,
    ) -> Self {
        let mut runner = Runner::new(
            bundle.store.clone(),
            bundle.provider.clone(),
            bundle.registry_for(agent.as_ref()),
            bundle.hooks.clone(),
        )
        .with_telemetry(bundle.telemetry.clone());
        if let Some(permissions) = &bundle.permissions {
            runner = runner.with_shared_permissions(permissions.clone());
        }
        Self {
            id: memory.session_id().to_owned(),
            agent,
            bundle,
            runner,
            memory,
            turn: 0,
            usage: Usage::default(),
            cost: 0.0,
            trace_id: None,
            mode: TraceMode::Agent,
            task: None,
        }
    }

    /// Records the session's trace as `mode` (the task agent uses
    /// [`TraceMode::Task`]).
    pub fn set_mode(&mut self, mode: TraceMode) {
        self.mode = mode;
    }

    /// The task (and root goal) of the trace the first turn creates; the
    /// first message when unset.
    pub fn set_task(&mut self, task: impl Into<String>) {
        self.task = Some(task.into());
    }

    /// The bundle the session runs on.
    pub fn bundle(&self) -> &RuntimeBundle {
        &self.bundle
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Turns submitted so far.
    pub fn turn_index(&self) -> u64 {
        self.turn
    }

    /// Tokens used by all turns.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Cost of all turns.
    pub fn cost(&self) -> f64 {
        self.cost
    }

    /// The session's trace, once a turn has run.
    pub fn trace_id(&self) -> Option<&str> {
        self.trace_id.as_deref()
    }

    /// The session's memory.
    pub fn memory(&self) -> &SessionMemory {
        &self.memory
    }

    /// The runner (to stop a turn from another task).
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// The system prompt with the memory snapshot appended.
    pub async fn system_prompt(&self) -> Result<String, AgentError> {
        let snapshot =
            self.memory.snapshot().await.map_err(|e| AgentError::Memory(e.to_string()))?;
        let base = self.agent.system_prompt();
        Ok(if snapshot.is_empty() { base } else { format!("{base}\n\n{}", snapshot.render()) })
    }

    /// Runs one turn: `input` as a user message, the loop to its end.
    /// `on_event` sees every event as it happens. Dropping the future
    /// stops the turn's run (the trace ends `stopped`).
    pub async fn submit_turn_with(
        &mut self,
        input: &str,
        mut on_event: impl FnMut(&AgentEvent) + Send,
    ) -> Result<TurnOutcome, AgentError> {
        let turn = self.turn + 1;
        let mut start = HookEvent::at(HookPoint::OnTurnStart);
        start.turn = Some(turn);
        start.trace_id = self.trace_id.clone();
        self.bundle.hooks.fire(&start).await?;

        let config = RunConfig {
            trace_id: self.trace_id.clone(),
            system_prompt: Some(self.system_prompt().await?),
            agent_type: self.agent.name().to_owned(),
            params: self.bundle.params.clone(),
            max_iterations: self.bundle.max_iterations,
            mode: self.mode,
            task: self.task.clone(),
            ..RunConfig::default()
        };
        let mut handle = self.runner.run(vec![Message::new(Role::User, input)], config).await?;
        self.trace_id = Some(handle.trace_id().to_owned());
        let mut tool_calls = 0;
        while let Some(event) = handle.next_event().await {
            if matches!(event, AgentEvent::ToolStarted { .. }) {
                tool_calls += 1;
            }
            on_event(&event);
        }
        let outcome = handle.wait().await?;
        self.turn = turn;
        self.usage += outcome.usage;
        self.cost += outcome.cost;

        let mut end = HookEvent::at(HookPoint::OnTurnEnd);
        end.turn = Some(turn);
        end.trace_id = self.trace_id.clone();
        self.bundle.hooks.fire(&end).await?;
        Ok(TurnOutcome {
            turn,
            trace_id: outcome.trace_id,
            text: outcome.final_text.unwrap_or_default(),
            tool_calls,
            usage: outcome.usage,
        })
    }

    /// [`submit_turn_with`](Self::submit_turn_with) without watching events.
    pub async fn submit_turn(&mut self, input: &str) -> Result<TurnOutcome, AgentError> {
        self.submit_turn_with(input, |_| {}).await
    }
}
