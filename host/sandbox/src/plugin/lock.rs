//! The lock file: each plugin's SHA-256 and what it requested when the user
//! last accepted it. A plugin that changed and now asks for more is held
//! back until accepted again. It also records which plugin serves each tool
//! name, so that a plugin added later can never take a name over, and
//! where each plugin installed from a registry came from.

use crate::manifest::Requests;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct LockFile {
    #[serde(default)]
    plugins: BTreeMap<String, LockEntry>,
    /// Tool name → the plugin that serves it.
    #[serde(default)]
    tools: BTreeMap<String, String>,
    /// Plugin → the registry reference it was installed from. The installer
    /// writes these; the runtime only keeps them.
    #[serde(default)]
    sources: BTreeMap<String, PluginSource>,
    #[serde(skip)]
    path: PathBuf,
}

/// What a lock file holds, borrowed to be written.
#[derive(Serialize)]
struct Written<'a> {
    plugins: &'a BTreeMap<String, LockEntry>,
    tools: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    sources: &'a BTreeMap<String, PluginSource>,
}

/// Where an installed plugin came from: the registry reference it was
/// installed by and the digest of the image manifest pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSource {
    /// `oci://HOST[:PORT]/REPOSITORY:TAG` (or `@sha256:...`) as given.
    pub reference: String,
    /// The image manifest's digest, `sha256:...`.
    pub digest: String,
}

/// Records that `plugin` was installed from `source`, or, with `None`, from
/// somewhere else (a local file), forgetting its registry.
pub fn record_source(
    lock_file: &Path,
    plugin: &str,
    source: Option<PluginSource>,
) -> Result<(), String> {
    let mut lock = LockFile::open(lock_file)?;
    match source {
        Some(source) => lock.sources.insert(plugin.to_owned(), source),
        None => lock.sources.remove(plugin),
    };
    lock.write_with(&lock.sources).map_err(|e| format!("{}: {e}", lock_file.display()))
}

/// The registry sources the lock file at `lock_file` records, by plugin.
pub fn sources(lock_file: &Path) -> Result<BTreeMap<String, PluginSource>, String> {
    Ok(LockFile::open(lock_file)?.sources)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LockEntry {
    sha256: String,
    requests: Requests,
}

impl LockFile {
    /// Reads the lock file; a missing file is an empty lock.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        let mut lock: Self = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        lock.path = path.to_path_buf();
        Ok(lock)
    }

    /// Reads the file again: another process (`reson plugins accept`, an
    /// installer) may have written it since. A file that no longer reads
    /// leaves what this one knew in place, and says why.
    pub(crate) fn refresh(&mut self) {
        match Self::open(&self.path) {
            Ok(fresh) => *self = fresh,
            Err(e) => tracing::warn!("keeping the lock file as last read: {e}"),
        }
    }

    /// Records a plugin seen for the first time or changed without asking
    /// for more. Returns what it asks for beyond the locked version when
    /// that is not empty (and records nothing then). The requests are
    /// compared whatever the digest says: the manifest is a file of its own
    /// beside the component, so an unchanged component can ask for more.
    pub(crate) fn admit(
        &mut self,
        name: &str,
        sha256: &str,
        requests: &Requests,
    ) -> Result<(), Vec<String>> {
        let entry = LockEntry { sha256: sha256.to_owned(), requests: requests.clone() };
        match self.plugins.get(name) {
            Some(locked) if *locked == entry => return Ok(()),
            Some(locked) => {
                let grown = requests.growth_over(&locked.requests);
                if !grown.is_empty() {
                    return Err(grown);
                }
            }
            None => {}
        }
        self.plugins.insert(name.to_owned(), entry);
        self.save();
        Ok(())
    }

    /// Accepts the plugin as it is now, whatever it requests.
    pub(crate) fn accept(
        &mut self,
        name: &str,
        sha256: &str,
        requests: &Requests,
    ) -> std::io::Result<()> {
        self.plugins.insert(
            name.to_owned(),
            LockEntry { sha256: sha256.to_owned(), requests: requests.clone() },
        );
        self.write()
    }

    /// The plugin recorded as serving `tool` or a name differing from it
    /// only by ASCII case (one name to the runtime).
    pub(crate) fn owner(&self, tool: &str) -> Option<&str> {
        self.tools
            .get(tool)
            .or_else(|| {
                self.tools.iter().find(|(t, _)| t.eq_ignore_ascii_case(tool)).map(|(_, p)| p)
            })
            .map(String::as_str)
    }

    /// Records `plugin` as serving `tool`, replacing any other spelling of
    /// the name.
    fn set_owner(&mut self, tool: &str, plugin: &str) {
        self.tools.retain(|t, _| t == tool || !t.eq_ignore_ascii_case(tool));
        self.tools.insert(tool.to_owned(), plugin.to_owned());
    }

    /// Records the owners of tool names; writes the file only when
    /// something changed.
    pub(crate) fn record_owners<'a>(&mut self, owners: impl Iterator<Item = (&'a str, &'a str)>) {
        let mut changed = false;
        for (tool, plugin) in owners {
            if self.tools.get(tool).map(String::as_str) != Some(plugin) {
                self.set_owner(tool, plugin);
                changed = true;
            }
        }
        if changed {
            self.save();
        }
    }

    /// Hands every tool name in `tools` to `plugin`, whoever had it: the
    /// user's explicit choice through `reson plugins accept`.
    pub(crate) fn transfer(&mut self, plugin: &str, tools: &[String]) -> std::io::Result<()> {
        for tool in tools {
            self.set_owner(tool, plugin);
        }
        self.write()
    }

    fn save(&self) {
        if let Err(e) = self.write() {
            tracing::warn!(path = %self.path.display(), "cannot write lock file: {e}");
        }
    }

    /// Writes the file, keeping the sources it holds on disk: an installer
    /// may have recorded one since this runtime read it.
    fn write(&self) -> std::io::Result<()> {
        let on_disk = Self::open(&self.path).map(|lock| lock.sources);
        self.write_with(on_disk.as_ref().unwrap_or(&self.sources))
    }

    fn write_with(&self, sources: &BTreeMap<String, PluginSource>) -> std::io::Result<()> {
        let written = Written { plugins: &self.plugins, tools: &self.tools, sources };
        let text = toml::to_string_pretty(&written).map_err(std::io::Error::other)?;
        let dir =
            self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(b"# Written by reson: the SHA-256 and requests of each accepted plugin.\n")?;
        tmp.write_all(text.as_bytes())?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Access;

    #[test]
    fn holds_back_a_changed_plugin_that_asks_for_more() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reson.lock");
        let mut lock = LockFile::open(&path).unwrap();
        let small = Requests::default();
        let big = Requests { dirs: Access::Read, ..Requests::default() };
        lock.admit("p", "aaa", &small).unwrap();
        lock.admit("p", "bbb", &small).unwrap();
        assert_eq!(lock.admit("p", "ccc", &big).unwrap_err(), vec!["dirs `read` (was `none`)"]);
        let mut reopened = LockFile::open(&path).unwrap();
        assert!(reopened.admit("p", "ccc", &big).is_err(), "the refusal survives a restart");
        reopened.accept("p", "ccc", &big).unwrap();
        assert!(LockFile::open(&path).unwrap().admit("p", "ccc", &big).is_ok());
    }

    #[test]
    fn holds_back_an_unchanged_component_whose_manifest_asks_for_more() {
        let dir = tempfile::tempdir().unwrap();
        let mut lock = LockFile::open(&dir.path().join("reson.lock")).unwrap();
        let small = Requests::default();
        let big = Requests { dirs: Access::ReadWrite, ..Requests::default() };
        lock.admit("p", "aaa", &small).unwrap();
        assert_eq!(
            lock.admit("p", "aaa", &big).unwrap_err(),
            vec!["dirs `read-write` (was `none`)"]
        );
        assert!(lock.admit("p", "aaa", &small).is_ok(), "asking for what was accepted");
    }

    #[test]
    fn keeps_sources_an_installer_recorded_while_the_runtime_ran() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reson.lock");
        // A lock file written before sources existed still loads.
        std::fs::write(&path, "[plugins.p]\nsha256 = \"aaa\"\n[plugins.p.requests]\n").unwrap();
        let mut running = LockFile::open(&path).unwrap();
        let source = PluginSource {
            reference: "oci://127.0.0.1:5000/p:1".into(),
            digest: "sha256:01".into(),
        };
        record_source(&path, "p", Some(source.clone())).unwrap();
        running.admit("p", "bbb", &Requests::default()).unwrap();
        assert_eq!(sources(&path).unwrap(), BTreeMap::from([("p".to_owned(), source)]));
        record_source(&path, "p", None).unwrap();
        assert!(sources(&path).unwrap().is_empty());
        assert!(!std::fs::read_to_string(&path).unwrap().contains("sources"));
    }
}
