//! The `/api` routes, with the OpenAPI document generated from them.

mod approvals;
mod knowledge;
mod plugins;
mod questions;
mod runs;
pub(crate) mod traces;
mod watch;

use super::auth;
use super::state::AppState;
use axum::middleware::from_fn_with_state;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "reson", description = "Run Reson agents in the background, watch their traces, answer their approvals."),
    components(schemas(super::error::ErrorBody)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

/// Declares the bearer token in the document.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The `/api` routes behind the token, and their OpenAPI document.
pub(crate) fn api(state: &AppState) -> OpenApiRouter<AppState> {
    let header_only = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(plugins::health))
        .routes(routes!(plugins::list))
        .routes(routes!(traces::list, runs::create))
        .routes(routes!(traces::running))
        .routes(routes!(traces::get))
        .routes(routes!(traces::messages))
        .routes(routes!(traces::events))
        .routes(routes!(traces::checkpoints))
        .routes(routes!(traces::image))
        .routes(routes!(runs::run))
        .routes(routes!(runs::stop))
        .routes(routes!(runs::reflect))
        .routes(routes!(runs::experiences, runs::add_experience))
        .routes(routes!(runs::remove_experience))
        .routes(routes!(knowledge::search, knowledge::save))
        .routes(routes!(knowledge::remove))
        .routes(routes!(approvals::list))
        .routes(routes!(approvals::answer))
        .routes(routes!(questions::list))
        .routes(routes!(questions::answer))
        .route_layer(from_fn_with_state(state.clone(), auth::require_header));
    let watch = OpenApiRouter::new()
        .routes(routes!(watch::watch))
        .route_layer(from_fn_with_state(state.clone(), auth::require_header_or_query));
    header_only.merge(watch)
}
