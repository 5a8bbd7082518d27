//! What a plugin is allowed to do: the intersection of its requests and the
//! user's grants, and the checks made against it on every host call.

mod command;
mod grants;
mod patterns;

pub use command::{
    CommandError, DEFAULT_COMMAND_PATH, ExecVector, GitRepositoryConfig, ResolvedCommand,
    SearchPath, canonical_line, env_allowed, exec_vector, git_probe, git_repository_config, join,
    pinned_env, resolve, split,
};
pub use grants::{CommandDenial, EffectiveLimits, Grants, MountedDir, guest_path};
pub use patterns::{CommandPattern, PatternError, UrlPattern};

use crate::config::{PluginsConfig, SandboxConfig};

impl SandboxConfig {
    /// `command_path`, checked.
    pub fn search_path(&self) -> Result<SearchPath, CommandError> {
        SearchPath::new(&self.command_path)
    }
}

impl PluginsConfig {
    /// Checks what the types alone cannot: secret URL patterns, the
    /// command search path and inline trusted keys.
    pub fn validate(&self) -> Result<(), String> {
        for (name, secret) in &self.secrets {
            for pattern in secret.urls.iter().flatten() {
                UrlPattern::parse(pattern).map_err(|e| format!("[secrets.{name}]: {e}"))?;
            }
        }
        self.sandbox.search_path().map_err(|e| format!("[sandbox]: {e}"))?;
        self.validate_trusted_keys()
    }
}
