//! `reson:plugin/config`: the plugin's non-secret settings.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::config::Host;

impl Host for HostState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        self.remaining()?;
        Ok(self.grants.config.get(&key).cloned())
    }

    fn all(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        self.remaining()?;
        Ok(self.grants.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}
