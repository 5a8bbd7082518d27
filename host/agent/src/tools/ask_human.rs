//! The built-in `ask_human` tool: the model puts a question to a person.
//! The human module runs it; this module is its contract with the model:
//! the arguments and the words of the result.

use reson_sandbox::plugin::ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "ask_human";

/// The longest question the tool takes, in bytes: a question is for a
/// person to read.
pub const MAX_QUESTION: usize = 4096;

/// Arguments of `ask_human`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The question, complete in itself: the person sees nothing else.
    pub question: String,
    /// Answers to choose from, when the question has a few; the person may
    /// still answer in their own words.
    #[serde(default)]
    pub choices: Vec<String>,
}

impl AskArgs {
    /// Parses the model's arguments; the error is a message for the model.
    pub fn parse(arguments: &str) -> Result<Self, String> {
        let args: Self = serde_json::from_str(arguments)
            .map_err(|e| format!("Error: invalid ask_human arguments: {e}"))?;
        if args.question.trim().is_empty() {
            return Err("Error: ask_human needs a non-empty `question`".into());
        }
        if args.question.len() > MAX_QUESTION {
            return Err(format!(
                "Error: the question is {} bytes; keep it under {MAX_QUESTION}, the person \
                 reads it",
                args.question.len()
            ));
        }
        if args.choices.iter().any(|c| c.trim().is_empty()) {
            return Err("Error: every one of `choices` needs some text".into());
        }
        Ok(args)
    }

    /// The question as the person sees it: with its choices numbered.
    pub fn text(&self) -> String {
        let mut text = self.question.trim().to_owned();
        for (i, choice) in self.choices.iter().enumerate() {
            text.push_str(&format!("\n  {}. {}", i + 1, choice.trim()));
        }
        text
    }

    /// `answer` with a choice's number replaced by the choice.
    pub fn resolve(&self, answer: &str) -> String {
        let trimmed = answer.trim();
        trimmed
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.choices.get(i))
            .map_or_else(|| trimmed.to_owned(), |c| c.trim().to_owned())
    }
}

/// The result when no one is there to ask.
pub const NO_ONE: &str = "No one can be asked right now: this run has no terminal, client or \
                          viewer a person answers through. Go on with your best judgement and \
                          say what you assumed.";

/// The tool's spec, built once.
pub fn spec() -> ToolSpec {
    static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        super::builtin_spec::<AskArgs>(
            NAME,
            "Ask a person a question and wait for the answer: when you need a decision, a \
             preference or a fact only they have. `question` (complete in itself) and optional \
             `choices`. When no one is there the answer says so at once; go on with your best \
             judgement then.",
        )
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_and_choices_resolve_by_number() {
        let args =
            AskArgs::parse(r#"{"question": "Which colour?", "choices": ["red", "blue"]}"#).unwrap();
        assert_eq!(args.text(), "Which colour?\n  1. red\n  2. blue");
        assert_eq!(args.resolve(" 2 "), "blue");
        assert_eq!(args.resolve("3"), "3", "not a choice: the answer as given");
        assert_eq!(args.resolve("green, please"), "green, please");
        for bad in [r#"{"question": " "}"#, r#"{"question": "q", "choices": [""]}"#, r#"{"q": 1}"#]
        {
            assert!(AskArgs::parse(bad).unwrap_err().starts_with("Error: "), "{bad}");
        }
        let long = serde_json::json!({ "question": "x".repeat(MAX_QUESTION + 1) }).to_string();
        assert!(AskArgs::parse(&long).unwrap_err().contains("keep it under"));
    }
}
