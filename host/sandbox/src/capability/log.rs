//! `reson:plugin/log`: guest records go into the host's `tracing` log.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::log::{Host, Level};
use reson_text::text::{Lines, escape_controls};

/// A guest that logs in a loop must not flood the host's log.
const MAX_RECORDS_PER_CALL: usize = 1_000;
const MAX_RECORD_BYTES: usize = 4_096;

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.remaining()?;
        self.logged += 1;
        if self.logged > MAX_RECORDS_PER_CALL {
            return Ok(());
        }
        let mut message = message;
        if message.len() > MAX_RECORD_BYTES {
            let cut = message.floor_char_boundary(MAX_RECORD_BYTES);
            message.truncate(cut);
            message.push_str(" [truncated]");
        }
        let message = reson_text::redact::redact(&message);
        // The record is the guest's words: one line, nothing a terminal acts on.
        let message = escape_controls(&message, Lines::Escape);
        let plugin = &*self.plugin;
        match level {
            Level::Trace => tracing::trace!(target: "reson::plugin", plugin, "{message}"),
            Level::Debug => tracing::debug!(target: "reson::plugin", plugin, "{message}"),
            Level::Info => tracing::info!(target: "reson::plugin", plugin, "{message}"),
            Level::Warn => tracing::warn!(target: "reson::plugin", plugin, "{message}"),
            Level::Error => tracing::error!(target: "reson::plugin", plugin, "{message}"),
        }
        Ok(())
    }
}
