//! Building the Chat Completions request: the host's messages in OpenAI's
//! shape, tools, parameters, and the HTTP request around them.

use crate::settings::Settings;
use reson_sdk::host::http;
use reson_sdk::provider::{ChatRequest, ContentPart, ImageSource, Message, ProviderError, Role};
use serde_json::{Map, Value, json};

/// The HTTP request for `request`: `POST {base_url}/chat/completions` with a
/// bearer token that the host fills in from the secret. No timeout is set:
/// the host bounds the request by the call's deadline, and a long answer
/// may legitimately take minutes.
pub fn http_request(
    settings: &Settings,
    request: &ChatRequest,
) -> Result<http::Request, ProviderError> {
    let body = serde_json::to_vec(&body(request)?).map_err(|e| {
        ProviderError::BadRequest(format!("openai: cannot serialise the request: {e}"))
    })?;
    let accept = if request.params.stream { "text/event-stream" } else { "application/json" };
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), accept.to_owned()),
    ];
    if let Some(secret) = &settings.api_key_secret {
        headers.push(("authorization".to_owned(), format!("Bearer {{{{secret:{secret}}}}}")));
    }
    Ok(http::Request {
        method: "POST".to_owned(),
        url: settings.url(),
        headers,
        body: Some(body),
        timeout_ms: None,
    })
}

/// The JSON body for `request`. `params.extra` is merged last, key by key,
/// so it can override anything; a `null` there removes the key (for
/// example `{"max_tokens": null, "max_completion_tokens": 4096}` for
/// models that refuse `max_tokens`).
pub fn body(request: &ChatRequest) -> Result<Value, ProviderError> {
    let params = &request.params;
    let mut body = Map::new();
    body.insert("model".into(), params.model.clone().into());
    body.insert("messages".into(), messages(&request.messages)?.into());
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                let parameters: Value = serde_json::from_str(&tool.input_schema).map_err(|e| {
                    ProviderError::BadRequest(format!(
                        "openai: the input schema of tool `{}` is not valid JSON: {e}",
                        tool.name
                    ))
                })?;
                Ok(json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": parameters,
                    },
                }))
            })
            .collect::<Result<Vec<_>, ProviderError>>()?;
        body.insert("tools".into(), tools.into());
    }
    if let Some(temperature) = params.temperature {
        body.insert("temperature".into(), rounded(temperature));
    }
    if let Some(top_p) = params.top_p {
        body.insert("top_p".into(), rounded(top_p));
    }
    if let Some(max_tokens) = params.max_tokens {
        body.insert("max_tokens".into(), max_tokens.into());
    }
    if !params.stop.is_empty() {
        body.insert("stop".into(), params.stop.clone().into());
    }
    if params.stream {
        body.insert("stream".into(), true.into());
        // Without this the stream carries no token counts at all.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(extra) = &params.extra {
        let extra: Value = serde_json::from_str(extra).map_err(|e| {
            ProviderError::BadRequest(format!("openai: params.extra is not valid JSON: {e}"))
        })?;
        let Value::Object(extra) = extra else {
            return Err(ProviderError::BadRequest(format!(
                "openai: params.extra must be a JSON object, not {extra}"
            )));
        };
        for (key, value) in extra {
            if value.is_null() {
                body.remove(&key);
            } else {
                body.insert(key, value);
            }
        }
    }
    Ok(Value::Object(body))
}

/// An `f32` parameter as the decimal a user wrote: `0.7f32` widened to
/// `f64` would be sent as 0.699999988079071.
fn rounded(value: f32) -> Value {
    value.to_string().parse::<f64>().map_or(Value::Null, Value::from)
}

/// The conversation in OpenAI's shape.
///
/// OpenAI accepts images only in user messages, so the images of tool
/// results are moved into one user message after the run of tool messages
/// they belong to (each introduced by its call id); the run itself must
/// stay unbroken, right after the assistant message that made the calls.
fn messages(messages: &[Message]) -> Result<Vec<Value>, ProviderError> {
    let mut out = Vec::with_capacity(messages.len());
    let mut tool_images: Vec<Value> = Vec::new();
    for (position, message) in messages.iter().enumerate() {
        if !matches!(message.role, Role::Tool) && !tool_images.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut tool_images)}));
        }
        let mut entry = Map::new();
        match message.role {
            Role::System | Role::User => {
                let role = if matches!(message.role, Role::System) { "system" } else { "user" };
                entry.insert("role".into(), role.into());
                entry.insert("content".into(), content(&message.content));
            }
            Role::Assistant => {
                entry.insert("role".into(), "assistant".into());
                // Reasoning is not sent back: Chat Completions has no field
                // for it, and some servers (DeepSeek) refuse it.
                let content = if message.content.is_empty() && !message.tool_calls.is_empty() {
                    Value::Null
                } else {
                    content(&message.content)
                };
                entry.insert("content".into(), content);
                if !message.tool_calls.is_empty() {
                    let calls: Vec<Value> = message
                        .tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                    entry.insert("tool_calls".into(), calls.into());
                }
            }
            Role::Tool => {
                let Some(call_id) = &message.tool_call_id else {
                    return Err(ProviderError::BadRequest(format!(
                        "openai: message {position} is a tool result without a tool_call_id"
                    )));
                };
                let mut texts = Vec::new();
                let mut images = Vec::new();
                for part in &message.content {
                    match part {
                        ContentPart::Text(text) => texts.push(text.as_str()),
                        ContentPart::Image(source) => images.push(image_part(source)),
                    }
                }
                let mut text = texts.join("\n");
                if !images.is_empty() {
                    let intro = format!("Images from the result of tool call {call_id}:");
                    tool_images.push(json!({"type": "text", "text": intro}));
                    tool_images.append(&mut images);
                    if text.is_empty() {
                        text = "(the result is the images in the next message)".to_owned();
                    }
                }
                entry.insert("role".into(), "tool".into());
                entry.insert("tool_call_id".into(), call_id.clone().into());
                entry.insert("content".into(), text.into());
            }
        }
        if let Some(name) = &message.name
            && !matches!(message.role, Role::Tool)
        {
            entry.insert("name".into(), name.clone().into());
        }
        out.push(Value::Object(entry));
    }
    if !tool_images.is_empty() {
        out.push(json!({"role": "user", "content": tool_images}));
    }
    Ok(out)
}

/// Message content: a plain string when it is one text (what every
/// OpenAI-compatible server accepts), else a list of parts.
fn content(parts: &[ContentPart]) -> Value {
    match parts {
        [] => "".into(),
        [ContentPart::Text(text)] => text.clone().into(),
        parts => parts
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => json!({"type": "text", "text": text}),
                ContentPart::Image(source) => image_part(source),
            })
            .collect::<Vec<_>>()
            .into(),
    }
}

/// An `image_url` part; inline images become `data:` URLs.
fn image_part(source: &ImageSource) -> Value {
    let url = match source {
        ImageSource::Url(url) => url.clone(),
        ImageSource::Inline(image) => {
            format!("data:{};base64,{}", image.media_type, base64(&image.data))
        }
    };
    json!({"type": "image_url", "image_url": {"url": url}})
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::tests::kind;
    use reson_sdk::provider::{Image, Params, ToolCall, ToolSpec};

    fn message(role: Role, content: Vec<ContentPart>) -> Message {
        Message {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning: None,
            provider_data: None,
        }
    }

    fn text(role: Role, text: &str) -> Message {
        message(role, vec![ContentPart::Text(text.to_owned())])
    }

    fn params() -> Params {
        Params {
            model: "gpt-4o".to_owned(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            stop: Vec::new(),
            stream: false,
            extra: None,
        }
    }

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, tools: Vec::new(), params: params() }
    }

    #[test]
    fn a_plain_conversation_becomes_string_contents() {
        let mut user = text(Role::User, "Hi");
        user.name = Some("ana".to_owned());
        let body = body(&request(vec![text(Role::System, "Be brief."), user])).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi", "name": "ana"},
                ],
            })
        );
    }

    #[test]
    fn images_become_image_url_parts_and_inline_ones_data_urls() {
        let user = message(
            Role::User,
            vec![
                ContentPart::Text("What is this?".to_owned()),
                ContentPart::Image(ImageSource::Url("https://example.com/cat.png".to_owned())),
                ContentPart::Image(ImageSource::Inline(Image {
                    media_type: "image/png".to_owned(),
                    data: b"\x89PNG".to_vec(),
                })),
            ],
        );
        let body = body(&request(vec![user])).unwrap();
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            ])
        );
    }

    #[test]
    fn tool_calls_and_results_use_openais_fields() {
        let mut assistant = message(Role::Assistant, Vec::new());
        assistant.reasoning = Some("I should look.".to_owned());
        assistant.tool_calls = vec![
            ToolCall {
                id: "call_abc".to_owned(),
                name: "read".to_owned(),
                arguments: r#"{"path":"a.txt"}"#.to_owned(),
            },
            ToolCall { id: "call_def".to_owned(), name: "list".to_owned(), arguments: "{}".into() },
        ];
        let mut first = text(Role::Tool, "hello");
        first.tool_call_id = Some("call_abc".to_owned());
        let mut second = text(Role::Tool, "a.txt\nb.txt");
        second.tool_call_id = Some("call_def".to_owned());
        let history = vec![text(Role::User, "Read a.txt"), assistant, first, second];
        let body = body(&request(history)).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "Read a.txt"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_abc", "type": "function",
                     "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}},
                    {"id": "call_def", "type": "function",
                     "function": {"name": "list", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "hello"},
                {"role": "tool", "tool_call_id": "call_def", "content": "a.txt\nb.txt"},
            ])
        );
    }

    #[test]
    fn tool_result_images_follow_the_run_of_tool_messages_as_a_user_message() {
        let png = || {
            ContentPart::Image(ImageSource::Inline(Image {
                media_type: "image/png".to_owned(),
                data: b"png".to_vec(),
            }))
        };
        let mut shot =
            message(Role::Tool, vec![ContentPart::Text("Screenshot taken.".into()), png()]);
        shot.tool_call_id = Some("call_1".to_owned());
        let mut bare = message(Role::Tool, vec![png()]);
        bare.tool_call_id = Some("call_2".to_owned());
        let mut assistant = text(Role::Assistant, "Looking.");
        assistant.tool_calls = vec![
            ToolCall { id: "call_1".into(), name: "shot".into(), arguments: "{}".into() },
            ToolCall { id: "call_2".into(), name: "shot".into(), arguments: "{}".into() },
        ];
        let history = vec![assistant, shot, bare, text(Role::User, "Well?")];
        let messages = &body(&request(history)).unwrap()["messages"];
        assert_eq!(messages[0]["content"], "Looking.");
        assert_eq!(
            messages[1],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "Screenshot taken."})
        );
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "call_2",
                   "content": "(the result is the images in the next message)"})
        );
        let image =
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,cG5n"}});
        assert_eq!(
            messages[3],
            json!({"role": "user", "content": [
                {"type": "text", "text": "Images from the result of tool call call_1:"}, image,
                {"type": "text", "text": "Images from the result of tool call call_2:"}, image,
            ]})
        );
        assert_eq!(messages[4], json!({"role": "user", "content": "Well?"}));
        assert_eq!(messages.as_array().unwrap().len(), 5);
    }

    #[test]
    fn a_tool_result_without_a_call_id_is_refused() {
        let err = body(&request(vec![text(Role::User, "x"), text(Role::Tool, "y")])).unwrap_err();
        let expected = "openai: message 1 is a tool result without a tool_call_id";
        assert_eq!(kind(&err), ("bad-request".to_owned(), expected));
    }

    #[test]
    fn tools_and_parameters_are_sent_and_streaming_asks_for_usage() {
        let mut request = request(vec![text(Role::User, "Hi")]);
        request.tools = vec![ToolSpec {
            name: "read".to_owned(),
            description: "Reads a file.".to_owned(),
            input_schema:
                r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#
                    .to_owned(),
        }];
        request.params.temperature = Some(0.7);
        request.params.top_p = Some(0.9);
        request.params.max_tokens = Some(1024);
        request.params.stop = vec!["END".to_owned()];
        request.params.stream = true;
        let body = body(&request).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "Hi"}],
                "tools": [{"type": "function", "function": {
                    "name": "read",
                    "description": "Reads a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                   "required": ["path"]},
                }}],
                "temperature": 0.7,
                "top_p": 0.9,
                "max_tokens": 1024,
                "stop": ["END"],
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn extra_is_merged_last_and_null_removes_a_key() {
        let mut request = request(vec![text(Role::User, "Hi")]);
        request.params.max_tokens = Some(100);
        let extra = r#"{"max_tokens": null, "max_completion_tokens": 4096,
                        "reasoning_effort": "low", "model": "o3"}"#;
        request.params.extra = Some(extra.to_owned());
        let body = body(&request).unwrap();
        assert_eq!(body.get("max_tokens"), None);
        assert_eq!(body["max_completion_tokens"], 4096);
        assert_eq!(body["reasoning_effort"], "low");
        assert_eq!(body["model"], "o3");
    }

    #[test]
    fn bad_extras_and_schemas_are_bad_requests() {
        let mut bad = request(vec![]);
        bad.params.extra = Some("[1]".to_owned());
        let err = body(&bad).unwrap_err();
        let expected = "openai: params.extra must be a JSON object, not [1]";
        assert_eq!(kind(&err), ("bad-request".to_owned(), expected));
        bad.params.extra = Some("{".to_owned());
        let err = body(&bad).unwrap_err();
        let expected = "openai: params.extra is not valid JSON: EOF while parsing an object at \
                        line 1 column 1";
        assert_eq!(kind(&err), ("bad-request".to_owned(), expected));
        let mut bad = request(vec![]);
        bad.tools = vec![ToolSpec {
            name: "t".into(),
            description: String::new(),
            input_schema: "{".into(),
        }];
        let err = body(&bad).unwrap_err();
        let expected = "openai: the input schema of tool `t` is not valid JSON: EOF while parsing \
                        an object at line 1 column 1";
        assert_eq!(kind(&err), ("bad-request".to_owned(), expected));
    }

    #[test]
    fn the_http_request_posts_json_with_the_secret_reference() {
        let settings = Settings::from_config(|_| None).unwrap();
        let mut chat = request(vec![text(Role::User, "Hi")]);
        let http = http_request(&settings, &chat).unwrap();
        assert_eq!(http.method, "POST");
        assert_eq!(http.url, "https://api.openai.com/v1/chat/completions");
        assert_eq!(
            http.headers,
            [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("accept".to_owned(), "application/json".to_owned()),
                ("authorization".to_owned(), "Bearer {{secret:OPENAI_API_KEY}}".to_owned()),
            ]
        );
        assert_eq!(http.timeout_ms, None);
        let sent: Value = serde_json::from_slice(http.body.as_deref().unwrap()).unwrap();
        assert_eq!(sent, body(&chat).unwrap());

        chat.params.stream = true;
        let local = Settings { api_key_secret: None, ..settings };
        let http = http_request(&local, &chat).unwrap();
        assert_eq!(http.headers[1].1, "text/event-stream");
        assert!(!http.headers.iter().any(|(name, _)| name == "authorization"));
    }
}
