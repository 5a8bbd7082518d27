//! `echo` as an Extism plugin: the JSON echo of plugins/echo (parse
//! `{"text": …}`, return the text) behind the PDK's input and output.

use extism_pdk::{FnResult, plugin_fn};
use serde::Deserialize;

/// Arguments of `echo`, as in plugins/echo.
#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

/// Returns the `text` of a JSON object.
#[plugin_fn]
pub fn echo(args: String) -> FnResult<String> {
    let args: EchoArgs = serde_json::from_str(&args)?;
    Ok(args.text)
}
