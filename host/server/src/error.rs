//! Every error of the server, and its JSON form:
//! `{"error":{"code":"snake_case","message":"human text"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::net::SocketAddr;

/// Why a request (or the server itself) failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No such trace, approval or route.
    #[error("{0}")]
    NotFound(String),
    /// A run already has the trace, or a stop of a trace not running.
    #[error("{0}")]
    Conflict(String),
    /// A request that names something wrong: a sequence not on the tree, a
    /// query parameter, a provider or preset.
    #[error("{0}")]
    BadRequest(String),
    /// A body that is not JSON, or not the expected shape.
    #[error("{0}")]
    Unprocessable(String),
    /// A body over the configured limit.
    #[error("the request body is over the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// No token, or the wrong one.
    #[error("a valid token is required: send `Authorization: Bearer TOKEN`")]
    Unauthorized,
    /// The server is shutting down and starts no more runs.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A model the request needed failed to answer.
    #[error("{0}")]
    BadGateway(String),
    /// The server's own failure (a store that cannot be read, ...).
    #[error("{0}")]
    Internal(String),
    /// The server cannot listen on its address.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The configuration is unsafe or invalid (a non-loopback address with
    /// no token, a bad CORS origin).
    #[error("{0}")]
    Config(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) | Self::Bind { .. } | Self::Config(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The `code` of the JSON body.
    pub fn code(&self) -> &'static str {
        code_of(self.status())
    }
}

/// The JSON code of an error status; statuses the API does not name
/// itself (405 from the router, 400 from a refused WebSocket upgrade) keep
/// their meaning in the same form.
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::CONFLICT => "conflict",
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::BAD_GATEWAY => "bad_gateway",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::UPGRADE_REQUIRED => "upgrade_required",
        _ => "internal",
    }
}

/// The JSON body of every error.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    /// `not_found`, `conflict`, `bad_request`, `unprocessable`,
    /// `payload_too_large`, `unauthorized`, `bad_gateway`,
    /// `unavailable` or `internal`; and from the checks every request
    /// passes first, `misdirected_request` (421: a `Host` that does not
    /// name the server), `forbidden` (403: a page of another origin) or
    /// `unsupported_media_type` (415: a body that is not JSON).
    code: String,
    /// For a person.
    message: String,
}

/// An error response with `status`, its code and `message`.
fn error_response(status: StatusCode, message: &str) -> Response {
    let body = ErrorBody {
        error: ErrorDetail { code: code_of(status).to_owned(), message: message.to_owned() },
    };
    let mut response = (status, super::response::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status().is_server_error() {
            tracing::warn!("api: {self}");
        }
        error_response(self.status(), &self.to_string())
    }
}

impl From<reson_trace::TraceError> for ApiError {
    fn from(e: reson_trace::TraceError) -> Self {
        use reson_trace::TraceError;
        match e {
            TraceError::NotFound(_) | TraceError::InvalidId(_) => Self::NotFound(e.to_string()),
            TraceError::NoSuchMessage { .. } => Self::BadRequest(e.to_string()),
            _ => Self::Internal(e.to_string()),
        }
    }
}

impl From<reson_agent::agent::AgentError> for ApiError {
    /// Errors of preparing a run: what the request named is wrong, or the
    /// server failed.
    fn from(e: reson_agent::agent::AgentError) -> Self {
        use reson_agent::agent::AgentError;
        match e {
            AgentError::NoSuchTrace(_) => Self::NotFound(e.to_string()),
            AgentError::AlreadyRunning(_) => Self::Conflict(e.to_string()),
            AgentError::NoSuchMessage { .. } | AgentError::Config(_) => {
                Self::BadRequest(e.to_string())
            }
            // Files changed outside Reson, which the restore would
            // overwrite: the message lists them.
            AgentError::Checkpoint(reson_workspace::WorkspaceError::Conflicts { .. }) => {
                Self::Conflict(e.to_string())
            }
            _ => Self::Internal(e.to_string()),
        }
    }
}

/// Gives the errors that axum and tower-http answer by themselves (an
/// unknown method, a refused upgrade, a body cut at the limit) the API's
/// JSON form, so that every error a client sees is one shape.
pub(crate) fn json_errors(response: Response, max_body_bytes: usize) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(max_body_bytes).to_string(),
        StatusCode::METHOD_NOT_ALLOWED => "this route does not take that method".to_owned(),
        StatusCode::NOT_FOUND => "no such route".to_owned(),
        _ => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    let (mut parts, _) = response.into_parts();
    let fresh = error_response(status, &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(fresh.headers().clone());
    Response::from_parts(parts, fresh.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn each_error_has_its_status_and_code() {
        let cases = [
            (ApiError::NotFound("no trace x".into()), 404, "not_found"),
            (ApiError::Conflict("busy".into()), 409, "conflict"),
            (ApiError::BadRequest("bad".into()), 400, "bad_request"),
            (ApiError::Unprocessable("not json".into()), 422, "unprocessable"),
            (ApiError::PayloadTooLarge(10), 413, "payload_too_large"),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::BadGateway("model down".into()), 502, "bad_gateway"),
            (ApiError::Internal("disk".into()), 500, "internal"),
        ];
        for (error, status, code) in cases {
            let message = error.to_string();
            let response = error.into_response();
            assert_eq!(response.status().as_u16(), status);
            let json = body_of(response).await;
            assert_eq!(json["error"]["code"], code);
            assert_eq!(json["error"]["message"], message);
        }
    }

    #[test]
    fn a_401_asks_for_a_bearer_token() {
        let response = ApiError::Unauthorized.into_response();
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn run_errors_map_to_what_the_request_got_wrong() {
        use reson_agent::agent::AgentError;
        let status = |e: AgentError| ApiError::from(e).status().as_u16();
        assert_eq!(status(AgentError::NoSuchTrace("t".into())), 404);
        assert_eq!(status(AgentError::AlreadyRunning("t".into())), 409);
        let missing = AgentError::NoSuchMessage { trace_id: "t".into(), sequence: 9, last: 2 };
        assert_eq!(status(missing), 400);
        assert_eq!(status(AgentError::Memory("disk full".into())), 500);
        let invalid = reson_trace::TraceError::InvalidId("../x".into());
        assert_eq!(ApiError::from(invalid).status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn plain_errors_become_json_and_keep_their_headers() {
        let plain = Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET")
            .header(header::CONTENT_TYPE, "text/plain")
            .body(axum::body::Body::from("nope"))
            .unwrap();
        let response = json_errors(plain, 10);
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(response.headers()[header::ALLOW], "GET");
        assert_eq!(body_of(response).await["error"]["code"], "method_not_allowed");
        let cut = Response::builder()
            .status(StatusCode::PAYLOAD_TOO_LARGE)
            .body(axum::body::Body::from("length limit exceeded"))
            .unwrap();
        let json = body_of(json_errors(cut, 10)).await;
        assert_eq!(json["error"]["code"], "payload_too_large");
        assert_eq!(json["error"]["message"], "the request body is over the limit of 10 bytes");
        let ok = Response::new(axum::body::Body::from("fine"));
        let response = json_errors(ok, 10);
        assert_eq!(axum::body::to_bytes(response.into_body(), 64).await.unwrap(), "fine");
    }
}
