//! `oci://HOST[:PORT]/REPOSITORY(:TAG|@sha256:DIGEST)`.

use crate::RegistryError;
use std::net::IpAddr;

/// The scheme that marks a plugin reference.
const SCHEME: &str = "oci://";

/// A plugin's place in a registry. The registry host is always written
/// out: no registry is implied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    reference: oci_client::Reference,
}

impl OciRef {
    /// Whether `text` is meant as a registry reference (starts `oci://`).
    pub fn is_oci(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// `HOST[:PORT]`.
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The repository inside the registry.
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The `sha256:...` digest the reference pins, if it pins one.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The same repository pinned to `digest`.
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            reference: oci_client::Reference::with_digest(
                self.registry().to_owned(),
                self.repository().to_owned(),
                digest.to_owned(),
            ),
        }
    }

    /// Whether the registry is on this machine (`localhost` or
    /// `127.0.0.0/8`), where plain HTTP is allowed.
    pub fn is_loopback(&self) -> bool {
        let registry = self.registry();
        let host = registry.rsplit_once(':').map_or(registry, |(host, _)| host);
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    pub(crate) fn oci(&self) -> &oci_client::Reference {
        &self.reference
    }
}

impl std::str::FromStr for OciRef {
    type Err = RegistryError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| RegistryError::BadReference {
            reference: text.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| bad("it does not start with oci://"))?;
        let Some((host, path)) = rest.split_once('/') else {
            return Err(bad("it names no repository"));
        };
        if host.is_empty() || path.is_empty() {
            return Err(bad("it names no registry host or no repository"));
        }
        let reference: oci_client::Reference = rest.parse().map_err(|e| bad(&format!("{e}")))?;
        // The parser takes `name/repo` for a Docker Hub repository; here the
        // first part is always the registry.
        if reference.registry() != host {
            return Err(bad("the part before the first `/` must be the registry's HOST[:PORT]"));
        }
        if reference.tag().is_none() && reference.digest().is_none() {
            return Err(bad("it names no tag and no digest"));
        }
        Ok(Self { reference })
    }
}

impl std::fmt::Display for OciRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry(), self.repository())?;
        if let Some(tag) = self.reference.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.digest() {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags_and_digests_with_the_registry_written_out() {
        let tagged: OciRef = "oci://127.0.0.1:5000/tools/echo:1.0".parse().unwrap();
        assert_eq!((tagged.registry(), tagged.repository()), ("127.0.0.1:5000", "tools/echo"));
        assert_eq!(tagged.digest(), None);
        assert!(tagged.is_loopback());
        assert_eq!(tagged.to_string(), "oci://127.0.0.1:5000/tools/echo:1.0");

        let digest = format!("sha256:{}", "ab".repeat(32));
        let pinned: OciRef = format!("oci://registry.example.com/echo@{digest}").parse().unwrap();
        assert_eq!(pinned.digest(), Some(digest.as_str()));
        assert!(!pinned.is_loopback());
        assert_eq!(
            tagged.pinned(&digest).to_string(),
            format!("oci://127.0.0.1:5000/tools/echo@{digest}")
        );
        assert!("oci://localhost/echo:1".parse::<OciRef>().unwrap().is_loopback());
    }

    #[test]
    fn refuses_references_that_imply_a_registry_or_name_nothing() {
        for (text, says) in [
            ("127.0.0.1:5000/echo:1", "oci://"),
            ("oci://echo", "no repository"),
            ("oci://tools/echo:1", "registry's HOST[:PORT]"),
            ("oci://127.0.0.1:5000/Echo:1", "not a plugin reference"),
            ("oci://127.0.0.1:5000/echo@sha256:12", "not a plugin reference"),
        ] {
            let error = text.parse::<OciRef>().unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
