//! Preparing a run: the trace it writes (new, or an existing one
//! continued, rewound or regenerated), the path from the root to the head,
//! the goal tree of that branch, and results for calls a crash or stop cut
//! off.

use crate::agent::error::AgentError;
use crate::agent::runner::{
    AgentEvent, INTERRUPTED, Inner, Link, Run, RunConfig, RunMode, compact,
};
use crate::policy::{Budget, Meter};
use crate::telemetry::Span;
use crate::tools::goal;
use reson_trace::{EventKind, Message, MessageTree, Role, Trace, TraceStatus, Usage};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Key in `Trace::context.extra` under which the system prompt is kept,
/// so a continue without one reuses it.
const SYSTEM_PROMPT_KEY: &str = "system_prompt";

/// Key in `Trace::context.extra` under which the budget of the trace's
/// latest run is kept, for readers such as the viewer's budget bar.
const BUDGET_KEY: &str = "budget";

impl Run {
    /// Prepares the trace for a run: new, continue, rewind or regenerate
    /// (see [`RunMode`]), with the goal tree of its branch, calls cut off
    /// earlier healed, and `messages` persisted after the head.
    pub(super) async fn prepare(
        inner: Arc<Inner>,
        mut messages: Vec<Message>,
        mut config: RunConfig,
        events: mpsc::UnboundedSender<AgentEvent>,
        link: Link,
    ) -> Result<Self, AgentError> {
        let Link { meter, cancel, extra, depth, parent_span: _ } = link;
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
                trace.uid.clone_from(&config.uid);
                if let Some(id) = &config.new_trace_id {
                    trace.id.clone_from(id);
                }
                trace.model = Some(config.params.model.clone()).filter(|m| !m.is_empty());
                trace.provider = Some(inner.provider.name().to_owned());
                trace.tools = inner.offered_tools().into_iter().map(|t| t.name).collect();
                trace.llm_params = serde_json::to_value(&config.params).unwrap_or_default();
                if let Some((parent_trace, parent_goal)) = &config.parent {
                    trace.parent_trace_id = Some(parent_trace.clone());
                    trace.parent_goal_id = Some(parent_goal.clone());
                }
                trace.context.extra.extend(extra);
                record_budget(&mut trace, &meter);
                store.create_trace(&trace).await?;
                (trace, RunMode::New)
            }
            Some(id) => {
                // Another user's trace is not there for this run: the same
                // error as a missing one, so that its existence stays hidden.
                let mut trace = store
                    .get_trace(id)
                    .await?
                    .filter(|t| config.uid.is_none() || t.uid == config.uid)
                    .ok_or_else(|| AgentError::NoSuchTrace(id.clone()))?;
                // Stored with the run's first write to the trace.
                record_budget(&mut trace, &meter);
                // A run of a trace is its owner's, whoever started it.
                config.uid.clone_from(&trace.uid);
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
            depth,
            compaction: compact::State::default(),
            images: HashMap::new(),
            workspace: None,
            span: Span::default(),
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
            let point = run.tree.rewind_point(after);
            parent = Some(point);
            if run.config.restore_files {
                let config = &run.config;
                let restored = reson_workspace::restore(
                    &*run.inner.store,
                    &run.trace.id,
                    point,
                    config.force_restore,
                    &config.checkpoints.options(),
                )
                .await?;
                run.emit(AgentEvent::FilesRestored {
                    written: restored.written,
                    removed: restored.removed,
                    not_restorable: restored.not_restorable,
                });
            }
        } else if run.config.restore_files {
            return Err(AgentError::Config(
                "restoring files needs a rewind: say after which message".into(),
            ));
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
            if let Some(knowledge) = run.inner.tools.knowledge().cloned()
                && let Some(root) =
                    run.goals.current().map(|g| (g.id.clone(), g.description.clone()))
            {
                let found = knowledge.for_goal(&run.visible(), &root.1).await;
                // The root was just added, so it is there.
                let _ = run.goals.attach_knowledge(&root.0, found);
            }
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

    /// Gives every tool call on the main path that has no result a
    /// persisted "interrupted" result.
    pub(super) async fn heal(&mut self) -> Result<(), AgentError> {
        let Some(head) = self.trace.head_sequence else { return Ok(()) };
        for (_, call) in self.tree.orphaned_tool_calls(head) {
            let store = self.inner.store.clone();
            let text = match self.inner.tools.interrupted(&call, &mut self.trace, &*store).await {
                Some(text) => text,
                None => INTERRUPTED.to_owned(),
            };
            let mut result = Message::tool_result(&call, text);
            result.synthetic = true;
            self.persist(result).await?;
        }
        Ok(())
    }
}
/// Keeps the limits the run is held to in the trace; none when nothing is
/// limited.
fn record_budget(trace: &mut Trace, meter: &Meter) {
    let limits = meter.limits();
    if limits == Budget::default() {
        trace.context.extra.remove(BUDGET_KEY);
    } else if let Ok(value) = serde_json::to_value(limits) {
        trace.context.extra.insert(BUDGET_KEY.to_owned(), value);
    }
}
