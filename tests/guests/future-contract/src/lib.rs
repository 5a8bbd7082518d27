//! A tool component built for `reson:plugin@0.2.0`, a contract version the
//! host does not know. Built without the SDK (which pins 0.1.0), straight
//! from `wit/`. It serves one tool, `future`, which would answer `future`.

wit_bindgen::generate!({
    path: "wit",
    world: "reson:plugin/tool-plugin@0.2.0",
});

use exports::reson::plugin::tool::{CallContext, Guest, ToolError, ToolOutput};
use reson::plugin::types::ToolSpec;

struct Future;

impl Guest for Future {
    fn list() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "future".to_owned(),
            description: "Answers `future` (built for contract 0.2.0).".to_owned(),
            input_schema: r#"{"type":"object","properties":{}}"#.to_owned(),
        }]
    }

    fn call(name: String, _args: String, _context: CallContext) -> Result<ToolOutput, ToolError> {
        if name != "future" {
            return Err(ToolError::UnknownTool(name));
        }
        Ok(ToolOutput {
            text: "future".to_owned(),
            long_term_memory: None,
            include_output_only_once: false,
            images: Vec::new(),
        })
    }
}

export!(Future);
