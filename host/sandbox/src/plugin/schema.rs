//! A tool's input schema, shared rather than copied.

use serde::{Serialize, Serializer};
use std::ops::Deref;
use std::sync::Arc;

/// A JSON Schema of a tool's arguments, with its JSON text. Tool listings
/// are built once or more per loop iteration (every model call offers
/// every tool, every call is dispatched against them), so a clone shares
/// the parsed value, and the text providers are sent is made once.
#[derive(Clone, PartialEq)]
pub struct Schema(Arc<Parts>);

#[derive(PartialEq)]
struct Parts {
    value: serde_json::Value,
    text: String,
}

impl Schema {
    /// The schema as compact JSON text.
    pub fn text(&self) -> &str {
        &self.0.text
    }
}

impl From<serde_json::Value> for Schema {
    fn from(value: serde_json::Value) -> Self {
        let text = value.to_string();
        Self(Arc::new(Parts { value, text }))
    }
}

impl Deref for Schema {
    type Target = serde_json::Value;

    fn deref(&self) -> &serde_json::Value {
        &self.0.value
    }
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.value.fmt(f)
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.value.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_clone_shares_the_value_and_the_text_is_the_compact_json() {
        let schema = Schema::from(json!({ "type": "object", "required": ["a"] }));
        let copy = schema.clone();
        assert!(Arc::ptr_eq(&schema.0, &copy.0));
        assert_eq!(copy.text(), r#"{"required":["a"],"type":"object"}"#);
        assert_eq!(copy["type"], "object");
        assert_eq!(serde_json::to_value(&copy).unwrap(), *schema);
    }
}
