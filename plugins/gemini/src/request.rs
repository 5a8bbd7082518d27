//! The outgoing request: the host's OpenAI-shaped chat request turned into
//! a Gemini `GenerateContentRequest` and the HTTP request around it.

use crate::schema;
use crate::settings::Settings;
use crate::signatures::Signatures;
use reson_sdk::host::http;
use reson_sdk::provider::{
    ChatRequest, ContentPart, ImageSource, Message, Params, ProviderError, Role, ToolSpec,
};
use serde_json::{Map, Number, Value, json};

/// The media type sent for an image URL whose extension says nothing.
const DEFAULT_IMAGE_TYPE: &str = "image/png";

/// The HTTP request performing `request`. The API key is a secret
/// reference the host fills in; the plugin never holds it.
pub fn http_request(
    settings: &Settings,
    request: &ChatRequest,
) -> Result<http::Request, ProviderError> {
    let body = body(request)?;
    Ok(http::Request {
        method: "POST".to_owned(),
        url: url(&settings.base_url, &request.params.model, request.params.stream)?,
        headers: vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-goog-api-key".to_owned(), format!("{{{{secret:{}}}}}", settings.secret)),
        ],
        body: Some(body.to_string().into_bytes()),
        // The host bounds the request by the call's deadline.
        timeout_ms: None,
    })
}

/// `{base_url}/models/{model}:generateContent`, or
/// `:streamGenerateContent?alt=sse` for a streamed call.
pub fn url(base_url: &str, model: &str, stream: bool) -> Result<String, ProviderError> {
    let model = model.trim();
    // Gemini names models `models/…`; both spellings are accepted.
    let model = model.strip_prefix("models/").unwrap_or(model);
    if model.is_empty() {
        return Err(ProviderError::BadRequest(
            "no model given: set the model to a Gemini model name such as `gemini-2.5-flash`"
                .to_owned(),
        ));
    }
    let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    Ok(format!("{base_url}/models/{}:{method}", encode_segment(model)))
}

/// The JSON body of a `generateContent` call.
pub fn body(request: &ChatRequest) -> Result<Value, ProviderError> {
    let model = request.params.model.strip_prefix("models/").unwrap_or(&request.params.model);
    let (system, contents) = contents(&request.messages, nests_images(model))?;
    if contents.is_empty() {
        return Err(ProviderError::BadRequest(
            "nothing to send: the request has no user, assistant or tool message with content"
                .to_owned(),
        ));
    }
    let mut body = Map::new();
    if !system.is_empty() {
        body.insert("systemInstruction".to_owned(), json!({ "parts": system }));
    }
    body.insert("contents".to_owned(), Value::Array(contents));
    if !request.tools.is_empty() {
        let declarations = request.tools.iter().map(declaration).collect::<Result<Vec<_>, _>>()?;
        body.insert("tools".to_owned(), json!([{ "functionDeclarations": declarations }]));
    }
    let config = generation_config(&request.params)?;
    if !config.is_empty() {
        body.insert("generationConfig".to_owned(), Value::Object(config));
    }
    let mut body = Value::Object(body);
    if let Some(extra) = &request.params.extra {
        merge(&mut body, parse_extra(extra)?);
    }
    Ok(body)
}

/// The system instruction's parts and the conversation's turns. Gemini
/// wants the roles to alternate, so messages that map to the same role
/// (consecutive tool results, a user message after them) share one turn.
fn contents(messages: &[Message], nested: bool) -> Result<(Vec<Value>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let (role, parts) = match message.role {
            Role::System => {
                // A system instruction holds text only.
                system.extend(texts(message).map(|text| json!({ "text": text })));
                continue;
            }
            Role::User => ("user", user_parts(message)?),
            Role::Assistant => ("model", model_parts(message)),
            Role::Tool => ("user", tool_parts(message, &messages[..i], nested)?),
        };
        // Gemini refuses a turn without parts.
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, last_parts)) if *last == role => last_parts.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    let contents = turns.into_iter().map(|(role, parts)| json!({"role": role, "parts": parts}));
    Ok((system, contents.collect()))
}

/// The non-empty text parts of `message` (Gemini refuses empty text).
fn texts(message: &Message) -> impl Iterator<Item = &str> {
    message.content.iter().filter_map(|part| match part {
        ContentPart::Text(text) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    })
}

fn user_parts(message: &Message) -> Result<Vec<Value>, ProviderError> {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            ContentPart::Text(text) if text.is_empty() => None,
            ContentPart::Text(text) => Some(Ok(json!({ "text": text }))),
            ContentPart::Image(source) => Some(image_part(source)),
        })
        .collect()
}

/// An assistant message as a `model` turn: its text, then its calls, each
/// with the thought signature it came with. Reasoning is not sent back:
/// Gemini's thought summaries are not inputs, the signatures carry that
/// state.
fn model_parts(message: &Message) -> Vec<Value> {
    let signatures = Signatures::from_provider_data(message.provider_data.as_deref());
    let mut parts: Vec<Value> = texts(message).map(|text| json!({ "text": text })).collect();
    if let (Some(signature), Some(last)) = (&signatures.text, parts.last_mut()) {
        last["thoughtSignature"] = json!(signature);
    }
    for (index, call) in message.tool_calls.iter().enumerate() {
        let mut part =
            json!({"functionCall": {"name": call.name, "args": arguments(&call.arguments)}});
        if let Some(signature) = signatures.tool_call(index) {
            part["thoughtSignature"] = json!(signature);
        }
        parts.push(part);
    }
    parts
}

/// A call's arguments as the object Gemini wants. Arguments that are not a
/// JSON object (a model's invalid JSON, kept in the history so the model can
/// see its mistake) are wrapped rather than lost.
fn arguments(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({ "arguments": text }),
    }
}

/// Whether `model` takes a tool result's images inside its
/// `functionResponse` (`parts`, each named by a `displayName` the response
/// refers to with `{"$ref": name}`): the Gemini 3 models do ("multimodal
/// function responses"); earlier ones take only the images as parts of the
/// same turn, after the response.
fn nests_images(model: &str) -> bool {
    model.starts_with("gemini-3")
}

/// A tool result as a `functionResponse` part, with its images: inside it
/// when `nested` (see [`nests_images`]), else after it in the same turn.
/// Gemini has no call ids: a response names its function.
fn tool_parts(
    message: &Message,
    earlier: &[Message],
    nested: bool,
) -> Result<Vec<Value>, ProviderError> {
    let name = message
        .name
        .clone()
        .filter(|name| !name.is_empty())
        .or_else(|| called_name(message.tool_call_id.as_deref()?, earlier))
        .ok_or_else(|| {
            ProviderError::BadRequest(format!(
                "a tool result (call id `{}`) names no tool and answers no earlier call",
                message.tool_call_id.as_deref().unwrap_or_default()
            ))
        })?;
    let text: String = message
        .content
        .iter()
        .filter_map(|part| match part {
            ContentPart::Text(text) => Some(text.as_str()),
            ContentPart::Image(_) => None,
        })
        .collect();
    let mut response = json!({"name": name, "response": {"content": text}});
    let mut after = Vec::new();
    let mut nested_parts = Vec::new();
    for part in &message.content {
        let ContentPart::Image(source) = part else { continue };
        let mut image = image_part(source)?;
        // Only inline bytes nest: a function response's `fileData` is not
        // served by the Gemini API.
        match image.get_mut("inlineData") {
            Some(inline) if nested => {
                // Unique in the request: the earlier messages' count.
                let display = format!("{name}-{}-{}.img", earlier.len(), nested_parts.len() + 1);
                inline["displayName"] = json!(display);
                nested_parts.push(image);
            }
            _ => after.push(image),
        }
    }
    if !nested_parts.is_empty() {
        let refs: Vec<Value> =
            nested_parts.iter().map(|p| json!({"$ref": p["inlineData"]["displayName"]})).collect();
        response["response"]["images"] = Value::Array(refs);
        response["parts"] = Value::Array(nested_parts);
    }
    let mut parts = vec![json!({ "functionResponse": response })];
    parts.extend(after);
    Ok(parts)
}

/// The name of the call `id` in the nearest earlier assistant message
/// (synthesized ids repeat from one answer to the next).
fn called_name(id: &str, earlier: &[Message]) -> Option<String> {
    earlier
        .iter()
        .rev()
        .filter(|m| matches!(m.role, Role::Assistant))
        .find_map(|m| m.tool_calls.iter().find(|call| call.id == id))
        .map(|call| call.name.clone())
}

fn image_part(source: &ImageSource) -> Result<Value, ProviderError> {
    match source {
        ImageSource::Inline(image) => Ok(json!({
            "inlineData": {"mimeType": image.media_type, "data": base64(&image.data)}
        })),
        ImageSource::Url(url) => {
            if let Some(rest) = url.strip_prefix("data:") {
                let (meta, data) = rest
                    .split_once(',')
                    .filter(|(meta, _)| meta.ends_with(";base64"))
                    .ok_or_else(|| {
                        ProviderError::BadRequest(
                            "an image `data:` URL must be base64 (`data:<type>;base64,...`)"
                                .to_owned(),
                        )
                    })?;
                let media_type = meta.split(';').next().filter(|t| !t.is_empty());
                Ok(json!({"inlineData": {
                    "mimeType": media_type.unwrap_or(DEFAULT_IMAGE_TYPE), "data": data
                }}))
            } else if is_http(url) {
                Ok(json!({"fileData": {"mimeType": guess_image_type(url), "fileUri": url}}))
            } else {
                let shown: String = url.chars().take(40).collect();
                Err(ProviderError::BadRequest(format!(
                    "unsupported image URL `{shown}`: use https:, http: or data:"
                )))
            }
        }
    }
}

fn is_http(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// The media type of an image URL, from its path's extension.
fn guess_image_type(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let file = path.rsplit('/').next().unwrap_or_default();
    let extension = file.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("heic") => "image/heic",
        Some("heif") => "image/heif",
        _ => DEFAULT_IMAGE_TYPE,
    }
}

fn declaration(tool: &ToolSpec) -> Result<Value, ProviderError> {
    let schema: Value = serde_json::from_str(&tool.input_schema).map_err(|e| {
        ProviderError::BadRequest(format!("tool `{}` has an invalid input schema: {e}", tool.name))
    })?;
    let mut declaration = json!({"name": tool.name, "description": tool.description});
    if let Some(parameters) = schema::parameters(&schema) {
        declaration["parameters"] = parameters;
    }
    Ok(declaration)
}

fn generation_config(params: &Params) -> Result<Map<String, Value>, ProviderError> {
    let mut config = Map::new();
    if let Some(temperature) = params.temperature {
        config.insert("temperature".to_owned(), number("temperature", temperature)?);
    }
    if let Some(top_p) = params.top_p {
        config.insert("topP".to_owned(), number("top_p", top_p)?);
    }
    if let Some(max_tokens) = params.max_tokens {
        config.insert("maxOutputTokens".to_owned(), json!(max_tokens));
    }
    if !params.stop.is_empty() {
        config.insert("stopSequences".to_owned(), json!(params.stop));
    }
    Ok(config)
}

/// An `f32` as the JSON number it was written as: widening it directly
/// would send 0.7 as 0.699999988079071.
fn number(name: &str, value: f32) -> Result<Value, ProviderError> {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| ProviderError::BadRequest(format!("{name} must be a finite number")))
}

fn parse_extra(extra: &str) -> Result<Value, ProviderError> {
    match serde_json::from_str::<Value>(extra) {
        Ok(object @ Value::Object(_)) => Ok(object),
        _ => Err(ProviderError::BadRequest(
            "params.extra must be a JSON object (merged into the request body)".to_owned(),
        )),
    }
}

/// Merges `extra` into `target`, objects key by key, so that an extra
/// `generationConfig.thinkingConfig` keeps the temperature already set.
fn merge(target: &mut Value, extra: Value) {
    match (target, extra) {
        (Value::Object(target), Value::Object(extra)) => {
            for (key, value) in extra {
                match target.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, extra) => *target = extra,
    }
}

/// Percent-encodes a URL path segment (RFC 3986 unreserved characters stay).
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648), for inline image bytes.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_sdk::provider::{Image, ToolCall};

    fn message(role: Role, text: &str) -> Message {
        Message {
            role,
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentPart::Text(text.into())]
            },
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning: None,
            provider_data: None,
        }
    }

    fn assistant_calling(text: &str, calls: &[(&str, &str, &str)]) -> Message {
        let mut m = message(Role::Assistant, text);
        m.tool_calls = calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*arguments).into(),
            })
            .collect();
        m
    }

    fn tool_result(id: &str, name: Option<&str>, text: &str) -> Message {
        let mut m = message(Role::Tool, text);
        m.tool_call_id = Some(id.into());
        m.name = name.map(Into::into);
        m
    }

    fn params(model: &str, stream: bool) -> Params {
        Params {
            model: model.into(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            stop: Vec::new(),
            stream,
            extra: None,
        }
    }

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, tools: Vec::new(), params: params("gemini-2.5-flash", false) }
    }

    #[test]
    fn a_conversation_becomes_a_system_instruction_and_alternating_turns() {
        let body = body(&request(vec![
            message(Role::System, "You are terse."),
            message(Role::User, "Hi"),
            message(Role::User, "Still there?"),
            message(Role::Assistant, "Yes."),
            message(Role::Assistant, ""),
            message(Role::System, "Answer in French."),
            message(Role::User, "Why?"),
        ]))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "systemInstruction": {"parts": [{"text": "You are terse."},
                                                {"text": "Answer in French."}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "Hi"}, {"text": "Still there?"}]},
                    {"role": "model", "parts": [{"text": "Yes."}]},
                    {"role": "user", "parts": [{"text": "Why?"}]}
                ]
            })
        );
    }

    #[test]
    fn tool_calls_and_consecutive_results_become_function_parts() {
        let mut after = message(Role::User, "Thanks, now summarise.");
        after.content.push(ContentPart::Text(String::new()));
        let body = body(&request(vec![
            message(Role::User, "Weather in Paris and Rome?"),
            assistant_calling(
                "Checking.",
                &[
                    ("call_0", "get_weather", r#"{"city":"Paris"}"#),
                    ("call_1", "get_weather", r#"{"city":"Rome"}"#),
                    ("call_2", "now", "{not json"),
                ],
            ),
            tool_result("call_0", Some("get_weather"), "18°C"),
            // No name: matched to its call by id.
            tool_result("call_1", None, "24°C"),
            tool_result("call_2", Some("now"), "noon"),
            after,
        ]))
        .unwrap();
        assert_eq!(
            body["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
                {"role": "model", "parts": [
                    {"text": "Checking."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
                    {"functionCall": {"name": "now", "args": {"arguments": "{not json"}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"content": "18°C"}}},
                    {"functionResponse": {"name": "get_weather", "response": {"content": "24°C"}}},
                    {"functionResponse": {"name": "now", "response": {"content": "noon"}}},
                    {"text": "Thanks, now summarise."}
                ]}
            ])
        );
    }

    #[test]
    fn a_result_matches_the_nearest_call_with_its_id() {
        // Ids restart at call_0 in every answer.
        let sent = body(&request(vec![
            message(Role::User, "go"),
            assistant_calling("", &[("call_0", "first", "{}")]),
            tool_result("call_0", Some("first"), "1"),
            assistant_calling("", &[("call_0", "second", "{}")]),
            tool_result("call_0", None, "2"),
        ]))
        .unwrap();
        assert_eq!(sent["contents"][4]["parts"][0]["functionResponse"]["name"], "second");
        let orphan = body(&request(vec![message(Role::User, "go"), tool_result("x", None, "?")]));
        assert!(matches!(orphan, Err(ProviderError::BadRequest(m)) if m.contains("`x`")));
    }

    #[test]
    fn thought_signatures_are_sent_back_on_their_parts() {
        let mut answer = assistant_calling(
            "Let me check.",
            &[("call_0", "a", "{}"), ("call_1", "b", r#"{"x":1}"#)],
        );
        answer.reasoning = Some("thinking summary".into());
        answer.provider_data =
            Signatures { text: Some("sigT".into()), tool_calls: vec![Some("sigA".into()), None] }
                .to_provider_data();
        let body = body(&request(vec![message(Role::User, "q"), answer])).unwrap();
        assert_eq!(
            body["contents"][1]["parts"],
            json!([
                {"text": "Let me check.", "thoughtSignature": "sigT"},
                {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "sigA"},
                {"functionCall": {"name": "b", "args": {"x": 1}}}
            ])
        );
    }

    #[test]
    fn images_become_inline_data_or_file_data() {
        let mut user = message(Role::User, "What is this?");
        user.content.extend([
            ContentPart::Image(ImageSource::Inline(Image {
                media_type: "image/jpeg".into(),
                data: b"\xff\xd8\xff".to_vec(),
            })),
            ContentPart::Image(ImageSource::Url("data:image/webp;base64,UklGRg==".into())),
            ContentPart::Image(ImageSource::Url("https://example.com/a/cat.JPG?size=2".into())),
            ContentPart::Image(ImageSource::Url("HTTPS://example.com/noext".into())),
        ]);
        let mut result = tool_result("call_0", Some("screenshot"), "taken");
        result
            .content
            .push(ContentPart::Image(ImageSource::Url("data:image/png;base64,iVBO".into())));
        let sent = vec![user, assistant_calling("", &[("call_0", "screenshot", "{}")]), result];
        let body = body(&request(sent.clone())).unwrap();
        assert_eq!(
            body["contents"][0]["parts"],
            json!([
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}},
                {"inlineData": {"mimeType": "image/webp", "data": "UklGRg=="}},
                {"fileData": {"mimeType": "image/jpeg",
                              "fileUri": "https://example.com/a/cat.JPG?size=2"}},
                {"fileData": {"mimeType": "image/png", "fileUri": "HTTPS://example.com/noext"}}
            ])
        );
        assert_eq!(
            body["contents"][2]["parts"],
            json!([
                {"functionResponse": {"name": "screenshot", "response": {"content": "taken"}}},
                {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}
            ])
        );
        // Gemini 3 takes inline images inside the function response.
        let mut gemini3 = request(sent.clone());
        gemini3.params.model = "models/gemini-3-pro-preview".into();
        let nested = super::body(&gemini3).unwrap();
        assert_eq!(
            nested["contents"][2]["parts"],
            json!([{"functionResponse": {
                "name": "screenshot",
                "response": {"content": "taken", "images": [{"$ref": "screenshot-2-1.img"}]},
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBO",
                                          "displayName": "screenshot-2-1.img"}}]
            }}])
        );
        for bad in ["ftp://x/y.png", "data:image/png,rawbytes", "file:///etc/passwd"] {
            let mut user = message(Role::User, "");
            user.content.push(ContentPart::Image(ImageSource::Url(bad.into())));
            assert!(matches!(body_of(user), Err(ProviderError::BadRequest(_))), "{bad}");
        }
    }

    fn body_of(message: Message) -> Result<Value, ProviderError> {
        body(&request(vec![message]))
    }

    #[test]
    fn tools_and_generation_config_and_extra() {
        let mut request = request(vec![message(Role::User, "hi")]);
        request.tools = vec![
            ToolSpec {
                name: "read".into(),
                description: "Reads a file.".into(),
                input_schema: r#"{"$schema":"https://json-schema.org/draft/2020-12/schema",
                    "type":"object","additionalProperties":false,
                    "properties":{"path":{"type":"string"}},"required":["path"]}"#
                    .into(),
            },
            ToolSpec {
                name: "now".into(),
                description: "The time.".into(),
                input_schema: r#"{"type":"object","properties":{}}"#.into(),
            },
        ];
        request.params.temperature = Some(0.7);
        request.params.top_p = Some(0.95);
        request.params.max_tokens = Some(1024);
        request.params.stop = vec!["END".into()];
        request.params.extra = Some(
            r#"{"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}},
                "safetySettings": []}"#
                .into(),
        );
        let body = body(&request).unwrap();
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [
                {"name": "read", "description": "Reads a file.",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}},
                {"name": "now", "description": "The time."}
            ]}])
        );
        assert_eq!(
            body["generationConfig"],
            json!({"temperature": 0.7, "topP": 0.95, "maxOutputTokens": 1024,
                   "stopSequences": ["END"], "thinkingConfig": {"thinkingBudget": 0}})
        );
        assert_eq!(body["safetySettings"], json!([]));
        assert!(body.to_string().contains(r#""temperature":0.7"#));
    }

    #[test]
    fn bad_inputs_are_bad_requests() {
        let mut bad_schema = request(vec![message(Role::User, "hi")]);
        bad_schema.tools.push(ToolSpec {
            name: "broken".into(),
            description: String::new(),
            input_schema: "{".into(),
        });
        assert!(
            matches!(body(&bad_schema), Err(ProviderError::BadRequest(m)) if m.contains("broken"))
        );
        let mut bad_extra = request(vec![message(Role::User, "hi")]);
        bad_extra.params.extra = Some("[1]".into());
        assert!(matches!(body(&bad_extra), Err(ProviderError::BadRequest(_))));
        let mut nan = request(vec![message(Role::User, "hi")]);
        nan.params.temperature = Some(f32::NAN);
        assert!(matches!(body(&nan), Err(ProviderError::BadRequest(_))));
        let empty = request(vec![message(Role::System, "only a system prompt")]);
        assert!(matches!(body(&empty), Err(ProviderError::BadRequest(m)) if m.contains("nothing")));
    }

    #[test]
    fn the_http_request_posts_json_with_the_key_as_a_secret_reference() {
        let settings =
            Settings::load(|key| (key == "api_key_secret").then(|| "MY_KEY".into())).unwrap();
        let mut chat = request(vec![message(Role::User, "hi")]);
        let http = http_request(&settings, &chat).unwrap();
        assert_eq!(http.method, "POST");
        assert_eq!(
            http.url,
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        );
        assert_eq!(
            http.headers,
            [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-goog-api-key".to_owned(), "{{secret:MY_KEY}}".to_owned())
            ]
        );
        let sent: Value = serde_json::from_slice(&http.body.unwrap()).unwrap();
        assert_eq!(sent["contents"][0]["parts"][0]["text"], "hi");

        chat.params = params("models/gemini-2.5-pro", true);
        assert!(
            http_request(&settings, &chat)
                .unwrap()
                .url
                .ends_with("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse")
        );
        assert_eq!(
            url("http://h/v1", "odd/{{secret:K}} name", false).unwrap(),
            "http://h/v1/models/odd%2F%7B%7Bsecret%3AK%7D%7D%20name:generateContent"
        );
        assert!(matches!(url("http://h", " ", false), Err(ProviderError::BadRequest(_))));
    }
}
