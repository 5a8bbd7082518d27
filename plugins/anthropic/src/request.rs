//! Building a Messages API request from the host's chat request.

use crate::settings::Settings;
use crate::{schema, thinking};
use reson_sdk::provider::{
    ChatRequest, ContentPart, ImageSource, Message, Params, ProviderError, Role, ToolSpec,
};
use serde_json::{Map, Number, Value, json};

/// The API version every request pins.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request sets none: the API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The headers of a Messages API call. The key is a `{{secret:…}}`
/// reference the host fills in.
pub fn headers(settings: &Settings) -> Vec<(String, String)> {
    vec![
        ("x-api-key".to_owned(), settings.api_key_reference()),
        ("anthropic-version".to_owned(), ANTHROPIC_VERSION.to_owned()),
        ("content-type".to_owned(), "application/json".to_owned()),
    ]
}

/// The JSON body for `request`.
pub fn body(request: &ChatRequest) -> Result<Value, ProviderError> {
    let params = &request.params;
    if params.model.trim().is_empty() {
        return Err(bad_request("no model given; name one, for example claude-sonnet-4-5"));
    }
    let (system, messages) = conversation(&request.messages)?;
    let mut body = Map::new();
    body.insert("model".into(), json!(params.model));
    body.insert("max_tokens".into(), json!(params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(tool).collect::<Result<_, _>>()?;
        body.insert("tools".into(), Value::Array(tools));
    }
    sampling(params, &mut body)?;
    if params.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    if let Some(extra) = &params.extra {
        // Extras are how a caller turns on what has no parameter of its own,
        // such as `thinking` or `tool_choice`; they win over our fields.
        match serde_json::from_str(extra) {
            Ok(Value::Object(extra)) => body.extend(extra),
            _ => return Err(bad_request("params.extra must be a JSON object")),
        }
    }
    Ok(Value::Object(body))
}

fn bad_request(message: &str) -> ProviderError {
    ProviderError::BadRequest(format!("anthropic: {message}"))
}

fn sampling(params: &Params, body: &mut Map<String, Value>) -> Result<(), ProviderError> {
    if let Some(temperature) = params.temperature {
        body.insert("temperature".into(), number("temperature", temperature)?);
    }
    if let Some(top_p) = params.top_p {
        body.insert("top_p".into(), number("top_p", top_p)?);
    }
    if !params.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(params.stop));
    }
    Ok(())
}

/// `value` as a JSON number, by way of its shortest decimal form so that
/// 0.7f32 is sent as 0.7, not 0.699999988079071.
fn number(name: &str, value: f32) -> Result<Value, ProviderError> {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| bad_request(&format!("{name} is not a finite number: {value}")))
}

fn tool(spec: &ToolSpec) -> Result<Value, ProviderError> {
    let schema: Value = serde_json::from_str(&spec.input_schema).map_err(|e| {
        bad_request(&format!("tool `{}` has an invalid input schema: {e}", spec.name))
    })?;
    let mut tool = json!({"name": spec.name, "input_schema": schema::for_api(schema)});
    if !spec.description.is_empty() {
        tool["description"] = json!(spec.description);
    }
    Ok(tool)
}

/// The top-level `system` blocks and the `messages` list. The API has no
/// system role inside the conversation, so every system message goes to
/// `system`, in order. Consecutive messages that end up with the same role
/// are merged: that is how tool results, which the API takes as
/// `tool_result` blocks of a user turn, all land in the one user turn that
/// must follow the assistant's `tool_use` blocks.
fn conversation(messages: &[Message]) -> Result<(Vec<Value>, Vec<Value>), ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => {
                system.extend(system_blocks(message)?);
                continue;
            }
            Role::User => ("user", content_blocks(&message.content)?),
            Role::Assistant => ("assistant", assistant_blocks(message)?),
            Role::Tool => ("user", vec![tool_result(message)?]),
        };
        // The API refuses a turn without content.
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last)) if *last_role == role => last.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns =
        turns.into_iter().map(|(role, blocks)| json!({"role": role, "content": blocks})).collect();
    Ok((system, turns))
}

fn system_blocks(message: &Message) -> Result<Vec<Value>, ProviderError> {
    message
        .content
        .iter()
        .filter(|part| !matches!(part, ContentPart::Text(text) if text.is_empty()))
        .map(|part| match part {
            ContentPart::Text(text) => Ok(json!({"type": "text", "text": text})),
            ContentPart::Image(_) => Err(bad_request("a system message cannot hold images")),
        })
        .collect()
}

/// Text and image blocks; empty texts are left out because the API refuses
/// empty text blocks.
fn content_blocks(parts: &[ContentPart]) -> Result<Vec<Value>, ProviderError> {
    let mut blocks = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            ContentPart::Text(text) if text.is_empty() => {}
            ContentPart::Text(text) => blocks.push(json!({"type": "text", "text": text})),
            ContentPart::Image(source) => blocks.push(image_block(source)?),
        }
    }
    Ok(blocks)
}

/// Thinking first (the API wants it ahead of the text it led to), then
/// text, then the tool calls.
fn assistant_blocks(message: &Message) -> Result<Vec<Value>, ProviderError> {
    let mut blocks = thinking::api_blocks(message.provider_data.as_deref());
    blocks.extend(content_blocks(&message.content)?);
    for call in &message.tool_calls {
        // The model may have produced arguments that are not a JSON object;
        // the host has told it so in the tool result, and the API accepts
        // only an object here.
        let input = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    Ok(blocks)
}

fn tool_result(message: &Message) -> Result<Value, ProviderError> {
    let id = message
        .tool_call_id
        .as_ref()
        .ok_or_else(|| bad_request("a tool message has no tool_call_id"))?;
    let mut block = json!({"type": "tool_result", "tool_use_id": id});
    let content = content_blocks(&message.content)?;
    // `content` is optional, and an empty list is refused.
    if !content.is_empty() {
        block["content"] = Value::Array(content);
    }
    Ok(block)
}

fn image_block(source: &ImageSource) -> Result<Value, ProviderError> {
    let source = match source {
        ImageSource::Inline(image) => json!({
            "type": "base64", "media_type": image.media_type, "data": base64(&image.data)
        }),
        ImageSource::Url(url) => match url.get(..5) {
            Some(scheme) if scheme.eq_ignore_ascii_case("data:") => data_url_source(&url[5..])?,
            _ => json!({"type": "url", "url": url}),
        },
    };
    Ok(json!({"type": "image", "source": source}))
}

/// A base64 source from the part of a `data:` URL after the scheme,
/// `image/png;base64,iVBOR…`. The API cannot fetch `data:` URLs itself.
fn data_url_source(rest: &str) -> Result<Value, ProviderError> {
    let (meta, data) =
        rest.split_once(',').ok_or_else(|| bad_request("a data: URL image has no `,`"))?;
    let media_type = meta
        .strip_suffix(";base64")
        .ok_or_else(|| bad_request("a data: URL image must be base64-encoded (`;base64,`)"))?;
    // Parameters such as `;charset=` do not belong in the media type.
    let media_type = media_type.split(';').next().unwrap_or_default();
    Ok(json!({"type": "base64", "media_type": media_type, "data": data}))
}

/// Standard base64 with padding (RFC 4648 §4).
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

    fn tool_message(id: &str, text: &str) -> Message {
        Message { tool_call_id: Some(id.into()), ..message(Role::Tool, text) }
    }

    fn params(model: &str) -> Params {
        Params {
            model: model.into(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            stop: Vec::new(),
            stream: false,
            extra: None,
        }
    }

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, tools: Vec::new(), params: params("claude-sonnet-4-5") }
    }

    #[test]
    fn headers_reference_the_secret_and_pin_the_version() {
        let settings = Settings::load(|_| None).unwrap();
        let headers = headers(&settings);
        let pairs: Vec<(&str, &str)> =
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("x-api-key", "{{secret:ANTHROPIC_API_KEY}}"),
                ("anthropic-version", "2023-06-01"),
                ("content-type", "application/json"),
            ]
        );
    }

    #[test]
    fn a_plain_request_has_system_on_top_and_the_default_max_tokens() {
        let body = body(&request(vec![
            message(Role::System, "You are terse."),
            message(Role::User, "Hello"),
        ]))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "system": [{"type": "text", "text": "You are terse."}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
            })
        );
    }

    #[test]
    fn sampling_parameters_stream_and_extras_are_sent() {
        let mut request = request(vec![message(Role::User, "Hi")]);
        request.params.temperature = Some(0.7);
        request.params.top_p = Some(0.9);
        request.params.max_tokens = Some(1024);
        request.params.stop = vec!["END".into()];
        request.params.stream = true;
        request.params.extra = Some(
            r#"{"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 9000}"#
                .into(),
        );
        let body = body(&request).unwrap();
        assert_eq!(body["temperature"], json!(0.7));
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["stop_sequences"], json!(["END"]));
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert_eq!(body["max_tokens"], json!(9000), "extras win");
        assert!(body.get("system").is_none());
    }

    #[test]
    fn bad_parameters_are_bad_requests() {
        let mut no_model = request(vec![message(Role::User, "Hi")]);
        no_model.params.model = " ".into();
        assert!(
            matches!(body(&no_model), Err(ProviderError::BadRequest(m)) if m.contains("no model"))
        );
        let mut nan = request(vec![message(Role::User, "Hi")]);
        nan.params.temperature = Some(f32::NAN);
        assert!(
            matches!(body(&nan), Err(ProviderError::BadRequest(m)) if m.contains("temperature"))
        );
        for extra in ["[1]", "{", "null"] {
            let mut bad = request(vec![message(Role::User, "Hi")]);
            bad.params.extra = Some(extra.into());
            assert!(
                matches!(body(&bad), Err(ProviderError::BadRequest(m)) if m.contains("params.extra"))
            );
        }
    }

    #[test]
    fn tools_carry_their_schema_as_json() {
        let mut request = request(vec![message(Role::User, "Weather?")]);
        request.tools = vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "Current weather for a city.".into(),
                input_schema: r#"{"type":"object","properties":{"city":{"type":"string"}}}"#.into(),
            },
            ToolSpec {
                name: "noop".into(),
                description: String::new(),
                input_schema: r#"{"type":"object"}"#.into(),
            },
        ];
        let body = body(&request).unwrap();
        assert_eq!(
            body["tools"],
            json!([
                {"name": "get_weather", "description": "Current weather for a city.",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"name": "noop", "input_schema": {"type": "object"}}
            ])
        );
        request.tools[1].input_schema = "{oops".into();
        assert!(matches!(body_err(&request), ProviderError::BadRequest(m) if m.contains("`noop`")));
    }

    fn body_err(request: &ChatRequest) -> ProviderError {
        body(request).unwrap_err()
    }

    #[test]
    fn tool_calls_and_grouped_results_follow_the_api_shape() {
        let mut assistant = message(Role::Assistant, "Let me check both.");
        assistant.tool_calls = vec![
            ToolCall {
                id: "toolu_01A".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            },
            ToolCall {
                id: "toolu_01B".into(),
                name: "get_weather".into(),
                arguments: "{\"ci".into(),
            },
        ];
        let body = body(&request(vec![
            message(Role::User, "Weather in Paris and Oslo?"),
            assistant,
            tool_message("toolu_01A", "18°C, sunny"),
            tool_message("toolu_01B", ""),
            message(Role::User, "<goal-tree>…</goal-tree>"),
        ]))
        .unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Oslo?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me check both."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
                     "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A",
                     "content": [{"type": "text", "text": "18°C, sunny"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_01B"},
                    {"type": "text", "text": "<goal-tree>…</goal-tree>"}
                ]}
            ])
        );
    }

    #[test]
    fn a_tool_message_without_an_id_is_a_bad_request() {
        let err = body_err(&request(vec![message(Role::Tool, "out")]));
        assert!(matches!(err, ProviderError::BadRequest(m) if m.contains("tool_call_id")));
    }

    #[test]
    fn thinking_goes_back_before_the_text_of_assistant_turns() {
        let mut assistant = message(Role::Assistant, "It is 4.");
        assistant.reasoning = Some("2 + 2 = 4".into());
        assistant.provider_data = Some(
            r#"{"anthropic": {"thinking": [{"thinking": "2 + 2 = 4", "signature": "EqQB"}]}}"#
                .into(),
        );
        let body = body(&request(vec![message(Role::User, "2+2?"), assistant])).unwrap();
        assert_eq!(
            body["messages"][1]["content"],
            json!([
                {"type": "thinking", "thinking": "2 + 2 = 4", "signature": "EqQB"},
                {"type": "text", "text": "It is 4."}
            ])
        );
    }

    #[test]
    fn empty_messages_are_left_out_and_systems_are_collected() {
        let body = body(&request(vec![
            message(Role::System, "A"),
            message(Role::User, "Hi"),
            message(Role::Assistant, ""),
            message(Role::System, "B"),
            message(Role::User, "Again"),
        ]))
        .unwrap();
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
        );
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "Hi"}, {"type": "text", "text": "Again"}
            ]}])
        );
    }

    #[test]
    fn images_become_base64_or_url_sources() {
        let mut user = message(Role::User, "What is this?");
        user.content.extend([
            ContentPart::Image(ImageSource::Inline(Image {
                media_type: "image/png".into(),
                data: b"\x89PNG".to_vec(),
            })),
            ContentPart::Image(ImageSource::Url("data:image/jpeg;base64,/9j/4AAQ".into())),
            ContentPart::Image(ImageSource::Url("https://example.com/cat.png".into())),
        ]);
        let body = body(&request(vec![user])).unwrap();
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw=="}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                             "data": "/9j/4AAQ"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
            ])
        );
    }

    #[test]
    fn unusable_data_urls_and_system_images_are_bad_requests() {
        for url in ["data:image/png,rawbytes", "data:image/png;base64"] {
            let mut user = message(Role::User, "");
            user.content.push(ContentPart::Image(ImageSource::Url(url.into())));
            assert!(
                matches!(body_err(&request(vec![user])), ProviderError::BadRequest(_)),
                "{url}"
            );
        }
        let mut system = message(Role::System, "");
        system.content.push(ContentPart::Image(ImageSource::Url("https://e.com/a.png".into())));
        assert!(matches!(body_err(&request(vec![system])), ProviderError::BadRequest(_)));
    }
}
