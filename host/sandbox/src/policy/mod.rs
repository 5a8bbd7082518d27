//! What a plugin is allowed to do: the intersection of its requests and the
//! user's grants, and the checks made against it on every host call.

mod command;
mod grants;
mod patterns;

pub use command::{
    CommandError, DEFAULT_COMMAND_PATH, ExecVector, GitRepositoryConfig, ResolvedCommand,
    SearchPath, canonical_line, env_allowed, exec_vector, git_probe, git_repository_config,
    pinned_env, resolve, split,
};
pub use grants::{CommandDenial, EffectiveLimits, Grants, MountedDir};
pub use patterns::{CommandPattern, PatternError, UrlPattern};
