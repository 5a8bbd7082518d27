//! # reson-sandbox
//!
//! Runs untrusted WebAssembly components with only what the user granted,
//! as one would use Extism: load a plugins directory ([`plugin::Runtime`]),
//! grant directories, URLs, commands and secrets ([`config::PluginsConfig`]),
//! call a tool, and have every limit (time, memory, fuel, output, handles,
//! processes) enforced by the host.
//!
//! - [`contract`]: the WIT worlds a component may target, as bindings.
//! - [`plugin`]: the engine, the loader and compiled-code cache, the lock
//!   file, signatures and the keys trusted for them, hot reload, and calls
//!   into instances.
//! - [`capability`]: the host side of every import a guest may call
//!   (files, `http`, `process`, secrets, clock, logs).
//! - [`manifest`]: what a plugin requests, beside its component.
//! - [`config`]: what the user grants, the `reson.toml` sections above.
//! - [`policy`]: grants (a manifest's requests intersected with the
//!   user's) and the command policy.
//! - [`jail`]: the OS jail every granted command runs in.
//!
//! It depends only on `reson-text`. It must never know about agents,
//! models, traces, servers or MCP: the agent crate builds on it, not the
//! other way round.
//!
//! ```no_run
//! use reson_sandbox::config::PluginsConfig;
//! use reson_sandbox::plugin::{CallContext, Options, Runtime};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config: PluginsConfig = toml::from_str(&std::fs::read_to_string("reson.toml")?)?;
//! let runtime = Runtime::open(Options::from_config(config)).await?;
//! let out = runtime.call_tool("echo", r#"{"text":"hi"}"#, &CallContext::default()).await?;
//! assert_eq!(out.text, "hi");
//! # Ok(())
//! # }
//! ```

pub mod capability;
pub mod config;
pub mod contract;
pub mod jail;
pub mod manifest;
mod observer;
pub mod plugin;
pub mod policy;
