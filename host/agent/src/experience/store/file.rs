//! `experiences.md`: one block per experience, YAML front matter then the
//! rule. Read whole; written whole to a temporary file that replaces it
//! (so a reader sees the old file or the new one), under an exclusive lock
//! on `experiences.md.lock` held from the read to the rename, so two
//! writers never interleave and neither loses the other's blocks.

use super::super::{Experience, ExperienceError, Rating};
use super::ExperienceStore;
use crate::skills::front_matter;
use async_trait::async_trait;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

const HEADER: &str = "# Experiences\n\nLessons learnt from past runs, one block each: YAML front matter \
                      (id, trace_id, category, tags, metrics, created_at), then the rule. Edit \
                      freely; keep the `---` lines (write a `---` line in a rule as `\\---`).\n";

/// Experiences in a markdown file: the embedded default.
#[derive(Debug, Clone)]
pub struct FileExperienceStore {
    path: PathBuf,
}

impl FileExperienceStore {
    /// The store at `path`; the file need not exist yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The store `[experiences] path` names (relative to the config file).
    pub fn from_config(config: &impl AsRef<crate::config::AgentConfig>) -> Self {
        let config = config.as_ref();
        Self::new(config.resolve(&config.experiences.path))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads, changes and writes back the whole file under the lock; a
    /// failed change writes nothing.
    async fn update<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Vec<Experience>) -> Result<T, ExperienceError> + Send + 'static,
    ) -> Result<T, ExperienceError> {
        let path = self.path.clone();
        blocking(move || {
            let _lock = lock(&path)?;
            let (preamble, mut all) = read(&path)?;
            let out = change(&mut all)?;
            write(&path, &preamble, &all)?;
            Ok(out)
        })
        .await
    }
}

#[async_trait]
impl ExperienceStore for FileExperienceStore {
    async fn list(&self) -> Result<Vec<Experience>, ExperienceError> {
        let path = self.path.clone();
        blocking(move || Ok(read(&path)?.1)).await
    }

    async fn append(&self, new: Vec<Experience>) -> Result<(), ExperienceError> {
        super::check_new(&new)?;
        self.update(move |all| {
            if let Some(taken) = new.iter().find(|n| all.iter().any(|e| e.id == n.id)) {
                return Err(ExperienceError::DuplicateId(taken.id.clone()));
            }
            all.extend(new);
            Ok(())
        })
        .await
    }

    async fn rate(&self, id: &str, rating: Rating) -> Result<Experience, ExperienceError> {
        let id = id.to_owned();
        self.update(move |all| {
            let e = all
                .iter_mut()
                .find(|e| e.id == id)
                .ok_or_else(|| ExperienceError::UnknownId(id.clone()))?;
            e.rated(rating);
            Ok(e.clone())
        })
        .await
    }

    async fn record_use(&self, ids: &[String]) -> Result<(), ExperienceError> {
        let ids = ids.to_vec();
        self.update(move |all| {
            for e in all.iter_mut().filter(|e| ids.contains(&e.id)) {
                e.usage_count += 1;
            }
            Ok(())
        })
        .await
    }

    async fn remove(&self, id: &str) -> Result<Experience, ExperienceError> {
        let id = id.to_owned();
        self.update(move |all| {
            let at = all
                .iter()
                .position(|e| e.id == id)
                .ok_or_else(|| ExperienceError::UnknownId(id.clone()))?;
            Ok(all.remove(at))
        })
        .await
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ExperienceError> + Send + 'static,
) -> Result<T, ExperienceError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ExperienceError::Io {
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    })?
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExperienceError + '_ {
    move |source| ExperienceError::Io { path: path.to_path_buf(), source }
}

/// An exclusive lock beside the file, held until the returned file drops.
fn lock(path: &Path) -> Result<File, ExperienceError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    file.lock().map_err(io(&lock_path))?;
    Ok(file)
}

/// The file's text before the first block, and its experiences.
fn read(path: &Path) -> Result<(String, Vec<Experience>), ExperienceError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((String::new(), Vec::new()));
        }
        Err(e) => return Err(io(path)(e)),
    };
    parse(&text).map_err(|(line, message)| ExperienceError::Malformed {
        path: path.to_path_buf(),
        line,
        message,
    })
}

/// Parses the file's text; an error names the line.
pub(crate) fn parse(text: &str) -> Result<(String, Vec<Experience>), (usize, String)> {
    let (preamble, blocks) = front_matter::blocks(text)?;
    let mut all: Vec<Experience> = Vec::with_capacity(blocks.len());
    for block in blocks {
        let mut experience: Experience = serde_yaml_ng::from_str(&block.yaml).map_err(|e| {
            (block.line + e.location().map_or(0, |l| l.line()), format!("front matter: {e}"))
        })?;
        experience.rule = front_matter::unescape_body(&block.body);
        if experience.id.trim().is_empty() {
            return Err((block.line, "an experience needs an `id`".into()));
        }
        if experience.rule.is_empty() {
            return Err((block.line, format!("experience {} has no rule text", experience.id)));
        }
        if let Err(e) = experience.check() {
            return Err((block.line, e.to_string()));
        }
        if all.iter().any(|e| e.id == experience.id) {
            return Err((block.line, format!("experience id {} appears twice", experience.id)));
        }
        all.push(experience);
    }
    Ok((preamble.join("\n"), all))
}

/// The file's text for `all`, after `preamble` (the header when empty).
pub(crate) fn render(preamble: &str, all: &[Experience]) -> String {
    let mut text = if preamble.trim().is_empty() { HEADER.to_owned() } else { preamble.to_owned() };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    for e in all {
        let yaml = serde_yaml_ng::to_string(e).expect("an experience serialises");
        text.push_str(&format!(
            "\n---\n{}---\n{}\n",
            reson_text::redact::redact(&yaml),
            reson_text::redact::redact(&front_matter::escape_body(&e.rule))
        ));
    }
    text
}

/// Replaces the file with `all`: a temporary file in the same directory,
/// synced, then renamed over it.
fn write(path: &Path, preamble: &str, all: &[Experience]) -> Result<(), ExperienceError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    file.write_all(render(preamble, all).as_bytes()).map_err(io(path))?;
    file.as_file().sync_all().map_err(io(path))?;
    file.persist(path).map_err(|e| io(path)(e.error))?;
    Ok(())
}
