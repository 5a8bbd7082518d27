//! # reson-sdk: write Reson tools, providers and plan parsers as WebAssembly components
//!
//! A tool is a function over a deserialised argument struct. The argument
//! struct derives `serde::Deserialize` and `schemars::JsonSchema` (add
//! `serde` and `schemars` 1.x to your dependencies); the schema the model
//! sees and the host validates against is derived from it, never written by
//! hand. One component may serve several tools.
//!
//! ```no_run
//! use reson_sdk::{Context, Output, ToolError, Toolbox};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Arguments of `shout`.
//! #[derive(Deserialize, JsonSchema)]
//! struct ShoutArgs {
//!     /// The text to shout.
//!     text: String,
//!     /// How many exclamation marks to add.
//!     #[serde(default)]
//!     marks: usize,
//! }
//!
//! fn shout(args: ShoutArgs, _ctx: &Context) -> Result<Output, ToolError> {
//!     if args.marks > 10 {
//!         return Err(ToolError::invalid("at most 10 marks"));
//!     }
//!     Ok(Output::text(format!("{}{}", args.text.to_uppercase(), "!".repeat(args.marks))))
//! }
//!
//! fn tools() -> Toolbox {
//!     Toolbox::new().tool("shout", "Upper-cases text and adds exclamation marks.", shout)
//! }
//!
//! reson_sdk::export_tools!(tools);
//! ```
//!
//! Build it as a component and drop it, with its manifest, into a plugins
//! directory:
//!
//! ```text
//! # Cargo.toml: [lib] crate-type = ["cdylib"]
//! cargo build --release --target wasm32-wasip2
//! cp target/wasm32-wasip2/release/shout.wasm plugins/
//! printf 'name = "shout"\nversion = "0.1.0"\n' > plugins/shout.toml
//! reson tool call shout '{"text": "hi", "marks": 2}'
//! ```
//!
//! The manifest (`<name>.toml`) requests capabilities — directories, HTTP
//! hosts, command patterns, secrets — and limits; the user's `reson.toml`
//! grants them. The component can use only what both allow: the [`host`]
//! imports and WASI calls outside the grant return errors.
//!
//! An LLM provider is written the same way around one `chat` function and
//! exported with [`export_provider!`]; the [`provider`] module has its types,
//! streaming and an example. A plan parser, which turns a model's planning
//! answer into steps, is one `parse` function exported with
//! [`export_plan_parser!`]; see the [`plan`] module.
//!
//! The contract version (`reson:plugin@0.1.0`) is part of every interface
//! name the component exports, so the host can refuse a component built for
//! another version with a message naming both.

#[doc(hidden)]
pub mod bindings;
pub mod browser;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod host;
pub mod plan;
pub mod provider;
pub mod text;
mod tool;

pub use tool::{Context, Output, ToolError, Toolbox};

/// The version of the `reson:plugin` contract this SDK builds against.
pub const CONTRACT_VERSION: &str = "0.1.0";
