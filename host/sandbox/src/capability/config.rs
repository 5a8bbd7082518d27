//! `reson:plugin/config`: the plugin's non-secret settings. A setting that
//! holds a secret anyway (a key pasted into a `base_url`) reaches the
//! guest redacted, like everything else the host hands it.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::config::Host;
use reson_text::redact::redact;

impl Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        self.remaining()?;
        Ok(self.grants.config.get(&key).map(|v| redact(v).into_owned()))
    }

    async fn all(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        self.remaining()?;
        Ok(self.grants.config.iter().map(|(k, v)| (k.clone(), redact(v).into_owned())).collect())
    }
}
