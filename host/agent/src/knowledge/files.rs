//! Knowledge in a `tantivy` index in a directory (default
//! `.reson/knowledge/`, beside the experiences file).
//!
//! Title, tags and content are indexed with one English analyzer (words,
//! lowercased, stop words dropped, stemmed); a query is run through the
//! same analyzer and becomes a disjunction of its words over the three
//! fields, title boosted over tags over content, ranked by BM25. No query
//! parser sees the user's text, so nothing in it is syntax. The scope is
//! an untokenized term that filters.
//!
//! Every save is one commit: what a save returned is on disk, and a process
//! killed at any moment leaves the index as of its last commit. Writers in
//! this process take turns on a mutex; writers in other processes (a CLI
//! next to `reson serve`) wait for tantivy's writer lock.

use super::{Draft, Entry, Hit, KnowledgeError, KnowledgeStore, snippet};
use crate::scope::{Scope, Visible};
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::directory::error::LockError;
use tantivy::query::{AllQuery, BooleanQuery, BoostQuery, Occur, Query, RegexQuery, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value as _,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TokenStream as _,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term};

/// The analyzer's name in the index.
const ANALYZER: &str = "reson_en";
/// How much a match in the title counts against one in the content.
const TITLE_BOOST: f32 = 3.0;
/// How much a match in a tag counts against one in the content.
const TAGS_BOOST: f32 = 2.0;
/// Most query words searched: a pasted page as a query still searches
/// quickly.
const MAX_QUERY_WORDS: usize = 32;
/// How long a save waits for another process's writer.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The writer's indexing memory: tantivy's minimum per thread is 15 MB.
const WRITER_MEMORY: usize = 50_000_000;

/// Knowledge in an embedded full-text index: the default store.
#[derive(Clone)]
pub struct FileKnowledgeStore {
    dir: PathBuf,
    opened: Arc<Mutex<Option<Arc<Opened>>>>,
}

impl std::fmt::Debug for FileKnowledgeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileKnowledgeStore").field("dir", &self.dir).finish()
    }
}

/// The open index.
struct Opened {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    /// Held while this process writes.
    writing: Mutex<()>,
}

#[derive(Clone, Copy)]
struct Fields {
    id: Field,
    scope: Field,
    title: Field,
    tags: Field,
    content: Field,
    /// The whole entry as JSON, stored only.
    entry: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        id: builder.add_text_field("id", STRING),
        scope: builder.add_text_field("scope", STRING),
        title: builder.add_text_field("title", text.clone()),
        tags: builder.add_text_field("tags", text.clone()),
        content: builder.add_text_field("content", text),
        entry: builder.add_text_field("entry", STORED),
    };
    (builder.build(), fields)
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::new(Language::English).expect("tantivy has English stop words"))
        .filter(Stemmer::new(Language::English))
        .build()
}

impl FileKnowledgeStore {
    /// The store in `dir`; the directory is created at the first save.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), opened: Arc::default() }
    }

    /// The store `[knowledge] path` names (relative to the config file).
    pub fn from_config(config: &impl AsRef<crate::config::AgentConfig>) -> Self {
        let config = config.as_ref();
        Self::new(config.resolve(&config.knowledge.path))
    }

    /// The index directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn error(&self, e: impl std::fmt::Display) -> KnowledgeError {
        KnowledgeError::Index { path: self.dir.clone(), message: e.to_string() }
    }

    /// The open index; `None` when there is none yet and `create` is false.
    fn open(&self, create: bool) -> Result<Option<Arc<Opened>>, KnowledgeError> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = opened.as_ref() {
            return Ok(Some(o.clone()));
        }
        if !create && !self.dir.join("meta.json").exists() {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| self.error(e))?;
        let directory = MmapDirectory::open(&self.dir).map_err(|e| self.error(e))?;
        let (schema, fields) = schema();
        let index = Index::open_or_create(directory, schema).map_err(|e| self.error(e))?;
        index.tokenizers().register(ANALYZER, analyzer());
        // Reloaded by hand before each read: another process's commit is
        // seen at once, with no watcher thread.
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e: TantivyError| self.error(e))?;
        let o = Arc::new(Opened { index, reader, fields, writing: Mutex::new(()) });
        *opened = Some(o.clone());
        Ok(Some(o))
    }

    /// Runs `f` on the open index off the async threads; `none` when there
    /// is no index yet (only saves create one).
    async fn with<T: Send + 'static>(
        &self,
        create: bool,
        none: impl FnOnce() -> Result<T, KnowledgeError> + Send + 'static,
        f: impl FnOnce(&Self, &Opened) -> Result<T, KnowledgeError> + Send + 'static,
    ) -> Result<T, KnowledgeError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || match store.open(create)? {
            Some(opened) => f(&store, &opened),
            None => none(),
        })
        .await
        .map_err(|e| self.error(e))?
    }

    /// A writer, once no other process holds one.
    fn writer(&self, opened: &Opened) -> Result<IndexWriter, KnowledgeError> {
        let started = Instant::now();
        loop {
            match opened.index.writer_with_num_threads(1, WRITER_MEMORY) {
                Ok(writer) => return Ok(writer),
                Err(TantivyError::LockFailure(LockError::LockBusy, _))
                    if started.elapsed() < LOCK_WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(self.error(e)),
            }
        }
    }

    /// Commits what `writer` holds, waits for its merges and shows the
    /// result to readers.
    fn commit(&self, opened: &Opened, mut writer: IndexWriter) -> Result<(), KnowledgeError> {
        writer.commit().map_err(|e| self.error(e))?;
        writer.wait_merging_threads().map_err(|e| self.error(e))?;
        opened.reader.reload().map_err(|e| self.error(e))
    }
}

impl Opened {
    fn entry(&self, doc: &TantivyDocument) -> Result<Entry, String> {
        let json = doc.get_first(self.fields.entry).and_then(|v| v.as_str()).unwrap_or("");
        serde_json::from_str(json).map_err(|e| format!("a stored entry does not parse: {e}"))
    }

    /// The query for the entry `id` of `scope`: ids are per scope.
    fn key(&self, scope: &Scope, id: &str) -> Box<dyn Query> {
        let term = |field, text: &str| -> (Occur, Box<dyn Query>) {
            let term = Term::from_field_text(field, text);
            (Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic)))
        };
        Box::new(BooleanQuery::new(vec![
            term(self.fields.id, id),
            term(self.fields.scope, &scope.to_string()),
        ]))
    }

    /// The entries `query` matches, as of the last reload (at most
    /// `limit`).
    fn entries(&self, query: &dyn Query, limit: usize) -> Result<Vec<Entry>, String> {
        let searcher = self.reader.searcher();
        let found = searcher
            .search(query, &TopDocs::with_limit(limit).order_by_score())
            .map_err(|e| e.to_string())?;
        found
            .into_iter()
            .map(|(_, address)| {
                let doc: TantivyDocument = searcher.doc(address).map_err(|e| e.to_string())?;
                self.entry(&doc)
            })
            .collect()
    }

    /// The stored entry `id` of `scope`, as of the last reload.
    fn lookup(&self, scope: &Scope, id: &str) -> Result<Option<Entry>, String> {
        Ok(self.entries(&*self.key(scope, id), 1)?.pop())
    }

    /// The entry `id` names for `visible`, as of the last reload.
    fn find(&self, id: &str, visible: &Visible) -> Result<Option<Entry>, String> {
        let term = Term::from_field_text(self.fields.id, id);
        let query = self.scoped(Box::new(TermQuery::new(term, IndexRecordOption::Basic)), visible);
        // One entry an id per scope: a handful of scopes at most.
        Ok(super::nearest(self.entries(&*query, 64)?, visible))
    }

    fn document(&self, entry: &Entry) -> TantivyDocument {
        let f = &self.fields;
        let mut doc = TantivyDocument::new();
        doc.add_text(f.id, &entry.id);
        doc.add_text(f.scope, entry.scope.to_string());
        doc.add_text(f.title, &entry.title);
        for tag in &entry.tags {
            doc.add_text(f.tags, tag);
        }
        doc.add_text(f.content, &entry.content);
        doc.add_text(f.entry, serde_json::to_string(entry).expect("an entry serialises"));
        doc
    }

    /// `query` restricted to the scopes of `visible`.
    fn scoped(&self, query: Box<dyn Query>, visible: &Visible) -> Box<dyn Query> {
        if visible.all {
            return query;
        }
        let term = |scope: Scope| -> (Occur, Box<dyn Query>) {
            let term = Term::from_field_text(self.fields.scope, &scope.to_string());
            (Occur::Should, Box::new(TermQuery::new(term, IndexRecordOption::Basic)))
        };
        let mut any_scope = vec![term(Scope::Global)];
        any_scope.extend(visible.uid.clone().map(|uid| term(Scope::User(uid))));
        match &visible.agent_type {
            Some(kind) => any_scope.push(term(Scope::Agent(kind.clone()))),
            None => {
                let every_agent = RegexQuery::from_pattern("agent:.+", self.fields.scope)
                    .expect("a constant pattern compiles");
                any_scope.push((Occur::Should, Box::new(every_agent)));
            }
        }
        Box::new(BooleanQuery::new(vec![
            (Occur::Must, query),
            (Occur::Must, Box::new(BooleanQuery::new(any_scope))),
        ]))
    }

    /// The words of `text` as the index holds them, each once.
    fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(text);
        let mut terms: Vec<String> = Vec::new();
        while let Some(token) = stream.next() {
            if !terms.contains(&token.text) {
                terms.push(token.text.clone());
            }
        }
        terms.truncate(MAX_QUERY_WORDS);
        terms
    }
}

#[async_trait]
impl KnowledgeStore for FileKnowledgeStore {
    async fn save_all(&self, drafts: Vec<Draft>) -> Result<Vec<Entry>, KnowledgeError> {
        let mut entries = super::entries(drafts)?;
        self.with(
            true,
            || Err(KnowledgeError::Invalid("no index to save into".into())),
            move |store, opened| {
                let _turn = opened.writing.lock().unwrap_or_else(|e| e.into_inner());
                let writer = store.writer(opened)?;
                // Under the writer lock, so another process's last save is
                // seen before this one keeps or replaces an entry.
                opened.reader.reload().map_err(|e| store.error(e))?;
                for entry in &mut entries {
                    let stored =
                        opened.lookup(&entry.scope, &entry.id).map_err(|e| store.error(e))?;
                    if let Some(old) = stored {
                        entry.created_at = old.created_at;
                    }
                    writer
                        .delete_query(opened.key(&entry.scope, &entry.id))
                        .map_err(|e| store.error(e))?;
                    writer.add_document(opened.document(entry)).map_err(|e| store.error(e))?;
                }
                store.commit(opened, writer)?;
                Ok(entries)
            },
        )
        .await
    }

    async fn get(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let (id, visible) = (id.to_owned(), visible.clone());
        let unknown = KnowledgeError::UnknownId(id.clone());
        let missing = KnowledgeError::UnknownId(id.clone());
        self.with(
            false,
            || Err(missing),
            move |store, opened| {
                opened.reader.reload().map_err(|e| store.error(e))?;
                opened.find(&id, &visible).map_err(|e| store.error(e))?.ok_or(unknown)
            },
        )
        .await
    }

    async fn remove(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let (id, visible) = (id.to_owned(), visible.clone());
        let missing = KnowledgeError::UnknownId(id.clone());
        self.with(
            false,
            || Err(missing),
            move |store, opened| {
                let _turn = opened.writing.lock().unwrap_or_else(|e| e.into_inner());
                let writer = store.writer(opened)?;
                opened.reader.reload().map_err(|e| store.error(e))?;
                let Some(entry) = opened.find(&id, &visible).map_err(|e| store.error(e))? else {
                    return Err(KnowledgeError::UnknownId(id));
                };
                writer.delete_query(opened.key(&entry.scope, &id)).map_err(|e| store.error(e))?;
                store.commit(opened, writer)?;
                Ok(entry)
            },
        )
        .await
    }

    async fn list(&self, visible: &Visible) -> Result<Vec<Entry>, KnowledgeError> {
        let visible = visible.clone();
        self.with(
            false,
            || Ok(Vec::new()),
            move |store, opened| {
                opened.reader.reload().map_err(|e| store.error(e))?;
                let searcher = opened.reader.searcher();
                let query = opened.scoped(Box::new(AllQuery), &visible);
                let found =
                    searcher.search(&query, &DocSetCollector).map_err(|e| store.error(e))?;
                let mut entries = found
                    .into_iter()
                    .map(|address| {
                        let doc: TantivyDocument =
                            searcher.doc(address).map_err(|e| store.error(e))?;
                        opened.entry(&doc).map_err(|e| store.error(e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                entries.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
                Ok(entries)
            },
        )
        .await
    }

    async fn search(
        &self,
        query: &str,
        visible: &Visible,
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        let (text, visible) = (query.to_owned(), visible.clone());
        let limit = limit.min(super::MAX_LIMIT);
        self.with(
            false,
            || Ok(Vec::new()),
            move |store, opened| {
                let terms = opened.terms(&text);
                if terms.is_empty() || limit == 0 {
                    return Ok(Vec::new());
                }
                let f = opened.fields;
                let mut words: Vec<(Occur, Box<dyn Query>)> = Vec::new();
                for term in &terms {
                    for (field, boost) in
                        [(f.title, TITLE_BOOST), (f.tags, TAGS_BOOST), (f.content, 1.0)]
                    {
                        let q = TermQuery::new(
                            Term::from_field_text(field, term),
                            IndexRecordOption::WithFreqs,
                        );
                        words.push((Occur::Should, Box::new(BoostQuery::new(Box::new(q), boost))));
                    }
                }
                let query = opened.scoped(Box::new(BooleanQuery::new(words)), &visible);
                opened.reader.reload().map_err(|e| store.error(e))?;
                let searcher = opened.reader.searcher();
                let found = searcher
                    .search(&query, &TopDocs::with_limit(limit).order_by_score())
                    .map_err(|e| store.error(e))?;
                found
                    .into_iter()
                    .map(|(score, address)| {
                        let doc: TantivyDocument =
                            searcher.doc(address).map_err(|e| store.error(e))?;
                        let entry = opened.entry(&doc).map_err(|e| store.error(e))?;
                        Ok(Hit { snippet: snippet(&entry.content, &text), score, entry })
                    })
                    .collect()
            },
        )
        .await
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}
