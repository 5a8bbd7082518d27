//! What the host offers a plugin besides WASI. Every call is checked against
//! the plugin's grants; a refusal comes back as an error value, never a trap.

pub use crate::bindings::tool_world::reson::plugin::{config, http, process};

use crate::bindings::tool_world::reson::plugin::log::{Level, log};

/// Logs at info level into the host's log, tagged with the plugin name.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}
