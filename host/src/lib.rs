//! # reson
//!
//! An agent host whose tools, LLM providers and plan parsers are
//! WebAssembly components, loaded at run time from a plugins directory and
//! run in a wasmtime sandbox that holds only what the user granted.
//!
//! The plugin runtime is the entry point:
//!
//! ```no_run
//! use reson::config::Config;
//! use reson::plugin::{CallContext, Options, Runtime};
//!
//! let config = Config::load("reson.toml".as_ref())?;
//! let runtime = Runtime::open(Options::from_config(config))?;
//! let _watcher = runtime.watch()?; // hot reload
//! let out = runtime.call_tool("echo", r#"{"text":"hi"}"#, &CallContext::default())?;
//! assert_eq!(out.text, "hi");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod agent;
pub mod capability;
pub mod config;
pub mod contract;
pub mod plugin;
pub mod policy;
pub mod provider;
pub mod redact;
pub mod text;
pub mod tools;
pub mod trace;
