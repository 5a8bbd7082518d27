//! `reson:plugin/streaming`: deltas a provider emits while `chat` runs.

use super::HostState;
use crate::contract::bindings::provider::reson::plugin::chat_types::Delta;
use crate::contract::bindings::provider::reson::plugin::streaming::Host;

impl Host for HostState {
    async fn emit(&mut self, delta: Delta) -> wasmtime::Result<()> {
        self.remaining()?;
        if let Some(sink) = self.deltas.as_mut() {
            sink(delta);
        }
        Ok(())
    }
}
