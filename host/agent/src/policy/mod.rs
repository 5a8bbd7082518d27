//! What a run may do: the permission rules and presets checked on every
//! tool call, and the budget a run and its sub-agents share. The
//! sandbox's grant and command policy is re-exported beside them, as the
//! rules match commands the way grants do.

mod budget;
mod presets;
mod rules;

pub(crate) use budget::Meter;
pub use budget::{Budget, BudgetError, dollars};
pub use presets::Preset;
pub use reson_sandbox::policy::*;
pub use rules::{
    Decision, PatternKind, Rule, RuleError, RuleSet, TOOL_ARGUMENTS, ToolArgument, Verdict,
    subject_of,
};
