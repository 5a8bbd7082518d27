//! Failures as typed provider errors, whose case decides whether the host
//! retries: HTTP statuses with Gemini's error bodies, error objects inside a
//! stream, and the host's transport errors.

use reson_sdk::host::http::HttpError;
use reson_sdk::provider::{ProviderError, RateLimit, ServerError};
use serde_json::Value;

/// How many characters of a body that is not a Gemini error are quoted.
const QUOTED_CHARS: usize = 300;

/// What a Gemini error object says:
/// `{"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED", "details": [...]}`.
#[derive(Debug, Default, PartialEq)]
struct ApiError {
    code: Option<u16>,
    status: String,
    message: String,
    /// `ErrorInfo.reason` of each detail (`API_KEY_INVALID`, ...).
    reasons: Vec<String>,
    /// `RetryInfo.retryDelay`, in milliseconds.
    retry_delay_ms: Option<u64>,
}

impl ApiError {
    /// The `error` object of a response body, if it has one.
    fn from_body(body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        // The non-SSE stream form wraps the error in an array.
        let value = match value {
            Value::Array(items) => items.into_iter().next()?,
            value => value,
        };
        value.get("error").map(Self::from_value)
    }

    fn from_value(error: &Value) -> Self {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default();
        let details = error.get("details").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        Self {
            code: error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()),
            status: text("status").to_owned(),
            // Some proxies send the error as a bare string.
            message: error.as_str().unwrap_or(text("message")).to_owned(),
            reasons: details
                .iter()
                .filter_map(|d| d.get("reason").and_then(Value::as_str))
                .map(str::to_owned)
                .collect(),
            retry_delay_ms: details
                .iter()
                .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
                .and_then(duration_ms),
        }
    }

    /// The message with the status names: `API key not valid. (HTTP 400 INVALID_ARGUMENT)`.
    fn describe(&self, http_status: u16) -> String {
        let message = if self.message.is_empty() { "no error message" } else { &self.message };
        if self.status.is_empty() {
            format!("{message} (HTTP {http_status})")
        } else {
            format!("{message} (HTTP {http_status} {})", self.status)
        }
    }

    /// Gemini reports a wrong key as a 400 whose detail says so.
    fn key_invalid(&self) -> bool {
        self.reasons.iter().any(|reason| reason == "API_KEY_INVALID")
    }
}

/// The error for a response with a non-success `status`.
pub fn from_status(status: u16, headers: &[(String, String)], body: &[u8]) -> ProviderError {
    let api = ApiError::from_body(body);
    let message = match &api {
        Some(api) => api.describe(status),
        None => format!("{} (HTTP {status})", quote(body)),
    };
    let retry_after_ms =
        retry_after_header(headers).or_else(|| api.as_ref().and_then(|a| a.retry_delay_ms));
    let key_invalid = api.as_ref().is_some_and(ApiError::key_invalid);
    classify(status, message, retry_after_ms, key_invalid)
}

/// The error for an `{"error": ...}` event inside a stream that began with
/// 200: its code (or status name) stands in for the HTTP status.
pub fn from_stream_error(error: &Value) -> ProviderError {
    let api = ApiError::from_value(error);
    let status = api.code.or_else(|| status_of(&api.status)).unwrap_or(500);
    classify(status, api.describe(status), api.retry_delay_ms, api.key_invalid())
}

fn classify(
    status: u16,
    message: String,
    retry_after_ms: Option<u64>,
    key_invalid: bool,
) -> ProviderError {
    match status {
        401 | 403 => ProviderError::Auth(message),
        400 if key_invalid => ProviderError::Auth(message),
        429 => ProviderError::RateLimited(RateLimit { message, retry_after_ms }),
        408 | 504 => ProviderError::Timeout(message),
        400..=499 => ProviderError::BadRequest(message),
        500..=599 => ProviderError::Server(ServerError { status, message }),
        // No redirects are followed, so a 3xx ends here too.
        _ => ProviderError::InvalidResponse(format!("unexpected HTTP status: {message}")),
    }
}

/// The HTTP status a `google.rpc.Code` name corresponds to.
fn status_of(name: &str) -> Option<u16> {
    Some(match name {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => 500,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => return None,
    })
}

/// The error for a request the host could not complete. `secret` is the
/// name of the key's secret, which a denial most likely concerns.
pub fn from_http(error: HttpError, secret: &str) -> ProviderError {
    match error {
        HttpError::Denied(detail) => ProviderError::Auth(format!(
            "the host denied the request ({detail}); the gemini plugin needs the secret \
             `{secret}` granted (`secrets = [\"{secret}\"]` under [plugins.gemini] in reson.toml) \
             and set, and the API URL granted"
        )),
        HttpError::Timeout => {
            ProviderError::Timeout("the request to the Gemini API timed out".to_owned())
        }
        HttpError::Connect(detail) => {
            ProviderError::Network(format!("could not connect to the Gemini API: {detail}"))
        }
        HttpError::Io(detail) => {
            ProviderError::Network(format!("the connection to the Gemini API failed: {detail}"))
        }
        HttpError::TooLarge(cap) => ProviderError::InvalidResponse(format!(
            "the Gemini response is larger than the host's cap of {cap} bytes"
        )),
        HttpError::InvalidRequest(detail) => ProviderError::BadRequest(format!(
            "the host refused the request as malformed ({detail}); check the `base_url` setting"
        )),
    }
}

/// `Retry-After` in milliseconds, when it is in seconds; an HTTP date is
/// ignored rather than trusted against a clock the plugin cannot read.
fn retry_after_header(headers: &[(String, String)]) -> Option<u64> {
    let (_, value) = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"))?;
    value.trim().parse::<u64>().ok().map(|seconds| seconds.saturating_mul(1000))
}

/// A protobuf JSON duration (`"12s"`, `"0.5s"`) in milliseconds.
fn duration_ms(text: &str) -> Option<u64> {
    let seconds: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    // `as` saturates: an absurd delay becomes u64::MAX, not a panic.
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64)
}

/// The start of a body that is not a Gemini error (an HTML page from a
/// proxy, say), for the message.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "no error message".to_owned();
    }
    let mut quoted: String = text.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Gemini's body for an exhausted quota, as the API sends it.
    const QUOTA_BODY: &str = r#"{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
            "quotaValue": "5"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [{"description": "Learn more about Gemini API quotas",
                   "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]
      },
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "12s"
      }
    ]
  }
}
"#;

    const KEY_INVALID_BODY: &str = r#"{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"}
      },
      {
        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
        "locale": "en-US",
        "message": "API key not valid. Please pass a valid API key."
      }
    ]
  }
}
"#;

    fn body(code: u16, status: &str, message: &str) -> Vec<u8> {
        json!({"error": {"code": code, "message": message, "status": status}})
            .to_string()
            .into_bytes()
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn every_status_maps_to_its_case_with_the_api_message() {
        let cases: &[(u16, &str, &str)] = &[
            (400, "INVALID_ARGUMENT", "bad-request"),
            (401, "UNAUTHENTICATED", "auth"),
            (403, "PERMISSION_DENIED", "auth"),
            (404, "NOT_FOUND", "bad-request"),
            (408, "DEADLINE_EXCEEDED", "timeout"),
            (413, "INVALID_ARGUMENT", "bad-request"),
            (422, "INVALID_ARGUMENT", "bad-request"),
            (429, "RESOURCE_EXHAUSTED", "rate-limited"),
            (500, "INTERNAL", "server"),
            (502, "", "server"),
            (503, "UNAVAILABLE", "server"),
            (504, "DEADLINE_EXCEEDED", "timeout"),
            (302, "", "invalid-response"),
        ];
        for &(status, name, kind) in cases {
            let err = from_status(status, &[], &body(status, name, "the API says no"));
            let (actual, message) = match &err {
                ProviderError::Auth(m) => ("auth", m.clone()),
                ProviderError::RateLimited(r) => ("rate-limited", r.message.clone()),
                ProviderError::Timeout(m) => ("timeout", m.clone()),
                ProviderError::BadRequest(m) => ("bad-request", m.clone()),
                ProviderError::Server(s) => {
                    assert_eq!(s.status, status);
                    ("server", s.message.clone())
                }
                ProviderError::InvalidResponse(m) => ("invalid-response", m.clone()),
                other => panic!("{status}: unexpected {other:?}"),
            };
            assert_eq!(actual, kind, "status {status}");
            assert!(message.contains("the API says no"), "{status}: {message}");
            assert!(message.contains(&format!("HTTP {status}")), "{status}: {message}");
        }
    }

    #[test]
    fn an_invalid_key_is_an_auth_error_though_gemini_says_400() {
        let err = from_status(400, &[], KEY_INVALID_BODY.as_bytes());
        assert!(
            matches!(&err, ProviderError::Auth(m) if m.starts_with("API key not valid.")
                && m.ends_with("(HTTP 400 INVALID_ARGUMENT)")),
            "{err:?}"
        );
    }

    #[test]
    fn rate_limits_take_the_retry_after_header_then_the_body_hint() {
        let quota = QUOTA_BODY.as_bytes();
        let delay = |headers: &[(&str, &str)], body: &[u8]| match from_status(
            429,
            &self::headers(headers),
            body,
        ) {
            ProviderError::RateLimited(r) => r.retry_after_ms,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(delay(&[("Retry-After", "30")], quota), Some(30_000));
        assert_eq!(delay(&[], quota), Some(12_000));
        // A date is ignored, and the body's hint used instead.
        assert_eq!(delay(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")], quota), Some(12_000));
        assert_eq!(delay(&[("retry-after", "2")], b"slow down"), Some(2_000));
        assert_eq!(delay(&[], &body(429, "RESOURCE_EXHAUSTED", "quota")), None);
        let fractional = br#"{"error": {"code": 429, "details": [{"retryDelay": "1.5s"}]}}"#;
        assert_eq!(delay(&[], fractional), Some(1_500));
        let absurd = br#"{"error": {"details": [{"retryDelay": "1e300s"}, {"retryDelay": 5}]}}"#;
        assert_eq!(delay(&[], absurd), Some(u64::MAX));
        assert_eq!(delay(&[], br#"{"error": {"details": [{"retryDelay": "-1s"}]}}"#), None);
    }

    #[test]
    fn bodies_that_are_not_gemini_errors_are_quoted() {
        let html = format!("<html><body>{}</body></html>", "x".repeat(1000));
        let err = from_status(502, &[], html.as_bytes());
        let ProviderError::Server(s) = err else { panic!("{err:?}") };
        assert!(s.message.starts_with("<html><body>xxx"));
        assert!(s.message.ends_with("… (HTTP 502)"));
        assert!(s.message.chars().count() < QUOTED_CHARS + 20);
        let err = from_status(503, &[], b"");
        assert!(
            matches!(err, ProviderError::Server(s) if s.message == "no error message (HTTP 503)")
        );
        let array = format!("[{}]", String::from_utf8(body(404, "NOT_FOUND", "no model")).unwrap());
        let err = from_status(404, &[], array.as_bytes());
        assert!(
            matches!(err, ProviderError::BadRequest(m) if m == "no model (HTTP 404 NOT_FOUND)")
        );
    }

    #[test]
    fn stream_errors_use_their_code_or_status_name() {
        let quota: Value = serde_json::from_str(QUOTA_BODY).unwrap();
        let err = from_stream_error(&quota["error"]);
        assert!(matches!(err, ProviderError::RateLimited(r) if r.retry_after_ms == Some(12_000)));
        let err = from_stream_error(&json!({"status": "UNAVAILABLE", "message": "overloaded"}));
        assert!(matches!(err, ProviderError::Server(s) if s.status == 503));
        let err = from_stream_error(&json!("boom"));
        assert!(matches!(err, ProviderError::Server(s) if s.message == "boom (HTTP 500)"));
    }

    #[test]
    fn host_errors_map_to_their_cases() {
        let err = from_http(HttpError::Denied("secret `GEMINI_API_KEY` is not set".into()), "K");
        assert!(matches!(&err, ProviderError::Auth(m) if m.contains("secret `K`")
            && m.contains("GEMINI_API_KEY` is not set")));
        assert!(matches!(from_http(HttpError::Timeout, "K"), ProviderError::Timeout(_)));
        assert!(matches!(from_http(HttpError::Connect("dns".into()), "K"),
            ProviderError::Network(m) if m.contains("dns")));
        assert!(matches!(from_http(HttpError::Io("reset".into()), "K"),
            ProviderError::Network(m) if m.contains("reset")));
        assert!(matches!(from_http(HttpError::TooLarge(32), "K"),
            ProviderError::InvalidResponse(m) if m.contains("32 bytes")));
        assert!(matches!(from_http(HttpError::InvalidRequest("bad URL".into()), "K"),
            ProviderError::BadRequest(m) if m.contains("base_url")));
    }
}
