//! `reson:plugin/streaming`: deltas a provider emits while `chat` runs.
//! They count against the plugin's output cap: each one is held by the
//! host until its reader takes it, so a provider streaming without end
//! would otherwise fill the host's memory.

use super::{HostState, HostTrap};
use crate::contract::bindings::provider::reson::plugin::chat_types::Delta;
use crate::contract::bindings::provider::reson::plugin::streaming::Host;

impl Host for HostState {
    async fn emit(&mut self, delta: Delta) -> wasmtime::Result<()> {
        self.remaining()?;
        let size = match &delta {
            Delta::Text(text) | Delta::Reasoning(text) => text.len(),
            Delta::ToolCall(call) => {
                call.arguments_fragment.len()
                    + call.id.as_ref().map_or(0, String::len)
                    + call.name.as_ref().map_or(0, String::len)
            }
        };
        self.streamed = self.streamed.saturating_add(size as u64);
        let cap = self.grants.limits.output_bytes;
        if self.streamed > cap {
            return Err(wasmtime::Error::new(HostTrap::Streamed { streamed: self.streamed, cap }));
        }
        if let Some(sink) = self.deltas.as_mut() {
            sink(delta);
        }
        Ok(())
    }
}
