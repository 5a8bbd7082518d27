//! Messages in the OpenAI-compatible shape the host stores. Provider
//! plugins convert from and to their own APIs; the trace keeps this form.

use super::goal::GoalTree;
pub use super::image::ImageRef;
use super::image::{ImageData, check_image, extension};
pub use super::usage::Usage;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The user (or the host speaking for them).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL (`https:` or `data:`). A store keeps the bytes of
    /// a `data:` URL image beside the message and stores an
    /// [`Image`](Self::Image) in its place (see [`ImageRef`]).
    ImageUrl {
        /// The URL.
        url: String,
    },
    /// An image stored beside the message; its bytes come from
    /// [`TraceStore::get_image`](super::TraceStore::get_image).
    Image(ImageRef),
}

/// A tool call made by the assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the matching tool message carries back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Arguments as JSON text, exactly as the model produced them.
    pub arguments: String,
}

/// The text of a healed tool call's synthetic result: the call did not
/// finish, and a later run (or a reader of the trace) records it so.
pub const INTERRUPTED: &str = "Interrupted: this tool call did not finish; the run stopped or crashed before its result was recorded.";

/// A message as stored in a trace. `sequence` is unique in its trace and
/// never reused; `parent_sequence` links messages into a tree whose main
/// path runs from the trace's head back to the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `{trace_id}-{sequence:04}`.
    pub id: String,
    /// The trace it belongs to.
    pub trace_id: String,
    /// Position in the trace, from 1; never reused.
    pub sequence: u64,
    /// The message this one follows; `None` for the root.
    pub parent_sequence: Option<u64>,
    /// Who wrote it.
    pub role: Role,
    /// Text and image parts.
    #[serde(default)]
    pub content: Vec<ContentPart>,
    /// Calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a tool message: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The goal that was current when it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_id: Option<String>,
    /// Reasoning the model showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Provider-specific data to round-trip (thinking signatures, item ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_data: Option<serde_json::Value>,
    /// On a tool message: a summary that replaces the content in later history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_term_memory: Option<String>,
    /// On a tool message: send the content once, then only the summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_output_only_once: bool,
    /// Tokens this message cost (assistant messages).
    #[serde(default)]
    pub usage: Usage,
    /// Cost in USD.
    #[serde(default)]
    pub cost: f64,
    /// Time to produce it (model call or tool run), in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// Why the model stopped (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Written by the host rather than the model or a tool (for example the
    /// "interrupted" result of a healed tool call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
    /// On an assistant message: the model requests it took, failed attempts
    /// included; 0 (not recorded, as in older traces) counts as one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// On a `goal` tool result: the goal tree right after the call, so
    /// that each branch of the trace has its own tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goals: Option<GoalTree>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ContentPart {
    /// An image given as bytes, as a `data:` URL part (which a store keeps
    /// beside the message).
    pub fn image_data(media_type: &str, data: &[u8]) -> Self {
        Self::ImageUrl { url: format!("data:{media_type};base64,{}", BASE64.encode(data)) }
    }
}

impl Message {
    /// A message of `role` with one text part; the store fills in id,
    /// trace, sequence, parent and time when it is added.
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            id: String::new(),
            trace_id: String::new(),
            sequence: 0,
            parent_sequence: None,
            role,
            content: if text.is_empty() { Vec::new() } else { vec![ContentPart::Text { text }] },
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            goal_id: None,
            reasoning: None,
            provider_data: None,
            long_term_memory: None,
            include_output_only_once: false,
            usage: Usage::default(),
            cost: 0.0,
            duration_ms: 0,
            finish_reason: None,
            synthetic: false,
            attempts: 0,
            goals: None,
            created_at_ms: 0,
        }
    }

    /// A tool result answering `call`.
    pub fn tool_result(call: &ToolCall, text: impl Into<String>) -> Self {
        let mut message = Self::new(Role::Tool, text);
        message.tool_call_id = Some(call.id.clone());
        message.name = Some(call.name.clone());
        message
    }

    /// All text parts joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text } => Some(text.as_str()),
                ContentPart::ImageUrl { .. } | ContentPart::Image(_) => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }
}

/// The images a message refers to, by name.
pub(crate) fn referenced(message: &Message) -> impl Iterator<Item = &ImageRef> {
    message.content.iter().filter_map(|part| match part {
        ContentPart::Image(image) => Some(image),
        _ => None,
    })
}

/// Takes the inline images out of `message` (sequence already assigned):
/// each `data:` URL of a valid image becomes a [`ContentPart::Image`], and
/// its bytes are returned to be stored under that name, in order. Anything
/// else (an `https:` URL, a `data:` URL that is not a valid image) stays as
/// it is.
pub(crate) fn take_inline(message: &mut Message) -> Vec<ImageData> {
    let decoded: Vec<Option<Inline>> = message.content.iter().map(inline_image).collect();
    let count = decoded.iter().flatten().count();
    let mut taken = Vec::with_capacity(count);
    for (part, decoded) in message.content.iter_mut().zip(decoded) {
        let Some((media_type, data, (width, height))) = decoded else { continue };
        let ext = extension(&media_type).unwrap_or("png");
        let name = if count == 1 {
            format!("{:06}.{ext}", message.sequence)
        } else {
            format!("{:06}-{}.{ext}", message.sequence, taken.len() + 1)
        };
        *part = ContentPart::Image(ImageRef {
            media_type,
            name: name.clone(),
            bytes: data.len() as u64,
            width,
            height,
        });
        taken.push(ImageData { name, data });
    }
    taken
}

/// An inline image's media type (lower case), bytes, width and height.
type Inline = (String, Vec<u8>, (u32, u32));

/// The image of a `data:` URL part holding a valid one.
fn inline_image(part: &ContentPart) -> Option<Inline> {
    let ContentPart::ImageUrl { url } = part else { return None };
    let rest = url.get(..5).filter(|s| s.eq_ignore_ascii_case("data:")).map(|_| &url[5..])?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?.to_ascii_lowercase();
    let data = BASE64.decode(data).ok()?;
    let size = check_image(&media_type, &data, u64::MAX).ok()?;
    Some((media_type, data, size))
}

/// Gives `message` its place as the next message of `trace`, after
/// `parent`: its id, sequence and time, as every store assigns them.
pub(crate) fn place_next(message: &mut Message, trace: &super::model::Trace, parent: Option<u64>) {
    let seq = trace.last_sequence + 1;
    message.id = format!("{}-{seq:04}", trace.id);
    message.trace_id = trace.id.clone();
    message.sequence = seq;
    message.parent_sequence = parent;
    message.created_at_ms = super::model::now_ms();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tests::PNG;

    fn data_url(media_type: &str, data: &[u8]) -> ContentPart {
        ContentPart::image_data(media_type, data)
    }

    #[test]
    fn inline_images_are_taken_out_and_named_by_sequence() {
        let mut message = Message::new(Role::Tool, "two shots");
        message.sequence = 3;
        message.content.push(data_url("image/png", PNG));
        message.content.push(ContentPart::ImageUrl { url: "https://example.com/a.png".into() });
        message.content.push(data_url("image/png", b"garbage"));
        message.content.push(data_url("IMAGE/PNG", PNG));
        let taken = take_inline(&mut message);
        assert_eq!(
            taken.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            ["000003-1.png", "000003-2.png"]
        );
        assert!(taken.iter().all(|i| i.data == PNG));
        assert_eq!(
            message.content[1],
            ContentPart::Image(ImageRef {
                media_type: "image/png".into(),
                name: "000003-1.png".into(),
                bytes: PNG.len() as u64,
                width: 1,
                height: 1,
            })
        );
        assert!(
            matches!(&message.content[2], ContentPart::ImageUrl { url } if url.starts_with("https:"))
        );
        assert!(matches!(&message.content[3], ContentPart::ImageUrl { .. }), "invalid: kept");
        assert!(matches!(&message.content[4], ContentPart::Image(i) if i.name == "000003-2.png"));

        let mut one = Message::new(Role::Tool, "");
        one.sequence = 12;
        one.content.push(data_url("image/png", PNG));
        assert_eq!(take_inline(&mut one)[0].name, "000012.png");
    }
}
