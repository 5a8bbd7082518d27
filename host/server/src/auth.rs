//! Who is calling: the bearer token of every `/api` request, checked in
//! constant time against the single `token` and the users' hashed tokens
//! (see [`crate::users`]). The watch route also takes it as `?token=`,
//! since a browser cannot set headers on a WebSocket. A handler learns the
//! caller from the [`Caller`] extractor.

use super::caller::Caller;
use super::error::ApiError;
use super::state::AppState;
use super::users::Users;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

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

/// The token a request was let in with, kept so that an answer that
/// lasts (a watch socket) can check it again after the token file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential(Option<String>);

impl Credential {
    /// Whether the token still lets in exactly `caller`: not revoked, nor
    /// given another user or role. A server with no token lets everyone in
    /// as an admin, so nothing there can be revoked.
    pub(crate) fn still_names(&self, users: &Users, caller: &Caller) -> bool {
        match &self.0 {
            None => users.open(),
            Some(token) => users.identify(token).map(Caller::from).as_ref() == Some(caller),
        }
    }
}

/// Who a request is, and the token that says so: an admin when no token of
/// any kind is set; else the one its token (in the header, or in the query
/// where `query_allowed`) names, if any.
pub(crate) fn caller(
    users: &Users,
    headers: &HeaderMap,
    query: Option<&str>,
    query_allowed: bool,
) -> Option<(Caller, Credential)> {
    if users.open() {
        return Some((Caller { uid: None, admin: true }, Credential(None)));
    }
    if let Some(token) = bearer(headers)
        && let Some(found) = users.identify(token)
    {
        return Some((found.into(), Credential(Some(token.to_owned()))));
    }
    let token = query_token(query).filter(|_| query_allowed)?;
    let found = users.identify(&token)?;
    Some((found.into(), Credential(Some(token))))
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
    let (found, credential) = found.ok_or(ApiError::Unauthorized)?;
    request.extensions_mut().insert(found);
    request.extensions_mut().insert(credential);
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

    /// Who `caller` says the request is, without the credential.
    fn who(
        users: &Users,
        headers: &HeaderMap,
        query: Option<&str>,
        allowed: bool,
    ) -> Option<Caller> {
        caller(users, headers, query, allowed).map(|(who, _)| who)
    }

    #[test]
    fn a_bearer_header_carries_the_token() {
        let none = HeaderMap::new();
        let open = Users::new(None, &BTreeMap::new(), None).unwrap();
        assert_eq!(who(&open, &none, None, false), Some(ADMIN), "no token set: an admin");
        let users = single("tok-123");
        assert_eq!(who(&users, &none, None, false), None);
        assert_eq!(who(&users, &with_auth("Bearer tok-123"), None, false), Some(ADMIN));
        assert_eq!(who(&users, &with_auth("bearer  tok-123 "), None, false), Some(ADMIN));
        for wrong in ["Bearer tok-124", "Basic tok-123", "tok-123", "Bearer tok-12", "Bearer "] {
            assert_eq!(who(&users, &with_auth(wrong), None, false), None, "{wrong}");
        }
    }

    #[test]
    fn the_query_token_counts_only_where_allowed() {
        let none = HeaderMap::new();
        let query = Some("since=3&token=tok%2B1");
        assert!(who(&single("tok+1"), &none, query, true).is_some());
        assert!(who(&single("tok+1"), &none, query, false).is_none());
        assert!(who(&single("tok+2"), &none, query, true).is_none());
        assert!(who(&single("tok+1"), &none, Some("since=3"), true).is_none());
    }

    #[test]
    fn a_user_s_token_names_the_user_and_role() {
        let users = BTreeMap::from([(
            "alice".to_owned(),
            UserSettings { token_sha256: hash_token("alice-tok"), role: Role::User },
        )]);
        let users = Users::new(None, &users, None).unwrap();
        let alice = who(&users, &with_auth("Bearer alice-tok"), None, false).unwrap();
        assert_eq!(alice, Caller { uid: Some("alice".into()), admin: false });
        assert!(alice.sees(Some("alice")));
        assert!(!alice.sees(Some("bob")) && !alice.sees(None));
        assert_eq!(alice.only(), Some("alice"));
        assert!(ADMIN.sees(Some("bob")) && ADMIN.sees(None) && ADMIN.only().is_none());
    }

    #[test]
    fn a_credential_stops_naming_its_caller_once_its_token_is_revoked_or_changed() {
        let dir = tempfile::tempdir().unwrap();
        let file = crate::users::TokenFile::new(dir.path().join("tokens.toml"));
        let (_, token) = file.add("alice", Role::User).unwrap();
        let users = Users::new(None, &BTreeMap::new(), Some(file.path())).unwrap();
        let headers = with_auth(&format!("Bearer {token}"));
        let (alice, credential) = caller(&users, &headers, None, false).unwrap();
        assert!(credential.still_names(&users, &alice));
        file.revoke("alice").unwrap();
        assert!(!credential.still_names(&users, &alice), "revoked");
        let open = Users::new(None, &BTreeMap::new(), None).unwrap();
        let (admin, none) = caller(&open, &HeaderMap::new(), None, false).unwrap();
        assert!(none.still_names(&open, &admin), "nothing to revoke on an open server");
    }
}
