//! A tool component built against a frozen copy of `reson:plugin@0.1.0`
//! as it was before the `browser` interface joined the tool world: adding
//! an import to a world must not break components built without it. Built
//! without the SDK (which follows `wit/`), it serves `pre_browser`, which
//! logs and reads a setting through the host, then answers.

wit_bindgen::generate!({
    path: "wit",
    world: "reson:plugin/tool-plugin",
});

use exports::reson::plugin::tool::{CallContext, Guest, ToolError, ToolOutput};
use reson::plugin::log::{Level, log};
use reson::plugin::types::ToolSpec;

struct PreBrowser;

impl Guest for PreBrowser {
    fn list() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "pre_browser".to_owned(),
            description: "Answers `still here` and the `greeting` setting.".to_owned(),
            input_schema: r#"{"type":"object","properties":{}}"#.to_owned(),
        }]
    }

    fn call(name: String, _args: String, _context: CallContext) -> Result<ToolOutput, ToolError> {
        if name != "pre_browser" {
            return Err(ToolError::UnknownTool(name));
        }
        log(Level::Info, "pre-browser guest called");
        let greeting = reson::plugin::config::get("greeting").unwrap_or_default();
        Ok(ToolOutput {
            text: format!("still here {greeting}"),
            long_term_memory: None,
            include_output_only_once: false,
            images: Vec::new(),
        })
    }
}

export!(PreBrowser);
