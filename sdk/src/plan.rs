//! The plan-parser-author API: the types of `reson:plugin/plan-parser` and
//! [`export_plan_parser!`](crate::export_plan_parser).
//!
//! A plan parser is one function, `fn parse(raw: String, goal: String) ->
//! Result<Plan, ParseError>`: `raw` is the model's answer to a planning
//! request and `goal` the goal it was asked to plan for. Steps form a tree
//! through [`PlanStep::parent`], the index of the parent step, which always
//! comes before its children in [`Plan::steps`]. The [`ParseError`] case says
//! what was wrong, so the host can tell the model how to fix its answer.
//!
//! ```no_run
//! use reson_sdk::plan::{ParseError, Plan, PlanStep};
//!
//! /// One top-level step per non-blank line.
//! fn parse(raw: String, _goal: String) -> Result<Plan, ParseError> {
//!     let mut steps = Vec::new();
//!     for line in raw.lines().map(str::trim).filter(|line| !line.is_empty()) {
//!         steps.push(PlanStep { description: line.to_owned(), parent: None });
//!     }
//!     if steps.is_empty() {
//!         return Err(ParseError::Empty);
//!     }
//!     Ok(Plan { steps })
//! }
//!
//! reson_sdk::export_plan_parser!(parse);
//! ```

pub use crate::bindings::plan_parser_world::exports::reson::plugin::plan_parser::{
    ParseError, Plan, PlanStep,
};

/// Exports a `fn(String, String) -> Result<Plan, ParseError>` (the answer,
/// then the goal) as this component's `reson:plugin/plan-parser` interface.
/// Use it once per component; see the [`plan`](crate::plan) module for an
/// example.
#[macro_export]
macro_rules! export_plan_parser {
    ($parse:path) => {
        struct __ResonPlanParserPlugin;

        impl $crate::bindings::plan_parser_world::exports::reson::plugin::plan_parser::Guest
            for __ResonPlanParserPlugin
        {
            fn parse(
                raw: ::std::string::String,
                goal: ::std::string::String,
            ) -> ::std::result::Result<$crate::plan::Plan, $crate::plan::ParseError> {
                $parse(raw, goal)
            }
        }

        // Natively the crate is a library (its tests, the fuzz targets): the
        // component's export symbols exist only in the WebAssembly build.
        #[cfg(target_family = "wasm")]
        $crate::bindings::plan_parser_world::export_plan_parser_world!(__ResonPlanParserPlugin with_types_in $crate::bindings::plan_parser_world);
        #[cfg(not(target_family = "wasm"))]
        const _: () = {
            let _ = $parse;
        };
    };
}
