//! The server's health and its plugins.

use crate::caller::Caller;
use crate::error::ApiError;
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
    /// The caller's runs going in this server (an admin's: all of them).
    running: usize,
}

/// Whether the server is up, and how many of the caller's runs it has.
#[utoipa::path(get, path = "/api/health", responses((status = 200, body = Health)))]
pub(crate) async fn health(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Health>, ApiError> {
    let running = if caller.admin {
        state.runs.len()
    } else {
        let mut mine = 0;
        for id in state.runs.running() {
            mine += usize::from(state.traces.find(&caller, &id).await?.is_some());
        }
        mine
    };
    Ok(Json(Health { status: "ok", version: env!("CARGO_PKG_VERSION"), running }))
}

/// Every plugin found, as `reson plugins list --json` shows them.
#[utoipa::path(get, path = "/api/plugins", responses((status = 200, body = Vec<Object>)))]
pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<PluginInfo>> {
    Json(state.runtime.plugins())
}
