//! Who is calling: the bearer token of every `/api` request, checked in
//! constant time against the single `token` and the users' hashed tokens
//! (see [`crate::users`]). The watch route also takes it as `?token=`,
//! since a browser cannot set headers on a WebSocket. A handler learns the
//! caller from the [`Caller`] extractor.

use super::error::ApiError;
use super::state::AppState;
use super::users::{Identity, Users};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

/// The caller of a request: a user, or an admin. Routes answer a user only
/// for what is theirs (a trace, an approval, an experience): anything else
/// is answered exactly as if it did not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user's name; `None` for the single `[server] token` and for a
    /// server with no token at all, both admins.
    pub uid: Option<String>,
    /// Sees and drives everyone's.
    pub admin: bool,
}

impl Caller {
    /// Whether something of `owner` (a trace's `uid`, ...) is visible to
    /// the caller: an admin sees everything, a user only their own.
    pub fn sees(&self, owner: Option<&str>) -> bool {
        self.admin || (self.uid.is_some() && self.uid.as_deref() == owner)
    }

    /// The user whose things a list should be narrowed to: `None` for an
    /// admin (everything).
    pub fn only(&self) -> Option<&str> {
        if self.admin { None } else { self.uid.as_deref() }
    }
}

impl From<Identity> for Caller {
    fn from(identity: Identity) -> Self {
        Self { uid: identity.uid, admin: identity.admin }
    }
}

/// Set by the auth middleware; a route outside it has no caller (a 401).
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or(ApiError::Unauthorized)
    }
}

/// Loads trace `id` for `caller`, or a 404: the same 404 whether it does
/// not exist or is another user's, so a user cannot learn that it exists.
pub(crate) async fn load(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<reson_trace::Trace, ApiError> {
    state
        .store
        .get_trace(id)
        .await?
        .filter(|trace| caller.sees(trace.uid.as_deref()))
        .ok_or_else(|| not_found(id))
}

/// The 404 of a trace the caller may not see.
pub(crate) fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no trace {id}"))
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

/// Who a request is: an admin when no token of any kind is set; else the
/// one its token (in the header, or in the query where `query_allowed`)
/// names, if any.
pub(crate) fn caller(
    users: &Users,
    headers: &HeaderMap,
    query: Option<&str>,
    query_allowed: bool,
) -> Option<Caller> {
    if users.open() {
        return Some(Caller { uid: None, admin: true });
    }
    if let Some(found) = bearer(headers).and_then(|t| users.identify(t)) {
        return Some(found.into());
    }
    let token = query_token(query).filter(|_| query_allowed)?;
    users.identify(&token).map(Caller::from)
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
    mut request: Request,
    next: Next,
    query_allowed: bool,
) -> Result<Response, ApiError> {
    let found = caller(&state.users, request.headers(), request.uri().query(), query_allowed);
    let found = found.ok_or(ApiError::Unauthorized)?;
    request.extensions_mut().insert(found);
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::users::{Role, UserSettings, hash_token};
    use axum::http::HeaderValue;
    use std::collections::BTreeMap;

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn single(token: &str) -> Users {
        Users::new(Some(token.into()), &BTreeMap::new(), None).unwrap()
    }

    const ADMIN: Caller = Caller { uid: None, admin: true };

    #[test]
    fn a_bearer_header_carries_the_token() {
        let none = HeaderMap::new();
        let open = Users::new(None, &BTreeMap::new(), None).unwrap();
        assert_eq!(caller(&open, &none, None, false), Some(ADMIN), "no token set: an admin");
        let users = single("tok-123");
        assert_eq!(caller(&users, &none, None, false), None);
        assert_eq!(caller(&users, &with_auth("Bearer tok-123"), None, false), Some(ADMIN));
        assert_eq!(caller(&users, &with_auth("bearer  tok-123 "), None, false), Some(ADMIN));
        for wrong in ["Bearer tok-124", "Basic tok-123", "tok-123", "Bearer tok-12", "Bearer "] {
            assert_eq!(caller(&users, &with_auth(wrong), None, false), None, "{wrong}");
        }
    }

    #[test]
    fn the_query_token_counts_only_where_allowed() {
        let none = HeaderMap::new();
        let query = Some("since=3&token=tok%2B1");
        assert!(caller(&single("tok+1"), &none, query, true).is_some());
        assert!(caller(&single("tok+1"), &none, query, false).is_none());
        assert!(caller(&single("tok+2"), &none, query, true).is_none());
        assert!(caller(&single("tok+1"), &none, Some("since=3"), true).is_none());
    }

    #[test]
    fn a_user_s_token_names_the_user_and_role() {
        let users = BTreeMap::from([(
            "alice".to_owned(),
            UserSettings { token_sha256: hash_token("alice-tok"), role: Role::User },
        )]);
        let users = Users::new(None, &users, None).unwrap();
        let alice = caller(&users, &with_auth("Bearer alice-tok"), None, false).unwrap();
        assert_eq!(alice, Caller { uid: Some("alice".into()), admin: false });
        assert!(alice.sees(Some("alice")));
        assert!(!alice.sees(Some("bob")) && !alice.sees(None));
        assert_eq!(alice.only(), Some("alice"));
        assert!(ADMIN.sees(Some("bob")) && ADMIN.sees(None) && ADMIN.only().is_none());
    }
}
