//! Secret values, substituted by the host into outbound requests so that a
//! plugin never holds a key, and redacted from anything the host writes.

use std::collections::BTreeMap;

const MARK_OPEN: &str = "{{secret:";
const MARK_CLOSE: &str = "}}";
const REDACTED: &str = "[REDACTED]";

/// Where secret values come from: the environment first, then the config.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    configured: BTreeMap<String, String>,
}

/// Why a `{{secret:NAME}}` reference could not be filled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SecretError {
    NotGranted(String),
    Unset(String),
}

impl Secrets {
    pub(crate) fn new(configured: BTreeMap<String, String>) -> Self {
        Self { configured }
    }

    fn value(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().or_else(|| self.configured.get(name).cloned())
    }

    /// Replaces every `{{secret:NAME}}` in `text`, if `allowed(NAME)`.
    pub(crate) fn substitute(
        &self,
        text: &str,
        allowed: impl Fn(&str) -> bool,
    ) -> Result<String, SecretError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(MARK_OPEN) {
            let after = &rest[start + MARK_OPEN.len()..];
            let Some(end) = after.find(MARK_CLOSE) else { break };
            let name = &after[..end];
            if !allowed(name) {
                return Err(SecretError::NotGranted(name.to_owned()));
            }
            let value = self.value(name).ok_or_else(|| SecretError::Unset(name.to_owned()))?;
            out.push_str(&rest[..start]);
            out.push_str(&value);
            rest = &after[end + MARK_CLOSE.len()..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `text` with every known secret value replaced by `[REDACTED]`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for name in self.configured.keys() {
            if let Some(value) = self.value(name).filter(|v| v.len() >= 4) {
                text = text.replace(&value, REDACTED);
            }
        }
        text
    }

    /// Redacts the values of `names` too (secrets from the environment that
    /// the config does not list).
    pub(crate) fn redact_named<'a>(
        &self,
        text: &str,
        names: impl Iterator<Item = &'a String>,
    ) -> String {
        let mut text = self.redact(text);
        for name in names {
            if let Some(value) = self.value(name).filter(|v| v.len() >= 4) {
                text = text.replace(&value, REDACTED);
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new(BTreeMap::from([("RESON_TEST_KEY".to_owned(), "sk-12345".to_owned())]))
    }

    #[test]
    fn substitutes_only_granted_names() {
        let s = secrets();
        let ok = s.substitute("Bearer {{secret:RESON_TEST_KEY}}", |n| n == "RESON_TEST_KEY");
        assert_eq!(ok.unwrap(), "Bearer sk-12345");
        let denied = s.substitute("{{secret:RESON_TEST_KEY}}", |_| false);
        assert_eq!(denied, Err(SecretError::NotGranted("RESON_TEST_KEY".into())));
        let unset = s.substitute("{{secret:RESON_NOPE_X}}", |_| true);
        assert_eq!(unset, Err(SecretError::Unset("RESON_NOPE_X".into())));
        assert_eq!(s.substitute("no refs", |_| false).unwrap(), "no refs");
    }

    #[test]
    fn redacts_values() {
        assert_eq!(secrets().redact("key sk-12345 leaked"), "key [REDACTED] leaked");
    }
}
