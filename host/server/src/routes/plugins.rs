//! The server's health and its plugins.

use crate::response::Json;
use crate::state::AppState;
use axum::extract::State;
use reson_sandbox::plugin::PluginInfo;
use serde::Serialize;
use utoipa::ToSchema;

/// The server is up.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`.
    status: &'static str,
    version: &'static str,
    /// Runs going in this server.
    running: usize,
}

/// Whether the server is up, and how many runs it has.
#[utoipa::path(get, path = "/api/health", responses((status = 200, body = Health)))]
pub(crate) async fn health(State(state): State<AppState>) -> Json<Health> {
    Json(Health { status: "ok", version: env!("CARGO_PKG_VERSION"), running: state.runs.len() })
}

/// Every plugin found, as `reson plugins list --json` shows them.
#[utoipa::path(get, path = "/api/plugins", responses((status = 200, body = Vec<Object>)))]
pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<PluginInfo>> {
    Json(state.runtime.plugins())
}
