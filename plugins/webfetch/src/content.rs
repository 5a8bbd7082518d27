//! What a response body becomes for the model: HTML turned into Markdown or
//! plain text, other text as it is, binary content refused; then capped.

use html2text::render::TrivialDecorator;
use schemars::JsonSchema;
use serde::Deserialize;

/// How an HTML page comes back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Plain text, without markup.
    Text,
    /// Markdown: headings, links, lists, code blocks and tables kept.
    #[default]
    Markdown,
}

/// Elements whose content is not part of what a page says: code, styling,
/// fallbacks for browsers without JavaScript, and drawings.
const SKIPPED_ELEMENTS: [&str; 7] =
    ["script", "style", "noscript", "template", "svg", "canvas", "iframe"];
/// Line width of plain text; wide, so that wrapping rarely splits a sentence.
const TEXT_WIDTH: usize = 200;
/// The most bytes of HTML converted. Parsing and laying out a page takes
/// tens of times its size in memory; 2 MiB of HTML usually holds more text
/// than the default `max_bytes` lets through.
const MAX_HTML_BYTES: usize = 2 << 20;

/// What kind of content a response holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    /// An HTML page, to convert.
    Html,
    /// Text to return as it is (plain text, JSON, XML, source code, ...).
    Text,
    /// Anything else, with the media type to name in the error.
    Binary(String),
}

/// Classifies a body by its `Content-Type` header value, or, when there is
/// none, by a look at the body itself.
pub fn classify(content_type: Option<&str>, body: &[u8]) -> Kind {
    let Some(media_type) = content_type.map(media_type).filter(|t| !t.is_empty()) else {
        return match std::str::from_utf8(strip_bom(body)) {
            Ok(text) if text.trim_start().starts_with('<') => Kind::Html,
            Ok(text) if !text.contains('\0') => Kind::Text,
            _ => Kind::Binary("no content type".to_owned()),
        };
    };
    match media_type.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        t if is_text(t) => Kind::Text,
        _ => Kind::Binary(media_type),
    }
}

/// `text/html` from `Text/HTML; charset=utf-8`.
fn media_type(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// Whether a media type (lower case, without parameters) is text a model can
/// read as it is.
fn is_text(media_type: &str) -> bool {
    const TEXT_APPLICATIONS: [&str; 12] = [
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/graphql",
        "application/x-ndjson",
    ];
    media_type.starts_with("text/")
        || media_type.ends_with("+json")
        || media_type.ends_with("+xml")
        || TEXT_APPLICATIONS.contains(&media_type)
}

/// `body` without the UTF-8 byte order mark some servers put first.
fn strip_bom(body: &[u8]) -> &[u8] {
    body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body)
}

/// The text of a body of `kind`, in `format` if it is HTML. Bytes that are
/// not UTF-8 show as U+FFFD; binary content is refused.
pub fn render(kind: &Kind, body: &[u8], format: Format) -> Result<String, String> {
    let text = String::from_utf8_lossy(strip_bom(body));
    match kind {
        Kind::Html => {
            let (html, cut) = html_prefix(&text, MAX_HTML_BYTES);
            let mut converted = convert(html, format)?;
            if cut {
                converted.push_str(&format!(
                    "\n\n[truncated: only the first {} of the page's {} bytes of HTML were \
                     converted]",
                    html.len(),
                    text.len()
                ));
            }
            Ok(converted)
        }
        Kind::Text => Ok(text.into_owned()),
        Kind::Binary(media_type) => Err(format!("the content is binary ({media_type})")),
    }
}

/// At most the first `max` bytes of `html`, and whether anything was cut. A
/// tag the cut would split is left out whole, so no half tag shows as text.
fn html_prefix(html: &str, max: usize) -> (&str, bool) {
    if html.len() <= max {
        return (html, false);
    }
    let end = html.floor_char_boundary(max);
    let end = match (html[..end].rfind('<'), html[..end].rfind('>')) {
        (Some(open), close) if close.is_none_or(|close| close < open) => open,
        _ => end,
    };
    (&html[..end], true)
}

/// HTML as Markdown or plain text, without the [`SKIPPED_ELEMENTS`].
fn convert(html: &str, format: Format) -> Result<String, String> {
    match format {
        Format::Markdown => htmd::HtmlToMarkdown::builder()
            .skip_tags(SKIPPED_ELEMENTS.to_vec())
            .build()
            .convert(html)
            .map_err(|err| format!("cannot convert the HTML to Markdown: {err}")),
        Format::Text => {
            let hidden = format!("{} {{ display: none }}", SKIPPED_ELEMENTS.join(", "));
            html2text::config::with_decorator(TrivialDecorator::new())
                .no_table_borders()
                .add_css(&hidden)
                .and_then(|config| config.string_from_read(html.as_bytes(), TEXT_WIDTH))
                .map(|mut plain| {
                    // Block elements leave blank lines behind at the end.
                    plain.truncate(plain.trim_end().len());
                    plain
                })
                .map_err(|err| format!("cannot convert the HTML to text: {err}"))
        }
    }
}

/// `text` cut to at most `max_bytes` bytes, the note saying so included.
/// `max_bytes` must leave room for the note (see `MIN_MAX_BYTES`).
pub fn cap(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let note = format!(
        "\n\n[truncated: the text has {} bytes, more than max_bytes ({max_bytes})]",
        text.len()
    );
    let end = text.floor_char_boundary(max_bytes.saturating_sub(note.len()));
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_decide_the_kind() {
        assert_eq!(classify(Some("text/html; charset=utf-8"), b""), Kind::Html);
        assert_eq!(classify(Some("Application/XHTML+XML"), b""), Kind::Html);
        assert_eq!(classify(Some("text/plain"), b"<not html>"), Kind::Text);
        assert_eq!(classify(Some("text/markdown; charset=UTF-8"), b"# x"), Kind::Text);
        assert_eq!(classify(Some("application/json"), b"{}"), Kind::Text);
        assert_eq!(classify(Some("application/rss+xml"), b"<rss/>"), Kind::Text);
        assert_eq!(classify(Some("application/vnd.api+json"), b"{}"), Kind::Text);
        assert_eq!(classify(Some("image/png"), b"\x89PNG"), Kind::Binary("image/png".into()));
        assert_eq!(
            classify(Some("application/octet-stream"), b"text"),
            Kind::Binary("application/octet-stream".into())
        );
    }

    #[test]
    fn without_a_content_type_the_body_decides() {
        assert_eq!(classify(None, b"\xef\xbb\xbf  <!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(classify(Some(""), b"<p>x</p>"), Kind::Html);
        assert_eq!(classify(None, b"plain words"), Kind::Text);
        assert_eq!(classify(None, b"\x00\x01\x02"), Kind::Binary("no content type".into()));
        assert_eq!(classify(None, b"\xff\xfe\x00"), Kind::Binary("no content type".into()));
    }

    const PAGE: &str = r#"<!doctype html><html><head><title>Doc</title>
        <style>body { color: red }</style><script>if (1 < 2) alert("x")</script></head>
        <body><h1>Hello &amp; welcome</h1>
        <p>Some <b>bold</b> text and <a href="https://example.com/a">a link</a>.</p>
        <ul><li>one</li><li>two</li></ul>
        <pre><code>fn main() {}</code></pre><noscript>Enable JavaScript</noscript>
        </body></html>"#;

    #[test]
    fn html_becomes_markdown_without_scripts_or_styles() {
        let md = render(&Kind::Html, PAGE.as_bytes(), Format::Markdown).unwrap();
        assert!(md.contains("# Hello & welcome"), "{md}");
        assert!(md.contains("Some **bold** text and [a link](https://example.com/a)."), "{md}");
        assert!(md.contains("*   one\n*   two"), "{md}");
        assert!(md.contains("```\nfn main() {}\n```"), "{md}");
        for hidden in ["color", "alert", "Enable JavaScript"] {
            assert!(!md.contains(hidden), "{hidden} in {md}");
        }
    }

    #[test]
    fn html_becomes_plain_text_without_markup() {
        let text = render(&Kind::Html, PAGE.as_bytes(), Format::Text).unwrap();
        assert!(text.contains("Hello & welcome"), "{text}");
        assert!(text.contains("Some bold text and a link"), "{text}");
        assert!(text.ends_with("fn main() {}"), "{text}");
        for hidden in ["#", "**", "[", "*", "color", "alert", "<p>", "Enable JavaScript"] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
    }

    #[test]
    fn only_the_start_of_a_huge_page_is_converted_and_that_is_said() {
        assert_eq!(html_prefix("<p>short</p>", 12), ("<p>short</p>", false));
        assert_eq!(html_prefix("<p>one</p><p>two</p>", 12), ("<p>one</p>", true));
        assert_eq!(html_prefix("<p>one two three", 10), ("<p>one two", true));
        assert_eq!(html_prefix("ééé", 3), ("é", true));

        let page = format!("<p>{}</p>", "word ".repeat(MAX_HTML_BYTES / 4));
        let md = render(&Kind::Html, page.as_bytes(), Format::Markdown).unwrap();
        assert!(md.starts_with("word word"));
        let note = format!(
            "word\n\n[truncated: only the first {} of the page's {} bytes of HTML were converted]",
            MAX_HTML_BYTES,
            page.len()
        );
        assert!(md.ends_with(&note), "{}", &md[md.len() - 200..]);
    }

    #[test]
    fn other_text_comes_back_as_it_is() {
        let json = br#"{"a": "<b>"}"#;
        assert_eq!(render(&Kind::Text, json, Format::Markdown).unwrap(), r#"{"a": "<b>"}"#);
        assert_eq!(
            render(&Kind::Text, b"caf\xc3\xa9 \xff", Format::Text).unwrap(),
            "café \u{fffd}"
        );
        assert_eq!(
            render(&Kind::Binary("image/png".into()), b"", Format::Text).unwrap_err(),
            "the content is binary (image/png)"
        );
    }

    #[test]
    fn long_text_is_cut_with_a_note_within_the_cap() {
        assert_eq!(cap("short".to_owned(), 5), "short");
        let capped = cap("é".repeat(300), 256);
        assert!(capped.len() <= 256, "{}", capped.len());
        assert!(capped.starts_with("éé"));
        assert!(
            capped.ends_with("\n\n[truncated: the text has 600 bytes, more than max_bytes (256)]"),
            "{capped}"
        );
    }
}
