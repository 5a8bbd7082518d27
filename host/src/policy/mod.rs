//! What a plugin is allowed to do: the intersection of its requests and the
//! user's grants, and the checks made against it on every host call.

mod grants;
mod patterns;
mod presets;
mod rules;

pub use grants::{EffectiveLimits, Grants, MountedDir};
pub use patterns::{CommandPattern, PatternError, UrlPattern};
pub use presets::Preset;
pub use rules::{
    Decision, PatternKind, Rule, RuleError, RuleSet, TOOL_ARGUMENTS, ToolArgument, Verdict,
    subject_of,
};
