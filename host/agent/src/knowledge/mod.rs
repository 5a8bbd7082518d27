//! Knowledge: notes that outlive a run (how a system is set up, a fix
//! that worked, a person's preferences), saved by the model with
//! `knowledge_save`, by people with `reson knowledge add` or the API, and
//! found again by full-text search with ranking.
//!
//! Every entry belongs to one [`Scope`]: a user's (`user:{uid}`), an agent
//! type's (`agent:{type}`) or everyone's (`global`). A run sees the global
//! entries, its agent type's, and its user's ([`Visible::run`]); it saves
//! into its user's scope, or the global one on a host without users
//! ([`Visible::home`]). Sub-agents inherit their caller's user, so they save
//! where the caller would.
//!
//! One trait, [`KnowledgeStore`], two stores: [`FileKnowledgeStore`], an
//! embedded `tantivy` index in a directory (the default, beside the
//! experiences), and [`PgKnowledgeStore`], a table with a generated
//! `tsvector` several hosts share. Both rank by relevance (BM25 on files,
//! `ts_rank_cd` in PostgreSQL) with titles weighing most, then tags, then
//! content, and both treat a query as plain words: quotes, colons or
//! `AND` in it never make a search fail.

mod files;
mod postgres;

pub use files::FileKnowledgeStore;
pub use postgres::PgKnowledgeStore;

use crate::scope::{Scope, ScopeError, Visible};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest content, in bytes: knowledge is notes, not documents; a longer
/// text is refused (with this limit in the message), never cut silently.
pub const MAX_CONTENT_BYTES: usize = 32 * 1024;
/// Most tags on one entry.
pub const MAX_TAGS: usize = 20;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Most hits one search returns.
pub const MAX_LIMIT: usize = 100;
/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 240;

/// Why knowledge could not be saved, found or removed.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    /// The entry cannot be stored as given (no title, a bad scope, ...);
    /// nothing was written.
    #[error("invalid knowledge entry: {0}")]
    Invalid(String),
    /// A field is longer than its limit; nothing was written.
    #[error("knowledge {field} is {len} bytes, more than the {limit} allowed: shorten it")]
    TooLarge {
        /// `title`, `content` or `tags`.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// No entry has this id (or none the caller may see).
    #[error("no knowledge entry {0}")]
    UnknownId(String),
    /// The index directory could not be read or written.
    #[error("knowledge index {path}: {message}")]
    Index {
        /// The directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The database failed (it went away, ...).
    #[error(transparent)]
    Database(#[from] reson_trace::database::DatabaseError),
}

impl From<ScopeError> for KnowledgeError {
    fn from(e: ScopeError) -> Self {
        KnowledgeError::Invalid(e.to_string())
    }
}

/// Where an entry came from, when a run saved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The trace of the run.
    pub trace_id: String,
    /// The id of the `knowledge_save` call, which names the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `kn_` and 16 hex digits, or an id a person chose.
    pub id: String,
    /// Whose it is.
    pub scope: Scope,
    /// What it is about, in a few words; weighs most in search.
    pub title: String,
    /// The note itself.
    pub content: String,
    /// Keywords; weigh more than content in search.
    #[serde(default)]
    pub tags: Vec<String>,
    /// RFC 3339 time it was first saved.
    pub created_at: String,
    /// RFC 3339 time it was last saved.
    pub updated_at: String,
    /// The run that saved it, if a run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

/// What to save: a new entry, or (with the `id` of a stored one) its new
/// version.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Draft {
    /// Replace this entry (or create it under this id); a fresh id when
    /// `None`.
    #[serde(default)]
    pub id: Option<String>,
    /// Whose it is.
    pub scope: Option<Scope>,
    /// What it is about.
    pub title: String,
    /// The note.
    pub content: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The run that saved it.
    #[serde(default)]
    pub source: Option<Source>,
}

impl Draft {
    /// A new entry in `scope`.
    pub fn new(scope: Scope, title: &str, content: &str, tags: &[&str]) -> Self {
        Self {
            id: None,
            scope: Some(scope),
            title: title.to_owned(),
            content: content.to_owned(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            source: None,
        }
    }

    /// The entry this draft makes, checked and trimmed, with secrets
    /// redacted, stamped `now` (`created_at` is the stored one's on an
    /// update: the stores keep it).
    pub fn into_entry(self, now: &str) -> Result<Entry, KnowledgeError> {
        if [&self.title, &self.content].into_iter().chain(&self.tags).any(|s| s.contains('\0')) {
            return Err(KnowledgeError::Invalid("a NUL character cannot be stored".into()));
        }
        let redact = |s: &str| reson_text::redact::redact(s.trim()).into_owned();
        let title = redact(&self.title);
        if title.is_empty() {
            return Err(KnowledgeError::Invalid("an entry needs a title".into()));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(KnowledgeError::TooLarge {
                field: "title",
                len: title.len(),
                limit: MAX_TITLE_CHARS,
            });
        }
        let content = redact(&self.content);
        if content.is_empty() {
            return Err(KnowledgeError::Invalid(format!("entry `{title}` has no content")));
        }
        if content.len() > MAX_CONTENT_BYTES {
            return Err(KnowledgeError::TooLarge {
                field: "content",
                len: content.len(),
                limit: MAX_CONTENT_BYTES,
            });
        }
        let mut tags: Vec<String> = Vec::new();
        for tag in self.tags.iter().map(|t| redact(t)).filter(|t| !t.is_empty()) {
            if tag.chars().count() > MAX_TAG_CHARS {
                return Err(KnowledgeError::TooLarge {
                    field: "tag",
                    len: tag.len(),
                    limit: MAX_TAG_CHARS,
                });
            }
            if !tags.iter().any(|t| t.eq_ignore_ascii_case(&tag)) {
                tags.push(tag);
            }
        }
        if tags.len() > MAX_TAGS {
            return Err(KnowledgeError::TooLarge {
                field: "tags",
                len: tags.len(),
                limit: MAX_TAGS,
            });
        }
        let id = match self.id {
            Some(id) => {
                let ok = !id.is_empty()
                    && id.len() <= 64
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !ok {
                    return Err(KnowledgeError::Invalid(format!(
                        "id `{id}`: use 1 to 64 letters, digits, `_` or `-`"
                    )));
                }
                id
            }
            None => new_id(),
        };
        Ok(Entry {
            id,
            scope: self.scope.unwrap_or(Scope::Global),
            title,
            content,
            tags,
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
            source: self.source,
        })
    }
}

/// The entries a batch of drafts makes, all stamped now; refused whole
/// when one draft is bad or an id is given twice in one scope.
fn entries(drafts: Vec<Draft>) -> Result<Vec<Entry>, KnowledgeError> {
    let now = now();
    let entries = drafts.into_iter().map(|d| d.into_entry(&now)).collect::<Result<Vec<_>, _>>()?;
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = entries.iter().find(|e| !seen.insert((&e.scope, e.id.as_str()))) {
        return Err(KnowledgeError::Invalid(format!(
            "id {} is given twice in scope {}",
            twice.id, twice.scope
        )));
    }
    Ok(entries)
}

/// Of the visible entries that share an id (one a scope), the one the id
/// names: the caller's own scope's first, then a user's, an agent
/// type's, the global one.
fn nearest(found: Vec<Entry>, visible: &Visible) -> Option<Entry> {
    let home = visible.home();
    let rank = |scope: &Scope| match scope {
        _ if *scope == home => 0,
        Scope::User(_) => 1,
        Scope::Agent(_) => 2,
        Scope::Global => 3,
    };
    found
        .into_iter()
        .filter(|entry| visible.sees(&entry.scope))
        .min_by_key(|entry| (rank(&entry.scope), entry.scope.to_string()))
}

/// A fresh entry id.
fn new_id() -> String {
    format!("kn_{:016x}", fastrand::u64(..))
}

/// The time now, RFC 3339 in UTC with microseconds (so that text order is
/// time order, and saves one after another differ).
fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The entry.
    pub entry: Entry,
    /// How well it matches: higher is better; comparable only within one
    /// search of one store.
    pub score: f32,
    /// The part of the content around the first word of the query found
    /// in it (the content's start when none is).
    pub snippet: String,
}

/// Durable, searchable storage of knowledge entries.
///
/// An id names an entry within its scope: ids live in each scope's own
/// namespace, so one user's choice of an id never meets another's (the
/// same id in another scope is another entry). Where several scopes a
/// caller sees hold the same id, the id names the nearest: the caller's
/// own, then an agent type's, then the global one.
#[async_trait]
pub trait KnowledgeStore: Send + Sync {
    /// Saves each draft, all or none, and returns the entries as stored. A
    /// draft with the id of a stored entry of its scope replaces it,
    /// keeping its `created_at`. A bad draft is refused before anything
    /// is written.
    async fn save_all(&self, drafts: Vec<Draft>) -> Result<Vec<Entry>, KnowledgeError>;

    /// Saves one draft; see [`save_all`](Self::save_all).
    async fn save(&self, draft: Draft) -> Result<Entry, KnowledgeError> {
        let mut saved = self.save_all(vec![draft]).await?;
        Ok(saved.pop().expect("one entry saved for one draft"))
    }

    /// The entry `id` names among the scopes `visible` covers; when there
    /// is none there, [`KnowledgeError::UnknownId`], so a caller learns
    /// nothing of other scopes.
    async fn get(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError>;

    /// Removes the entry `id` and returns it; as [`get`](Self::get) for an
    /// entry that is not there or not visible (nothing is removed then).
    async fn remove(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError>;

    /// Every visible entry, oldest first (entries saved in one batch by
    /// id).
    async fn list(&self, visible: &Visible) -> Result<Vec<Entry>, KnowledgeError>;

    /// The visible entries matching `query`, best first, at most `limit`
    /// (at most [`MAX_LIMIT`]). The query is words, whatever characters it
    /// holds; one with no searchable word finds nothing.
    async fn search(
        &self,
        query: &str,
        visible: &Visible,
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError>;

    /// Where the entries are, for messages.
    fn describe(&self) -> String;
}

/// The lowercase words of `text` (letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Up to [`SNIPPET_CHARS`] characters of `content` around the first word
/// of `query` found in it (a word's start counts: `deploy` finds
/// `deployment`), else its start; `…` marks a cut.
pub fn snippet(content: &str, query: &str) -> String {
    let chars: Vec<char> = content.chars().collect();
    let lower: Vec<char> = chars.iter().map(|c| c.to_lowercase().next().unwrap_or(*c)).collect();
    let found = words(query).iter().filter(|w| w.chars().count() >= 3).find_map(|w| {
        let w: Vec<char> = w.chars().collect();
        lower.windows(w.len()).enumerate().find_map(|(i, window)| {
            let starts_word = i == 0 || !lower[i - 1].is_alphanumeric();
            (starts_word && window == w.as_slice()).then_some(i)
        })
    });
    let start = found.map_or(0, |at| at.saturating_sub(SNIPPET_CHARS / 3));
    // Start at a word when cutting into the text.
    let start = if start == 0 {
        0
    } else {
        (start..found.unwrap_or(start)).find(|&i| chars[i - 1].is_whitespace()).unwrap_or(start)
    };
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let mut out: String = chars[start..end].iter().collect::<String>().replace('\n', " ");
    if start > 0 {
        out.insert(0, '…');
    }
    if end < chars.len() {
        out.push('…');
    }
    out
}

/// Knowledge as a run uses it: the store, and how many entries a new goal
/// gets.
#[derive(Clone)]
pub struct Knowledge {
    /// Where entries are kept.
    pub store: Arc<dyn KnowledgeStore>,
    /// Most entries attached to a new goal (0: none).
    pub attach: usize,
}

impl Knowledge {
    /// Knowledge in `store`, three entries to a new goal.
    pub fn new(store: Arc<dyn KnowledgeStore>) -> Self {
        Self { store, attach: 3 }
    }

    /// The best matches for a goal `description`, as the goal keeps them.
    /// A failed search attaches nothing: the goal is added all the same.
    pub async fn for_goal(
        &self,
        visible: &Visible,
        description: &str,
    ) -> Vec<reson_trace::GoalKnowledge> {
        if self.attach == 0 {
            return Vec::new();
        }
        match self.store.search(description, visible, self.attach).await {
            Ok(hits) => hits
                .into_iter()
                .map(|h| reson_trace::GoalKnowledge {
                    id: h.entry.id,
                    title: h.entry.title,
                    snippet: h.snippet,
                })
                .collect(),
            Err(e) => {
                tracing::warn!("knowledge for a new goal: {e}");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_are_checked_and_trimmed() {
        let entry = Draft::new(Scope::Global, "  Title ", " body\n", &["a", "A", " ", "b"])
            .into_entry("2026-01-01T00:00:00.000Z")
            .unwrap();
        assert_eq!((entry.title.as_str(), entry.content.as_str()), ("Title", "body"));
        assert_eq!(entry.tags, ["a", "b"]);
        assert!(entry.id.starts_with("kn_"));
        let err = Draft::new(Scope::Global, " ", "x", &[]).into_entry("t").unwrap_err();
        assert!(err.to_string().contains("needs a title"), "{err}");
        let huge = "word ".repeat(MAX_CONTENT_BYTES);
        let err = Draft::new(Scope::Global, "t", &huge, &[]).into_entry("t").unwrap_err();
        assert!(matches!(err, KnowledgeError::TooLarge { field: "content", .. }), "{err}");
        let bad_id = Draft { id: Some("a/b".into()), ..Draft::new(Scope::Global, "t", "c", &[]) };
        assert!(bad_id.into_entry("t").unwrap_err().to_string().contains("id `a/b`"));
    }

    #[test]
    fn a_snippet_shows_the_matching_part() {
        let content = format!(
            "{} The deployment uses blue-green switching. {}",
            "x ".repeat(200),
            "y ".repeat(200)
        );
        let s = snippet(&content, "how to DEPLOY");
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("deployment uses blue-green"), "{s}");
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
        assert_eq!(snippet("short text", "nothing"), "short text");
    }
}
