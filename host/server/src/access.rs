//! The trace store as routes reach it: only through the caller.
//!
//! A route never holds the store itself. It asks [`Traces::get`] for a
//! trace with the [`Caller`], and gets a [`Visible`] only for a trace the
//! caller may see; what lies inside a trace (its goals, messages, images,
//! events, sub-traces) is read through that [`Visible`] alone. So a new
//! route cannot forget whose a trace is: it has no other way in. Another
//! user's trace and a missing one are the same [`not_found`], word for word.
//!
//! The server's own work (starting runs, leases, shutdown) takes the whole
//! store through [`Traces::unscoped`]; no route calls it, which
//! `tests/system/layering.rs` checks.

use crate::caller::Caller;
use crate::error::ApiError;
use reson_agent::agent::human;
use reson_trace::{Event, GoalTree, Message, Trace, TraceFilter, TraceStore};
use std::sync::Arc;

/// The 404 of a trace the caller may not see: the same whether it does
/// not exist or is another user's.
pub(crate) fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no trace {id}"))
}

/// The trace store, reached through a caller.
#[derive(Clone)]
pub(crate) struct Traces {
    store: Arc<dyn TraceStore>,
}

impl Traces {
    pub(crate) fn new(store: Arc<dyn TraceStore>) -> Self {
        Self { store }
    }

    /// The whole store, for the server's own work. Never for a route's
    /// reads on a caller's behalf: those go through [`Traces::get`].
    pub(crate) fn unscoped(&self) -> &Arc<dyn TraceStore> {
        &self.store
    }

    /// Trace `id` if `caller` may see it; otherwise (or when there is
    /// none) [`not_found`].
    pub(crate) async fn get(&self, caller: &Caller, id: &str) -> Result<Visible, ApiError> {
        match self.find(caller, id).await? {
            Some(trace) => Ok(Visible { trace, store: self.store.clone() }),
            None => Err(not_found(id)),
        }
    }

    /// Trace `id` if `caller` may see it; `None` when there is none or it
    /// is another user's. Whose it is is read first, alone: another
    /// user's trace is never loaded, so its answer costs about what a
    /// missing one's does.
    pub(crate) async fn find(&self, caller: &Caller, id: &str) -> Result<Option<Trace>, ApiError> {
        match self.store.owner(id).await? {
            Some(owner) if caller.sees(owner.as_deref()) => {}
            _ => return Ok(None),
        }
        // Checked again on the trace itself, should the two ever disagree.
        Ok(self.store.get_trace(id).await?.filter(|trace| caller.sees(trace.uid.as_deref())))
    }

    /// The traces `filter` matches that `caller` may see.
    pub(crate) async fn list(
        &self,
        caller: &Caller,
        filter: TraceFilter,
    ) -> Result<Vec<Trace>, ApiError> {
        let filter = TraceFilter { uid: caller.only().map(str::to_owned), ..filter };
        let mut traces = self.store.list_traces(&filter).await?;
        // The store narrows by user already; this holds should it not.
        traces.retain(|trace| caller.sees(trace.uid.as_deref()));
        Ok(traces)
    }

    /// Whether `caller` may stop trace `id`: theirs, or (an admin only) one
    /// being created, which has no stored record yet and so no owner.
    pub(crate) async fn may_stop(&self, caller: &Caller, id: &str) -> Result<(), ApiError> {
        match self.store.owner(id).await? {
            Some(owner) if caller.sees(owner.as_deref()) => Ok(()),
            None if caller.admin => Ok(()),
            _ => Err(not_found(id)),
        }
    }
}

/// A trace its caller may see, and the only way into what it holds.
pub(crate) struct Visible {
    /// The trace as stored when it was looked up.
    pub(crate) trace: Trace,
    store: Arc<dyn TraceStore>,
}

impl Visible {
    /// The trace's id.
    pub(crate) fn id(&self) -> &str {
        &self.trace.id
    }

    /// Its goal tree.
    pub(crate) async fn goals(&self) -> Result<GoalTree, ApiError> {
        Ok(self.store.get_goals(self.id()).await?)
    }

    /// Every message, on every branch, by sequence.
    pub(crate) async fn all_messages(&self) -> Result<Vec<Message>, ApiError> {
        Ok(self.store.get_messages(self.id()).await?)
    }

    /// The main path's messages, root to head.
    pub(crate) async fn main_path(&self) -> Result<Vec<Message>, ApiError> {
        match self.trace.head_sequence {
            Some(head) => Ok(self.store.get_main_path_messages(self.id(), head).await?),
            None => Ok(Vec::new()),
        }
    }

    /// The bytes of image `name`, kept beside one of its messages.
    pub(crate) async fn image(&self, name: &str) -> Result<Option<Vec<u8>>, ApiError> {
        Ok(self.store.get_image(self.id(), name).await?)
    }

    /// Its events after `last`.
    pub(crate) async fn events_after(&self, last: u64) -> Result<Vec<Event>, ApiError> {
        Ok(self.store.events_after(self.id(), last).await?)
    }

    /// Every checkpoint of its workspace, with what each changed.
    pub(crate) async fn checkpoints(
        &self,
    ) -> Result<Vec<reson_workspace::CheckpointChanges>, ApiError> {
        reson_workspace::changes(&*self.store, self.id())
            .await
            .map_err(|e| ApiError::Internal(format!("the checkpoints of {}: {e}", self.id())))
    }

    /// Records `answer` (by `by`) to this trace, a question no run waits
    /// on any more, and marks the person answered in `asking`, the trace
    /// that asked (which the caller sees too).
    pub(crate) async fn answer_later(
        &self,
        asking: &Visible,
        answer: &str,
        by: &str,
    ) -> Result<human::AnsweredLater, human::AnswerError> {
        let question = human::Question::of(&self.trace);
        if question.is_none_or(|q| q.trace_id != asking.trace.id) {
            return Err(human::AnswerError::NotOpen(self.trace.id.clone()));
        }
        human::answer_later(&*self.store, self.id(), answer, by).await
    }

    /// The reports of its replays, oldest first.
    pub(crate) async fn replays(&self) -> Result<Vec<serde_json::Value>, ApiError> {
        let kind = reson_agent::replay::REPORT_KIND;
        let records = self.store.list_records(self.id(), Some(kind)).await?;
        Ok(records.into_iter().map(|r| r.body).collect())
    }

    /// Its sub-agents' traces that `caller` may see, newest first.
    pub(crate) async fn sub_traces(&self, caller: &Caller) -> Result<Vec<Trace>, ApiError> {
        let filter =
            TraceFilter { parent_trace_id: Some(self.trace.id.clone()), ..TraceFilter::default() };
        let mut traces = self.store.list_traces(&filter).await?;
        traces.retain(|trace| caller.sees(trace.uid.as_deref()));
        Ok(traces)
    }

    /// The store, to hand to what works on this trace alone (a
    /// reflection), by this trace's id.
    pub(crate) fn store_of_this_trace(&self) -> &Arc<dyn TraceStore> {
        &self.store
    }
}
