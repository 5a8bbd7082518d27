//! What a plugin is allowed to do: the intersection of its requests and the
//! user's grants, and the checks made against it on every host call.

mod grants;
mod patterns;

pub use grants::{EffectiveLimits, Grants, MountedDir};
pub use patterns::{CommandPattern, PatternError, UrlPattern};
