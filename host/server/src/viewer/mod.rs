//! The trace viewer page: static files compiled into the binary and served
//! at `/` and `/assets/*`. They hold no data and need no token; the page
//! fetches everything from `/api` itself.

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// A script of the page, an ES module under `/assets/`.
macro_rules! script {
    ($name:literal) => {
        Asset {
            path: concat!("/assets/", $name),
            content_type: "text/javascript; charset=utf-8",
            body: include_str!($name),
        }
    };
}

static ASSETS: [Asset; 10] = [
    Asset { path: "/", content_type: "text/html; charset=utf-8", body: include_str!("index.html") },
    script!("app.js"),
    script!("dom.js"),
    script!("timeline.js"),
    script!("costs.js"),
    script!("graph.js"),
    script!("files.js"),
    script!("decisions.js"),
    Asset {
        path: "/assets/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("style.css"),
    },
    Asset {
        path: "/assets/favicon.svg",
        content_type: "image/svg+xml",
        body: include_str!("favicon.svg"),
    },
];

/// The page's routes, one per file, for any router state. Paths under
/// `/assets/` that name no file are left to the caller's fallback, so they
/// get the API's JSON 404.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS.iter().fold(Router::new(), |router, asset| {
        router
            .route(asset.path, get(move |headers: HeaderMap| async move { serve(asset, &headers) }))
    })
}

fn serve(asset: &Asset, headers: &HeaderMap) -> Response {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let csp = HeaderValue::from_str(&content_security_policy(host))
        .expect("the policy is built from checked ASCII");
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type)),
            (header::CONTENT_SECURITY_POLICY, csp),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        asset.body,
    )
        .into_response()
}

/// Everything from this origin only; the WebSocket to the same host is
/// named as well, since browsers before CSP 3 do not count `ws:` as
/// `'self'`. A `Host` that is not a plain host[:port] is left out rather
/// than written into the header, so a crafted one cannot widen the policy.
fn content_security_policy(host: Option<&str>) -> String {
    let sockets = host
        .filter(|h| {
            !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .map(|h| format!(" ws://{h} wss://{h}"))
        .unwrap_or_default();
    format!(
        "default-src 'self'; connect-src 'self'{sockets}; img-src 'self' blob:; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

#[cfg(test)]
mod tests {
    use super::content_security_policy;

    #[test]
    fn the_socket_of_the_same_host_is_allowed_and_nothing_else() {
        let csp = content_security_policy(Some("127.0.0.1:8000"));
        assert!(
            csp.contains("connect-src 'self' ws://127.0.0.1:8000 wss://127.0.0.1:8000;"),
            "{csp}"
        );
        assert!(csp.starts_with("default-src 'self';"), "{csp}");
        let ipv6 = content_security_policy(Some("[::1]:80"));
        assert!(ipv6.contains("ws://[::1]:80 "), "{ipv6}");
    }

    #[test]
    fn a_crafted_host_cannot_add_sources() {
        for host in ["evil.example; script-src *", "a b", "x'y", ""] {
            let csp = content_security_policy(Some(host));
            assert!(csp.contains("connect-src 'self';"), "{host:?}: {csp}");
            assert!(!csp.contains("evil"), "{csp}");
        }
        assert!(content_security_policy(None).contains("connect-src 'self';"));
    }
}
