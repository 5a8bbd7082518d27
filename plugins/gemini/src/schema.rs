//! Tool input schemas rewritten for Gemini's `parameters`, which take an
//! OpenAPI 3.0 subset and refuse the whole request over one key they do not
//! know (`$schema`, `additionalProperties`, `$ref`, type lists, ...). The
//! host's tools carry JSON Schema as `schemars` writes it, so the common
//! constructs are translated rather than only dropped: `$ref` is inlined,
//! `"type": [T, "null"]` and a `{"type": "null"}` branch become
//! `nullable`, `oneOf` becomes `anyOf`, a string `const` becomes an `enum`.

use serde_json::{Map, Value, json};

/// Keys of Gemini's `Schema` copied as they are.
const KEPT: &[&str] = &[
    "description",
    "title",
    "nullable",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "example",
    "propertyOrdering",
];

/// The `format` values Gemini accepts; others (`uint`, `email`, ...) are
/// refused by some models, and the description still tells the model.
const FORMATS: &[&str] = &["enum", "date-time", "int32", "int64", "float", "double"];

/// How deep `$ref`s are followed; a recursive type ends there as `{}`.
const MAX_DEPTH: usize = 32;
/// How many schema nodes one tool's conversion visits at most: a type
/// referring to itself twice would otherwise expand exponentially.
const MAX_NODES: usize = 10_000;

/// The `parameters` of a function declaration for a tool whose arguments
/// follow `schema`, or `None` for a tool without arguments. Gemini wants an
/// object schema with properties there, so a union of objects (a tagged
/// enum of actions) is flattened into one object.
pub fn parameters(schema: &Value) -> Option<Value> {
    let converted = Converter { root: schema, budget: MAX_NODES }.convert(schema, 0);
    let Value::Object(mut object) = converted else { return None };
    if let Some(Value::Array(branches)) = object.remove("anyOf") {
        flatten(&mut object, branches);
    }
    // Gemini refuses an object schema without properties.
    if !object.contains_key("properties") {
        return None;
    }
    object.insert("type".to_owned(), json!("object"));
    Some(Value::Object(object))
}

/// Merges object `branches` into `object`: every property of any branch
/// (string enums of a shared property joined), required only what all
/// branches require, and each branch's description kept in the top
/// description so the model still sees the forms. The host validates the
/// arguments against the tool's own schema, so a mix-up is reported back.
fn flatten(object: &mut Map<String, Value>, branches: Vec<Value>) {
    let mut properties = match object.remove("properties") {
        Some(Value::Object(properties)) => properties,
        _ => Map::new(),
    };
    let mut common: Option<Vec<Value>> = None;
    let mut forms = Vec::new();
    for branch in branches {
        let Value::Object(branch) = branch else { continue };
        if let Some(Value::Object(branch_properties)) = branch.get("properties") {
            for (name, schema) in branch_properties {
                match properties.get_mut(name) {
                    Some(existing) => join_enums(existing, schema),
                    None => {
                        properties.insert(name.clone(), schema.clone());
                    }
                }
            }
        }
        let required: Vec<Value> = match branch.get("required") {
            Some(Value::Array(names)) => names.clone(),
            _ => Vec::new(),
        };
        if let Some(description) = branch.get("description").and_then(Value::as_str) {
            let names: Vec<&str> = required.iter().filter_map(Value::as_str).collect();
            forms.push(format!("- {description} (arguments: {})", names.join(", ")));
        }
        common = Some(match common {
            None => required,
            Some(common) => common.into_iter().filter(|name| required.contains(name)).collect(),
        });
    }
    if !properties.is_empty() {
        object.insert("properties".to_owned(), Value::Object(properties));
    }
    let mut required: Vec<Value> = match object.remove("required") {
        Some(Value::Array(names)) => names,
        _ => Vec::new(),
    };
    for name in common.unwrap_or_default() {
        if !required.contains(&name) {
            required.push(name);
        }
    }
    if !required.is_empty() {
        object.insert("required".to_owned(), Value::Array(required));
    }
    if !forms.is_empty() {
        let intro = object.get("description").and_then(Value::as_str).unwrap_or_default();
        let forms = format!("One of these forms:\n{}", forms.join("\n"));
        let description = if intro.is_empty() { forms } else { format!("{intro}\n\n{forms}") };
        object.insert("description".to_owned(), json!(description));
    }
}

/// Adds the enum values of `other` to those of `existing`.
fn join_enums(existing: &mut Value, other: &Value) {
    let (Some(Value::Array(values)), Some(Value::Array(more))) =
        (existing.get_mut("enum"), other.get("enum"))
    else {
        return;
    };
    for value in more {
        if !values.contains(value) {
            values.push(value.clone());
        }
    }
}

/// A conversion of one tool's schema.
struct Converter<'a> {
    /// The whole schema, which `$ref`s point into.
    root: &'a Value,
    /// Nodes left to visit.
    budget: usize,
}

impl Converter<'_> {
    fn convert(&mut self, schema: &Value, depth: usize) -> Value {
        let Value::Object(map) = schema else {
            // A boolean schema (`true`: anything) has no Gemini counterpart.
            return json!({});
        };
        if depth > MAX_DEPTH || self.budget == 0 {
            return json!({});
        }
        self.budget -= 1;
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            let target = reference.strip_prefix('#').and_then(|pointer| self.root.pointer(pointer));
            let mut resolved = target.map_or_else(|| json!({}), |t| self.convert(t, depth + 1));
            // Keywords next to a `$ref` (a field's own description) win.
            if let Value::Object(resolved) = &mut resolved {
                for key in ["description", "title"] {
                    if let Some(value) = map.get(key) {
                        resolved.insert(key.to_owned(), value.clone());
                    }
                }
            }
            return resolved;
        }

        let mut out = Map::new();
        let mut nullable = false;
        for (key, value) in map {
            match key.as_str() {
                "type" => nullable |= set_type(value, &mut out),
                "properties" => {
                    if let Value::Object(properties) = value {
                        let converted: Map<String, Value> = properties
                            .iter()
                            .map(|(name, schema)| (name.clone(), self.convert(schema, depth + 1)))
                            .collect();
                        if !converted.is_empty() {
                            out.insert(key.clone(), Value::Object(converted));
                        }
                    }
                }
                "items" => {
                    // Draft 7 tuple form: Gemini has one item schema.
                    let item = match value {
                        Value::Array(items) => items.first().unwrap_or(&Value::Null),
                        item => item,
                    };
                    out.insert(key.clone(), self.convert(item, depth + 1));
                }
                "anyOf" | "oneOf" => {
                    if let Value::Array(branches) = value {
                        let mut kept = Vec::new();
                        for branch in branches {
                            if branch.get("type").and_then(Value::as_str) == Some("null") {
                                nullable = true;
                            } else {
                                kept.push(self.convert(branch, depth + 1));
                            }
                        }
                        match kept.len() {
                            0 => {}
                            1 => absorb(&mut out, kept.remove(0)),
                            _ => {
                                out.insert("anyOf".to_owned(), Value::Array(kept));
                            }
                        }
                    }
                }
                "allOf" => {
                    if let Value::Array(parts) = value {
                        for part in parts {
                            absorb(&mut out, self.convert(part, depth + 1));
                        }
                    }
                }
                "enum" => {
                    if let Value::Array(values) = value {
                        nullable |= values.iter().any(Value::is_null);
                        let strings: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
                        // Gemini enums are strings only.
                        if !strings.is_empty() && strings.iter().all(|v| v.is_string()) {
                            out.insert(
                                key.clone(),
                                Value::Array(strings.into_iter().cloned().collect()),
                            );
                        }
                    }
                }
                "const" if value.is_string() => {
                    out.insert("enum".to_owned(), json!([value]));
                }
                "required" => {
                    if let Value::Array(names) = value {
                        let names: Vec<Value> =
                            names.iter().filter(|n| n.is_string()).cloned().collect();
                        out.insert(key.clone(), Value::Array(names));
                    }
                }
                "format" if value.as_str().is_some_and(|f| FORMATS.contains(&f)) => {
                    out.insert(key.clone(), value.clone());
                }
                "default" if !value.is_null() => {
                    out.insert(key.clone(), value.clone());
                }
                key if KEPT.contains(&key) => {
                    out.insert(key.to_owned(), value.clone());
                }
                // `$schema`, `additionalProperties`, `$defs`, `definitions`,
                // `$id`, `examples`, `exclusiveMinimum`, ...: not in Gemini's
                // Schema.
                _ => {}
            }
        }
        if nullable {
            out.insert("nullable".to_owned(), json!(true));
        }
        keep_known_required(&mut out);
        Value::Object(out)
    }
}

/// Sets `type` from a JSON Schema type or type list; returns whether the
/// list allowed `null`.
fn set_type(value: &Value, out: &mut Map<String, Value>) -> bool {
    match value {
        Value::String(name) if name == "null" => true,
        Value::String(_) => {
            out.insert("type".to_owned(), value.clone());
            false
        }
        Value::Array(names) => {
            let types: Vec<&Value> = names.iter().filter(|n| n.as_str() != Some("null")).collect();
            match types.as_slice() {
                [] => {}
                [one] => {
                    out.insert("type".to_owned(), (*one).clone());
                }
                many => {
                    let branches = many.iter().map(|t| json!({ "type": t })).collect();
                    out.insert("anyOf".to_owned(), Value::Array(branches));
                }
            }
            types.len() < names.len()
        }
        _ => false,
    }
}

/// Merges the keys of `schema` into `out`, keeping what `out` already has.
fn absorb(out: &mut Map<String, Value>, schema: Value) {
    if let Value::Object(map) = schema {
        for (key, value) in map {
            out.entry(key).or_insert(value);
        }
    }
}

/// Gemini refuses a `required` name that is not a property.
fn keep_known_required(out: &mut Map<String, Value>) {
    let Some(Value::Array(required)) = out.get("required") else { return };
    let known: Vec<Value> = required
        .iter()
        .filter(|name| {
            let name = name.as_str().unwrap_or_default();
            out.get("properties").and_then(|p| p.get(name)).is_some()
        })
        .cloned()
        .collect();
    if known.is_empty() {
        out.remove("required");
    } else {
        out.insert("required".to_owned(), Value::Array(known));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_and_additional_properties_go_at_every_level() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "ReadArgs",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "path": {"type": "string", "description": "File to read."},
                "additionalProperties": {"type": "string"},
                "opts": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                    "properties": {"n": {"type": "integer", "format": "uint", "minimum": 0}}
                },
                "tags": {"type": "array", "items": {"type": "string", "$schema": "x"}}
            },
            "required": ["path", "missing"]
        });
        let converted = parameters(&schema).unwrap();
        assert_eq!(
            converted,
            json!({
                "title": "ReadArgs",
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to read."},
                    // A property may be called that; only the keyword goes.
                    "additionalProperties": {"type": "string"},
                    "opts": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn schemars_constructs_are_translated() {
        // What schemars 1 writes for optional fields, nested structs and enums.
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "limit": {"type": ["integer", "null"], "format": "int64", "default": null},
                "range": {"anyOf": [{"$ref": "#/$defs/Range"}, {"type": "null"}],
                          "description": "Lines to read."},
                "mode": {"$ref": "#/$defs/Mode", "description": "How."},
                "level": {"oneOf": [{"const": "low", "type": "string"},
                                    {"const": "high", "type": "string"}]}
            },
            "$defs": {
                "Range": {"type": "object", "properties": {"start": {"type": "integer"}},
                          "required": ["start"], "additionalProperties": false},
                "Mode": {"type": "string", "enum": ["fast", "slow"]}
            }
        });
        let converted = parameters(&schema).unwrap();
        assert_eq!(
            converted["properties"],
            json!({
                "limit": {"type": "integer", "format": "int64", "nullable": true},
                "range": {"type": "object", "properties": {"start": {"type": "integer"}},
                          "required": ["start"], "nullable": true, "description": "Lines to read."},
                "mode": {"type": "string", "enum": ["fast", "slow"], "description": "How."},
                "level": {"anyOf": [{"type": "string", "enum": ["low"]},
                                    {"type": "string", "enum": ["high"]}]}
            })
        );
        assert!(converted.get("$defs").is_none());
    }

    #[test]
    fn a_tool_without_arguments_has_no_parameters() {
        let empty = json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(parameters(&empty), None);
        assert_eq!(parameters(&json!(true)), None);
        assert_eq!(parameters(&json!({})), None);
    }

    #[test]
    fn a_union_of_objects_is_flattened_into_one_object() {
        // What schemars writes for an internally tagged enum of actions.
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "GoalArgs",
            "description": "Plan your work.",
            "oneOf": [
                {"description": "Add a goal.", "type": "object",
                 "properties": {"action": {"type": "string", "const": "add"},
                                "description": {"type": "string"}},
                 "required": ["action", "description"]},
                {"description": "Finish a goal.", "type": "object",
                 "properties": {"action": {"type": "string", "const": "done"},
                                "goal_id": {"type": "string"},
                                "summary": {"type": "string"}},
                 "required": ["action", "goal_id"]},
                {"type": "object", "properties": {"action": {"type": "string", "enum": ["list"]}},
                 "required": ["action"]}
            ]
        });
        assert_eq!(
            parameters(&schema).unwrap(),
            json!({
                "title": "GoalArgs",
                "type": "object",
                "description": "Plan your work.\n\nOne of these forms:\n\
                    - Add a goal. (arguments: action, description)\n\
                    - Finish a goal. (arguments: action, goal_id)",
                "properties": {
                    "action": {"type": "string", "enum": ["add", "done", "list"]},
                    "description": {"type": "string"},
                    "goal_id": {"type": "string"},
                    "summary": {"type": "string"}
                },
                "required": ["action"]
            })
        );
    }

    #[test]
    fn recursive_references_end() {
        let schema = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object",
                               "properties": {"children": {"type": "array",
                                                           "items": {"$ref": "#/$defs/Node"}}}}}
        });
        let converted = parameters(&schema).unwrap();
        assert_eq!(converted["properties"]["tree"]["type"], "object");
        let missing = json!({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}});
        assert_eq!(parameters(&missing).unwrap()["properties"]["x"], json!({}));
        // Two references to itself per level: 2^32 expansions without the
        // node budget.
        let doubling = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/T"}},
            "$defs": {"T": {"type": "object", "properties": {"l": {"$ref": "#/$defs/T"},
                                                             "r": {"$ref": "#/$defs/T"}}}}
        });
        assert!(parameters(&doubling).is_some());
    }
}
