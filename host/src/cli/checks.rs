//! What is wrong with the config, found before anything runs, each said
//! with the file, the line and the fix: a grant of a directory that does
//! not exist (which would leave its plugin unloaded, and the model told of
//! an unknown tool), and a `[plugins.NAME]` section no plugin answers to.

use reson::config::Config;
use std::path::Path;

/// The config file as read, for finding the line a setting is on.
pub(crate) struct Source<'a> {
    /// The file as named on the command line (or `reson.toml`).
    pub(crate) path: &'a Path,
    pub(crate) text: String,
}

impl<'a> Source<'a> {
    pub(crate) fn read(path: &'a Path) -> Option<Self> {
        Some(Self { path, text: std::fs::read_to_string(path).ok()? })
    }

    /// `file:line` of the first line after `[plugins.NAME]` holding
    /// `needle` (the section header itself when `needle` is `None`, or
    /// when no later line holds it); just `file` when the section is
    /// written another way (a dotted key, an inline table).
    fn at(&self, plugin: &str, needle: Option<&str>) -> String {
        let header = format!("[plugins.{plugin}]");
        let lines: Vec<&str> = self.text.lines().collect();
        let file = self.path.display();
        let Some(start) = lines.iter().position(|l| l.trim() == header) else {
            return file.to_string();
        };
        let end = lines[start + 1..]
            .iter()
            .position(|l| l.trim_start().starts_with('['))
            .map_or(lines.len(), |n| start + 1 + n);
        let line =
            needle.and_then(|n| (start..end).find(|&i| lines[i].contains(n))).unwrap_or(start);
        format!("{file}:{}", line + 1)
    }
}

/// Grants in `config` of directories that do not exist: one error each.
pub(crate) fn missing_dirs(config: &Config, source: Option<&Source>) -> Vec<String> {
    let mut errors = Vec::new();
    for (plugin, grant) in config.plugins.plugins.iter().filter(|(_, g)| g.enabled) {
        for dir in &grant.dirs {
            if config.plugins.resolve(&dir.path).exists() {
                continue;
            }
            let shown = dir.path.display().to_string();
            let at = source.map_or_else(
                || "reson.toml".to_owned(),
                |s| s.at(plugin, Some(&format!("\"{shown}\""))),
            );
            errors.push(format!(
                "{at}: [plugins.{plugin}] dirs: {shown} does not exist (create it, or remove the \
                 grant)"
            ));
        }
    }
    errors
}

/// `[plugins.NAME]` sections for which the plugins directory holds no
/// `NAME.wasm`: one warning each, with the nearest plugin's name.
pub(crate) fn unknown_plugins(
    config: &Config,
    plugins_dir: &Path,
    source: Option<&Source>,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(plugins_dir) else { return Vec::new() };
    let present: Vec<String> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            (path.extension()? == "wasm").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    config
        .plugins
        .plugins
        .keys()
        .filter(|name| !present.contains(name))
        .map(|name| {
            let at = source.map_or_else(|| "reson.toml".to_owned(), |s| s.at(name, None));
            let nearest = present
                .iter()
                .map(|p| (distance(name, p), p))
                .filter(|(d, _)| *d <= 2.max(name.len() / 3))
                .min();
            let hint = nearest.map(|(_, p)| format!(" (did you mean `{p}`?)")).unwrap_or_default();
            format!("{at}: [plugins.{name}]: no plugin `{name}` in {}{hint}", plugins_dir.display())
        })
        .collect()
}

/// Edits (insert, delete, replace) from `a` to `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_found_on_its_line_within_its_section() {
        let path = Path::new("reson.toml");
        let text = "x = 1\n[plugins.shell]\ndirs = [{ path = \"ws\" }]\n\n[plugins.fs]\n\
                    tools = [\"read\"]\ndirs = [{ path = \"ws\" }]\n"
            .to_owned();
        let source = Source { path, text };
        assert_eq!(source.at("fs", Some("\"ws\"")), "reson.toml:7");
        assert_eq!(source.at("fs", None), "reson.toml:5");
        assert_eq!(source.at("shell", Some("\"nowhere\"")), "reson.toml:2");
        assert_eq!(source.at("web", None), "reson.toml");
        assert_eq!(distance("fss", "fs"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
