//! Experiences: lessons learnt from past runs, kept in a human-readable,
//! editable `experiences.md` (default `.reson/experiences.md`), or, with
//! `[store] kind = "postgres"`, in a table several hosts share (see
//! [`ExperienceStore`]; `reson experiences export` writes it in the
//! markdown form).
//!
//! One block per experience: YAML front matter, then the rule as text.
//!
//! ```text
//! ---
//! id: exp_3f9a1c2b7d40
//! trace_id: tr_0123456789ab
//! category: tool_usage
//! tags:
//!   state: [rust, cargo]
//!   intent: [build]
//! metrics:
//!   helpful: 1
//!   harmful: 0
//! created_at: 2026-11-23T16:00:00Z
//! scope: user:alice
//! condition: a Rust workspace with slow tests
//! evidence: [tr_0123456789ab-0007]
//! source: execution
//! confidence: 0.8
//! usage_count: 3
//! success_rate: 0.75
//! ---
//! Run `cargo check` before `cargo test`: it fails faster.
//! ```
//!
//! The fields after `created_at` are optional, and left out when they hold
//! their defaults (global scope, no condition or evidence, learnt from an
//! execution, confidence 0.5, never used, not rated): files written before
//! they existed read as before, and are written back unchanged.
//!
//! An experience's [`Scope`](crate::scope::Scope) says who sees it: everyone (global), one
//! user's runs (`user:{uid}`), or one agent type's (`agent:{type}`). A run
//! sees the global ones, its user's and its agent type's
//! ([`Visible`](crate::scope::Visible));
//! what a run learns goes to its user's scope.
//!
//! [`reflect`] adds experiences from a finished trace; a new run gets the
//! best matches in its first message ([`Experiences::relevant`]): a utility
//! model call tags the task with `intent` and `state` tags, and experiences
//! rank by shared intent tags, then shared state tags, then helpful minus
//! harmful ratings ([`ExperienceStore::relevant`]). The `get_experience`
//! tool searches them on demand.

mod reflect;
mod store;

pub use reflect::{Reflection, reflect};
pub use store::{ExperienceStore, FileExperienceStore, PgExperienceStore, to_markdown};

use crate::scope::{Scope, Visible};

use crate::provider::{self, ChatProvider, ChatRequest, LlmParams, ProviderError};
use reson_trace::{Message, Role, TraceError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why experiences could not be read, written, found or learnt.
#[derive(Debug, thiserror::Error)]
pub enum ExperienceError {
    /// The file (or its lock) could not be read or written.
    #[error("experiences {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A block of the file does not parse; nothing was dropped or written.
    #[error("malformed experiences file {path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// No experience has this id.
    #[error("no experience {0}")]
    UnknownId(String),
    /// An append names an id already stored (or names one twice); nothing
    /// was appended.
    #[error("experience id {0} is already taken")]
    DuplicateId(String),
    /// An experience that cannot be stored (no id, no rule, ...).
    #[error("invalid experience: {0}")]
    Invalid(String),
    /// The database failed (it went away, ...).
    #[error(transparent)]
    Database(#[from] reson_trace::database::DatabaseError),
    /// No trace has this id.
    #[error("no trace {0}")]
    NoTrace(String),
    /// The trace cannot be reflected on now.
    #[error("cannot reflect on trace {trace_id}: {reason}")]
    NotReady {
        /// The trace.
        trace_id: String,
        /// Why.
        reason: String,
    },
    /// The trace store failed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The model call failed.
    #[error("model call failed: {0}")]
    Model(#[from] ProviderError),
    /// The model's answer is not what was asked for; nothing was written.
    #[error("the model's answer is not valid: {0}")]
    BadAnswer(String),
}

/// How an experience turned out when it was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    /// It helped.
    Helpful,
    /// It misled.
    Harmful,
}

impl std::str::FromStr for Rating {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "helpful" => Ok(Self::Helpful),
            "harmful" => Ok(Self::Harmful),
            _ => Err(format!("`{s}` is not a rating: use helpful or harmful")),
        }
    }
}

/// What an experience is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tags {
    /// The situation it applies in (`rust`, `monorepo`, `offline`, ...).
    #[serde(default)]
    pub state: Vec<String>,
    /// What one is trying to do (`build`, `refactor`, `debug`, ...).
    #[serde(default)]
    pub intent: Vec<String>,
}

/// How often an experience was rated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    /// Times it helped.
    #[serde(default)]
    pub helpful: u64,
    /// Times it misled.
    #[serde(default)]
    pub harmful: u64,
}

/// How an experience was learnt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Reflecting on a run.
    #[default]
    Execution,
    /// From what a person said about a run.
    Feedback,
    /// Written by a person.
    Manual,
}

impl Source {
    fn is_execution(&self) -> bool {
        *self == Source::Execution
    }

    /// Its name, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Execution => "execution",
            Source::Feedback => "feedback",
            Source::Manual => "manual",
        }
    }
}

impl std::str::FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "execution" => Ok(Source::Execution),
            "feedback" => Ok(Source::Feedback),
            "manual" => Ok(Source::Manual),
            _ => Err(format!("source `{s}` is not execution, feedback or manual")),
        }
    }
}

/// The confidence of an experience nobody rated.
pub const DEFAULT_CONFIDENCE: f64 = 0.5;

fn default_confidence() -> f64 {
    DEFAULT_CONFIDENCE
}

fn is_default_confidence(c: &f64) -> bool {
    *c == DEFAULT_CONFIDENCE
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One experience.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experience {
    /// `exp_` and 12 hex digits (or any id a person wrote).
    pub id: String,
    /// The trace it was learnt from.
    #[serde(default)]
    pub trace_id: String,
    /// `tool_usage`, `logic_flow`, `environment`, ...
    #[serde(default)]
    pub category: String,
    /// What it is about.
    #[serde(default)]
    pub tags: Tags,
    /// Its ratings.
    #[serde(default)]
    pub metrics: Metrics,
    /// RFC 3339 time it was learnt.
    #[serde(default)]
    pub created_at: String,
    /// Who it is for.
    #[serde(default, skip_serializing_if = "Scope::is_global")]
    pub scope: Scope,
    /// When it applies, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub condition: String,
    /// The ids of the messages that taught it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// How it was learnt.
    #[serde(default, skip_serializing_if = "Source::is_execution")]
    pub source: Source,
    /// How sure it is, 0 to 1.
    #[serde(default = "default_confidence", skip_serializing_if = "is_default_confidence")]
    pub confidence: f64,
    /// How many runs it was given to (in their first message, or by
    /// `get_experience`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub usage_count: u64,
    /// The share of its ratings that said it helped; `None` until rated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<f64>,
    /// Fields a person added by hand, kept as they are.
    #[serde(flatten)]
    extra: BTreeMap<String, serde_yaml_ng::Value>,
    /// The rule itself: the block's text.
    #[serde(skip)]
    pub rule: String,
}

impl Experience {
    /// A new experience learnt from `trace_id`, rated helpful once.
    pub fn new(trace_id: &str, category: &str, tags: Tags, rule: &str) -> Self {
        Self {
            id: format!("exp_{:012x}", fastrand::u64(..) & 0xffff_ffff_ffff),
            trace_id: trace_id.to_owned(),
            category: category.to_owned(),
            tags,
            metrics: Metrics { helpful: 1, harmful: 0 },
            created_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            scope: Scope::Global,
            condition: String::new(),
            evidence: Vec::new(),
            source: Source::Execution,
            confidence: DEFAULT_CONFIDENCE,
            usage_count: 0,
            success_rate: None,
            extra: BTreeMap::new(),
            rule: rule.trim().to_owned(),
        }
    }

    /// Helpful minus harmful ratings.
    pub fn net(&self) -> i64 {
        self.metrics.helpful as i64 - self.metrics.harmful as i64
    }

    /// Counts one rating: the metrics, and the success rate they give.
    pub fn rated(&mut self, rating: Rating) {
        match rating {
            Rating::Helpful => self.metrics.helpful += 1,
            Rating::Harmful => self.metrics.harmful += 1,
        }
        let total = self.metrics.helpful + self.metrics.harmful;
        self.success_rate = Some(self.metrics.helpful as f64 / total as f64);
    }

    /// Refuses what cannot be stored: no id, no rule, a confidence or
    /// success rate outside 0 to 1.
    pub fn check(&self) -> Result<(), ExperienceError> {
        if self.id.trim().is_empty() {
            return Err(ExperienceError::Invalid("an experience needs an id".into()));
        }
        if self.rule.trim().is_empty() {
            return Err(ExperienceError::Invalid(format!("experience {} has no rule", self.id)));
        }
        let share = |x: f64| (0.0..=1.0).contains(&x);
        if !share(self.confidence) || !self.success_rate.is_none_or(share) {
            return Err(ExperienceError::Invalid(format!(
                "experience {}: confidence and success_rate must be between 0 and 1",
                self.id
            )));
        }
        Ok(())
    }
}

/// The experiences sharing tags with `intent` and `state`, best first: by
/// intent tags shared, then state tags shared, then [`Experience::net`];
/// ties keep file order. At most `k`.
pub fn rank<'a>(
    all: &'a [Experience],
    intent: &[String],
    state: &[String],
    k: usize,
) -> Vec<&'a Experience> {
    let shared = |have: &[String], want: &[String]| {
        have.iter().filter(|h| want.iter().any(|w| w.eq_ignore_ascii_case(h))).count()
    };
    let mut scored: Vec<((usize, usize, i64), &Experience)> = all
        .iter()
        .map(|e| ((shared(&e.tags.intent, intent), shared(&e.tags.state, state), e.net()), e))
        .filter(|((i, s, _), _)| i + s > 0)
        .collect();
    scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    scored.into_iter().take(k).map(|(_, e)| e).collect()
}

/// `found` as a markdown list: id, category and rule.
pub fn render_list(found: &[&Experience]) -> String {
    found
        .iter()
        .map(|e| {
            let rule = e.rule.replace('\n', "\n  ");
            format!("- [{}] ({}) {rule}\n", e.id, e.category)
        })
        .collect()
}

/// The first JSON object in a model's answer (which may wrap it in prose
/// or a code fence).
pub(crate) fn json_object<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let start = text.find('{').ok_or("no JSON object in the answer")?;
    let end = text.rfind('}').filter(|&e| e > start).ok_or("no JSON object in the answer")?;
    serde_json::from_str(&text[start..=end]).map_err(|e| e.to_string())
}

/// Experiences as a run uses them: the store, how many go into a new
/// trace, and the model that tags tasks.
#[derive(Clone)]
pub struct Experiences {
    /// Where they are kept.
    pub store: Arc<dyn ExperienceStore>,
    /// Most experiences put into a new trace's first message.
    pub top_k: usize,
    /// The provider of the tagging call; the run's when `None`.
    pub utility_provider: Option<Arc<dyn ChatProvider>>,
    /// The model of the tagging call; the run's when empty.
    pub utility_model: String,
}

impl Experiences {
    /// Experiences in `store`, three to a new trace, tagged by the run's
    /// own provider and model.
    pub fn new(store: Arc<dyn ExperienceStore>) -> Self {
        Self { store, top_k: 3, utility_provider: None, utility_model: String::new() }
    }

    /// Experiences in `store` as `[experiences]` sets them up: how many to
    /// inject, and the tagging call's provider (a plugin of `runtime`) and
    /// model.
    pub fn configured(
        runtime: &reson_sandbox::plugin::Runtime,
        store: Arc<dyn ExperienceStore>,
        config: &impl AsRef<crate::config::AgentConfig>,
    ) -> Self {
        let config = config.as_ref();
        let mut experiences = Self::new(store);
        experiences.top_k = config.experiences.top_k;
        experiences.utility_model = config.experiences.utility_model.clone().unwrap_or_default();
        experiences.utility_provider = config.experiences.utility_provider.as_ref().map(|name| {
            Arc::new(crate::provider::PluginProvider::new(runtime.clone(), name.clone()))
                as Arc<dyn ChatProvider>
        });
        experiences
    }

    /// Tags `task` with one utility model call: the intent and state tags
    /// it names. `provider` and `params` are the run's; the utility
    /// settings override them.
    pub async fn tags(
        &self,
        provider: &Arc<dyn ChatProvider>,
        params: &LlmParams,
        task: &str,
        cancel: CancellationToken,
    ) -> Result<Tags, ExperienceError> {
        let provider = self.utility_provider.as_ref().unwrap_or(provider);
        let mut params = LlmParams { stream: false, ..params.clone() };
        if !self.utility_model.is_empty() {
            params.model = self.utility_model.clone();
        }
        let request = ChatRequest {
            messages: vec![
                Message::new(Role::System, TAGGING_PROMPT),
                Message::new(Role::User, task),
            ],
            tools: Vec::new(),
            params,
        };
        let answer = provider::complete(&**provider, request, cancel, |_| {}).await?;
        json_object::<Tags>(&answer.message.text())
            .map_err(|e| ExperienceError::BadAnswer(format!("tags: {e}")))
    }

    /// The `## Relevant experience` section for a new trace's `task`, from
    /// the experiences `visible` to its run, or `None` when none matches
    /// (no model call is made when there are no experiences at all). Those
    /// given count one more use.
    pub async fn relevant(
        &self,
        provider: &Arc<dyn ChatProvider>,
        params: &LlmParams,
        task: &str,
        visible: &Visible,
        cancel: CancellationToken,
    ) -> Result<Option<String>, ExperienceError> {
        if self.top_k == 0 || self.store.is_empty().await? {
            return Ok(None);
        }
        let tags = self.tags(provider, params, task, cancel).await?;
        let found = self.store.relevant_in(visible, &tags.intent, &tags.state, self.top_k).await?;
        if found.is_empty() {
            return Ok(None);
        }
        let ids: Vec<String> = found.iter().map(|e| e.id.clone()).collect();
        self.store.record_use(&ids).await?;
        let found: Vec<&Experience> = found.iter().collect();
        Ok(Some(format!("## Relevant experience\n{}", render_list(&found))))
    }
}

const TAGGING_PROMPT: &str = "Tag the user's task for looking up lessons from past runs. Answer \
with only a JSON object: {\"intent\": [...], \"state\": [...]}. intent: what the user wants done \
(short lowercase words such as build, debug, refactor, search, write). state: the situation \
(languages, tools, kinds of files, such as rust, python, git, config). At most five of each.";

#[cfg(test)]
mod tests {
    use super::*;

    fn experience(
        id: &str,
        intent: &[&str],
        state: &[&str],
        helpful: u64,
        harmful: u64,
    ) -> Experience {
        let tags = Tags {
            intent: intent.iter().map(|s| s.to_string()).collect(),
            state: state.iter().map(|s| s.to_string()).collect(),
        };
        let mut e = Experience::new("tr_x", "tool_usage", tags, &format!("rule {id}"));
        e.id = id.to_owned();
        e.metrics = Metrics { helpful, harmful };
        e
    }

    #[test]
    fn ranking_is_intent_then_state_then_helpfulness() {
        let all = [
            experience("state-only", &[], &["rust"], 9, 0),
            experience("intent", &["build"], &[], 1, 0),
            experience("both", &["build"], &["rust"], 1, 0),
            experience("both-harmful", &["build"], &["rust"], 1, 3),
            experience("both-helpful", &["build"], &["rust"], 5, 0),
            experience("unrelated", &["deploy"], &["go"], 50, 0),
        ];
        let ids: Vec<&str> = rank(&all, &["Build".into()], &["rust".into()], 10)
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(ids, ["both-helpful", "both", "both-harmful", "intent", "state-only"]);
        assert_eq!(rank(&all, &["build".into()], &[], 2).len(), 2);
    }

    #[test]
    fn answers_with_prose_around_the_json_parse() {
        let tags: Tags =
            json_object("Sure:\n```json\n{\"intent\": [\"build\"], \"state\": []}\n```").unwrap();
        assert_eq!(tags.intent, ["build"]);
        assert!(json_object::<Tags>("no json").is_err());
    }
}
