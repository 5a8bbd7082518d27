//! Plugins: loading components from a directory, keeping them current,
//! and calling them in a sandbox.

mod cache;
mod digest;
mod engine;
mod error;
mod function_cache;
mod instance;
mod loader;
mod lock;
mod runtime;
mod schema;
pub mod signing;
mod watch;

pub use crate::manifest::{Manifest, Requests};
pub use error::{CallError, Limit, LoadError, ToolFailure, TrapKind};
pub use loader::{CallContext, Image, ToolOutput, ToolSpec};
pub use lock::{PluginSource, record_source, sources};
pub use runtime::{
    Options, PluginInfo, PluginStatus, RESERVED_TOOL_NAMES, RefusedTool, Runtime, RuntimeError,
    WorkObserver,
};
pub use schema::Schema;
pub use signing::{Placement, SignatureStatus};
pub use watch::Watcher;
