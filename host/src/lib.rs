//! # reson
//!
//! An agent host whose tools, LLM providers and plan parsers are
//! WebAssembly components, loaded at run time from a plugins directory and
//! run in a wasmtime sandbox that holds only what the user granted.
//!
//! The plugin runtime is the entry point:
//!
//! Everything is async, on tokio: a call that waits (for a model, a host
//! request, a child process, a free instance) holds no thread.
//!
//! ```no_run
//! use reson::config::Config;
//! use reson::plugin::{CallContext, Options, Runtime};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::load("reson.toml".as_ref())?;
//! let runtime = Runtime::open(Options::from_config(config)).await?;
//! let _watcher = runtime.watch()?; // hot reload
//! let out = runtime.call_tool("echo", r#"{"text":"hi"}"#, &CallContext::default()).await?;
//! assert_eq!(out.text, "hi");
//! # Ok(())
//! # }
//! ```
//!
//! [`agent`] shows a whole run: a model, tools, a trace, and its events
//! as a stream.
//!
//! This crate is the facade over the crates under `host/`, each one
//! layer, each depending only on those below it:
//!
//! | crate | what it is | re-exported here as |
//! |---|---|---|
//! | `reson-text` | the redaction point, safe text | [`redact`], [`text`] |
//! | `reson-sandbox` | untrusted components under grants | [`contract`], [`plugin`], [`capability`], [`jail`] |
//! | `reson-trace` | traces and their stores, PostgreSQL | [`trace`], [`database`] |
//! | `reson-workspace` | workspace checkpoints, restore, diff | [`workspace`] |
//! | `reson-agent` | the agent loop and its tools | [`agent`], [`tools`], [`provider`], [`policy`], [`skills`], [`experience`], [`knowledge`], [`store`] |
//! | `reson-mcp` | MCP both ways | [`mcp`] |
//! | `reson-origin-guard` | what browser-facing servers refuse | [`origin_guard`] |
//! | `reson-registry` | plugins from and to OCI registries | [`registry`] |
//! | `reson-server` | `reson serve`'s HTTP API | [`api`] |
//!
//! [`config`] composes `reson.toml` from the sections those crates own.
//! Embedding code written against these paths keeps compiling as the
//! crates behind them move. The `reson` binary (`src/cli/`) is built on
//! this facade only.
//!
//! It may depend on every crate above; nothing depends on it. It must
//! hold no logic of its own beyond composing the configuration: a feature
//! belongs to the crate of its layer.

pub mod config;

pub use reson_agent::{
    agent, experience, knowledge, policy, provider, replay, scope, skills, store, telemetry, tools,
};
pub use reson_mcp as mcp;
pub use reson_origin_guard as origin_guard;
pub use reson_registry as registry;
pub use reson_sandbox::{capability, contract, jail, plugin};
pub use reson_server as api;
pub use reson_text::{redact, text};
pub use reson_trace as trace;
pub use reson_trace::database;
pub use reson_workspace as workspace;
