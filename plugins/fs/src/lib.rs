//! `echo`: returns its input. The smallest useful tool, and the one the
//! benchmarks and the README use.

use reson_sdk::{Context, Output, ToolError, Toolbox};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `echo`.
#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

fn echo(args: EchoArgs, _ctx: &Context) -> Result<Output, ToolError> {
    Ok(Output::text(args.text))
}

fn tools() -> Toolbox {
    Toolbox::new().tool("echo", "Returns the given text unchanged.", echo)
}

reson_sdk::export_tools!(tools);
