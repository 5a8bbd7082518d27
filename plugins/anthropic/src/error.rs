//! Turning failures — of the host's HTTP call, HTTP statuses, and the
//! API's error objects — into provider errors, whose case decides whether
//! the host retries.

use crate::settings::Settings;
use reson_sdk::host::http::HttpError;
use reson_sdk::provider::{ProviderError, RateLimit, ServerError};
use serde::Deserialize;

/// The API's error object: `{"type": "overloaded_error", "message": "..."}`.
#[derive(Debug, Deserialize)]
pub struct ApiError {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub message: String,
}

/// An error response body: `{"type": "error", "error": {...}}`.
#[derive(Deserialize)]
struct ErrorBody {
    error: ApiError,
}

/// How much of a body that is not an API error object goes into a message.
const SNIPPET_CHARS: usize = 300;

/// A failure of the host's HTTP call itself.
pub fn from_http(err: HttpError, settings: &Settings) -> ProviderError {
    let base_url = &settings.base_url;
    match err {
        // Both a missing secret and an ungranted URL land here; the host's
        // text says which, and the key's secret is what users most often
        // have to fix.
        HttpError::Denied(detail) => {
            let secret = &settings.api_key_secret;
            ProviderError::Auth(format!(
                "anthropic: the host refused the request ({detail}); the API key is the secret \
                 `{secret}`: grant it with `secrets = [\"{secret}\"]` under [plugins.anthropic] \
                 in reson.toml and set it in the environment or under [secrets]"
            ))
        }
        HttpError::Timeout => {
            ProviderError::Timeout(format!("anthropic: the request to {base_url} timed out"))
        }
        HttpError::Connect(detail) => {
            ProviderError::Network(format!("anthropic: cannot connect to {base_url}: {detail}"))
        }
        HttpError::Io(detail) => ProviderError::Network(format!(
            "anthropic: the connection to {base_url} failed: {detail}"
        )),
        HttpError::TooLarge(cap) => ProviderError::InvalidResponse(format!(
            "anthropic: the response is larger than the host's cap of {cap} bytes"
        )),
        HttpError::InvalidRequest(detail) => ProviderError::Other(format!(
            "anthropic: the host cannot send the request: {detail} (check the `base_url` setting)"
        )),
    }
}

/// The error for a response with a non-2xx `status`. `secret` names the
/// key's secret in authentication errors.
pub fn from_status(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    secret: &str,
) -> ProviderError {
    let api_error = serde_json::from_slice::<ErrorBody>(body).ok().map(|b| b.error);
    let detail = match &api_error {
        Some(error) => format!("{}: {}", error.kind, error.message),
        None => snippet(body),
    };
    let text = format!("anthropic: HTTP {status}: {detail}");
    match status {
        401 | 403 => ProviderError::Auth(format!("{text} (the API key is the secret `{secret}`)")),
        429 => ProviderError::RateLimited(RateLimit {
            message: text,
            retry_after_ms: retry_after_ms(headers),
        }),
        408 | 504 => ProviderError::Timeout(text),
        400 | 404 | 422 => ProviderError::BadRequest(text),
        500..=599 => {
            ProviderError::Server(ServerError { status, message: format!("anthropic: {detail}") })
        }
        // Others, such as 402 (billing) and 413 (too large), say what they
        // are in the error type; a client error is never worth a retry.
        400..=499 => api_error
            .and_then(|error| by_kind(&error.kind, text.clone()))
            .unwrap_or(ProviderError::BadRequest(text)),
        _ => ProviderError::InvalidResponse(format!(
            "anthropic: unexpected HTTP status {status}: {detail}"
        )),
    }
}

/// The error for an `error` event inside a stream that began with 200.
pub fn from_stream_error(error: &ApiError) -> ProviderError {
    let text = format!("anthropic: error event in the stream: {}: {}", error.kind, error.message);
    // An unknown kind mid-stream is most likely a passing server fault.
    by_kind(&error.kind, text.clone())
        .unwrap_or(ProviderError::Server(ServerError { status: 500, message: text }))
}

/// The error for an API error type, as documented at
/// <https://docs.anthropic.com/en/api/errors>; `None` for a type this
/// plugin does not know.
fn by_kind(kind: &str, text: String) -> Option<ProviderError> {
    Some(match kind {
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            ProviderError::BadRequest(text)
        }
        // Billing trouble is an account problem like a bad key: retrying
        // cannot help.
        "authentication_error" | "permission_error" | "billing_error" => ProviderError::Auth(text),
        "rate_limit_error" => {
            ProviderError::RateLimited(RateLimit { message: text, retry_after_ms: None })
        }
        "timeout_error" => ProviderError::Timeout(text),
        "api_error" => ProviderError::Server(ServerError { status: 500, message: text }),
        // 529 is the status the API gives overloaded errors.
        "overloaded_error" => ProviderError::Server(ServerError { status: 529, message: text }),
        _ => return None,
    })
}

/// The delay of a `retry-after` header given in seconds (possibly
/// fractional). The HTTP-date form is ignored: a plugin has no trustworthy
/// clock to subtract from, and the API sends seconds.
fn retry_after_ms(headers: &[(String, String)]) -> Option<u64> {
    let (_, value) = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))?;
    let seconds = value.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0)?;
    // Saturates on absurd values rather than wrapping.
    Some((seconds * 1000.0).round() as u64)
}

/// The start of a body that is not an API error object, for the message.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "ANTHROPIC_API_KEY";

    fn body(kind: &str, message: &str) -> Vec<u8> {
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
            .to_string()
            .into_bytes()
    }

    fn status(code: u16, body: &[u8]) -> ProviderError {
        from_status(code, &[], body, SECRET)
    }

    fn settings() -> Settings {
        Settings::load(|_| None).unwrap()
    }

    #[test]
    fn auth_statuses_are_auth_errors_naming_the_secret() {
        let err = status(401, &body("authentication_error", "invalid x-api-key"));
        assert!(
            matches!(&err, ProviderError::Auth(m) if m == "anthropic: HTTP 401: authentication_error: \
                invalid x-api-key (the API key is the secret `ANTHROPIC_API_KEY`)"),
            "{err:?}"
        );
        let err = status(403, &body("permission_error", "no access to this model"));
        assert!(matches!(&err, ProviderError::Auth(m) if m.contains("no access")), "{err:?}");
    }

    #[test]
    fn rate_limits_carry_retry_after_in_seconds() {
        let headers = vec![
            ("Retry-After".to_owned(), "12".to_owned()),
            ("anthropic-ratelimit-requests-remaining".to_owned(), "0".to_owned()),
        ];
        let err = from_status(
            429,
            &headers,
            &body("rate_limit_error", "Number of request tokens has exceeded your rate limit"),
            SECRET,
        );
        assert!(
            matches!(&err, ProviderError::RateLimited(RateLimit { message, retry_after_ms: Some(12_000) })
                if message == "anthropic: HTTP 429: rate_limit_error: Number of request tokens has \
                    exceeded your rate limit"),
            "{err:?}"
        );
        let fractional = [("retry-after".to_owned(), " 1.5 ".to_owned())];
        let err = from_status(429, &fractional, b"", SECRET);
        assert!(matches!(
            err,
            ProviderError::RateLimited(RateLimit { retry_after_ms: Some(1500), .. })
        ));
        for value in ["Wed, 21 Oct 2015 07:28:00 GMT", "-3", "soon", "NaN"] {
            let headers = [("retry-after".to_owned(), value.to_owned())];
            let err = from_status(429, &headers, b"", SECRET);
            assert!(
                matches!(err, ProviderError::RateLimited(RateLimit { retry_after_ms: None, .. })),
                "{value}"
            );
        }
    }

    #[test]
    fn timeouts_bad_requests_and_server_errors_by_status() {
        assert!(
            matches!(status(408, b""), ProviderError::Timeout(m) if m == "anthropic: HTTP 408: (empty body)")
        );
        assert!(matches!(status(504, &body("timeout_error", "Request timed out")),
            ProviderError::Timeout(m) if m.ends_with("timeout_error: Request timed out")));
        for code in [400, 404, 422] {
            let err = status(code, &body("invalid_request_error", "max_tokens: Field required"));
            assert!(
                matches!(&err, ProviderError::BadRequest(m)
                    if *m == format!("anthropic: HTTP {code}: invalid_request_error: max_tokens: Field required")),
                "{err:?}"
            );
        }
        let err = status(529, &body("overloaded_error", "Overloaded"));
        assert!(
            matches!(&err, ProviderError::Server(ServerError { status: 529, message })
                if message == "anthropic: overloaded_error: Overloaded"),
            "{err:?}"
        );
        let err = status(502, b"<html><body>Bad gateway</body></html>");
        assert!(
            matches!(&err, ProviderError::Server(ServerError { status: 502, message })
                if message == "anthropic: <html><body>Bad gateway</body></html>"),
            "{err:?}"
        );
        assert!(matches!(
            status(500, &body("api_error", "Internal server error")),
            ProviderError::Server(ServerError { status: 500, .. })
        ));
    }

    #[test]
    fn other_client_errors_follow_the_error_type_and_are_never_retried() {
        assert!(matches!(
            status(413, &body("request_too_large", "Request exceeds the maximum size")),
            ProviderError::BadRequest(_)
        ));
        assert!(matches!(
            status(402, &body("billing_error", "credit balance too low")),
            ProviderError::Auth(_)
        ));
        assert!(matches!(status(409, &body("conflict_error", "?")), ProviderError::BadRequest(_)));
        assert!(
            matches!(status(418, b"teapot"), ProviderError::BadRequest(m) if m == "anthropic: HTTP 418: teapot")
        );
    }

    #[test]
    fn unexpected_statuses_are_invalid_responses() {
        let err = status(302, b"");
        assert!(
            matches!(&err, ProviderError::InvalidResponse(m)
            if m == "anthropic: unexpected HTTP status 302: (empty body)"),
            "{err:?}"
        );
    }

    #[test]
    fn long_bodies_are_cut_at_a_character_boundary() {
        let long = "é".repeat(1000);
        let ProviderError::BadRequest(m) = status(400, long.as_bytes()) else { panic!() };
        assert_eq!(m, format!("anthropic: HTTP 400: {}…", "é".repeat(SNIPPET_CHARS)));
    }

    #[test]
    fn stream_error_events_map_by_type() {
        let event =
            |kind: &str| from_stream_error(&ApiError { kind: kind.into(), message: "m".into() });
        assert!(
            matches!(event("overloaded_error"), ProviderError::Server(ServerError { status: 529, message })
            if message == "anthropic: error event in the stream: overloaded_error: m")
        );
        assert!(matches!(
            event("rate_limit_error"),
            ProviderError::RateLimited(RateLimit { retry_after_ms: None, .. })
        ));
        assert!(matches!(
            event("api_error"),
            ProviderError::Server(ServerError { status: 500, .. })
        ));
        assert!(matches!(event("invalid_request_error"), ProviderError::BadRequest(_)));
        assert!(matches!(event("authentication_error"), ProviderError::Auth(_)));
        assert!(matches!(event("timeout_error"), ProviderError::Timeout(_)));
        assert!(matches!(
            event("brand_new_error"),
            ProviderError::Server(ServerError { status: 500, .. })
        ));
    }

    #[test]
    fn host_http_errors_map_to_their_cases() {
        let settings = settings();
        let err =
            from_http(HttpError::Denied("secret `ANTHROPIC_API_KEY` is not set".into()), &settings);
        assert!(
            matches!(&err, ProviderError::Auth(m) if m.starts_with(
            "anthropic: the host refused the request (secret `ANTHROPIC_API_KEY` is not set); the API key is the secret `ANTHROPIC_API_KEY`")),
            "{err:?}"
        );
        assert!(matches!(from_http(HttpError::Timeout, &settings),
            ProviderError::Timeout(m) if m == "anthropic: the request to https://api.anthropic.com timed out"));
        assert!(matches!(from_http(HttpError::Connect("dns error".into()), &settings),
            ProviderError::Network(m) if m == "anthropic: cannot connect to https://api.anthropic.com: dns error"));
        assert!(matches!(from_http(HttpError::Io("connection reset".into()), &settings),
            ProviderError::Network(m) if m.ends_with("failed: connection reset")));
        assert!(matches!(from_http(HttpError::TooLarge(33_554_432), &settings),
            ProviderError::InvalidResponse(m) if m.contains("33554432 bytes")));
        assert!(matches!(from_http(HttpError::InvalidRequest("bad URL".into()), &settings),
            ProviderError::Other(m) if m.contains("`base_url`")));
    }
}
