//! The script file: its format, loading it, and which turn a request plays.

use reson_sdk::provider::{Message, ProviderError, RateLimit, Role, ServerError};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;

/// The error for a plugin started without a script.
pub const NO_SCRIPT: &str = "scripted provider: no `script` setting; pass --script FILE";

/// A whole script: the assistant turns, played in order, and optionally
/// the scripts of other agents (sub-agents) sharing the file, and scripts
/// of their own for requests to other models (a utility or summary model).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub turns: Vec<Turn>,
    /// Tried in order; the first whose `match` occurs in the request's first
    /// user message plays instead of `turns`.
    #[serde(default)]
    pub agents: Vec<AgentScript>,
    /// Requests whose model is a key here play that script instead.
    #[serde(default)]
    pub models: BTreeMap<String, Script>,
}

/// The turns of one agent, chosen by its first user message (a sub-agent's
/// task, or context given before it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentScript {
    /// Text the first user message must contain; not empty.
    #[serde(rename = "match")]
    pub matches: String,
    pub turns: Vec<Turn>,
}

/// One assistant turn. Unknown fields are refused so that a misspelt field
/// fails loudly instead of being played as an empty turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub text: Option<String>,
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    pub usage: ScriptedUsage,
    /// `stop`, `tool-calls`, `length`, `content-filter`; anything else is
    /// played as `other(...)`.
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub delay_ms: u64,
    /// When set, the turn fails with this error and its message fields are
    /// not used.
    pub error: Option<ScriptedError>,
    pub cost: Option<f64>,
}

/// A tool call the turn makes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub id: Option<String>,
    pub name: String,
    /// A JSON string is the arguments text itself, as in OpenAI's API, which
    /// lets a script hand the host invalid JSON; any other value is
    /// serialised.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl ScriptedCall {
    /// The arguments as the JSON text the model would have produced.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(text) => text.clone(),
            value => value.to_string(),
        }
    }
}

/// Token counts; the ones a script leaves out are 0.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

/// A typed provider failure, chosen by `kind`. Each kind accepts only the
/// fields its error carries, so a `retry_after_ms` on a `server` error is
/// refused rather than silently dropped.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ScriptedError {
    RateLimited(RateLimited),
    Server(Server),
    Auth(Plain),
    Timeout(Plain),
    BadRequest(Plain),
    Network(Plain),
    InvalidResponse(Plain),
    Other(Plain),
}

/// Fields of a `rate-limited` error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimited {
    #[serde(default = "default_message")]
    pub message: String,
    pub retry_after_ms: Option<u64>,
}

/// Fields of a `server` error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    #[serde(default = "default_message")]
    pub message: String,
    #[serde(default = "default_status")]
    pub status: u16,
}

/// Fields of the errors that carry only a message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plain {
    #[serde(default = "default_message")]
    pub message: String,
}

fn default_message() -> String {
    "scripted error".to_owned()
}

fn default_status() -> u16 {
    500
}

impl ScriptedError {
    /// The error the provider returns for this turn.
    pub fn to_provider_error(&self) -> ProviderError {
        match self {
            Self::RateLimited(e) => ProviderError::RateLimited(RateLimit {
                message: e.message.clone(),
                retry_after_ms: e.retry_after_ms,
            }),
            Self::Server(e) => {
                ProviderError::Server(ServerError { status: e.status, message: e.message.clone() })
            }
            Self::Auth(e) => ProviderError::Auth(e.message.clone()),
            Self::Timeout(e) => ProviderError::Timeout(e.message.clone()),
            Self::BadRequest(e) => ProviderError::BadRequest(e.message.clone()),
            Self::Network(e) => ProviderError::Network(e.message.clone()),
            Self::InvalidResponse(e) => ProviderError::InvalidResponse(e.message.clone()),
            Self::Other(e) => ProviderError::Other(e.message.clone()),
        }
    }
}

impl Script {
    /// Reads and parses the script named by the `script` setting.
    pub fn load(setting: Option<String>) -> Result<Self, String> {
        let path = setting.ok_or_else(|| NO_SCRIPT.to_owned())?;
        // Without a grant WASI reports the file as missing, so say what
        // else to check.
        let text = fs::read_to_string(&path).map_err(|e| {
            format!(
                "scripted provider: cannot read script {path}: {e} (the plugin can read only \
                 the directories granted to it)"
            )
        })?;
        Self::parse(&path, &text)
    }

    /// Parses a script's text; `path` only names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, String> {
        // serde_json's message ends with "at line L column C".
        let script: Self = serde_json::from_str(text)
            .map_err(|e| format!("scripted provider: invalid script {path}: {e}"))?;
        // An empty `match` would take every request, hiding the entries after it.
        if let Some(i) = script.agents.iter().position(|a| a.matches.is_empty()) {
            return Err(format!(
                "scripted provider: invalid script {path}: agents[{i}] has an empty `match`"
            ));
        }
        Ok(script)
    }

    /// The script a request to `model` plays and its turn there, for a
    /// request `index` would play here: a model's own script (under
    /// `models`) plays that turn or, past its end, its last; any other
    /// model plays this script.
    pub fn for_model(&self, model: &str, index: usize) -> (&Script, usize) {
        match self.models.get(model) {
            Some(own) => (own, index.min(own.turns.len().saturating_sub(1))),
            None => (self, index),
        }
    }

    /// The turns that answer `messages`: those of the first agent whose
    /// `match` is in the first user message, else the top-level ones, with
    /// the name used in errors.
    pub fn turns_for(&self, messages: &[Message]) -> (&[Turn], String) {
        let first_user = messages.iter().find(|m| matches!(m.role, Role::User)).map(text_of);
        let agent =
            first_user.and_then(|text| self.agents.iter().find(|a| text.contains(&a.matches)));
        match agent {
            Some(agent) => (&agent.turns, format!("the script of agent {:?}", agent.matches)),
            None => (&self.turns, "the script".to_owned()),
        }
    }

    /// The turn at 0-based `index` of the turns answering `messages`, or why
    /// the script cannot answer it.
    pub fn turn(&self, messages: &[Message], index: usize) -> Result<&Turn, String> {
        let (turns, name) = self.turns_for(messages);
        turns.get(index).ok_or_else(|| {
            let count = turns.len();
            let noun = if count == 1 { "turn" } else { "turns" };
            format!(
                "scripted provider: {name} has {count} {noun} and this request needs turn {}",
                index + 1
            )
        })
    }
}

/// The text parts of `message`, joined.
fn text_of(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            reson_sdk::provider::ContentPart::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The 0-based turn a request plays: one per assistant message already in
/// its history. Counting the history rather than keeping a cursor is what
/// lets a fresh instance per call, rewinds and regenerations all land on
/// the right turn.
///
/// A host's compaction note (a user message starting `[compacted: N `)
/// stands for N answers it left out, so a compacted history plays the
/// turn its full history would.
pub fn turn_index(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m.role {
            Role::Assistant => 1,
            Role::User => compacted_answers(m),
            _ => 0,
        })
        .sum()
}

fn compacted_answers(message: &Message) -> usize {
    let Some(reson_sdk::provider::ContentPart::Text(text)) = message.content.first() else {
        return 0;
    };
    text.strip_prefix("[compacted: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_sdk::provider::ContentPart;

    fn message(role: Role) -> Message {
        Message {
            role,
            content: vec![ContentPart::Text("hi".into())],
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning: None,
            provider_data: None,
        }
    }

    #[test]
    fn every_field_parses() {
        let script = Script::parse(
            "s.json",
            r#"{"turns": [{
                "text": "t", "reasoning": "r",
                "tool_calls": [{"id": "x", "name": "glob", "arguments": {"pattern": "**/*"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "reasoning_tokens": 3,
                          "cache_read_tokens": 4, "cache_write_tokens": 5},
                "finish_reason": "length", "delay_ms": 7, "cost": 0.25,
                "error": {"kind": "rate-limited", "message": "slow down", "retry_after_ms": 9}
            }]}"#,
        )
        .unwrap();
        let turn = &script.turns[0];
        assert_eq!(turn.text.as_deref(), Some("t"));
        assert_eq!(turn.reasoning.as_deref(), Some("r"));
        assert_eq!(turn.tool_calls[0].id.as_deref(), Some("x"));
        assert_eq!(turn.tool_calls[0].arguments_text(), r#"{"pattern":"**/*"}"#);
        assert_eq!(turn.usage.cache_write_tokens, 5);
        assert_eq!(turn.finish_reason.as_deref(), Some("length"));
        assert_eq!(turn.delay_ms, 7);
        assert_eq!(turn.cost, Some(0.25));
        assert!(matches!(
            turn.error.as_ref().unwrap().to_provider_error(),
            ProviderError::RateLimited(RateLimit { message, retry_after_ms: Some(9) })
                if message == "slow down"
        ));
    }

    #[test]
    fn an_empty_turn_is_all_defaults() {
        let script = Script::parse("s.json", r#"{"turns": [{}]}"#).unwrap();
        let turn = &script.turns[0];
        assert!(turn.text.is_none() && turn.tool_calls.is_empty() && turn.error.is_none());
        assert_eq!(turn.usage.prompt_tokens, 0);
        assert_eq!(turn.delay_ms, 0);
    }

    #[test]
    fn arguments_default_to_an_empty_object_and_strings_pass_verbatim() {
        let script = Script::parse(
            "s.json",
            r#"{"turns": [{"tool_calls": [{"name": "a"}, {"name": "b", "arguments": "{\"x\": "},
                                          {"name": "c", "arguments": [1, null]}]}]}"#,
        )
        .unwrap();
        let texts: Vec<_> = script.turns[0].tool_calls.iter().map(|c| c.arguments_text()).collect();
        assert_eq!(texts, ["{}", r#"{"x": "#, "[1,null]"]);
    }

    #[test]
    fn each_error_kind_maps_to_its_provider_error() {
        let script = Script::parse(
            "s.json",
            r#"{"turns": [
                {"error": {"kind": "server", "message": "boom"}},
                {"error": {"kind": "server", "status": 503}},
                {"error": {"kind": "auth", "message": "bad key"}},
                {"error": {"kind": "timeout"}},
                {"error": {"kind": "bad-request", "message": "m"}},
                {"error": {"kind": "network", "message": "m"}},
                {"error": {"kind": "invalid-response", "message": "m"}},
                {"error": {"kind": "other", "message": "m"}},
                {"error": {"kind": "rate-limited"}}
            ]}"#,
        )
        .unwrap();
        let errors: Vec<_> =
            script.turns.iter().map(|t| t.error.as_ref().unwrap().to_provider_error()).collect();
        assert!(
            matches!(&errors[0], ProviderError::Server(ServerError { status: 500, message }) if message == "boom")
        );
        assert!(
            matches!(&errors[1], ProviderError::Server(ServerError { status: 503, message }) if message == "scripted error")
        );
        assert!(matches!(&errors[2], ProviderError::Auth(m) if m == "bad key"));
        assert!(matches!(&errors[3], ProviderError::Timeout(m) if m == "scripted error"));
        assert!(matches!(&errors[4], ProviderError::BadRequest(_)));
        assert!(matches!(&errors[5], ProviderError::Network(_)));
        assert!(matches!(&errors[6], ProviderError::InvalidResponse(_)));
        assert!(matches!(&errors[7], ProviderError::Other(_)));
        assert!(matches!(
            &errors[8],
            ProviderError::RateLimited(RateLimit { retry_after_ms: None, .. })
        ));
    }

    #[test]
    fn invalid_json_names_the_path_and_position() {
        let err = Script::parse("/s/script.json", "{\"turns\": [\n  {\"text\": }\n]}").unwrap_err();
        assert!(err.starts_with("scripted provider: invalid script /s/script.json: "), "{err}");
        assert!(err.contains("line 2 column"), "{err}");
    }

    #[test]
    fn misspelt_fields_and_unknown_kinds_are_refused() {
        let err = Script::parse("s.json", r#"{"turns": [{"tool_call": []}]}"#).unwrap_err();
        assert!(err.contains("unknown field `tool_call`"), "{err}");
        let err =
            Script::parse("s.json", r#"{"turns": [{"error": {"kind": "flaky"}}]}"#).unwrap_err();
        assert!(err.contains("unknown variant `flaky`"), "{err}");
        let err = Script::parse(
            "s.json",
            r#"{"turns": [{"error": {"kind": "server", "retry_after_ms": 5}}]}"#,
        )
        .unwrap_err();
        assert!(err.contains("unknown field `retry_after_ms`"), "{err}");
    }

    #[test]
    fn load_explains_a_missing_setting_and_an_unreadable_file() {
        assert_eq!(Script::load(None).unwrap_err(), NO_SCRIPT);
        let missing = std::env::temp_dir().join("scripted-test-no-such-script.json");
        let missing = missing.to_str().unwrap().to_owned();
        let err = Script::load(Some(missing.clone())).unwrap_err();
        assert!(err.starts_with(&format!("scripted provider: cannot read script {missing}: ")));
    }

    #[test]
    fn load_reads_a_script_file() {
        let path = std::env::temp_dir().join(format!("scripted-test-{}.json", std::process::id()));
        fs::write(&path, r#"{"turns": [{"text": "Done."}]}"#).unwrap();
        let script = Script::load(Some(path.to_str().unwrap().to_owned()));
        fs::remove_file(&path).unwrap();
        assert_eq!(script.unwrap().turns[0].text.as_deref(), Some("Done."));
    }

    #[test]
    fn the_turn_is_the_number_of_assistant_messages() {
        assert_eq!(turn_index(&[]), 0);
        assert_eq!(turn_index(&[message(Role::System), message(Role::User)]), 0);
        let history = [
            message(Role::User),
            message(Role::Assistant),
            message(Role::Tool),
            message(Role::Assistant),
            message(Role::User),
        ];
        assert_eq!(turn_index(&history), 2);
        let mut note = message(Role::User);
        note.content = vec![ContentPart::Text("[compacted: 5 earlier answers ...]".into())];
        assert_eq!(turn_index(&[message(Role::User), note, message(Role::Assistant)]), 6);
    }

    #[test]
    fn a_model_with_a_script_of_its_own_plays_it() {
        let script = Script::parse(
            "s.json",
            r#"{"turns": [{"text": "main"}],
                "models": {"utility": {"turns": [{"text": "tags"}]}}}"#,
        )
        .unwrap();
        let play = |model: &str, index: usize| {
            let (script, index) = script.for_model(model, index);
            script.turn(&[], index).map(|t| t.text.clone().unwrap_or_default())
        };
        assert_eq!(play("utility", 0).unwrap(), "tags");
        assert_eq!(play("utility", 7).unwrap(), "tags", "past its end: its last turn");
        assert_eq!(play("gpt-4o", 0).unwrap(), "main");
        assert!(play("", 1).is_err());
    }

    #[test]
    fn an_exhausted_script_says_how_long_it_is_and_what_was_needed() {
        let script = Script::parse("s.json", r#"{"turns": [{}, {}]}"#).unwrap();
        assert!(script.turn(&[], 1).is_ok());
        assert_eq!(
            script.turn(&[], 2).unwrap_err(),
            "scripted provider: the script has 2 turns and this request needs turn 3"
        );
        let one = Script::parse("s.json", r#"{"turns": [{}]}"#).unwrap();
        assert_eq!(
            one.turn(&[], 4).unwrap_err(),
            "scripted provider: the script has 1 turn and this request needs turn 5"
        );
    }

    fn user(text: &str) -> Message {
        Message { content: vec![ContentPart::Text(text.into())], ..message(Role::User) }
    }

    #[test]
    fn each_agent_plays_the_script_its_first_user_message_matches() {
        let script = Script::parse(
            "s.json",
            r#"{"turns": [{"text": "parent"}],
                "agents": [{"match": "list src", "turns": [{"text": "child a"}, {"text": "a2"}]},
                           {"match": "list", "turns": [{"text": "child b"}]}]}"#,
        )
        .unwrap();
        let text = |messages: &[Message], index| script.turn(messages, index).unwrap().text.clone();
        assert_eq!(text(&[user("Fix the bug")], 0).as_deref(), Some("parent"));
        assert_eq!(
            text(&[message(Role::System), user("please list src/")], 1).as_deref(),
            Some("a2")
        );
        // The first entry that matches wins; later user messages play no part.
        assert_eq!(text(&[user("list docs"), user("list src")], 0).as_deref(), Some("child b"));
        assert_eq!(
            script.turn(&[user("list docs")], 1).unwrap_err(),
            "scripted provider: the script of agent \"list\" has 1 turn and this request needs turn 2"
        );
        let err =
            Script::parse("s.json", r#"{"turns": [], "agents": [{"match": "", "turns": []}]}"#)
                .unwrap_err();
        assert!(err.ends_with("agents[0] has an empty `match`"), "{err}");
    }
}
