//! Plans: steps with a one-way status machine.

use serde::Serialize;
use std::fmt;

/// Where a step is in its life. Transitions only go forward:
/// `Pending → Running → Completed | Failed`, and `Pending | Running →
/// Skipped`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being executed.
    Running,
    /// Done, with the agent's answer.
    Completed {
        /// The final text of the step's turn.
        response: String,
    },
    /// Failed, with the error.
    Failed {
        /// What went wrong.
        error: String,
    },
    /// Not executed (a failure policy skipped it).
    Skipped,
}

impl StepStatus {
    fn name(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed { .. } => "completed",
            Self::Failed { .. } => "failed",
            Self::Skipped => "skipped",
        }
    }

    /// Whether the step is over (completed, failed or skipped).
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Completed { .. } | Self::Failed { .. } | Self::Skipped)
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transition the status machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step}: cannot go from {from} to {to}")]
pub struct TransitionError {
    /// The step's index.
    pub step: usize,
    /// Its status.
    pub from: &'static str,
    /// The status asked for.
    pub to: &'static str,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Position in the plan, from 0.
    pub index: usize,
    /// What to do.
    pub description: String,
    /// The step this one is a sub-step of.
    pub parent: Option<usize>,
    status: StepStatus,
}

impl Step {
    /// A pending step.
    pub fn new(index: usize, description: impl Into<String>, parent: Option<usize>) -> Self {
        Self { index, description: description.into(), parent, status: StepStatus::Pending }
    }

    /// The step's status.
    pub fn status(&self) -> &StepStatus {
        &self.status
    }

    fn go(&mut self, to: StepStatus, allowed: bool) -> Result<(), TransitionError> {
        if !allowed {
            return Err(TransitionError {
                step: self.index,
                from: self.status.name(),
                to: to.name(),
            });
        }
        self.status = to;
        Ok(())
    }

    /// Pending → Running.
    pub fn start(&mut self) -> Result<(), TransitionError> {
        let ok = self.status == StepStatus::Pending;
        self.go(StepStatus::Running, ok)
    }

    /// Running → Completed.
    pub fn complete(&mut self, response: impl Into<String>) -> Result<(), TransitionError> {
        let ok = self.status == StepStatus::Running;
        self.go(StepStatus::Completed { response: response.into() }, ok)
    }

    /// Running → Failed.
    pub fn fail(&mut self, error: impl Into<String>) -> Result<(), TransitionError> {
        let ok = self.status == StepStatus::Running;
        self.go(StepStatus::Failed { error: error.into() }, ok)
    }

    /// Pending or Running → Skipped.
    pub fn skip(&mut self) -> Result<(), TransitionError> {
        let ok = matches!(self.status, StepStatus::Pending | StepStatus::Running);
        self.go(StepStatus::Skipped, ok)
    }
}

/// A plan: steps in order, sub-steps after their parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The goal it serves.
    pub goal: String,
    /// Its steps.
    pub steps: Vec<Step>,
}

impl Plan {
    /// A plan of top-level steps.
    pub fn from_descriptions(
        goal: impl Into<String>,
        steps: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let steps = steps.into_iter().enumerate().map(|(i, d)| Step::new(i, d, None)).collect();
        Self { goal: goal.into(), steps }
    }

    /// The steps as a table, one a line: index, status, description
    /// (sub-steps indented).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            let depth =
                std::iter::successors(step.parent, |p| self.steps.get(*p).and_then(|s| s.parent))
                    .count();
            out.push_str(&format!(
                "{:>3}  {:<9}  {:indent$}{}\n",
                step.index + 1,
                step.status.name(),
                "",
                step.description,
                indent = depth * 2
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_in(status: &str) -> Step {
        let mut s = Step::new(0, "x", None);
        match status {
            "pending" => {}
            "running" => s.start().unwrap(),
            "completed" => {
                s.start().unwrap();
                s.complete("r").unwrap();
            }
            "failed" => {
                s.start().unwrap();
                s.fail("e").unwrap();
            }
            "skipped" => s.skip().unwrap(),
            _ => unreachable!(),
        }
        s
    }

    #[test]
    fn every_transition_legal_or_refused() {
        type Go = fn(&mut Step) -> Result<(), TransitionError>;
        let moves: [(&str, Go); 4] = [
            ("running", |s| s.start()),
            ("completed", |s| s.complete("done")),
            ("failed", |s| s.fail("boom")),
            ("skipped", |s| s.skip()),
        ];
        let legal = [
            ("pending", "running"),
            ("pending", "skipped"),
            ("running", "completed"),
            ("running", "failed"),
            ("running", "skipped"),
        ];
        for from in ["pending", "running", "completed", "failed", "skipped"] {
            for (to, go) in moves {
                let mut step = step_in(from);
                let result = go(&mut step);
                if legal.contains(&(from, to)) {
                    assert!(result.is_ok(), "{from} → {to} should be allowed");
                    assert_eq!(step.status().name(), to);
                } else {
                    let err = result.unwrap_err();
                    assert_eq!(err.to_string(), format!("step 0: cannot go from {from} to {to}"));
                    assert_eq!(step.status().name(), from, "a refused transition changes nothing");
                }
            }
        }
    }

    #[test]
    fn the_table_indents_sub_steps() {
        let mut plan = Plan::from_descriptions("g", ["a", "b"]);
        plan.steps.push(Step::new(2, "b.1", Some(1)));
        plan.steps[0].start().unwrap();
        plan.steps[0].complete("ok").unwrap();
        assert_eq!(plan.render(), "  1  completed  a\n  2  pending    b\n  3  pending      b.1\n");
    }
}
