//! The task agent: plan a goal with the model, parse the plan with a
//! plan-parser component, then execute each step as a session turn.

mod parser;
mod plan;

pub use parser::{PlanParser, PluginPlanParser};
pub use plan::{Plan, Step, StepStatus, TransitionError};

use super::error::AgentError;
use super::hooks::{HookEvent, HookPoint};
use super::session::{Agent, AgentSession, RuntimeBundle};
use reson_trace::{GoalTree, TraceMode};
use std::sync::Arc;

/// What to do when a step fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Stop: the remaining steps are skipped and the task fails.
    #[default]
    Stop,
    /// Skip the failed step's sub-steps, go on with the rest.
    Skip,
    /// Go on with every remaining step.
    Continue,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    /// The plan with every step's final status.
    pub plan: Plan,
    /// The session's trace.
    pub trace_id: Option<String>,
    /// Whether every step completed.
    pub succeeded: bool,
}

/// Runs goals as plans of session turns.
pub struct TaskAgent {
    session: AgentSession,
    parser: Arc<dyn PlanParser>,
    policy: FailurePolicy,
}

impl TaskAgent {
    /// A task agent for `agent` on `bundle`, parsing plans with `parser`.
    pub fn new(
        agent: Arc<dyn Agent>,
        bundle: RuntimeBundle,
        parser: Arc<dyn PlanParser>,
    ) -> Result<Self, AgentError> {
        let mut session = AgentSession::new(agent, bundle)?;
        session.set_mode(TraceMode::Task);
        Ok(Self { session, parser, policy: FailurePolicy::default() })
    }

    /// Sets the failure policy.
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The session steps run in.
    pub fn session(&self) -> &AgentSession {
        &self.session
    }

    /// Asks the model for a plan for `goal` and parses it (autonomous mode).
    pub async fn plan(&mut self, goal: &str) -> Result<Plan, AgentError> {
        self.session.set_task(goal);
        let prompt = format!("Make a plan for this goal: {goal}\n{}", self.parser.format_hint());
        let answer = self.session.submit_turn(&prompt).await?;
        self.parser.parse(&answer.text, goal).await
    }

    /// Plans, then executes. `on_progress` sees the plan after every change.
    pub async fn run(
        &mut self,
        goal: &str,
        on_progress: impl FnMut(&Plan) + Send,
    ) -> Result<TaskOutcome, AgentError> {
        let plan = self.plan(goal).await?;
        self.execute_plan(plan, on_progress).await
    }

    /// Executes a given plan (external mode): each step is one turn of the
    /// session; `OnPlanStepComplete` fires after each step that ran, with
    /// its index; the plan is mirrored into the trace's goal tree.
    pub async fn execute_plan(
        &mut self,
        mut plan: Plan,
        mut on_progress: impl FnMut(&Plan) + Send,
    ) -> Result<TaskOutcome, AgentError> {
        let total = plan.steps.len();
        self.session.set_task(plan.goal.clone());
        on_progress(&plan);
        let mut goal_ids: Vec<Option<String>> = vec![None; total];
        for i in 0..total {
            if plan.steps[i].status().is_final() {
                continue;
            }
            plan.steps[i].start().map_err(|e| AgentError::Other(e.to_string()))?;
            on_progress(&plan);
            let step = &plan.steps[i];
            let parent_goal = step.parent.and_then(|p| goal_ids[p].clone());
            let prompt = format!(
                "Step {} of {}: {}\n(Overall goal: {})",
                i + 1,
                total,
                step.description,
                plan.goal
            );
            let description = step.description.clone();
            let result = self.run_step(&prompt, &description, parent_goal, &mut goal_ids[i]).await;
            let step = &mut plan.steps[i];
            let transition = match &result {
                Ok(response) => step.complete(response.clone()),
                Err(e) => step.fail(e.to_string()),
            };
            transition.map_err(|e| AgentError::Other(e.to_string()))?;
            self.mirror(goal_ids[i].as_deref(), step.status()).await?;
            let mut event = HookEvent::at(HookPoint::OnPlanStepComplete);
            event.step_index = Some(i);
            event.trace_id = self.session.trace_id().map(str::to_owned);
            event.error = result.as_ref().err().map(ToString::to_string);
            self.session.bundle().hooks().fire(&event).await?;
            on_progress(&plan);
            if result.is_err() {
                match self.policy {
                    FailurePolicy::Stop => {
                        for later in plan.steps.iter_mut().skip(i + 1) {
                            later.skip().map_err(|e| AgentError::Other(e.to_string()))?;
                        }
                        on_progress(&plan);
                        break;
                    }
                    FailurePolicy::Skip => skip_descendants(&mut plan, i)?,
                    FailurePolicy::Continue => {}
                }
            }
        }
        let completed = plan
            .steps
            .iter()
            .filter(|s| matches!(s.status(), StepStatus::Completed { .. }))
            .count();
        let succeeded = completed == total;
        // The root goal is the task: closed with the plan's outcome.
        if self.session.trace_id().is_some() {
            self.edit_goals(|tree| {
                let root = tree.ensure_root(&plan.goal)?;
                tree.focus(&root)?;
                if succeeded {
                    tree.done(&format!("all {total} steps completed"))
                } else {
                    tree.abandon(&format!("{completed} of {total} steps completed"))
                }
            })
            .await?;
        }
        Ok(TaskOutcome { plan, trace_id: self.session.trace_id().map(str::to_owned), succeeded })
    }

    /// Runs one step's turn, creating its goal once the trace exists.
    async fn run_step(
        &mut self,
        prompt: &str,
        description: &str,
        parent_goal: Option<String>,
        goal_id: &mut Option<String>,
    ) -> Result<String, AgentError> {
        // The step's messages carry its goal when the trace already exists;
        // a first turn creates the trace, and its goal follows.
        let existed = self.session.trace_id().is_some();
        if existed {
            *goal_id = Some(self.add_goal(description, parent_goal.as_deref()).await?);
        }
        let result = self.session.submit_turn(prompt).await.map(|turn| turn.text);
        if !existed && self.session.trace_id().is_some() {
            *goal_id = Some(self.add_goal(description, parent_goal.as_deref()).await?);
        }
        result
    }

    /// Adds a step's goal under `parent_goal` (under the root when none)
    /// and focuses it; returns its id.
    async fn add_goal(
        &mut self,
        description: &str,
        parent_goal: Option<&str>,
    ) -> Result<String, AgentError> {
        self.edit_goals(|tree| {
            let parent = match parent_goal {
                Some(parent) => parent.to_owned(),
                None => tree.ensure_root(description)?,
            };
            let id = tree.under(&parent, description)?;
            tree.focus(&id)?;
            Ok(id)
        })
        .await
    }

    async fn mirror(
        &mut self,
        goal_id: Option<&str>,
        status: &StepStatus,
    ) -> Result<(), AgentError> {
        let Some(goal_id) = goal_id else { return Ok(()) };
        self.edit_goals(|tree| {
            tree.focus(goal_id)?;
            match status {
                StepStatus::Completed { response } => tree.done(&summary(response)),
                StepStatus::Failed { error } => tree.abandon(error),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn edit_goals<T>(
        &mut self,
        edit: impl FnOnce(&mut GoalTree) -> Result<T, reson_trace::GoalError>,
    ) -> Result<T, AgentError> {
        let trace_id =
            self.session.trace_id().ok_or_else(|| AgentError::Other("no trace yet".into()))?;
        let store = self.session.bundle().store().clone();
        let mut tree = store.get_goals(trace_id).await?;
        let out = edit(&mut tree).map_err(|e| AgentError::Other(e.to_string()))?;
        store.save_goals(trace_id, &tree).await?;
        Ok(out)
    }
}

fn summary(response: &str) -> String {
    let line = response.lines().next().unwrap_or_default();
    line.chars().take(120).collect()
}

fn skip_descendants(plan: &mut Plan, failed: usize) -> Result<(), AgentError> {
    let mut doomed = vec![failed];
    for i in failed + 1..plan.steps.len() {
        if plan.steps[i].parent.is_some_and(|p| doomed.contains(&p)) {
            doomed.push(i);
            plan.steps[i].skip().map_err(|e| AgentError::Other(e.to_string()))?;
        }
    }
    Ok(())
}
