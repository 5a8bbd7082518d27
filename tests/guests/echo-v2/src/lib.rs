//! `echo-v2`: the `echo` tool of `plugins/echo`, but answering `v2:{text}`.
//! The hot-reload tests copy it over `echo.wasm` and check that the next call
//! reaches the new code.

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
    Ok(Output::text(format!("v2:{}", args.text)))
}

fn tools() -> Toolbox {
    Toolbox::new().tool("echo", "Returns the given text prefixed with `v2:`.", echo)
}

reson_sdk::export_tools!(tools);
