//! The bearer token: checked on every `/api` route when one is set, in
//! constant time. The watch route also takes it as `?token=`, since a
//! browser cannot set headers on a WebSocket.

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

/// Whether `given` is the token. The time taken depends on the lengths
/// only, never on where the two differ.
pub(crate) fn token_matches(expected: &str, given: &str) -> bool {
    bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The token of an `Authorization: Bearer T` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The `token` parameter of a query string.
fn query_token(query: Option<&str>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Token {
        token: String,
    }
    let uri: axum::http::Uri = format!("/?{}", query?).parse().ok()?;
    axum::extract::Query::<Token>::try_from_uri(&uri).ok().map(|q| q.0.token)
}

/// Whether a request may pass: no token is set, or it sent the token (in
/// the header, or in the query where `query_allowed`).
pub(crate) fn authorized(
    expected: Option<&str>,
    headers: &HeaderMap,
    query: Option<&str>,
    query_allowed: bool,
) -> bool {
    let Some(expected) = expected else { return true };
    if bearer(headers).is_some_and(|t| token_matches(expected, t)) {
        return true;
    }
    query_allowed && query_token(query).is_some_and(|t| token_matches(expected, &t))
}

/// Middleware for the `/api` routes that take the token in the header only.
pub(crate) async fn require_header(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    check(&state, request, next, false).await
}

/// Middleware for the watch route: the header, or `?token=`.
pub(crate) async fn require_header_or_query(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    check(&state, request, next, true).await
}

async fn check(
    state: &AppState,
    request: Request,
    next: Next,
    query_allowed: bool,
) -> Result<Response, ApiError> {
    let token = state.config.token.as_deref();
    if authorized(token, request.headers(), request.uri().query(), query_allowed) {
        Ok(next.run(request).await)
    } else {
        Err(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn the_token_must_match_exactly() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        for wrong in ["s3cret-toke", "s3cret-token!", "S3cret-token", ""] {
            assert!(!token_matches("s3cret-token", wrong), "{wrong:?}");
        }
    }

    #[test]
    fn a_bearer_header_carries_the_token() {
        let none = HeaderMap::new();
        assert!(authorized(None, &none, None, false), "no token set: everything passes");
        assert!(!authorized(Some("tok-123"), &none, None, false));
        assert!(authorized(Some("tok-123"), &with_auth("Bearer tok-123"), None, false));
        assert!(authorized(Some("tok-123"), &with_auth("bearer  tok-123 "), None, false));
        assert!(!authorized(Some("tok-123"), &with_auth("Bearer tok-124"), None, false));
        assert!(!authorized(Some("tok-123"), &with_auth("Basic tok-123"), None, false));
        assert!(!authorized(Some("tok-123"), &with_auth("tok-123"), None, false));
    }

    #[test]
    fn the_query_token_counts_only_where_allowed() {
        let none = HeaderMap::new();
        let query = Some("since=3&token=tok%2B1");
        assert!(authorized(Some("tok+1"), &none, query, true));
        assert!(!authorized(Some("tok+1"), &none, query, false));
        assert!(!authorized(Some("tok+2"), &none, query, true));
        assert!(!authorized(Some("tok+1"), &none, Some("since=3"), true));
    }
}
