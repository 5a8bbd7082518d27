//! JSON out: every body the API sends passes through
//! [`reson_text::redact`] on its way.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A JSON response, redacted on its way out.
pub(crate) struct Json<T>(pub(crate) T);

/// `value` as JSON text, redacted: everything the server sends (bodies and
/// WebSocket frames) is made here.
pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let text = serde_json::to_string(value)?;
    Ok(reson_text::redact::redact(&text).into_owned())
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match to_json(&self.0) {
            Ok(text) => {
                ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], text)
                    .into_response()
            }
            // Only a map with non-string keys fails to serialise; none is sent.
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
}
