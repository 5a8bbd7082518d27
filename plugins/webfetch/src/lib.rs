//! `webfetch`: GETs a URL through the host's `http` capability and returns
//! the page as Markdown or plain text. The host sends the request only to
//! URLs the user granted and follows no redirects; this tool turns what comes
//! back into text the model can read.

mod content;

use content::Format;
use reson_sdk::host::http::{self, HttpError};
use reson_sdk::{Context, Output, ToolError, Toolbox};
use schemars::JsonSchema;
use serde::Deserialize;

/// The per-request timeout the host is asked for.
const TIMEOUT_MS: u32 = 30_000;
/// How much text comes back when the call does not say.
const DEFAULT_MAX_BYTES: u32 = 1 << 20;
/// The smallest cap, which leaves room for the note saying the text was cut.
const MIN_MAX_BYTES: u32 = 256;
/// Some servers refuse requests that name no client.
const USER_AGENT: &str = concat!("reson-webfetch/", env!("CARGO_PKG_VERSION"));
/// What the tool can show, best first.
const ACCEPT: &str = "text/html, text/markdown, text/plain;q=0.9, */*;q=0.8";

/// Arguments of `webfetch`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WebfetchArgs {
    /// The absolute `http://` or `https://` URL to GET. Redirects are not
    /// followed: a redirect comes back as an error naming its target.
    url: String,
    /// How an HTML page comes back: `markdown` (default) or plain `text`.
    /// Other text (plain text, JSON, XML, ...) comes back as it is.
    #[serde(default)]
    format: Format,
    /// The most bytes of text to return (default 1048576, at least 256);
    /// longer text is cut, with a last line saying so. The host's limit on
    /// a tool's output (1048576 bytes unless the user set another) still
    /// applies.
    #[schemars(range(min = 256))]
    max_bytes: Option<u32>,
}

fn webfetch(args: WebfetchArgs, _ctx: &Context) -> Result<Output, ToolError> {
    let max_bytes = args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes < MIN_MAX_BYTES {
        return Err(ToolError::invalid(format!("max_bytes must be at least {MIN_MAX_BYTES}")));
    }
    let request = http::Request {
        method: "GET".to_owned(),
        url: args.url.clone(),
        headers: vec![
            ("user-agent".to_owned(), USER_AGENT.to_owned()),
            ("accept".to_owned(), ACCEPT.to_owned()),
        ],
        body: None,
        timeout_ms: Some(TIMEOUT_MS),
    };
    let response = http::send(&request).map_err(|err| http_error(&args.url, err))?;
    check_status(&args.url, response.status, &response.headers)?;
    let kind = content::classify(header(&response.headers, "content-type"), &response.body);
    let text = content::render(&kind, &response.body, args.format)
        .map_err(|err| ToolError::failed(format!("GET {}: {err}", args.url)))?;
    if text.trim().is_empty() {
        return Ok(Output::text(format!("(GET {} returned no text)", args.url)));
    }
    Ok(Output::text(content::cap(text, max_bytes as usize)))
}

/// The value of the first header named `name` (any case).
fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
}

/// Refuses a response whose status is not 2xx. A redirect names its target,
/// since the host does not follow it and the model may want to.
fn check_status(url: &str, status: u16, headers: &[(String, String)]) -> Result<(), ToolError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let mut message = format!("GET {url} returned status {status}");
    if let Some(location) = header(headers, "location").filter(|_| (300..400).contains(&status)) {
        message.push_str(&format!(
            ", a redirect to {location} (redirects are not followed; fetch that URL if it is \
             the one meant)"
        ));
    }
    Err(ToolError::Failed(message))
}

/// The tool error for a request that produced no response.
fn http_error(url: &str, err: HttpError) -> ToolError {
    match err {
        HttpError::Denied(message) => ToolError::Denied(message),
        HttpError::InvalidRequest(message) => ToolError::InvalidArguments(message),
        HttpError::Timeout => {
            ToolError::failed(format!("GET {url} timed out after {TIMEOUT_MS} ms"))
        }
        HttpError::Connect(detail) => {
            ToolError::failed(format!("GET {url}: cannot connect: {detail}"))
        }
        HttpError::TooLarge(cap) => ToolError::failed(format!(
            "GET {url}: the response is larger than the host's cap of {cap} bytes"
        )),
        HttpError::Io(detail) => ToolError::failed(format!("GET {url}: {detail}")),
    }
}

fn tools() -> Toolbox {
    Toolbox::new().tool(
        "webfetch",
        "Fetches a URL with GET and returns its content as text: HTML pages as Markdown (or plain \
         text), other text such as JSON or plain text as it is. Only URLs the user granted can \
         be fetched; redirects are not followed. Binary content is refused.",
        webfetch,
    )
}

reson_sdk::export_tools!(tools);

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn headers_are_found_in_any_case() {
        let list = headers(&[("Content-Type", "text/html"), ("content-type", "text/plain")]);
        assert_eq!(header(&list, "content-type"), Some("text/html"));
        assert_eq!(header(&list, "location"), None);
    }

    #[test]
    fn only_2xx_statuses_succeed() {
        assert!(check_status("https://a.dev/", 200, &[]).is_ok());
        assert!(check_status("https://a.dev/", 204, &[]).is_ok());
        assert_eq!(
            check_status("https://a.dev/x", 404, &headers(&[("location", "/y")])),
            Err(ToolError::Failed("GET https://a.dev/x returned status 404".into()))
        );
        assert_eq!(
            check_status("http://a.dev/", 301, &headers(&[("Location", "https://a.dev/")])),
            Err(ToolError::Failed(
                "GET http://a.dev/ returned status 301, a redirect to https://a.dev/ (redirects \
                 are not followed; fetch that URL if it is the one meant)"
                    .into()
            ))
        );
    }

    #[test]
    fn host_errors_become_tool_errors() {
        let url = "https://a.dev/";
        let cases = [
            (
                HttpError::Denied("http denied: x".into()),
                ToolError::Denied("http denied: x".into()),
            ),
            (
                HttpError::InvalidRequest("bad URL".into()),
                ToolError::InvalidArguments("bad URL".into()),
            ),
            (
                HttpError::Timeout,
                ToolError::Failed("GET https://a.dev/ timed out after 30000 ms".into()),
            ),
            (
                HttpError::Connect("dns error".into()),
                ToolError::Failed("GET https://a.dev/: cannot connect: dns error".into()),
            ),
            (
                HttpError::TooLarge(33_554_432),
                ToolError::Failed(
                    "GET https://a.dev/: the response is larger than the host's cap of 33554432 \
                     bytes"
                        .into(),
                ),
            ),
            (HttpError::Io("reset".into()), ToolError::Failed("GET https://a.dev/: reset".into())),
        ];
        for (err, expected) in cases {
            assert_eq!(http_error(url, err), expected);
        }
    }
}
