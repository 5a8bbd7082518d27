//! Turning what went wrong — a failed host request, an HTTP error status, an
//! error the API reported in a 200 body or stream — into the
//! [`ProviderError`] case that tells the host whether to retry.

use crate::settings::Settings;
use reson_sdk::host::http::HttpError;
use reson_sdk::provider::{ProviderError, RateLimit, ServerError};
use serde_json::Value;

/// How much of a body that is not a JSON error goes into a message: enough
/// to recognise a proxy's error page, not the whole page.
const RAW_BODY_CHARS: usize = 300;

/// The error for a request the host could not complete.
pub fn from_http(err: HttpError, settings: &Settings) -> ProviderError {
    let url = settings.url();
    match err {
        // The host denies both an ungranted URL and an ungranted or unset
        // secret; either way the user has to fix the setup, not retry.
        HttpError::Denied(detail) => ProviderError::Auth(match &settings.api_key_secret {
            Some(secret) => format!(
                "openai: the host refused the request ({detail}); the API key is the secret \
                 `{secret}`: grant it under [plugins.openai] (secrets = [\"{secret}\"]) and set \
                 it in the environment or in [secrets], and grant the host of {url}"
            ),
            None => {
                format!("openai: the host refused the request ({detail}); grant the host of {url}")
            }
        }),
        HttpError::Timeout => ProviderError::Timeout(format!("openai: POST {url} timed out")),
        HttpError::Connect(detail) => {
            ProviderError::Network(format!("openai: cannot connect to {url}: {detail}"))
        }
        HttpError::Io(detail) => {
            ProviderError::Network(format!("openai: the connection to {url} failed: {detail}"))
        }
        HttpError::TooLarge(cap) => ProviderError::InvalidResponse(format!(
            "openai: the response from {url} is larger than the host's cap of {cap} bytes"
        )),
        HttpError::InvalidRequest(detail) => ProviderError::BadRequest(format!(
            "openai: cannot send the request to {url} ({detail}); check the `base_url` setting"
        )),
    }
}

/// The error for a response with a status other than 2xx.
pub fn from_status(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    settings: &Settings,
) -> ProviderError {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let detail = match &json {
        Some(json) => api_message(json).unwrap_or_else(|| raw_text(body)),
        None => raw_text(body),
    };
    let message = format!("openai: the API answered {status}: {detail}");
    let code = json.as_ref().and_then(error_code);
    match status {
        401 | 403 => ProviderError::Auth(match &settings.api_key_secret {
            Some(secret) => format!("{message} (the API key is the secret `{secret}`)"),
            None => format!("{message} (no API key is sent: `api_key_secret` is empty)"),
        }),
        // A spent quota is reported as 429 but clears only with billing:
        // retrying would only delay the failure.
        429 if code.as_deref() == Some("insufficient_quota") => ProviderError::Auth(message),
        429 => {
            let retry_after_ms = header(headers, "retry-after-ms")
                .and_then(|v| seconds_to_ms(v, 0.001))
                .or_else(|| header(headers, "retry-after").and_then(|v| seconds_to_ms(v, 1.0)));
            let retry_after_ms = retry_after_ms.or_else(|| try_again_in_ms(&detail));
            ProviderError::RateLimited(RateLimit { message, retry_after_ms })
        }
        408 | 504 => ProviderError::Timeout(message),
        500..=599 => ProviderError::Server(ServerError { status, message }),
        300..=399 => {
            let target = header(headers, "location").unwrap_or("an unnamed location");
            ProviderError::BadRequest(format!(
                "openai: the API answered {status}, a redirect to {target}; redirects are not \
                 followed, so set `base_url` to the final address"
            ))
        }
        // 400, 404 and 422 are the usual ones; any other 4xx (402 payment
        // required, 413 too large, ...) will not succeed on a retry either.
        400..=499 => ProviderError::BadRequest(message),
        _ => ProviderError::InvalidResponse(message),
    }
}

/// The error for an `{"error": ...}` object in a 200 body or in a stream
/// event, as OpenRouter sends when an upstream fails mid-answer. A numeric
/// `code` is taken as the HTTP status it stands for.
pub fn in_band(status: u16, json: &Value, settings: &Settings) -> ProviderError {
    let code = json.get("error").and_then(|e| e.get("code")).and_then(Value::as_u64);
    if let Some(code) = code.and_then(|c| u16::try_from(c).ok()).filter(|c| (400..600).contains(c))
    {
        let body = json.to_string();
        return from_status(code, &[], body.as_bytes(), settings);
    }
    let detail = api_message(json).unwrap_or_else(|| json.to_string());
    ProviderError::Server(ServerError {
        status,
        message: format!("openai: the API reported an error: {detail}"),
    })
}

/// The message of an API error body, with its code where it has one:
/// `{"error": {"message", "code"|"type"}}` (OpenAI, OpenRouter),
/// `{"error": "..."}` (Ollama), `{"message": ...}` (vLLM) or
/// `{"detail": ...}`.
fn api_message(json: &Value) -> Option<String> {
    let error = json.get("error");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| error.and_then(Value::as_str))
        .or_else(|| json.get("message").and_then(Value::as_str))
        .or_else(|| json.get("detail").and_then(Value::as_str))?;
    Some(match error_code(json) {
        Some(code) => format!("{message} ({code})"),
        None => message.to_owned(),
    })
}

/// The error's `code`, or else its `type`, when it is text.
fn error_code(json: &Value) -> Option<String> {
    let error = json.get("error")?;
    let code = error.get("code").and_then(Value::as_str);
    code.or_else(|| error.get("type").and_then(Value::as_str)).map(str::to_owned)
}

/// The start of a body that is not a JSON error, as text.
fn raw_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match text.char_indices().nth(RAW_BODY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The value of the first header named `name` (any case).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.trim())
}

/// A header counting `unit` seconds, as milliseconds. An HTTP date, which
/// `retry-after` may also hold, is not a number and gives `None`.
fn seconds_to_ms(value: &str, unit: f64) -> Option<u64> {
    let amount: f64 = value.trim().parse().ok()?;
    // `as` saturates, so a huge value cannot wrap.
    (amount.is_finite() && amount >= 0.0).then(|| (amount * unit * 1000.0).ceil() as u64)
}

/// The wait in a rate-limit message such as OpenAI's "Please try again in
/// 6.5s." or Groq's "try again in 1m30.5s" / "in 20ms".
fn try_again_in_ms(message: &str) -> Option<u64> {
    const PHRASE: &str = "try again in ";
    let start = message.to_ascii_lowercase().find(PHRASE)? + PHRASE.len();
    duration_ms(message.get(start..)?)
}

/// Parses the leading Go-style duration of `text` (`1h2m3.5s`, `20ms`).
fn duration_ms(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total = 0.0;
    let mut parsed_any = false;
    loop {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let Ok(amount) = rest[..digits].parse::<f64>() else { break };
        let after = &rest[digits..];
        let (scale, unit_len) = if after.starts_with("ms") {
            (1.0, 2)
        } else if after.starts_with('s') {
            (1000.0, 1)
        } else if after.starts_with('m') {
            (60_000.0, 1)
        } else if after.starts_with('h') {
            (3_600_000.0, 1)
        } else {
            break;
        };
        total += amount * scale;
        parsed_any = true;
        rest = &after[unit_len..];
    }
    (parsed_any && total.is_finite()).then(|| total.ceil() as u64)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::from_config(|_| None).unwrap()
    }

    fn status(status: u16, headers: &[(&str, &str)], body: &str) -> ProviderError {
        let headers: Vec<(String, String)> =
            headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        from_status(status, &headers, body.as_bytes(), &settings())
    }

    /// The case of `err` (with its status or wait) and its message, to
    /// check both in one assertion.
    pub fn kind(err: &ProviderError) -> (String, &str) {
        match err {
            ProviderError::Auth(m) => ("auth".into(), m),
            ProviderError::RateLimited(r) => {
                (format!("rate-limited {:?}", r.retry_after_ms), &r.message)
            }
            ProviderError::Timeout(m) => ("timeout".into(), m),
            ProviderError::BadRequest(m) => ("bad-request".into(), m),
            ProviderError::Server(s) => (format!("server {}", s.status), &s.message),
            ProviderError::Network(m) => ("network".into(), m),
            ProviderError::InvalidResponse(m) => ("invalid-response".into(), m),
            ProviderError::Other(m) => ("other".into(), m),
        }
    }

    const INVALID_KEY: &str = r#"{
    "error": {
        "message": "Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": null,
        "code": "invalid_api_key"
    }
}
"#;

    const RATE_LIMITED: &str = r#"{
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1.5s. Visit https://platform.openai.com/account/rate-limits to learn more.",
        "type": "tokens",
        "param": null,
        "code": "rate_limit_exceeded"
    }
}
"#;

    const CONTEXT_TOO_LONG: &str = r#"{
  "error": {
    "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded"
  }
}"#;

    #[test]
    fn unauthorized_and_forbidden_are_auth_errors_naming_the_secret() {
        for code in [401, 403] {
            let err = status(code, &[], INVALID_KEY);
            let (kind_of, message) = kind(&err);
            assert_eq!(kind_of, "auth");
            let start = format!("openai: the API answered {code}: Incorrect API key provided");
            assert!(message.starts_with(&start), "{message}");
            assert!(message.contains("(invalid_api_key)"), "{message}");
            assert!(message.ends_with("(the API key is the secret `OPENAI_API_KEY`)"), "{message}");
        }
    }

    #[test]
    fn too_many_requests_is_rate_limited_with_the_retry_after_header() {
        let err = status(429, &[("retry-after", "20")], RATE_LIMITED);
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "rate-limited Some(20000)");
        assert!(message.contains("Rate limit reached for gpt-4o"), "{message}");
        assert!(message.ends_with("(rate_limit_exceeded)"), "{message}");
        let err = status(429, &[("Retry-After-Ms", "250")], RATE_LIMITED);
        assert_eq!(kind(&err).0, "rate-limited Some(250)");
    }

    #[test]
    fn a_retry_after_date_is_ignored_for_the_bodys_hint() {
        let date = [("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")];
        assert_eq!(kind(&status(429, &date, RATE_LIMITED)).0, "rate-limited Some(1500)");
        assert_eq!(kind(&status(429, &date, "{}")).0, "rate-limited None");
    }

    #[test]
    fn rate_limit_hints_in_messages_are_parsed() {
        assert_eq!(try_again_in_ms("Please try again in 6.5s. Visit"), Some(6500));
        assert_eq!(try_again_in_ms("Please try again in 1m30.5s."), Some(90_500));
        assert_eq!(try_again_in_ms("Please Try Again In 20ms"), Some(20));
        assert_eq!(try_again_in_ms("try again in 1h"), Some(3_600_000));
        assert_eq!(try_again_in_ms("try again in a moment"), None);
        assert_eq!(try_again_in_ms("try again in 5 seconds"), None);
        assert_eq!(try_again_in_ms("try again in "), None);
        assert_eq!(try_again_in_ms("slow down"), None);
        assert_eq!(seconds_to_ms("1.2", 1.0), Some(1200));
        assert_eq!(seconds_to_ms("-3", 1.0), None);
        assert_eq!(seconds_to_ms("1e400", 1.0), None);
    }

    #[test]
    fn a_spent_quota_is_not_retried() {
        let body = r#"{"error": {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
        let err = status(429, &[], body);
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "auth");
        assert!(message.contains("exceeded your current quota"), "{message}");
    }

    #[test]
    fn request_timeout_and_gateway_timeout_are_timeouts() {
        for code in [408, 504] {
            let err = status(code, &[], "upstream request timeout");
            let expected = format!("openai: the API answered {code}: upstream request timeout");
            assert_eq!(kind(&err), ("timeout".to_owned(), expected.as_str()));
        }
    }

    #[test]
    fn client_errors_are_bad_requests_with_the_apis_message() {
        let err = status(400, &[], CONTEXT_TOO_LONG);
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "bad-request");
        let start = "openai: the API answered 400: This model's maximum context length is 128000";
        assert!(message.starts_with(start), "{message}");
        assert!(message.ends_with("(context_length_exceeded)"), "{message}");

        let not_found = r#"{"error": {
            "message": "The model `gpt-9` does not exist or you do not have access to it.",
            "type": "invalid_request_error", "param": null, "code": "model_not_found"}}"#;
        let err = status(404, &[], not_found);
        assert_eq!(kind(&err).0, "bad-request");
        assert!(kind(&err).1.contains("`gpt-9` does not exist"), "{err:?}");

        let cases = [
            (
                422,
                r#"{"object": "error", "message": "Field required: messages",
                    "type": "BadRequestError", "param": null, "code": 400}"#,
                "openai: the API answered 422: Field required: messages",
            ),
            (
                404,
                r#"{"error":"model \"llama9\" not found, try pulling it first"}"#,
                "openai: the API answered 404: model \"llama9\" not found, try pulling it first",
            ),
            (404, r#"{"detail":"Not Found"}"#, "openai: the API answered 404: Not Found"),
            (402, "{}", "openai: the API answered 402: {}"),
        ];
        for (code, body, expected) in cases {
            assert_eq!(kind(&status(code, &[], body)), ("bad-request".to_owned(), expected));
        }
    }

    #[test]
    fn server_errors_keep_their_status_and_cut_long_pages() {
        let body = r#"{"error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error", "param": null, "code": null}}"#;
        for code in [500, 502, 503, 529] {
            let err = status(code, &[], body);
            let (kind_of, message) = kind(&err);
            assert_eq!(kind_of, format!("server {code}"));
            assert!(message.ends_with("Sorry about that! (server_error)"), "{message}");
        }
        let page = format!("<html><body>{}</body></html>", "é".repeat(1000));
        let err = status(502, &[], &page);
        let message = kind(&err).1;
        assert!(message.ends_with('…') && message.chars().count() < 400, "{message}");
        let err = status(503, &[], "  ");
        assert_eq!(kind(&err).1, "openai: the API answered 503: (empty body)");
    }

    #[test]
    fn redirects_and_odd_statuses_are_not_retried() {
        let err = status(301, &[("location", "https://api.openai.com/v2/chat")], "");
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "bad-request");
        assert!(message.contains("redirect to https://api.openai.com/v2/chat"), "{message}");
        assert!(message.contains("`base_url`"), "{message}");
        assert_eq!(kind(&status(102, &[], "")).0, "invalid-response");
        assert_eq!(kind(&status(600, &[], "")).0, "invalid-response");
    }

    #[test]
    fn in_band_errors_use_a_numeric_code_as_the_status() {
        let error_of = |body: &str| {
            let json: Value = serde_json::from_str(body).unwrap();
            let err = in_band(200, &json, &settings());
            let (kind_of, message) = kind(&err);
            (kind_of, message.to_owned())
        };
        let openrouter = error_of(
            r#"{"error": {"code": 502, "message": "Provider returned error",
                "metadata": {"provider_name": "Together"}}}"#,
        );
        assert_eq!(openrouter.0, "server 502");
        assert!(openrouter.1.contains("Provider returned error"), "{}", openrouter.1);
        let limited = error_of(
            r#"{"error": {"code": 429, "message": "Rate limit exceeded. Please try again in 3s"}}"#,
        );
        assert_eq!(limited.0, "rate-limited Some(3000)");
        assert_eq!(
            error_of(r#"{"error": "the model crashed"}"#),
            (
                "server 200".to_owned(),
                "openai: the API reported an error: the model crashed".into()
            )
        );
        let odd = error_of(r#"{"error": {"code": 7}}"#);
        assert_eq!(
            odd,
            (
                "server 200".to_owned(),
                r#"openai: the API reported an error: {"error":{"code":7}}"#.into()
            )
        );
    }

    #[test]
    fn host_failures_map_to_their_cases() {
        let s = settings();
        let denied = "secret denied: secret `OPENAI_API_KEY` is not set";
        let err = from_http(HttpError::Denied(denied.into()), &s);
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "auth");
        assert!(message.contains(denied), "{message}");
        assert!(message.contains("the API key is the secret `OPENAI_API_KEY`"), "{message}");
        let keyless = Settings { api_key_secret: None, ..s.clone() };
        let err = from_http(HttpError::Denied("http denied".into()), &keyless);
        assert_eq!(kind(&err).0, "auth");
        assert!(!kind(&err).1.contains("secret `"), "{err:?}");

        let url = "https://api.openai.com/v1/chat/completions";
        let cases = [
            (HttpError::Timeout, "timeout", format!("openai: POST {url} timed out")),
            (
                HttpError::Connect("dns error".into()),
                "network",
                format!("openai: cannot connect to {url}: dns error"),
            ),
            (
                HttpError::Io("reset by peer".into()),
                "network",
                format!("openai: the connection to {url} failed: reset by peer"),
            ),
            (
                HttpError::TooLarge(33_554_432),
                "invalid-response",
                format!(
                    "openai: the response from {url} is larger than the host's cap of 33554432 bytes"
                ),
            ),
            (
                HttpError::InvalidRequest("bad URL".into()),
                "bad-request",
                format!(
                    "openai: cannot send the request to {url} (bad URL); check the `base_url` setting"
                ),
            ),
        ];
        for (failure, expected_kind, expected) in cases {
            let err = from_http(failure, &s);
            assert_eq!(kind(&err), (expected_kind.to_owned(), expected.as_str()));
        }
    }
}
