//! The backends: how each is asked, and how its answer reads.

use reson_sdk::ToolError;
use reson_sdk::host::http::Request;
use serde_json::Value;

/// The per-request timeout the host is asked for.
pub const TIMEOUT_MS: u32 = 20_000;
const USER_AGENT: &str = concat!("reson-search/", env!("CARGO_PKG_VERSION"));

/// Which search API answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SearXNG's JSON API (`/search?format=json`), a self-hosted instance.
    Searxng,
    /// Brave Search's web search API.
    Brave,
    /// Tavily's search API.
    Tavily,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Searxng => "searxng",
            Self::Brave => "brave",
            Self::Tavily => "tavily",
        }
    }
}

/// The settings of `[plugins.search.config]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub kind: Kind,
    /// The API root, without a trailing `/`.
    pub base_url: String,
    /// The secret holding the key; none for a backend that takes none.
    pub key_secret: Option<String>,
}

impl Backend {
    /// Reads the settings through `get`; a wrong one is an error naming it.
    pub fn from_config(get: impl Fn(&str) -> Option<String>) -> Result<Self, ToolError> {
        let kind = match get("backend").as_deref().map(str::trim) {
            None | Some("searxng") => Kind::Searxng,
            Some("brave") => Kind::Brave,
            Some("tavily") => Kind::Tavily,
            Some(other) => {
                return Err(ToolError::failed(format!(
                    "search: setting `backend` is `{other}`; it must be `searxng`, `brave` or \
                     `tavily` ([plugins.search.config] in reson.toml)"
                )));
            }
        };
        let default_url = match kind {
            Kind::Searxng => None,
            Kind::Brave => Some("https://api.search.brave.com"),
            Kind::Tavily => Some("https://api.tavily.com"),
        };
        let base_url = get("base_url")
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty())
            .or_else(|| default_url.map(str::to_owned))
            .ok_or_else(|| {
                ToolError::failed(
                    "search: the `searxng` backend needs `base_url`, the root of a SearXNG \
                     instance with the JSON format on ([plugins.search.config] in reson.toml)",
                )
            })?;
        let default_secret = match kind {
            Kind::Searxng => None,
            Kind::Brave => Some("BRAVE_API_KEY"),
            Kind::Tavily => Some("TAVILY_API_KEY"),
        };
        let key_secret = match get("api_key_secret") {
            Some(name) if name.trim().is_empty() => None,
            Some(name) => Some(name.trim().to_owned()),
            None => default_secret.map(str::to_owned),
        };
        Ok(Self { kind, base_url, key_secret })
    }

    /// The host fills in a secret named in a header or body from its
    /// value, after checking the URL is one the secret may go to.
    fn key(&self) -> Option<String> {
        self.key_secret.as_ref().map(|name| format!("{{{{secret:{name}}}}}"))
    }

    /// The request asking for `count` results for `query`.
    pub fn request(&self, query: &str, count: u32) -> Request {
        let mut headers = vec![
            ("user-agent".to_owned(), USER_AGENT.to_owned()),
            ("accept".to_owned(), "application/json".to_owned()),
        ];
        let encode = |pairs: &[(&str, &str)]| {
            form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
        };
        let count_text = count.to_string();
        let (method, url, body) = match self.kind {
            Kind::Searxng => {
                if let Some(key) = self.key() {
                    headers.push(("authorization".to_owned(), format!("Bearer {key}")));
                }
                let query = encode(&[("q", query), ("format", "json")]);
                ("GET", format!("{}/search?{query}", self.base_url), None)
            }
            Kind::Brave => {
                if let Some(key) = self.key() {
                    headers.push(("x-subscription-token".to_owned(), key));
                }
                let query = encode(&[("q", query), ("count", &count_text)]);
                ("GET", format!("{}/res/v1/web/search?{query}", self.base_url), None)
            }
            Kind::Tavily => {
                if let Some(key) = self.key() {
                    headers.push(("authorization".to_owned(), format!("Bearer {key}")));
                }
                headers.push(("content-type".to_owned(), "application/json".to_owned()));
                let body = serde_json::json!({ "query": query, "max_results": count });
                ("POST", format!("{}/search", self.base_url), Some(body.to_string().into_bytes()))
            }
        };
        Request { method: method.to_owned(), url, headers, body, timeout_ms: Some(TIMEOUT_MS) }
    }

    /// The results of a 2xx answer, best first, at most `count`.
    pub fn hits(&self, body: &[u8], count: u32) -> Result<Vec<Hit>, String> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| format!("the {} answer is not JSON: {e}", self.kind.name()))?;
        let (list, snippet_key) = match self.kind {
            Kind::Searxng => (value.get("results"), "content"),
            Kind::Brave => (value.get("web").and_then(|web| web.get("results")), "description"),
            Kind::Tavily => (value.get("results"), "content"),
        };
        let list = match list {
            Some(Value::Array(list)) => list.as_slice(),
            // Brave leaves `web` out when nothing matched.
            None if self.kind == Kind::Brave => &[],
            _ => {
                return Err(format!(
                    "the {} answer has no list of results where its API puts them",
                    self.kind.name()
                ));
            }
        };
        Ok(list
            .iter()
            .filter_map(|item| {
                let text = |key: &str| item.get(key).and_then(Value::as_str).map(plain);
                let url = text("url").filter(|u| !u.is_empty())?;
                Some(Hit {
                    title: text("title").unwrap_or_default(),
                    url,
                    snippet: text(snippet_key).unwrap_or_default(),
                })
            })
            .take(count as usize)
            .collect())
    }
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// The longest snippet kept, in characters.
const MAX_SNIPPET: usize = 600;

/// Text the API may mark up (Brave's `<strong>`, entities) as plain text on
/// one line, cut to [`MAX_SNIPPET`] characters.
fn plain(text: &str) -> String {
    let rendered = if text.contains(['<', '&']) {
        html2text::config::plain_no_decorate()
            .string_from_read(text.as_bytes(), 100_000)
            .unwrap_or_else(|_| text.to_owned())
    } else {
        text.to_owned()
    };
    let line = rendered.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX_SNIPPET) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(pairs: &[(&str, &str)]) -> Result<Backend, ToolError> {
        let pairs: Vec<(String, String)> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Backend::from_config(|key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    }

    #[test]
    fn settings_have_defaults_per_backend_and_wrong_ones_are_named() {
        let brave = backend(&[("backend", "brave")]).unwrap();
        assert_eq!(brave.base_url, "https://api.search.brave.com");
        assert_eq!(brave.key_secret.as_deref(), Some("BRAVE_API_KEY"));
        let tavily =
            backend(&[("backend", "tavily"), ("base_url", "http://127.0.0.1:9/")]).unwrap();
        assert_eq!(
            (tavily.base_url.as_str(), tavily.key_secret.as_deref()),
            ("http://127.0.0.1:9", Some("TAVILY_API_KEY"))
        );
        let searx = backend(&[("base_url", "https://searx.example")]).unwrap();
        assert_eq!((searx.kind, searx.key_secret), (Kind::Searxng, None));
        let err = backend(&[]).unwrap_err();
        assert!(format!("{:?}", err).contains("needs `base_url`"), "{err:?}");
        let err = backend(&[("backend", "google")]).unwrap_err();
        assert!(format!("{:?}", err).contains("`google`"), "{err:?}");
    }

    #[test]
    fn each_backend_is_asked_its_way_with_the_key_left_to_the_host() {
        let brave = backend(&[("backend", "brave")]).unwrap().request("rust & wasm", 3);
        assert_eq!(
            brave.url,
            "https://api.search.brave.com/res/v1/web/search?q=rust+%26+wasm&count=3"
        );
        assert!(
            brave
                .headers
                .contains(&("x-subscription-token".into(), "{{secret:BRAVE_API_KEY}}".into()))
        );
        let tavily = backend(&[("backend", "tavily")]).unwrap().request("q", 2);
        assert_eq!(
            (tavily.method.as_str(), tavily.url.as_str()),
            ("POST", "https://api.tavily.com/search")
        );
        let body: Value = serde_json::from_slice(tavily.body.as_deref().unwrap()).unwrap();
        assert_eq!(body, serde_json::json!({ "query": "q", "max_results": 2 }));
        let searx = backend(&[("base_url", "http://s.local")]).unwrap().request("a b", 5);
        assert_eq!(searx.url, "http://s.local/search?q=a+b&format=json");
        assert!(!searx.headers.iter().any(|(k, _)| k == "authorization"), "no key, none sent");
    }

    #[test]
    fn answers_read_in_each_apis_shape() {
        let brave = backend(&[("backend", "brave")]).unwrap();
        let body = br#"{"type":"search","web":{"type":"search","results":[
            {"title":"The <strong>Rust</strong> Book","url":"https://doc.rust-lang.org/book/","description":"Learn <strong>Rust</strong> &amp; more"},
            {"title":"no url"},
            {"title":"Second","url":"https://b.example/","description":""}]}}"#;
        let hits = brave.hits(body, 5).unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(
            hits[0],
            Hit {
                title: "The Rust Book".into(),
                url: "https://doc.rust-lang.org/book/".into(),
                snippet: "Learn Rust & more".into()
            }
        );
        assert!(
            brave.hits(br#"{"type":"search","query":{"original":"x"}}"#, 5).unwrap().is_empty()
        );
        let searx = backend(&[("base_url", "http://s")]).unwrap();
        let body = br#"{"query":"x","number_of_results":0,"results":[{"url":"https://a/","title":"A","content":"a","engine":"duckduckgo","score":1.0},{"url":"https://b/","title":"B","content":"b","engine":"bing","score":0.5}]}"#;
        let hits = searx.hits(body, 1).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.url.as_str()).collect::<Vec<_>>(),
            ["https://a/"],
            "at most count"
        );
        let tavily = backend(&[("backend", "tavily")]).unwrap();
        let body = br#"{"query":"x","answer":null,"images":[],"results":[{"title":"T","url":"https://t/","content":"tt","score":0.9,"raw_content":null}],"response_time":"1.2"}"#;
        assert_eq!(tavily.hits(body, 5).unwrap()[0].snippet, "tt");
        assert!(searx.hits(b"<html>", 5).unwrap_err().contains("not JSON"));
        assert!(searx.hits(br#"{"error":"x"}"#, 5).unwrap_err().contains("no list of results"));
        let long = format!(r#"{{"results":[{{"url":"u","content":"{}"}}]}}"#, "x".repeat(2000));
        assert_eq!(
            searx.hits(long.as_bytes(), 1).unwrap()[0].snippet.chars().count(),
            MAX_SNIPPET + 1
        );
    }
}
