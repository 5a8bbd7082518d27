//! # reson-mcp
//!
//! MCP both ways, on the official Rust SDK (`rmcp`): [`server`] serves the
//! tools on offer to any MCP client, over stdio or streamable HTTP, through
//! the same permission rules and sandbox as a run; [`client`] makes the
//! tools of MCP servers named in `reson.toml` tools of a run, as
//! `NAME__tool`.
//!
//! It depends on `reson-agent` (the tools, rules and approvals it serves;
//! the [`ToolSource`](reson_agent::tools::ToolSource) its client
//! implements), `reson-sandbox` (the jail for stdio servers),
//! `reson-trace`, `reson-text` and `reson-origin-guard`. It must never
//! widen what a run may do: every call it serves passes the same rules and
//! sandbox as a run's, and every tool it brings in is a run's tool like any
//! other, under the same rules.

pub mod client;
pub mod server;

use rmcp::model::ProtocolVersion;

/// The newest protocol revision spoken both ways. Later revisions are
/// stateless (no `initialize`, no session for `list_changed`), which the
/// two sides here do not implement yet; older ones are negotiated.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;
