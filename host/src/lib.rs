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

pub mod agent;
pub mod api;
pub mod capability;
pub mod config;
pub mod contract;
pub mod database;
pub mod experience;
pub mod jail;
pub mod mcp;
pub mod origin_guard;
pub mod plugin;
pub mod policy;
pub mod provider;
pub mod redact;
pub mod skills;
pub mod store;
pub mod text;
pub mod tools;
pub mod trace;
