//! Sub-agents: the `agent` and `evaluate` tools at run time. Every
//! sub-agent is a trace of its own whose `parent_trace_id` and
//! `parent_goal_id` name its caller, run by a runner narrowed from the
//! caller's: the tools both may use, the permission rules of both (each
//! call gets the stricter decision, and `ask` goes to the root's
//! approver), a budget carved from what the caller has left, one level
//! deeper, under the depth and fan-out limits.
//!
//! The two tools are one [`ToolSource`] that
//! [`Runner::with_sub_agents`] adds to the runner's registry; each call
//! finds its calling run ([`Caller`]) in its context, and reports what the
//! calling trace must record as a [`TraceUpdate`].

use crate::agent::approval::{Announce, Answer, ApprovalRequest, Approver, Permissions};
use crate::agent::runner::{AgentEvent, Caller, INTERRUPTED, Link, RunConfig, Runner, TraceUpdate};
use crate::config::AgentConfig;
use crate::policy::{Budget, Preset, RuleSet};
use crate::telemetry::Span;
use crate::tools::agent::{self, AgentArgs, AgentCallResult, SubAgentResult, SubAgentStats};
use crate::tools::evaluate::{self, EvaluateArgs, EvaluateResult, Verdict};
use crate::tools::{ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{
    AgentMode, Collaborator, CollaboratorKind, CollaboratorStatus, GoalStats, GoalTree, Message,
    Role, ToolCall, Trace, TraceError, TraceFilter, TraceMode, TraceStatus, TraceStore,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Key in a sub-trace's `context.extra`: the id of the call that started it.
const PARENT_CALL_KEY: &str = "parent_call_id";
/// Key in a sub-trace's `context.extra`: the skills it was given.
const SKILLS_KEY: &str = "skills";
/// The preset an evaluator runs under (narrowed by its caller's).
const EVALUATOR_PRESET: &str = "explore";

/// The system prompt of a new sub-agent.
const SUB_AGENT_PROMPT: &str = "You are a sub-agent working on one task for another agent. Use \
                                the tools you have, then answer with a short, complete summary \
                                of the result: it is all your caller will see.";

/// How sub-agents may be started: limits, and the presets and global
/// rules that `agent_type` names resolve against.
#[derive(Debug, Clone)]
pub struct SubAgentSettings {
    /// Deepest nesting: a root agent is at depth 0, and an agent at this
    /// depth may not start sub-agents.
    pub max_depth: u32,
    /// Most sub-agents one agent runs at once.
    pub max_fan_out: usize,
    /// A cap on each sub-agent's budget, under what its parent has left.
    pub child_budget: Budget,
    presets: BTreeMap<String, Preset>,
    global_rules: RuleSet,
}

impl Default for SubAgentSettings {
    /// Depth 3, fan-out 8, no cap per child, the built-in presets, and no
    /// global rules (unmatched calls ask).
    fn default() -> Self {
        Self {
            max_depth: 3,
            max_fan_out: 8,
            child_budget: Budget::default(),
            presets: BTreeMap::new(),
            global_rules: RuleSet::compile(&[]).expect("no rules compile"),
        }
    }
}

impl SubAgentSettings {
    /// The limits of `[sub_agents]`, the user's presets and the global
    /// permission rules of `config`.
    pub fn from_config(config: &impl AsRef<AgentConfig>) -> Result<Self, String> {
        let config = config.as_ref();
        let global_rules = config.rule_set().map_err(|e| e.to_string())?;
        Ok(Self {
            max_depth: config.sub_agents.max_depth,
            max_fan_out: config.sub_agents.max_fan_out,
            child_budget: config.sub_agents.child_budget,
            presets: config.presets.clone(),
            global_rules,
        })
    }

    fn preset(&self, name: &str) -> Result<(Preset, RuleSet), String> {
        let preset = Preset::resolve(name, &self.presets).map_err(|e| e.to_string())?;
        let rules = preset.rule_set(&self.global_rules).map_err(|e| e.to_string())?;
        Ok((preset, rules))
    }
}

impl Runner {
    /// The same runner offering the `agent` and `evaluate` tools: the model
    /// can hand work to sub-agents, each a trace under the calling goal,
    /// never allowed more than its caller, within `settings`' limits.
    pub fn with_sub_agents(self, settings: SubAgentSettings) -> Self {
        let tools = self.tools().clone().with_builtin(Arc::new(SubAgents { settings }));
        self.with_tools(tools)
    }
}

/// The `agent` and `evaluate` tools.
struct SubAgents {
    settings: SubAgentSettings,
}

#[async_trait]
impl ToolSource for SubAgents {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![agent::spec(), evaluate::spec()]
    }

    /// Runs one `agent` or `evaluate` call to its end. Every failure is a
    /// result the model can read.
    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        let Some(caller) = context.extensions.get::<Caller>() else {
            return ToolResult::error(format!("Error: `{}` works only inside a run", call.name));
        };
        let settings = &self.settings;
        if caller.depth >= settings.max_depth {
            return ToolResult::error(format!(
                "Error: sub-agent depth limit reached: this agent is at depth {} and sub-agents \
                 may go {} deep (sub_agents.max_depth); do the work yourself",
                caller.depth, settings.max_depth
            ));
        }
        // The span of this call, which the sub-agent's own goes under.
        let span = context.extensions.get::<Span>().map(|s| (*s).clone()).unwrap_or_default();
        if call.name == evaluate::NAME {
            run_evaluate(settings, &caller, call, &span).await
        } else {
            run_agent(settings, &caller, call, &span).await
        }
    }

    fn needs_run(&self) -> bool {
        true
    }

    async fn interrupted(
        &self,
        call: &ToolCall,
        trace: &mut Trace,
        store: &dyn TraceStore,
    ) -> Option<String> {
        Some(healed(store, trace, call).await)
    }
}

/// A change the calling run records in its trace and goal tree.
#[derive(Debug)]
enum Update {
    /// A sub-agent's trace exists and runs, under `goal_id`.
    Started {
        goal_id: String,
        sub_trace_id: String,
        task: String,
        agent_type: String,
        mode: AgentMode,
    },
    /// A sub-agent waits for an approval, or works again after one.
    Status { sub_trace_id: String, status: CollaboratorStatus },
    /// A sub-agent under `goal_id` ended; `spent` is what this call cost it
    /// (its own sub-agents included).
    Finished {
        goal_id: String,
        sub_trace_id: String,
        status: CollaboratorStatus,
        summary: Option<String>,
        spent: GoalStats,
    },
}

/// Sends `update` to the calling run, which records it in its trace and
/// goal tree.
fn report(caller: &Caller, update: Update) {
    let record: TraceUpdate = Box::new(move |trace, goals| apply(update, trace, goals));
    // A caller that has ended records nothing more.
    let _ = caller.updates.send(record);
}

/// Places held for sub-agents of one run, given back when dropped.
struct Slots {
    active: Arc<AtomicUsize>,
    taken: usize,
}

impl Slots {
    fn take(caller: &Caller, wanted: usize, max: usize) -> Result<Self, String> {
        let before = caller.active.fetch_add(wanted, Ordering::SeqCst);
        let slots = Slots { active: caller.active.clone(), taken: wanted };
        if before + wanted > max {
            return Err(format!(
                "Error: fan-out limit: {wanted} more sub-agents would make {} running at once, \
                 and at most {max} may run (sub_agents.max_fan_out); give fewer tasks",
                before + wanted
            ));
        }
        Ok(slots)
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.active.fetch_sub(self.taken, Ordering::SeqCst);
    }
}

async fn run_agent(
    settings: &SubAgentSettings,
    caller: &Caller,
    call: &ToolCall,
    span: &Span,
) -> ToolResult {
    let args = match AgentArgs::parse(&call.arguments) {
        Ok(args) => args,
        Err(e) => return ToolResult::error(e),
    };
    let tasks = args.tasks();
    let _slots = match Slots::take(caller, tasks.len(), settings.max_fan_out) {
        Ok(slots) => slots,
        Err(e) => return ToolResult::error(e),
    };
    // Every child is prepared before any starts: a bad preset or an
    // exhausted budget refuses the whole call, leaving nothing half done.
    let mut prepared = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let start = Start {
            task: task.to_string(),
            context: args.context_for(i),
            continue_from: args.continue_from.clone(),
            agent_type: args.agent_type.clone(),
            skills: args.skills.clone(),
            goal_id: None,
        };
        match prepare(settings, caller, call, span, start).await {
            Ok(child) => prepared.push(child),
            Err(e) => return ToolResult::error(e),
        }
    }
    let mode = args.mode();
    let runs = prepared.into_iter().map(|child| run(caller, call, child, mode));
    let results = futures::future::join_all(runs).await;
    let ok = results.iter().all(|r| r.status == "completed");
    let text = serde_json::to_string_pretty(&AgentCallResult { mode, results })
        .expect("results serialise");
    ToolResult { ok, ..ToolResult::text(text) }
}

async fn run_evaluate(
    settings: &SubAgentSettings,
    caller: &Caller,
    call: &ToolCall,
    span: &Span,
) -> ToolResult {
    let args = match EvaluateArgs::parse(&call.arguments) {
        Ok(args) => args,
        Err(e) => return ToolResult::error(e),
    };
    let Some(target) = args.target_goal_id.clone().or_else(|| caller.goal_id.clone()) else {
        return ToolResult::error(
            "Error: no goal to evaluate: give `target_goal_id` (there is no current goal)".into(),
        );
    };
    let Some(goal) = caller.goals.get(&target) else {
        return ToolResult::error(format!("Error: there is no goal {target} to evaluate"));
    };
    let _slots = match Slots::take(caller, 1, settings.max_fan_out) {
        Ok(slots) => slots,
        Err(e) => return ToolResult::error(e),
    };
    let start = Start {
        task: evaluate::mission(goal),
        context: args.messages.iter().map(|m| m.to_message()).collect(),
        continue_from: args.continue_from.clone(),
        agent_type: Some(EVALUATOR_PRESET.to_owned()),
        skills: None,
        // With no goal in focus, the evaluation belongs to the goal judged.
        goal_id: caller.goal_id.is_none().then(|| target.clone()),
    };
    let child = match prepare(settings, caller, call, span, start).await {
        Ok(child) => child,
        Err(e) => return ToolResult::error(e),
    };
    let result = run(caller, call, child, AgentMode::Evaluate).await;
    let verdict = (result.status == "completed")
        .then(|| Verdict::from_answer(result.summary.as_deref().unwrap_or_default()));
    let ok = verdict.is_some();
    let result = EvaluateResult {
        target_goal_id: target,
        sub_trace_id: result.sub_trace_id,
        status: result.status,
        verdict,
        error: result.error,
        stats: result.stats,
        resume: result.resume,
    };
    let text = serde_json::to_string_pretty(&result).expect("results serialise");
    ToolResult { ok, ..ToolResult::text(text) }
}

/// What one sub-agent is asked to do.
struct Start {
    task: String,
    context: Vec<Message>,
    continue_from: Option<String>,
    agent_type: Option<String>,
    skills: Option<Vec<String>>,
    /// The calling goal, when not the caller's current one.
    goal_id: Option<String>,
}

/// A sub-agent ready to run.
struct Prepared {
    runner: Runner,
    messages: Vec<Message>,
    config: RunConfig,
    link: Link,
    task: String,
    /// The calling goal.
    goal_id: String,
    /// What its trace tree had spent before this call.
    before: GoalStats,
}

/// Checks and builds one sub-agent: its preset, tools, permissions and
/// budget, each no more than the caller's.
async fn prepare(
    settings: &SubAgentSettings,
    caller: &Caller,
    call: &ToolCall,
    span: &Span,
    start: Start,
) -> Result<Prepared, String> {
    let store = caller.runner.store().clone();
    let continued = match &start.continue_from {
        Some(id) => {
            // Only a caller's own sub-agents: a model must not be able to
            // take over any trace it can name, nor learn whether one
            // exists: any other id, stored or not, gets the same words.
            let not_ours = || {
                format!(
                    "Error: this agent has no sub-agent {id} to continue; continue_from takes a \
                     sub_trace_id this agent's calls returned"
                )
            };
            let trace = store
                .get_trace(id)
                .await
                .map_err(|e| format!("Error: {e}"))?
                .filter(|trace| trace.parent_trace_id.as_deref() == Some(caller.trace_id.as_str()))
                .ok_or_else(not_ours)?;
            Some(trace)
        }
        None => None,
    };
    let explicit =
        start.agent_type.clone().or_else(|| continued.as_ref().map(|t| t.agent_type.clone()));
    let name = explicit.clone().unwrap_or_else(|| caller.agent_type.clone());
    let preset = match settings.preset(&name) {
        Ok(found) => Some(found),
        // The caller's own type need not be a preset (a library runner's);
        // its child then gets exactly the caller's tools and rules.
        Err(_) if explicit.is_none() => None,
        Err(e) => return Err(format!("Error: agent_type: {e}")),
    };
    let offered = caller.runner.offered_names();
    let tools: Vec<String> =
        offered.into_iter().filter(|t| preset.as_ref().is_none_or(|(p, _)| p.offers(t))).collect();
    let permissions = match (caller.runner.permissions(), &preset) {
        (Some(parent), Some((_, rules))) => Some(Arc::new(parent.narrowed(rules.clone()))),
        (Some(parent), None) => Some(parent),
        (None, Some((_, rules))) => {
            Some(Arc::new(Permissions::new(rules.clone(), Arc::new(NobodyToAsk))))
        }
        (None, None) => None,
    };
    let meter = caller.meter.carve(settings.child_budget).map_err(|e| format!("Error: {e}"))?;
    let child_runner = caller.runner.child(tools, permissions);
    let mut params = caller.config.params.clone();
    if let Some(temperature) = preset.as_ref().and_then(|(p, _)| p.temperature) {
        params.temperature = Some(temperature);
    }
    let max_iterations =
        preset.as_ref().and_then(|(p, _)| p.max_iterations).unwrap_or(caller.config.max_iterations);
    let parent_goal = start
        .goal_id
        .or_else(|| caller.goal_id.clone())
        .or_else(|| caller.goals.goals().first().map(|g| g.id.clone()))
        .unwrap_or_default();
    let skills = start
        .skills
        .or_else(|| preset.as_ref().map(|(p, _)| p.skills.clone()))
        .filter(|s| !s.is_empty());
    let config = RunConfig {
        trace_id: start.continue_from.clone(),
        // The caller's own id, when its caller chose it (the server does):
        // a child gets a fresh one.
        new_trace_id: None,
        after_sequence: None,
        system_prompt: continued.is_none().then(|| SUB_AGENT_PROMPT.to_owned()),
        mode: TraceMode::Task,
        agent_type: preset.as_ref().map_or(name, |(p, _)| p.name.clone()),
        task: Some(start.task.clone()),
        params,
        max_iterations,
        parent: Some((caller.trace_id.clone(), parent_goal.clone())),
        budget: Budget::default(),
        skills: skills.clone().or_else(|| caller.config.skills.clone()),
        // A sub-agent never rewinds, so it restores nothing.
        restore_files: false,
        force_restore: false,
        ..caller.config.clone()
    };
    let mut extra = serde_json::Map::new();
    extra.insert(PARENT_CALL_KEY.into(), call.id.clone().into());
    if let Some(skills) = skills {
        extra.insert(SKILLS_KEY.into(), skills.into());
    }
    let before = match &continued {
        Some(trace) => tree_stats(&*store, &trace.id).await.map_err(|e| format!("Error: {e}"))?.0,
        None => GoalStats::default(),
    };
    let mut messages = start.context;
    messages.push(Message::new(Role::User, start.task.clone()));
    let link = Link {
        meter,
        cancel: caller.cancel.child_token(),
        extra,
        depth: caller.depth + 1,
        parent_span: span.clone(),
    };
    Ok(Prepared {
        runner: child_runner,
        messages,
        config,
        link,
        task: start.task,
        goal_id: parent_goal,
        before,
    })
}

/// Runs a prepared sub-agent to its end, its events going out inside the
/// caller's, and reports it to the caller's run.
async fn run(caller: &Caller, call: &ToolCall, child: Prepared, mode: AgentMode) -> SubAgentResult {
    let Prepared { runner, messages, config, link, task, goal_id, before } = child;
    let agent_type = config.agent_type.clone();
    let store = runner.store().clone();
    let mut handle = match runner.start(messages, config.clone(), Some(link)).await {
        Ok(handle) => handle,
        Err(e) => {
            return SubAgentResult {
                sub_trace_id: config.trace_id.unwrap_or_default(),
                task,
                status: "failed".into(),
                summary: None,
                error: Some(e.to_string()),
                stats: SubAgentStats::default(),
                resume: None,
            };
        }
    };
    let id = handle.trace_id().to_owned();
    report(
        caller,
        Update::Started {
            goal_id: goal_id.clone(),
            sub_trace_id: id.clone(),
            task: task.clone(),
            agent_type,
            mode,
        },
    );
    let mut waiting = false;
    while let Some(event) = handle.next_event().await {
        let asks = matches!(event, AgentEvent::ApprovalNeeded { .. });
        if asks != waiting {
            waiting = asks;
            let status =
                if asks { CollaboratorStatus::Waiting } else { CollaboratorStatus::Running };
            report(caller, Update::Status { sub_trace_id: id.clone(), status });
        }
        let _ = caller.events.send(AgentEvent::SubAgent {
            call_id: call.id.clone(),
            sub_trace_id: id.clone(),
            event: Box::new(event),
        });
    }
    // The outcome is read back from the trace, which holds it however the
    // run ended.
    let _ = handle.wait().await;
    let mut result = describe(&*store, &id, task).await;
    let spent = match tree_stats(&*store, &id).await {
        Ok((after, _)) => minus(&after, &before),
        Err(_) => GoalStats::default(),
    };
    let status = match result.status.as_str() {
        "completed" => CollaboratorStatus::Completed,
        _ => CollaboratorStatus::Failed,
    };
    report(
        caller,
        Update::Finished {
            goal_id,
            sub_trace_id: id,
            status,
            summary: result.summary.clone().or_else(|| result.error.clone()),
            spent,
        },
    );
    if result.status != "completed" && result.resume.is_none() {
        result.resume = Some(resume_hint(&result.sub_trace_id));
    }
    result
}

fn resume_hint(id: &str) -> String {
    format!(
        "call agent with continue_from = \"{id}\" and a task saying how to go on; it keeps \
         everything it did"
    )
}

/// A sub-trace as a result: its status, final answer or error, and stats.
async fn describe(store: &dyn TraceStore, id: &str, task: String) -> SubAgentResult {
    let trace = store.get_trace(id).await.ok().flatten();
    let stats = tree_stats(store, id).await.map(|(_, s)| s).unwrap_or_default();
    let (status, summary, error) = match &trace {
        Some(t) => (status_word(t.status), t.result_summary.clone(), t.error_message.clone()),
        None => ("failed", None, Some(format!("trace {id} is gone"))),
    };
    let summary = summary.filter(|_| status == "completed");
    let resume = (status != "completed").then(|| resume_hint(id));
    SubAgentResult {
        sub_trace_id: id.to_owned(),
        task,
        status: status.into(),
        summary,
        error,
        stats,
        resume,
    }
}

fn status_word(status: TraceStatus) -> &'static str {
    match status {
        TraceStatus::Completed => "completed",
        TraceStatus::Failed => "failed",
        TraceStatus::Stopped => "stopped",
        TraceStatus::Waiting => "waiting",
        // Still marked running, yet no run has it: its host died.
        TraceStatus::Running => "interrupted",
    }
}

/// What the trace `id` and every sub-trace under it spent, summed, and the
/// same as the stats a result reports (`tool_calls` counts `id`'s own).
/// Sub-traces are found through the goals that started them, so the cost
/// follows the size of the tree, not of the store.
pub(crate) async fn tree_stats(
    store: &dyn TraceStore,
    id: &str,
) -> Result<(GoalStats, SubAgentStats), TraceError> {
    let mut total = GoalStats::default();
    let mut seen = std::collections::HashSet::new();
    let mut pending = vec![id.to_owned()];
    while let Some(next) = pending.pop() {
        if !seen.insert(next.clone()) {
            continue;
        }
        if let Some(trace) = store.get_trace(&next).await? {
            total += &trace.totals;
        }
        let goals = store.get_goals(&next).await?;
        pending.extend(goals.goals().iter().flat_map(|g| g.sub_trace_ids.iter().cloned()));
    }
    let tool_calls = store.get_messages(id).await?.iter().map(|m| m.tool_calls.len() as u64).sum();
    let stats = SubAgentStats {
        tokens: total.usage.prompt_tokens + total.usage.completion_tokens,
        prompt_tokens: total.usage.prompt_tokens,
        completion_tokens: total.usage.completion_tokens,
        cost_usd: total.cost,
        duration_ms: total.duration_ms,
        tool_calls,
        model_requests: total.requests,
    };
    Ok((total, stats))
}

fn minus(after: &GoalStats, before: &GoalStats) -> GoalStats {
    let mut usage = after.usage;
    usage.prompt_tokens = usage.prompt_tokens.saturating_sub(before.usage.prompt_tokens);
    usage.completion_tokens =
        usage.completion_tokens.saturating_sub(before.usage.completion_tokens);
    usage.reasoning_tokens = usage.reasoning_tokens.saturating_sub(before.usage.reasoning_tokens);
    usage.cache_read_tokens =
        usage.cache_read_tokens.saturating_sub(before.usage.cache_read_tokens);
    usage.cache_write_tokens =
        usage.cache_write_tokens.saturating_sub(before.usage.cache_write_tokens);
    GoalStats {
        messages: after.messages.saturating_sub(before.messages),
        usage,
        cost: (after.cost - before.cost).max(0.0),
        duration_ms: after.duration_ms.saturating_sub(before.duration_ms),
        requests: after.requests.saturating_sub(before.requests),
    }
}

/// Records `update` in the calling trace (its collaborators) and goal tree
/// (the calling goal's sub-traces and cumulative stats).
fn apply(update: Update, trace: &mut Trace, goals: &mut GoalTree) {
    let collaborators = &mut trace.context.collaborators;
    match update {
        Update::Started { goal_id, sub_trace_id, task, agent_type, mode } => {
            // A goal missing from the tree (a hand-edited file) just
            // goes unlinked.
            let _ = goals.link_sub_trace(&goal_id, &sub_trace_id, mode);
            let description: String = task.chars().take(200).collect();
            match collaborators.iter_mut().find(|c| c.trace_id.as_deref() == Some(&sub_trace_id)) {
                Some(known) => {
                    known.status = CollaboratorStatus::Running;
                    known.description = description;
                }
                None => {
                    let name = format!("{agent_type}#{}", collaborators.len() + 1);
                    collaborators.push(Collaborator {
                        name,
                        kind: CollaboratorKind::Agent,
                        description,
                        trace_id: Some(sub_trace_id),
                        status: CollaboratorStatus::Running,
                        summary: None,
                    });
                }
            }
        }
        Update::Status { sub_trace_id, status } => {
            if let Some(known) =
                collaborators.iter_mut().find(|c| c.trace_id.as_deref() == Some(&sub_trace_id))
            {
                known.status = status;
            }
        }
        Update::Finished { goal_id, sub_trace_id, status, summary, spent } => {
            let _ = goals.record_descendant(&goal_id, &spent);
            if let Some(known) =
                collaborators.iter_mut().find(|c| c.trace_id.as_deref() == Some(&sub_trace_id))
            {
                known.status = status;
                known.summary = summary.map(|s| s.chars().take(500).collect());
            }
        }
    }
}

/// The synthetic result of an `agent` or `evaluate` call that a crash or
/// stop cut off: the usual result, each sub-agent as its trace now stands,
/// with how to resume it. The calling trace's collaborators say so too.
async fn healed(store: &dyn TraceStore, trace: &mut Trace, call: &ToolCall) -> String {
    let text = healed_result(store, &trace.id, call).await;
    let ids: Vec<String> = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .map(|v| {
            let results = v.get("results").and_then(|r| r.as_array().cloned()).unwrap_or(vec![v]);
            results
                .iter()
                .filter(|r| r["status"] != "completed")
                .filter_map(|r| r["sub_trace_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for c in &mut trace.context.collaborators {
        if c.trace_id.as_ref().is_some_and(|id| ids.contains(id)) {
            c.status = CollaboratorStatus::Failed;
            c.summary = Some("interrupted: continue it with continue_from".into());
        }
    }
    text
}

async fn healed_result(store: &dyn TraceStore, trace_id: &str, call: &ToolCall) -> String {
    let filter =
        TraceFilter { parent_trace_id: Some(trace_id.to_owned()), ..TraceFilter::default() };
    let mut children: Vec<Trace> = store
        .list_traces(&filter)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.context.extra.get(PARENT_CALL_KEY).and_then(|v| v.as_str()) == Some(&call.id))
        .collect();
    children.sort_by_key(|t| t.created_at_ms);
    if call.name == evaluate::NAME {
        let args = EvaluateArgs::parse(&call.arguments).ok();
        let id = children
            .last()
            .map(|t| t.id.clone())
            .or_else(|| args.as_ref().and_then(|a| a.continue_from.clone()));
        let Some(id) = id else { return format!("{INTERRUPTED} No evaluator had started.") };
        let result = describe(store, &id, String::new()).await;
        let healed = EvaluateResult {
            target_goal_id: args.and_then(|a| a.target_goal_id).unwrap_or_default(),
            sub_trace_id: id,
            status: result.status,
            verdict: None,
            error: result.error,
            stats: result.stats,
            resume: result.resume,
        };
        return serde_json::to_string_pretty(&healed).expect("results serialise");
    }
    let args = AgentArgs::parse(&call.arguments).ok();
    let mut ids: Vec<(String, String)> = children.into_iter().map(|t| (t.id, t.task)).collect();
    if ids.is_empty()
        && let Some(id) = args.as_ref().and_then(|a| a.continue_from.clone())
    {
        ids.push((id, args.as_ref().map(|a| a.tasks().concat()).unwrap_or_default()));
    }
    if ids.is_empty() {
        return format!("{INTERRUPTED} No sub-agent had started.");
    }
    let mut results = Vec::new();
    for (id, task) in ids {
        results.push(describe(store, &id, task).await);
    }
    let mode = args.map_or(AgentMode::Delegate, |a| a.mode());
    serde_json::to_string_pretty(&AgentCallResult { mode, results }).expect("results serialise")
}

/// The approver of a sub-agent whose root has none: nobody can answer, so
/// every `ask` is denied.
struct NobodyToAsk;

#[async_trait]
impl Approver for NobodyToAsk {
    async fn approve(&self, _: &ApprovalRequest, _: &Announce) -> Option<Answer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runner::collaborators_section;

    #[test]
    fn collaborators_are_kept_current_and_shown_only_when_there_are_some() {
        let mut trace = Trace::new(TraceMode::Agent, "task", "default");
        let mut goals = crate::tools::goal::initial("task").unwrap();
        assert_eq!(collaborators_section(&trace), "");
        let started = |id: &str| Update::Started {
            goal_id: "g1".into(),
            sub_trace_id: id.into(),
            task: format!("task of {id}"),
            agent_type: "explore".into(),
            mode: AgentMode::Explore,
        };
        apply(started("tr_a"), &mut trace, &mut goals);
        apply(started("tr_b"), &mut trace, &mut goals);
        let waiting =
            Update::Status { sub_trace_id: "tr_b".into(), status: CollaboratorStatus::Waiting };
        apply(waiting, &mut trace, &mut goals);
        let spent = GoalStats { messages: 2, cost: 0.5, ..GoalStats::default() };
        let finished = Update::Finished {
            goal_id: "g1".into(),
            sub_trace_id: "tr_a".into(),
            status: CollaboratorStatus::Completed,
            summary: Some("found it".into()),
            spent,
        };
        apply(finished, &mut trace, &mut goals);
        assert_eq!(
            collaborators_section(&trace),
            "\n## Active Collaborators\n\
             - explore#1 (agent, completed, trace tr_a): task of tr_a — found it\n\
             - explore#2 (agent, waiting, trace tr_b): task of tr_b\n"
        );
        let g1 = goals.get("g1").unwrap();
        assert_eq!(g1.sub_trace_ids, ["tr_a", "tr_b"]);
        assert_eq!(g1.agent_mode, Some(AgentMode::Explore));
        assert_eq!(g1.cumulative_stats, spent);
        assert_eq!(g1.self_stats, GoalStats::default());
        // Started again (a continue): the same collaborator, running again.
        apply(started("tr_a"), &mut trace, &mut goals);
        assert_eq!(trace.context.collaborators.len(), 2);
        assert_eq!(trace.context.collaborators[0].status, CollaboratorStatus::Running);
        assert_eq!(goals.get("g1").unwrap().sub_trace_ids.len(), 2);
    }
}
