//! The built-in `agent` tool: hands work to sub-agents, each a trace of its
//! own under the calling goal. A string `task` delegates to one sub-agent;
//! a list explores, one sub-agent per item, all at once. The agent
//! module's sub-agent support runs it; this module is its contract with the
//! model: the arguments and the result.

use reson_sandbox::plugin::ToolSpec;
use reson_trace::{AgentMode, Message, Role};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tool's name.
pub const NAME: &str = "agent";

/// One task, or several run in parallel.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Tasks {
    /// Delegate: one sub-agent.
    One(String),
    /// Explore: one sub-agent per task, in parallel; results in this order.
    Many(Vec<String>),
}

/// A message of context given to a sub-agent before its task.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextMessage {
    /// `user` (the default), `assistant` or `system`.
    #[serde(default)]
    pub role: ContextRole,
    /// The text.
    pub content: String,
}

/// Who a context message is from.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextRole {
    /// The user.
    #[default]
    User,
    /// The assistant.
    Assistant,
    /// The system.
    System,
}

impl ContextMessage {
    /// The message as stored in the sub-agent's trace.
    pub fn to_message(&self) -> Message {
        let role = match self.role {
            ContextRole::User => Role::User,
            ContextRole::Assistant => Role::Assistant,
            ContextRole::System => Role::System,
        };
        Message::new(role, self.content.clone())
    }
}

/// Context messages: one list for every task, or one list per task.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ContextMessages {
    /// The same messages before every task.
    Shared(Vec<ContextMessage>),
    /// The i-th list before the i-th task.
    PerTask(Vec<Vec<ContextMessage>>),
}

/// Arguments of `agent`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentArgs {
    /// The mission: a string runs one sub-agent; a list runs one per item in
    /// parallel.
    pub task: Tasks,
    /// Context messages put before the task: one list shared by all tasks,
    /// or one list per task.
    #[serde(default)]
    pub messages: Option<ContextMessages>,
    /// A sub-trace id of this agent's: continue that sub-agent (with one
    /// task, its next message) instead of starting a new one.
    #[serde(default)]
    pub continue_from: Option<String>,
    /// A preset (tools, skills, max_iterations, temperature); the caller's
    /// own when unset. The sub-agent never gets more than its caller has.
    #[serde(default)]
    pub agent_type: Option<String>,
    /// Skills for the sub-agent, instead of the preset's.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
}

impl AgentArgs {
    /// Parses the model's arguments; the error is a message for the model.
    pub fn parse(arguments: &str) -> Result<Self, String> {
        let args: Self = serde_json::from_str(arguments)
            .map_err(|e| format!("Error: invalid agent arguments: {e}"))?;
        let tasks = args.tasks();
        if tasks.is_empty() || tasks.iter().any(|t| t.trim().is_empty()) {
            return Err("Error: agent needs a non-empty `task` (or a list of them)".into());
        }
        if args.continue_from.is_some() && tasks.len() != 1 {
            return Err("Error: `continue_from` continues one sub-agent: give one task".into());
        }
        if let Some(ContextMessages::PerTask(lists)) = &args.messages
            && lists.len() != tasks.len()
        {
            return Err(format!(
                "Error: `messages` has {} lists for {} tasks: give one list per task, or one \
                 list for all",
                lists.len(),
                tasks.len()
            ));
        }
        Ok(args)
    }

    /// The tasks, in order.
    pub fn tasks(&self) -> Vec<&str> {
        match &self.task {
            Tasks::One(task) => vec![task],
            Tasks::Many(tasks) => tasks.iter().map(String::as_str).collect(),
        }
    }

    /// Delegate (one string) or explore (a list).
    pub fn mode(&self) -> AgentMode {
        match self.task {
            Tasks::One(_) => AgentMode::Delegate,
            Tasks::Many(_) => AgentMode::Explore,
        }
    }

    /// The context messages for the `i`-th task.
    pub fn context_for(&self, i: usize) -> Vec<Message> {
        let list = match &self.messages {
            None => return Vec::new(),
            Some(ContextMessages::Shared(list)) => list,
            Some(ContextMessages::PerTask(lists)) => &lists[i],
        };
        list.iter().map(ContextMessage::to_message).collect()
    }
}

/// What a sub-agent spent, its own sub-agents included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SubAgentStats {
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Model and tool time, in milliseconds.
    pub duration_ms: u64,
    /// Tool calls the sub-agent made.
    pub tool_calls: u64,
    /// Model requests, failed attempts included.
    pub model_requests: u64,
}

/// One sub-agent's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentResult {
    /// The sub-agent's trace: give it as `continue_from` to continue it.
    pub sub_trace_id: String,
    /// Its task.
    pub task: String,
    /// `completed`, `failed`, `stopped` or `interrupted`.
    pub status: String,
    /// Its final answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it spent.
    pub stats: SubAgentStats,
    /// How to resume it, when it did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// The result of an `agent` call: one entry per task, in the tasks' order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCallResult {
    /// Delegate or explore.
    pub mode: AgentMode,
    /// The sub-agents' results.
    pub results: Vec<SubAgentResult>,
}

/// The tool's spec, built once.
pub fn spec() -> ToolSpec {
    static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| ToolSpec {
        name: NAME.to_owned(),
        description: "Hand work to sub-agents, each with a trace of its own under the current \
                      goal. `task` as a string runs one sub-agent; as a list, one per item, in \
                      parallel. Optional: `messages` (context before the task), `agent_type` (a \
                      preset; never more tools than yours), `skills`, `continue_from` (a \
                      sub_trace_id to continue). Returns each sub-agent's sub_trace_id, status, \
                      summary and stats."
            .to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(AgentArgs))
            .expect("a derived schema serialises")
            .into(),
        plugin: "builtin".to_owned(),
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_delegates_and_a_list_explores() {
        let one = AgentArgs::parse(r#"{"task": "read a"}"#).unwrap();
        assert_eq!((one.mode(), one.tasks()), (AgentMode::Delegate, vec!["read a"]));
        let many = AgentArgs::parse(
            r#"{"task": ["a", "b"], "messages": [[{"content": "x"}], [{"role": "system", "content": "y"}]]}"#,
        )
        .unwrap();
        assert_eq!(many.mode(), AgentMode::Explore);
        assert_eq!(many.context_for(1)[0].role, Role::System);
        let shared =
            AgentArgs::parse(r#"{"task": ["a", "b"], "messages": [{"content": "x"}]}"#).unwrap();
        assert_eq!(shared.context_for(1)[0].text(), "x");
    }

    #[test]
    fn bad_arguments_say_what_to_do() {
        let err = |args: &str| AgentArgs::parse(args).unwrap_err();
        assert_eq!(
            err(r#"{"task": []}"#),
            "Error: agent needs a non-empty `task` (or a list of them)"
        );
        assert_eq!(
            err(r#"{"task": " "}"#),
            "Error: agent needs a non-empty `task` (or a list of them)"
        );
        assert_eq!(
            err(r#"{"task": ["a", "b"], "continue_from": "tr_x"}"#),
            "Error: `continue_from` continues one sub-agent: give one task"
        );
        assert!(err(r#"{"task": ["a", "b"], "messages": [[]]}"#).contains("1 lists for 2 tasks"));
        assert!(err(r#"{"task": "a", "tools": ["shell"]}"#).contains("unknown field `tools`"));
    }

    #[test]
    fn the_schema_is_an_object() {
        assert_eq!(spec().input_schema["type"], "object");
    }
}
