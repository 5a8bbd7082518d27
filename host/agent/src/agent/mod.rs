//! Agents: the loop that turns model answers into tool calls and traces,
//! and the AG Core layer (agents, sessions, hooks, session memory) on top.
//!
//! Everything here is async, on tokio. [`Runner::run`] prepares the trace,
//! then runs the loop as a task of its own and hands back a [`RunHandle`]:
//! a [`Stream`](futures::Stream) of [`AgentEvent`]s, then the outcome.
//! Dropping the handle stops the run; many runs share one process and a
//! few threads.
//!
//! [`Runner::with_sub_agents`] adds the `agent` and `evaluate` tools: a
//! sub-agent is a trace of its own under the calling goal, run with no more
//! tools, rules or budget than its caller has; its events come out of the
//! caller's stream as [`AgentEvent::SubAgent`].
//!
//! ```no_run
//! use futures::StreamExt;
//! use reson_agent::agent::{AgentEvent, Hooks, RunConfig, Runner};
//! use reson_agent::provider::PluginProvider;
//! use reson_agent::tools::ToolRegistry;
//! use reson_sandbox::config::PluginsConfig;
//! use reson_sandbox::plugin::{Options, Runtime};
//! use reson_trace::{Durability, FileTraceStore, Message, Role};
//! use std::sync::Arc;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let plugins: PluginsConfig = toml::from_str(&std::fs::read_to_string("reson.toml")?)?;
//! let runtime = Runtime::open(Options::from_config(plugins)).await?;
//! let store = Arc::new(FileTraceStore::open(".reson/traces", Durability::Batched)?);
//! let provider = Arc::new(PluginProvider::new(runtime.clone(), "openai"));
//! let runner = Runner::new(store, provider, ToolRegistry::new(runtime), Hooks::none());
//!
//! let task = Message::new(Role::User, "List the files in the workspace.");
//! let mut run = runner.run(vec![task], RunConfig::default()).await?;
//! while let Some(event) = run.next().await {
//!     match event {
//!         AgentEvent::TextDelta { text } => print!("{text}"),
//!         AgentEvent::ToolStarted { name, .. } => println!("[{name}]"),
//!         _ => {}
//!     }
//! }
//! let outcome = run.wait().await?;
//! println!("\n{:?} after {} model calls", outcome.status, outcome.iterations);
//! # Ok(())
//! # }
//! ```

mod approval;
pub mod compaction;
mod doom;
mod error;
mod hooks;
pub mod human;
pub mod memory;
mod question;
mod runner;
mod session;
mod subagent;
mod task;

pub use approval::{
    Announce, Answer, ApprovalRequest, Approver, PendingApprovals, Permissions, Ruling, Unattended,
};
pub use error::AgentError;
pub use hooks::{Hook, HookDecision, HookEvent, HookPoint, Hooks};
pub use runner::{AgentEvent, INTERRUPTED, RunConfig, RunHandle, RunMode, RunOutcome, Runner};
pub use session::{Agent, AgentBuilder, AgentSession, BasicAgent, RuntimeBundle, TurnOutcome};
pub use subagent::SubAgentSettings;
pub use task::{
    FailurePolicy, Plan, PlanParser, PluginPlanParser, Step, StepStatus, TaskAgent, TaskOutcome,
    TransitionError,
};
