//! Allowlist patterns for URLs and command lines.

use globset::{Glob, GlobMatcher};
use reqwest::Url;

/// A pattern that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid pattern `{pattern}`: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// Why it is invalid.
    pub reason: String,
}

/// `[scheme://]host[:port][/path-prefix]`; `*.example.com` matches any
/// subdomain of example.com (not example.com itself), and `*` any host —
/// meant for a plugin's requests, where the user's grant still decides. A
/// `*` ending the path is the prefix before it (`/docs/*` is `/docs/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPattern {
    scheme: Option<String>,
    host: String,
    port: Option<u16>,
    path_prefix: String,
}

impl UrlPattern {
    /// Parses a pattern.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let err =
            |reason: &str| PatternError { pattern: pattern.to_owned(), reason: reason.to_owned() };
        let (scheme, rest) = match pattern.split_once("://") {
            Some((scheme, rest)) => (Some(scheme.to_ascii_lowercase()), rest),
            None => (None, pattern),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].strip_suffix('*').unwrap_or(&rest[i..])),
            None => (rest, "/"),
        };
        // An IPv6 address keeps its colons inside brackets.
        let port_sep = match authority.rfind(']') {
            Some(end) => authority[end..].find(':').map(|i| end + i),
            None => authority.rfind(':'),
        };
        let (host, port) = match port_sep {
            Some(i) => (
                authority[..i].trim_start_matches('[').trim_end_matches(']'),
                Some(authority[i + 1..].parse::<u16>().map_err(|_| err("port is not a number"))?),
            ),
            None => (authority.trim_start_matches('[').trim_end_matches(']'), None),
        };
        if host.is_empty() || host.contains('*') && host != "*" && !host.starts_with("*.") {
            return Err(err("host must be a name, an address or `*.domain`"));
        }
        Ok(Self { scheme, host: host.to_ascii_lowercase(), port, path_prefix: path.to_owned() })
    }

    /// Whether the pattern names one host rather than `*` or `*.domain`.
    pub fn names_one_host(&self) -> bool {
        !self.host.contains('*')
    }

    /// Whether `url` falls under this pattern.
    pub fn matches(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let scheme_ok = self.scheme.as_deref().is_none_or(|s| s == url.scheme());
        let port_ok = self.port.is_none_or(|p| Some(p) == url.port_or_known_default());
        self.host_matches(host) && scheme_ok && port_ok && path_under(url.path(), &self.path_prefix)
    }

    /// Whether some URL under this pattern is on `host:port`: what a proxy
    /// that sees only a `CONNECT host:port` can check. A pattern without a
    /// port takes any, as [`UrlPattern::matches`] does.
    pub fn matches_authority(&self, host: &str, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.host_matches(host)
    }

    fn host_matches(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.host == "*"
            || match self.host.strip_prefix("*.") {
                Some(domain) => {
                    host.strip_suffix(domain).is_some_and(|sub| sub.ends_with('.') && sub.len() > 1)
                }
                None => host.eq_ignore_ascii_case(&self.host),
            }
    }
}

/// `/v1` covers `/v1` and `/v1/x`, not `/v10`.
fn path_under(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| prefix.ends_with('/') || rest.starts_with('/'))
}

/// A glob over a command line (`program arg arg...`), e.g. `git *`.
#[derive(Debug, Clone)]
pub struct CommandPattern {
    source: String,
    matcher: GlobMatcher,
}

impl CommandPattern {
    /// Parses a glob; `*` matches across spaces and slashes.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let glob = Glob::new(pattern).map_err(|e| PatternError {
            pattern: pattern.to_owned(),
            reason: e.kind().to_string(),
        })?;
        Ok(Self { source: pattern.to_owned(), matcher: glob.compile_matcher() })
    }

    /// Whether the command line matches.
    pub fn matches(&self, command_line: &str) -> bool {
        self.matcher.is_match(command_line)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_ok(pattern: &str, url: &str) -> bool {
        UrlPattern::parse(pattern).unwrap().matches(&Url::parse(url).unwrap())
    }

    #[test]
    fn url_patterns() {
        let cases = [
            ("api.example.com", "https://api.example.com/v1/chat", true),
            ("api.example.com", "http://API.example.com", true),
            ("api.example.com", "https://evil.com/api.example.com", false),
            ("api.example.com", "https://api.example.com.evil.com/", false),
            ("*.example.com", "https://a.b.example.com/", true),
            ("*.example.com", "https://example.com/", false),
            ("*.example.com", "https://badexample.com/", false),
            ("127.0.0.1:8080", "http://127.0.0.1:8080/x", true),
            ("127.0.0.1:8080", "http://127.0.0.1:9090/x", false),
            ("example.com/v1", "https://example.com/v1/models", true),
            ("example.com/v1", "https://example.com/v10", false),
            ("example.com/v1", "https://example.com/", false),
            ("https://example.com", "http://example.com/", false),
            ("[::1]", "http://[::1]:3000/", true),
            ("*", "https://anything.example/x", true),
            ("*/v1", "https://anything.example/v2", false),
        ];
        for (pattern, url, expected) in cases {
            assert_eq!(url_ok(pattern, url), expected, "{pattern} vs {url}");
        }
    }

    #[test]
    fn bad_url_patterns() {
        assert!(UrlPattern::parse("").is_err());
        assert!(UrlPattern::parse("ex*ample.com").is_err());
        assert!(UrlPattern::parse("example.com:http").is_err());
    }

    #[test]
    fn command_patterns() {
        let git = CommandPattern::parse("git *").unwrap();
        assert!(git.matches("git status"));
        assert!(git.matches("git log --format=%H src/main.rs"));
        assert!(!git.matches("gitx status"));
        assert!(!git.matches("rm -rf /"));
        let exact = CommandPattern::parse("ls").unwrap();
        assert!(exact.matches("ls") && !exact.matches("ls /"));
        assert!(CommandPattern::parse("a[").is_err());
    }
}
