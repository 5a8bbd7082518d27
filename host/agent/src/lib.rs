//! # reson-agent
//!
//! The agent loop on top of the sandbox and the trace stores: a
//! [`agent::Runner`] takes a model ([`provider`]), the tools on offer
//! ([`tools`]: one [`tools::ToolSource`] interface for plugin tools, MCP
//! tools and the built-ins), a trace store, and runs the loop model →
//! tools → trace, with permissions and budgets ([`policy`]), sub-agents,
//! compaction, [`skills`], [`experience`]s, [`knowledge`], sessions and tasks;
//! and [`replay`]s a trace's plugin calls offline against their recorded effects.
//! Runs can export OpenTelemetry GenAI spans and metrics ([`telemetry`]).
//!
//! It depends on `reson-sandbox`, `reson-trace` and `reson-text` only. It
//! must never know about HTTP servers, MCP or the command line: those
//! crates build on it and hand it what they serve through its traits.

pub mod agent;
pub mod config;
pub mod experience;
pub mod knowledge;
pub mod policy;
pub mod provider;
pub mod replay;
pub mod scope;
pub mod skills;
pub mod store;
pub mod telemetry;
pub mod tools;
