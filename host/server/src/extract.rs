//! JSON in: request bodies and query strings whose failures are the API's
//! errors.

use super::error::ApiError;
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// A JSON request body; [`reson_origin_guard`] has refused any body not
/// declared `application/json` before a handler runs. As an
/// `Option`, an empty body is `None`: for routes whose fields are all
/// optional.
pub(crate) struct JsonBody<T>(pub(crate) T);

/// The body's bytes, within the limit.
async fn read(request: Request, state: &AppState) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(state.config.max_body_bytes)
        } else {
            ApiError::BadRequest(format!("cannot read the body: {e}"))
        }
    })
}

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        parse_body(&read(request, state).await?).map(JsonBody)
    }
}

impl<T: DeserializeOwned> OptionalFromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Option<Self>, ApiError> {
        let bytes = read(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        parse_body(&bytes).map(|body| Some(JsonBody(body)))
    }
}

/// Parses a request body: a JSON object.
pub(crate) fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would also take a struct from an array of its fields.
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        None => {
            return Err(ApiError::Unprocessable("the body is empty: send a JSON object".into()));
        }
        Some(_) => return Err(ApiError::Unprocessable("the body must be a JSON object".into())),
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Unprocessable(format!("the body is not valid for this route: {e}")))
}

/// A query string; a parameter that does not parse is a 400.
pub(crate) struct Params<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(query)| Params(query))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::to_json;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[serde(default)]
        n: Option<u64>,
    }

    #[test]
    fn bodies_parse_or_say_why_not() {
        assert_eq!(parse_body::<Body>(b"{\"n\":3}").unwrap(), Body { n: Some(3) });
        assert_eq!(parse_body::<Body>(b" {} ").unwrap(), Body { n: None });
        for empty in [&b""[..], b" \n"] {
            let err = parse_body::<Body>(empty).unwrap_err();
            assert_eq!(err.to_string(), "the body is empty: send a JSON object");
        }
        for bad in [&b"{\"n\":"[..], b"{\"n\":\"x\"}", b"{\"n\":1,\"m\":2}", b"{\xff}"] {
            let err = parse_body::<Body>(bad).unwrap_err();
            assert_eq!(err.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}");
            assert!(err.to_string().starts_with("the body is not valid"), "{err}");
        }
        for not_an_object in [&b"[1]"[..], b"1", b"\"x\"", b"\xff"] {
            let err = parse_body::<Body>(not_an_object).unwrap_err();
            assert_eq!(err.to_string(), "the body must be a JSON object");
        }
    }

    #[test]
    fn responses_are_redacted() {
        reson_text::redact::register("api-secret-93f1c0").unwrap();
        let text = to_json(&serde_json::json!({"message": "key api-secret-93f1c0"})).unwrap();
        assert_eq!(text, r#"{"message":"key [REDACTED]"}"#);
    }
}
