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

/// The newest protocol revision spoken both ways: 2026-07-28, stateless (no
/// `initialize`; the version and the client's capabilities ride in each
/// request's `_meta`; `list_changed` through `subscriptions/listen`).
/// Every older revision is still served and used: a server answers both
/// lifecycles, and a client falls back to [`LEGACY_VERSION`] with a server
/// that does not answer `server/discover`.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The newest revision with an `initialize` handshake: what the client
/// asks for from a server that does not speak [`PROTOCOL_VERSION`].
pub const LEGACY_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Whether `version` is a stateless revision (no `initialize`, no session).
pub(crate) fn is_stateless(version: &ProtocolVersion) -> bool {
    !version.has_initialize()
}
