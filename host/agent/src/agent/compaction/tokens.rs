//! Counting tokens: OpenAI's own BPE (tiktoken's `o200k_base` and
//! `cl100k_base`, through `tiktoken-rs`) for the OpenAI models that use
//! them (GPT-3.5 and later); an estimate of one token per four bytes for every other model
//! (Anthropic and Google publish no offline tokenizer), plus a fixed
//! overhead per message and per image.

use reson_sandbox::plugin::ToolSpec;
use reson_trace::{ContentPart, Message};
use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::Tokenizer;

/// Tokens every message costs beyond its text (role and separators, as
/// OpenAI counts them).
const PER_MESSAGE: u64 = 4;
/// What one image is counted as: a high-detail 512×512 tile and change.
const PER_IMAGE: u64 = 765;

/// Counts tokens for one model.
#[derive(Clone, Copy)]
pub struct TokenCounter {
    bpe: Option<&'static CoreBPE>,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_exact() { "TokenCounter(bpe)" } else { "TokenCounter(estimate)" })
    }
}

impl TokenCounter {
    /// The model's own tokenizer when there is one here, else the estimate.
    /// The first use of a tokenizer loads it (a few hundred milliseconds).
    pub fn for_model(model: &str) -> Self {
        use tiktoken_rs::{cl100k_base_singleton, o200k_base_singleton, o200k_harmony_singleton};
        // Only the encodings of current models: each one linked in adds its
        // table (1.7–3.6 MB) to the binary.
        let bpe = tiktoken_rs::tokenizer::get_tokenizer(model).and_then(|t| match t {
            Tokenizer::O200kHarmony => Some(o200k_harmony_singleton()),
            Tokenizer::O200kBase => Some(o200k_base_singleton()),
            Tokenizer::Cl100kBase => Some(cl100k_base_singleton()),
            _ => None,
        });
        Self { bpe }
    }

    /// The estimate, whatever the model.
    pub fn estimate() -> Self {
        Self { bpe: None }
    }

    /// Whether counts come from the model's own tokenizer.
    pub fn is_exact(&self) -> bool {
        self.bpe.is_some()
    }

    /// Tokens of `text`.
    pub fn count(&self, text: &str) -> u64 {
        match self.bpe {
            Some(bpe) => bpe.encode_ordinary(text).len() as u64,
            None => text.len().div_ceil(4) as u64,
        }
    }

    /// Tokens one message costs in a request.
    pub fn message(&self, message: &Message) -> u64 {
        let mut n = PER_MESSAGE;
        for part in &message.content {
            n += match part {
                ContentPart::Text { text } => self.count(text),
                ContentPart::ImageUrl { .. } | ContentPart::Image(_) => PER_IMAGE,
            };
        }
        for call in &message.tool_calls {
            n += PER_MESSAGE + self.count(&call.name) + self.count(&call.arguments);
        }
        n
    }

    /// Tokens a request of `messages` offering `tools` costs.
    pub fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> u64 {
        let tools: u64 = tools
            .iter()
            .map(|t| {
                PER_MESSAGE
                    + self.count(&t.name)
                    + self.count(&t.description)
                    + self.count(t.input_schema.text())
            })
            .sum();
        messages.iter().map(|m| self.message(m)).sum::<u64>() + tools + 3
    }
}

/// The context window of `model`, in tokens, for the families known here;
/// 128,000 for any other.
pub fn context_window(model: &str) -> u64 {
    let m = model.to_ascii_lowercase();
    let table: [(&str, u64); 10] = [
        ("gpt-4.1", 1_047_576),
        ("gpt-5", 400_000),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5", 16_385),
        ("o1", 200_000),
        ("o3", 200_000),
        ("claude", 200_000),
        ("gemini", 1_048_576),
    ];
    table.iter().find(|(prefix, _)| m.starts_with(prefix)).map_or(128_000, |(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_count_exactly_and_others_estimate() {
        let exact = TokenCounter::for_model("gpt-4o");
        assert!(exact.is_exact());
        assert_eq!(exact.count("hello world"), 2);
        let estimate = TokenCounter::for_model("claude-sonnet-4");
        assert!(!estimate.is_exact());
        assert_eq!(estimate.count("hello world"), 3);
        let message = Message::new(reson_trace::Role::User, "hello world");
        assert_eq!(exact.message(&message), 6);
    }

    #[test]
    fn each_image_counts_the_same_stored_or_inline() {
        use reson_trace::{ContentPart, ImageRef, Role};
        let counter = TokenCounter::estimate();
        let text = Message::new(Role::Tool, "shot");
        let mut shots = text.clone();
        shots.content.push(ContentPart::ImageUrl { url: "data:image/png;base64,iVBO".into() });
        shots.content.push(ContentPart::Image(ImageRef {
            media_type: "image/png".into(),
            name: "000003-2.png".into(),
            bytes: 5_000_000,
            width: 4000,
            height: 3000,
        }));
        assert_eq!(counter.message(&shots), counter.message(&text) + 2 * PER_IMAGE);
    }

    #[test]
    fn windows_by_family() {
        assert_eq!(context_window("gpt-4o-mini"), 128_000);
        assert_eq!(context_window("claude-opus-4"), 200_000);
        assert_eq!(context_window("scripted"), 128_000);
    }
}
