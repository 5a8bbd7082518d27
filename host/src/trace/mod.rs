//! Traces: the durable, branchable history of every run.

mod message;

pub use message::{ContentPart, Message, Role, ToolCall, Usage};
