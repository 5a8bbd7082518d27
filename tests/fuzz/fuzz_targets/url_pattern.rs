//! URL and host patterns (grants, secrets' URLs, the browser's and the
//! jail proxy's checks). Beyond "never panics": whatever a pattern lets a
//! URL through, the proxy's `CONNECT host:port` check lets through too (the
//! two checks never disagree in the URL's favour), and `*.domain` never
//! covers `domain` itself.
#![no_main]

use arbitrary::Arbitrary;
use reqwest::Url;
use reson_sandbox::policy::UrlPattern;

#[derive(Arbitrary, Debug)]
struct Input {
    pattern: String,
    scheme: u8,
    host: String,
    port: Option<u16>,
    path: String,
}

const SCHEMES: &[&str] = &["http", "https", "ws", "wss", "file", "ftp", "data"];

libfuzzer_sys::fuzz_target!(|input: Input| {
    let Ok(pattern) = UrlPattern::parse(&input.pattern) else { return };
    let scheme = SCHEMES[usize::from(input.scheme) % SCHEMES.len()];
    let port = input.port.map(|p| format!(":{p}")).unwrap_or_default();
    let Ok(url) = Url::parse(&format!("{scheme}://{}{port}/{}", input.host, input.path)) else {
        return;
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        assert!(!pattern.matches(&url) || url.port_or_known_default().is_none());
        return;
    };
    if pattern.matches(&url) {
        assert!(
            pattern.matches_authority(host, port),
            "{input:?}: {url} passes, its authority not"
        );
    }
    if let Ok(subdomains) = UrlPattern::parse(&format!("*.{host}")) {
        assert!(!subdomains.matches(&url), "*.{host} covers {url}");
        assert!(!subdomains.matches_authority(host, port), "*.{host} covers {host}:{port}");
    }
});
