//! The end of a run: its status (a limit reached or an error makes it
//! failed), the trace and goal tree stored with the event that ends it,
//! and the outcome handed back.

use crate::agent::error::AgentError;
use crate::agent::hooks::HookPoint;
use crate::agent::runner::{AgentEvent, Run, RunOutcome};
use reson_trace::{EventKind, TraceStatus};

impl Run {
    /// Ends the run with what its loop came to after `iterations` model
    /// calls: a stop caused by a spent budget fails it, naming the budget;
    /// an error fires the `OnError` hook.
    pub(super) async fn end(
        mut self,
        mut result: Result<TraceStatus, AgentError>,
        iterations: u32,
    ) -> Result<RunOutcome, AgentError> {
        // No tool call of this run is left: what the tools keep for the
        // trace (a browser and its profile) goes now, whatever comes next.
        self.inner.tools.run_ended(&self.trace.id).await;
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
        let finished = self.finish(status, error.clone()).await;
        let label = serde_json::to_value(status).ok();
        let label = label.as_ref().and_then(|v| v.as_str()).unwrap_or("failed");
        self.span.end_run(label, error.as_deref(), &self.usage);
        // A root run's spans go now, not at the batch's next tick: a short
        // CLI run may be the process's last.
        if self.depth == 0 {
            self.inner.telemetry.flush_soon();
        }
        finished?;
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

    /// Stores the trace's end with its goal tree, and syncs the store at
    /// a root run's end.
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
        if self.depth == 0 {
            self.inner.store.sync().await?;
        }
        Ok(())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
