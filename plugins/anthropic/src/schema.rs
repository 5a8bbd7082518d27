//! Fitting a tool's JSON Schema to what the Messages API accepts.
//!
//! The API refuses a request (every request, whichever tool the model
//! wants) when a tool's `input_schema` is not `"type": "object"` at its
//! root or has `oneOf`, `anyOf` or `allOf` there — the shape a schema
//! derived from a Rust enum has, such as the host's own `goal` tool. Such a
//! root is flattened: the alternatives' properties are merged (a property
//! whose schema differs between alternatives gets an `anyOf` of them, which
//! the API allows below the root), what every alternative requires stays
//! required, and the description lists the alternatives. The schema only
//! gets looser, and the host still checks arguments against the original,
//! so a call that fits only the loose one comes back to the model as an
//! error it can correct.

use serde_json::{Map, Value, json};

/// `schema` in a form the API accepts.
pub fn for_api(schema: Value) -> Value {
    let Value::Object(mut root) = schema else {
        // A boolean schema accepts anything, as does an empty object one.
        return json!({"type": "object"});
    };
    let mut alternatives = branches(&mut root, "oneOf");
    alternatives.extend(branches(&mut root, "anyOf"));
    let all = branches(&mut root, "allOf");
    root.insert("type".into(), json!("object"));
    if alternatives.is_empty() && all.is_empty() {
        return Value::Object(root);
    }

    let mut properties: Vec<(String, Vec<Value>)> = Vec::new();
    let mut required = names(root.get("required"));
    if let Some(Value::Object(own)) = root.remove("properties") {
        properties.extend(own.into_iter().map(|(name, schema)| (name, vec![schema])));
    }
    for branch in &all {
        merge(&mut properties, branch);
        required.extend(names(branch.get("required")));
    }
    for branch in &alternatives {
        merge(&mut properties, branch);
    }
    if let Some((first, rest)) = alternatives.split_first() {
        let common = names(first.get("required"))
            .into_iter()
            .filter(|name| rest.iter().all(|b| names(b.get("required")).contains(name)));
        required.extend(common);
    }
    let mut seen = Vec::new();
    required.retain(|name| {
        let new = !seen.contains(name);
        seen.push(name.clone());
        new
    });

    let properties: Map<String, Value> = properties
        .into_iter()
        .map(|(name, mut variants)| {
            let schema =
                if variants.len() == 1 { variants.remove(0) } else { json!({"anyOf": variants}) };
            (name, schema)
        })
        .collect();
    root.insert("properties".into(), Value::Object(properties));
    root.insert("required".into(), json!(required));
    let lines: Vec<String> = alternatives.iter().filter_map(describe).collect();
    if !lines.is_empty() {
        let list = format!("One of:\n{}", lines.join("\n"));
        let description = match root.get("description").and_then(Value::as_str) {
            Some(own) if !own.is_empty() => format!("{own}\n\n{list}"),
            _ => list,
        };
        root.insert("description".into(), json!(description));
    }
    Value::Object(root)
}

/// The object schemas listed under `key`, removed from `root`.
fn branches(root: &mut Map<String, Value>, key: &str) -> Vec<Map<String, Value>> {
    match root.remove(key) {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::Object(branch) => Some(branch),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The strings of a `required` list.
fn names(required: Option<&Value>) -> Vec<String> {
    required
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Adds `branch`'s properties, keeping each distinct schema of a name once.
fn merge(properties: &mut Vec<(String, Vec<Value>)>, branch: &Map<String, Value>) {
    let Some(Value::Object(own)) = branch.get("properties") else { return };
    for (name, schema) in own {
        match properties.iter_mut().find(|(known, _)| known == name) {
            Some((_, variants)) if variants.contains(schema) => {}
            Some((_, variants)) => variants.push(schema.clone()),
            None => properties.push((name.clone(), vec![schema.clone()])),
        }
    }
}

/// One line of the alternatives list: the branch's description and its
/// required fields, with the constant a field must hold when it has one,
/// since that is what tells the alternatives apart.
fn describe(branch: &Map<String, Value>) -> Option<String> {
    let fields: Vec<String> = names(branch.get("required"))
        .into_iter()
        .map(|name| {
            let constant = branch.get("properties").and_then(|p| p.get(&name)?.get("const"));
            match constant {
                Some(value) => format!("{name}={value}"),
                None => name,
            }
        })
        .collect();
    let description = branch.get("description").and_then(Value::as_str).unwrap_or_default();
    match (description.is_empty(), fields.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("- {description}")),
        (true, false) => Some(format!("- {}", fields.join(", "))),
        (false, false) => Some(format!("- {description} ({})", fields.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_schemas_pass_unchanged_and_others_become_objects() {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}},
                            "required": ["path"], "additionalProperties": false});
        assert_eq!(for_api(schema.clone()), schema);
        assert_eq!(for_api(json!({"properties": {}})), json!({"type": "object", "properties": {}}));
        assert_eq!(for_api(json!(true)), json!({"type": "object"}));
    }

    #[test]
    fn a_root_one_of_is_flattened_like_the_goal_tool() {
        // The shape schemars derives for the host's `goal` tool, shortened.
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "GoalAction",
            "description": "Arguments of `goal`: one action per call.",
            "oneOf": [
                {"type": "object", "description": "Add a goal under the current goal.",
                 "properties": {"action": {"type": "string", "const": "add"},
                                "description": {"type": "string", "description": "What the goal is."}},
                 "required": ["action", "description"], "additionalProperties": false},
                {"type": "object", "description": "Make `goal_id` the current goal.",
                 "properties": {"action": {"type": "string", "const": "focus"},
                                "goal_id": {"type": "string"}},
                 "required": ["action", "goal_id"], "additionalProperties": false}
            ]
        });
        assert_eq!(
            for_api(schema),
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "GoalAction",
                "type": "object",
                "description": "Arguments of `goal`: one action per call.\n\nOne of:\n\
                    - Add a goal under the current goal. (action=\"add\", description)\n\
                    - Make `goal_id` the current goal. (action=\"focus\", goal_id)",
                "properties": {
                    "action": {"anyOf": [{"type": "string", "const": "add"},
                                         {"type": "string", "const": "focus"}]},
                    "description": {"type": "string", "description": "What the goal is."},
                    "goal_id": {"type": "string"}
                },
                "required": ["action"]
            })
        );
    }

    #[test]
    fn all_of_requires_everything_and_keeps_root_properties() {
        let schema = json!({
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "allOf": [
                {"properties": {"name": {"type": "string"}}, "required": ["name", "id"]},
                {"properties": {"id": {"type": "integer"}}}
            ],
            "anyOf": [{"required": ["name"]}, false]
        });
        assert_eq!(
            for_api(schema),
            json!({
                "type": "object",
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                "required": ["id", "name"],
                "description": "One of:\n- name"
            })
        );
    }
}
