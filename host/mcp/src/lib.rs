//! MCP both ways, on the official Rust SDK (`rmcp`): [`server`] serves the
//! tools on offer to any MCP client, over stdio or streamable HTTP, through
//! the same permission rules and sandbox as a run; [`client`] makes the
//! tools of MCP servers named in `reson.toml` tools of a run, as
//! `NAME__tool`.

pub mod client;
pub mod server;

use rmcp::model::ProtocolVersion;

/// The newest protocol revision spoken both ways. Later revisions are
/// stateless (no `initialize`, no session for `list_changed`), which the
/// two sides here do not implement yet; older ones are negotiated.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;
