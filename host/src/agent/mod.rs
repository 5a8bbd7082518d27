//! Agents: the loop that turns model answers into tool calls and traces,
//! and the AG Core layer (agents, sessions, hooks, session memory) on top.

mod approval;
mod doom;
mod error;
mod hooks;
pub mod memory;
mod runner;
mod session;
mod task;

pub use approval::{Answer, ApprovalRequest, Approver, PendingApprovals, Permissions};
pub use error::AgentError;
pub use hooks::{Hook, HookDecision, HookEvent, HookPoint, Hooks};
pub use runner::{AgentEvent, INTERRUPTED, RunConfig, RunHandle, RunMode, RunOutcome, Runner};
pub use session::{Agent, AgentBuilder, AgentSession, BasicAgent, RuntimeBundle, TurnOutcome};
pub use task::{
    FailurePolicy, Plan, PlanParser, PluginPlanParser, Step, StepStatus, TaskAgent, TaskOutcome,
    TransitionError,
};
