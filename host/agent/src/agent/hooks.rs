//! Hooks: code that observes a run at fixed points and may block it.

use super::error::AgentError;
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

/// Where a hook fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookPoint {
    /// Before each model call.
    PreRequest,
    /// After each successful model call.
    PostRequest,
    /// Before a model call is tried again.
    OnRetry,
    /// When a run fails.
    OnError,
    /// When a session turn starts.
    OnTurnStart,
    /// When a session turn ends.
    OnTurnEnd,
    /// When a task agent finishes a plan step.
    OnPlanStepComplete,
    /// Before the history is compacted (`compaction_level` says how); a
    /// block stops the run instead.
    PreCompaction,
    /// After the history was compacted.
    PostCompaction,
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PreRequest => "pre-request",
            Self::PostRequest => "post-request",
            Self::OnRetry => "on-retry",
            Self::OnError => "on-error",
            Self::OnTurnStart => "on-turn-start",
            Self::OnTurnEnd => "on-turn-end",
            Self::OnPlanStepComplete => "on-plan-step-complete",
            Self::PreCompaction => "pre-compaction",
            Self::PostCompaction => "post-compaction",
        })
    }
}

/// What a hook is told.
#[derive(Debug, Clone)]
pub struct HookEvent {
    /// Where it fires.
    pub point: HookPoint,
    /// The trace, when one exists yet.
    pub trace_id: Option<String>,
    /// Loop iteration (model calls so far in this run).
    pub iteration: u32,
    /// Session turn, for turn hooks.
    pub turn: Option<u64>,
    /// Plan step index, for plan-step hooks.
    pub step_index: Option<usize>,
    /// Retry attempt (from 1), for retry hooks.
    pub attempt: Option<u32>,
    /// The error, for error and retry hooks.
    pub error: Option<String>,
    /// 1 or 2, for compaction hooks.
    pub compaction_level: Option<u8>,
}

impl HookEvent {
    /// An event at `point` with nothing else set.
    pub fn at(point: HookPoint) -> Self {
        Self {
            point,
            trace_id: None,
            iteration: 0,
            turn: None,
            step_index: None,
            attempt: None,
            error: None,
            compaction_level: None,
        }
    }
}

/// A hook's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    /// Go on.
    Continue,
    /// Stop the run with this reason (surfaces as [`AgentError::HookBlocked`]).
    Block(String),
}

/// A hook. Closures `Fn(&HookEvent) -> HookDecision` are hooks; a hook
/// that must wait (for a store, a service) implements this trait with
/// `#[async_trait]`. The run waits for each hook, so a hook should be quick.
#[async_trait]
pub trait Hook: Send + Sync {
    /// Observes `event`, and may block.
    async fn execute(&self, event: &HookEvent) -> HookDecision;
}

#[async_trait]
impl<F: Fn(&HookEvent) -> HookDecision + Send + Sync> Hook for F {
    async fn execute(&self, event: &HookEvent) -> HookDecision {
        self(event)
    }
}

/// The hooks of an agent, by point.
#[derive(Clone, Default)]
pub struct Hooks {
    hooks: Vec<(HookPoint, Arc<dyn Hook>)>,
}

impl Hooks {
    /// No hooks.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds `hook` at `point`.
    pub fn on(mut self, point: HookPoint, hook: impl Hook + 'static) -> Self {
        self.hooks.push((point, Arc::new(hook)));
        self
    }

    /// Fires every hook registered at `event.point`, in order; the first
    /// block wins.
    pub async fn fire(&self, event: &HookEvent) -> Result<(), AgentError> {
        for (point, hook) in &self.hooks {
            if *point != event.point {
                continue;
            }
            if let HookDecision::Block(reason) = hook.execute(event).await {
                return Err(AgentError::HookBlocked { point: event.point.to_string(), reason });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn hooks_fire_at_their_point_and_the_first_block_wins() {
        let seen = Arc::new(AtomicU32::new(0));
        let counter = seen.clone();
        let hooks = Hooks::none()
            .on(HookPoint::PreRequest, move |_: &HookEvent| {
                counter.fetch_add(1, Ordering::SeqCst);
                HookDecision::Continue
            })
            .on(HookPoint::PostRequest, |_: &HookEvent| HookDecision::Block("enough".into()))
            .on(HookPoint::PostRequest, |_: &HookEvent| panic!("never reached"));
        hooks.fire(&HookEvent::at(HookPoint::PreRequest)).await.unwrap();
        hooks.fire(&HookEvent::at(HookPoint::OnTurnEnd)).await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let err = hooks.fire(&HookEvent::at(HookPoint::PostRequest)).await.unwrap_err();
        assert_eq!(err.to_string(), "blocked by a hook at post-request: enough");
    }

    /// A hook that waits before it answers.
    struct Slow {
        answer: HookDecision,
    }

    #[async_trait]
    impl Hook for Slow {
        async fn execute(&self, _: &HookEvent) -> HookDecision {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            self.answer.clone()
        }
    }

    #[tokio::test]
    async fn an_async_hook_is_awaited_and_may_block() {
        let hooks = Hooks::none()
            .on(HookPoint::OnRetry, Slow { answer: HookDecision::Continue })
            .on(HookPoint::OnRetry, Slow { answer: HookDecision::Block("no retries".into()) });
        let err = hooks.fire(&HookEvent::at(HookPoint::OnRetry)).await.unwrap_err();
        assert_eq!(err.to_string(), "blocked by a hook at on-retry: no retries");
        hooks.fire(&HookEvent::at(HookPoint::PreRequest)).await.unwrap();
    }
}
