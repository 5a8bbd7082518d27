//! The manifest beside each plugin: `<name>.toml`, naming the plugin and
//! the capabilities it requests.

use crate::config::{Access, Limits};
use serde::{Deserialize, Serialize};

/// A parsed plugin manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Must equal the file stem of the `.wasm` beside it.
    pub name: String,
    /// The plugin's own version (not the contract version).
    pub version: String,
    /// One line about the plugin.
    #[serde(default)]
    pub description: String,
    /// What the plugin asks for; the user's grants decide what it gets.
    #[serde(default)]
    pub requests: Requests,
    /// The limits the plugin says it needs.
    #[serde(default)]
    pub limits: Limits,
    /// How its instances live.
    #[serde(default)]
    pub instance: InstancePolicy,
}

/// `[instance]` in a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstancePolicy {
    /// Keep an instance between calls instead of a fresh one per call:
    /// faster for guests that are slow to start (Python, JavaScript), but
    /// whatever a call leaves in memory is there for the next call, of any
    /// trace. An instance that trapped or hit a limit is never kept.
    #[serde(default)]
    pub keep_warm: bool,
    /// The name of a boolean argument of the plugin's tools: a call that
    /// sets it `true` runs in an instance kept for its trace alone (made
    /// by its first such call, used by one call at a time, ended with the
    /// run), so what one call leaves is there for the next call of that
    /// trace and of no other. Other calls get a fresh instance as usual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_arg: Option<String>,
}

/// Capabilities a plugin requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requests {
    /// The most access it wants to the directories the user grants.
    #[serde(default)]
    pub dirs: Access,
    /// URL patterns it wants to reach.
    #[serde(default)]
    pub http: Vec<String>,
    /// URL patterns it wants the host's browser to load.
    #[serde(default)]
    pub browser: Vec<String>,
    /// Command-line globs it wants to run.
    #[serde(default)]
    pub process: Vec<String>,
    /// Secret names it wants to reference.
    #[serde(default)]
    pub secrets: Vec<String>,
}

impl Requests {
    /// What `self` asks for beyond `earlier`, one phrase per item; empty
    /// when `self` asks for nothing new.
    pub fn growth_over(&self, earlier: &Requests) -> Vec<String> {
        let mut grown = Vec::new();
        if self.dirs > earlier.dirs {
            grown.push(format!("dirs `{}` (was `{}`)", self.dirs, earlier.dirs));
        }
        let lists = [
            ("http", &self.http, &earlier.http),
            ("browser", &self.browser, &earlier.browser),
            ("process", &self.process, &earlier.process),
            ("secret", &self.secrets, &earlier.secrets),
        ];
        for (kind, now, before) in lists {
            for item in now.iter().filter(|item| !before.contains(item)) {
                grown.push(format!("{kind} `{item}`"));
            }
        }
        grown
    }
}

impl Manifest {
    /// Parses manifest text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Self = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if manifest.name.is_empty() {
            return Err("`name` is empty".into());
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_lists_only_new_requests() {
        let before =
            Requests { dirs: Access::Read, http: vec!["a.example".into()], ..Requests::default() };
        let after = Requests {
            dirs: Access::ReadWrite,
            http: vec!["a.example".into(), "b.example".into()],
            secrets: vec!["KEY".into()],
            ..Requests::default()
        };
        assert_eq!(
            after.growth_over(&before),
            vec!["dirs `read-write` (was `read`)", "http `b.example`", "secret `KEY`"]
        );
        assert!(before.growth_over(&after).is_empty());
    }

    #[test]
    fn manifest_errors_name_the_field() {
        let err = Manifest::parse("name = \"x\"\n").unwrap_err();
        assert!(err.contains("version"), "{err}");
        let err = Manifest::parse("name = \"x\"\nversion = \"1\"\n[requests]\ndirs = \"all\"\n")
            .unwrap_err();
        assert!(err.contains("all"), "{err}");
    }
}
