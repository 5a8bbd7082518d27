//! Secret values, filled in by the host into outbound requests so that a
//! plugin never holds a key, each only into requests to the URLs it is
//! bound to. Every value is registered with [`reson_text::redact`] as soon as it
//! is read, so it is scrubbed from everything coming back to a guest and
//! from everything the host writes.

use crate::config::PluginsConfig;
use crate::policy::{Grants, UrlPattern};
use reqwest::Url;
use reson_text::redact::{self, WeakSecret};
use std::collections::BTreeMap;

/// How a secret reference opens: `{{secret:NAME}}`.
pub(crate) const MARK_OPEN: &str = "{{secret:";
const MARK_CLOSE: &str = "}}";

/// What the config says about one secret.
#[derive(Debug, Default)]
struct Entry {
    value: Option<String>,
    /// `None`: unbound, see [`Secrets::bound_to`]. A pattern that does not
    /// parse (the config checks them when it loads) binds to nothing.
    urls: Option<Vec<UrlPattern>>,
}

/// Where secret values come from (the environment first, then the config)
/// and where each may be sent.
#[derive(Debug)]
pub(crate) struct Secrets {
    entries: BTreeMap<String, Entry>,
}

/// Why a `{{secret:NAME}}` reference could not be filled.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SecretError {
    #[error("secret `{0}` is not granted")]
    NotGranted(String),
    #[error("secret `{0}` is not set")]
    Unset(String),
    #[error("secret `{name}` is refused because {reason}; use a longer, random key")]
    Weak { name: String, reason: WeakSecret },
    #[error(
        "secret `{name}` is not bound to {url}: bind it with `[secrets.{name}] urls = [...]` \
         (a secret without `urls` goes only to hosts the plugin's `http` grant names exactly)"
    )]
    Unbound { name: String, url: String },
    #[error("a secret may only be placed in the path or query of a URL, or in a header value")]
    Placement,
}

impl Secrets {
    /// The secrets of `config`, with every value the host can already see
    /// (configured, or in the environment under a name some plugin is
    /// granted) registered for redaction.
    pub(crate) fn from_config(config: &PluginsConfig) -> Self {
        let mut entries: BTreeMap<String, Entry> = config
            .secrets
            .iter()
            .map(|(name, secret)| {
                let urls = secret
                    .urls
                    .as_ref()
                    .map(|urls| urls.iter().filter_map(|p| UrlPattern::parse(p).ok()).collect());
                (name.clone(), Entry { value: secret.value.clone(), urls })
            })
            .collect();
        for grant in config.plugins.values() {
            for name in &grant.secrets {
                entries.entry(name.clone()).or_default();
            }
        }
        let secrets = Self { entries };
        for name in secrets.entries.keys() {
            if let Err(SecretError::Weak { reason, .. }) = secrets.value(name) {
                tracing::warn!(secret = %name, "secret `{name}` will be refused because {reason}");
            }
        }
        secrets
    }

    /// The value of `name`, registered for redaction; refused if too weak
    /// to be redacted without mangling unrelated text.
    pub(crate) fn value(&self, name: &str) -> Result<String, SecretError> {
        let value = std::env::var(name)
            .ok()
            .or_else(|| self.entries.get(name).and_then(|e| e.value.clone()))
            .ok_or_else(|| SecretError::Unset(name.to_owned()))?;
        redact::register(&value)
            .map_err(|reason| SecretError::Weak { name: name.to_owned(), reason })?;
        Ok(value)
    }

    /// Whether `name` may be sent in a request to `url`: to its bound
    /// patterns if the config gives any, else only to URLs the plugin's
    /// grant names by exact host, so a plugin granted `*` cannot send an
    /// unbound key anywhere it likes.
    pub(crate) fn bound_to(&self, name: &str, url: &Url, grants: &Grants) -> bool {
        match self.entries.get(name).and_then(|e| e.urls.as_ref()) {
            Some(patterns) => patterns.iter().any(|p| p.matches(url)),
            None => grants.grants_host_exactly(url),
        }
    }
}

/// `text` with every `{{secret:NAME}}` replaced by `with(NAME)`; an
/// unclosed reference is left as it is.
pub(crate) fn replace_refs(
    text: &str,
    mut with: impl FnMut(&str) -> Result<String, SecretError>,
) -> Result<String, SecretError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(MARK_OPEN) {
        let after = &rest[start + MARK_OPEN.len()..];
        let Some(end) = after.find(MARK_CLOSE) else { break };
        out.push_str(&rest[..start]);
        out.push_str(&with(&after[..end])?);
        rest = &after[end + MARK_CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(toml: &str) -> Secrets {
        Secrets::from_config(&toml::from_str::<PluginsConfig>(toml).unwrap())
    }

    #[test]
    fn replaces_references_in_order() {
        let mut seen = Vec::new();
        let out = replace_refs("a {{secret:ONE}} b {{secret:TWO}} {{secret:open", |name| {
            seen.push(name.to_owned());
            Ok(format!("<{name}>"))
        });
        assert_eq!(out.unwrap(), "a <ONE> b <TWO> {{secret:open");
        assert_eq!(seen, ["ONE", "TWO"]);
        let err = replace_refs("{{secret:X}}", |n| Err(SecretError::NotGranted(n.into())));
        assert_eq!(err, Err(SecretError::NotGranted("X".into())));
    }

    #[test]
    fn values_come_from_the_config_and_weak_ones_are_refused() {
        let s = secrets(
            "[secrets]\nRESON_UNIT_KEY = \"sk-unit-4f3e2d\"\nRESON_UNIT_IP = \"10.1.2.3\"\n",
        );
        assert_eq!(s.value("RESON_UNIT_KEY").unwrap(), "sk-unit-4f3e2d");
        assert_eq!(redact::redact("got sk-unit-4f3e2d"), "got [REDACTED]");
        let weak = s.value("RESON_UNIT_IP").unwrap_err();
        assert_eq!(
            weak,
            SecretError::Weak { name: "RESON_UNIT_IP".into(), reason: WeakSecret::Common }
        );
        assert!(weak.to_string().contains("`RESON_UNIT_IP`"), "{weak}");
        assert_eq!(
            s.value("RESON_UNIT_NOPE_X"),
            Err(SecretError::Unset("RESON_UNIT_NOPE_X".into()))
        );
    }
}
