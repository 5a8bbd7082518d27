//! Who is calling: a user, or an admin, as the auth middleware
//! ([`crate::auth`]) found from the request's token.

use super::error::ApiError;
use super::users::Identity;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

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
