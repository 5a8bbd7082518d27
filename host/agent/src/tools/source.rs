//! The one interface every kind of tool implements: plugin tools, the
//! tools of MCP servers, and the host's built-ins. A run hands each call a
//! [`ToolContext`]; what a source needs beyond the call's ids and token
//! (the goal tree, the calling run) comes in it, so adding a source needs
//! nothing from the runner.

use crate::tools::ToolResult;
use async_trait::async_trait;
use reson_sandbox::capability::effects::Effects;
use reson_sandbox::plugin::{CallContext, ToolSpec};
use reson_trace::{GoalTree, ToolCall, Trace, TraceStore};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How the calls of one source are scheduled among the calls of one
/// assistant message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// In the run's own task, one at a time in call order, with the run's
    /// goal tree in [`ToolContext::goals`]. A successful call may have
    /// changed the tree: the run stores it, and the call's result carries
    /// the tree after it, so a rewind can rebuild the tree of its branch.
    InOrder,
    /// Alongside the message's other concurrent calls.
    Concurrent,
}

/// Values of any type, one per type, that a run puts in a call's context
/// for the sources that know them (the calling run, for the sub-agent
/// tools), without this module naming them.
#[derive(Clone, Default)]
pub struct Extensions(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Extensions {
    /// Puts `value` in, replacing any earlier value of its type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.0.insert(TypeId::of::<T>(), value);
    }

    /// The value of type `T`, if there is one.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.get(&TypeId::of::<T>()).cloned().and_then(|v| v.downcast().ok())
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions").field("len", &self.0.len()).finish()
    }
}

/// What one call gets from the run (or other caller) that makes it.
#[derive(Debug, Default)]
pub struct ToolContext<'a> {
    /// The model's id for this call.
    pub call_id: String,
    /// The trace the call belongs to; `None` outside a run.
    pub trace_id: Option<String>,
    /// Cancelled when the call must stop (the run was stopped).
    pub cancel: CancellationToken,
    /// The run's goal tree, for a [`Dispatch::InOrder`] source's calls in
    /// a run; `None` otherwise.
    pub goals: Option<&'a mut GoalTree>,
    /// Whatever else the caller provides.
    pub extensions: Extensions,
    /// Where a plugin call's host calls are recorded, or answered from in
    /// a replay; `None` records nothing.
    pub effects: Option<Effects>,
    /// Whose kept plugin instances the call may use: `trace_id`'s when
    /// `None` (see [`CallContext::session`]).
    pub session: Option<String>,
}

impl ToolContext<'_> {
    /// The context a plugin or MCP call takes.
    pub fn call_context(&self) -> CallContext {
        CallContext {
            call_id: self.call_id.clone(),
            trace_id: self.trace_id.clone(),
            cancel: Some(self.cancel.clone()),
            effects: self.effects.clone(),
            session: self.session.clone(),
        }
    }
}

impl From<&CallContext> for ToolContext<'_> {
    fn from(context: &CallContext) -> Self {
        Self {
            call_id: context.call_id.clone(),
            trace_id: context.trace_id.clone(),
            cancel: context.cancel.clone().unwrap_or_default(),
            effects: context.effects.clone(),
            session: context.session.clone(),
            ..Self::default()
        }
    }
}

/// A source of tools: what it serves, and how it runs a call of one of
/// them. Add one to a registry with
/// [`ToolRegistry::with_source`](crate::tools::ToolRegistry::with_source);
/// the registry settles which source serves a name, and the runner checks
/// permissions and records every call whatever its source.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// Specs of the tools it serves now.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs one call of a tool it serves. Every failure is a result the
    /// model can read and act on; none ends the run.
    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult;

    /// How its calls are scheduled; concurrently unless it says otherwise.
    fn dispatch(&self) -> Dispatch {
        Dispatch::Concurrent
    }

    /// Whether its tools work only inside a run (they need the run's goal
    /// tree, or start runs of their own): such tools are not served to
    /// callers outside a run, as MCP clients are.
    fn needs_run(&self) -> bool {
        false
    }

    /// Ticks when the tools it serves may have changed.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// The directories a call of its tool `name` can change (absolute,
    /// canonical): the run checkpoints them around the call. None unless
    /// the source says so.
    fn writes(&self, _name: &str) -> Vec<PathBuf> {
        Vec::new()
    }

    /// Called when a run of trace `trace_id` starts, offering `tools`: the
    /// source may get ready for their calls without holding the run up
    /// (the plugin runtime starts the trace's browser in the background).
    fn run_started(&self, _trace_id: &str, _tools: &[String]) {}

    /// Called when a run of trace `trace_id` ends (finished, failed or
    /// stopped): what the source keeps for the trace's calls, such as the
    /// plugin runtime's browser, goes.
    async fn run_ended(&self, _trace_id: &str) {}

    /// The result of a call of one of its tools that a crash or stop cut
    /// off, recorded in `trace` (the calling trace) in place of the one it
    /// never gave; `None` for the usual "interrupted" result.
    async fn interrupted(
        &self,
        _call: &ToolCall,
        _trace: &mut Trace,
        _store: &dyn TraceStore,
    ) -> Option<String> {
        None
    }
}
