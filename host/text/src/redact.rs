//! The one redaction point: every secret value the host reads is registered
//! here, and every string the host writes (errors, events, trace files,
//! logs, terminal output) and every response a guest receives goes through
//! [`redact`], [`redact_bytes`] or a [`StreamRedactor`] on its way out.
//!
//! A secret is caught in each form a server or a library is likely to give
//! it back in: raw, percent-encoded (by the character sets of common
//! encoders, either hex case, `+` for space),
//! base64 (standard and URL-safe, padded or not, at each of the three byte
//! alignments, so a secret inside `user:secret` Basic auth is caught), hex,
//! and JSON-escaped (`\/`, `\uXXXX`); and each of those once more
//! JSON-escaped or percent-encoded, as when it sits inside a JSON error
//! message or a URL. One Aho-Corasick automaton matches
//! all of them at once; it is rebuilt only when a secret is added, and a
//! process with no secret pays one atomic load per call.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// The fewest bytes a secret may have: a shorter value would redact
/// unrelated text and is too easy to guess anyway.
pub const MIN_SECRET_BYTES: usize = 8;

/// The fewest different bytes a secret may be made of.
const MIN_DISTINCT_BYTES: usize = 5;

/// Everything but RFC 3986's unreserved characters: how the host writes a
/// secret into a URL, and how most URL libraries encode a component.
const URL_COMPONENT: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// What JavaScript's `encodeURIComponent` leaves alone besides letters
/// and digits.
const ENCODE_URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// What other common encoders leave alone besides letters and digits:
/// `application/x-www-form-urlencoded`, JavaScript's `encodeURIComponent`
/// and `encodeURI` (which also keeps the URL's delimiters), Python's
/// `quote`. (`NON_ALPHANUMERIC` itself is how Rust's and Go's strictest
/// encoders write it.)
const OTHER_ENCODERS: [&AsciiSet; 4] = [
    &NON_ALPHANUMERIC.remove(b'*').remove(b'-').remove(b'.').remove(b'_'),
    ENCODE_URI_COMPONENT,
    &ENCODE_URI_COMPONENT
        .remove(b';')
        .remove(b',')
        .remove(b'/')
        .remove(b'?')
        .remove(b':')
        .remove(b'@')
        .remove(b'&')
        .remove(b'=')
        .remove(b'+')
        .remove(b'$')
        .remove(b'#'),
    &NON_ALPHANUMERIC.remove(b'_').remove(b'.').remove(b'-').remove(b'~').remove(b'/'),
];

/// Why a value cannot be used as a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WeakSecret {
    /// Fewer than [`MIN_SECRET_BYTES`] bytes.
    #[error("it is shorter than {MIN_SECRET_BYTES} bytes")]
    TooShort,
    /// Made of too few different characters (`aaaaaaaa`, `abababab`).
    #[error("it is made of fewer than {MIN_DISTINCT_BYTES} different characters")]
    LowVariety,
    /// Digits and separators only: a number, an IP address, a date or a
    /// phone number, which ordinary text is full of.
    #[error("it looks like a number, an address or a date, which ordinary text is full of")]
    Common,
}

/// Whether `value` is distinctive enough to be kept apart from ordinary
/// text, so that redacting it cannot mangle unrelated output.
pub fn check_strength(value: &str) -> Result<(), WeakSecret> {
    if value.len() < MIN_SECRET_BYTES {
        return Err(WeakSecret::TooShort);
    }
    let mut seen = [false; 256];
    for b in value.bytes() {
        seen[usize::from(b)] = true;
    }
    if seen.iter().filter(|&&s| s).count() < MIN_DISTINCT_BYTES {
        return Err(WeakSecret::LowVariety);
    }
    let numeric = value.bytes().all(|b| b.is_ascii_digit() || b" .:-/,+()".contains(&b));
    if numeric || value.parse::<std::net::IpAddr>().is_ok() {
        return Err(WeakSecret::Common);
    }
    Ok(())
}

/// `value` percent-encoded as the host writes it into a URL path or query:
/// everything but `A-Z a-z 0-9 - . _ ~` as `%XX`.
pub fn percent_encoded(value: &str) -> String {
    utf8_percent_encode(value, URL_COMPONENT).to_string()
}

/// Every form of `value` that is redacted, sorted and without duplicates.
pub fn forms(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut forms = vec![value.to_owned()];
    let mut percent = vec![
        percent_encoded(value),
        utf8_percent_encode(value, NON_ALPHANUMERIC).to_string(),
        bytes.iter().map(|b| format!("%{b:02X}")).collect(),
    ];
    percent.extend(OTHER_ENCODERS.iter().map(|set| utf8_percent_encode(value, set).to_string()));
    for encoded in percent {
        let lower = lowercase_escapes(&encoded, '%', 2);
        for form in [encoded, lower] {
            forms.push(form.replace("%20", "+"));
            forms.push(form);
        }
    }
    forms.push(hex::encode(bytes));
    forms.push(hex::encode_upper(bytes));
    for engine in [&STANDARD, &URL_SAFE] {
        for lead in 0..3 {
            // Encoded after `lead` other bytes, the characters from `start`
            // on hold bits of the secret only, up to `stable`; the rest
            // depend on what follows (or are the padding at the end).
            let mut data = vec![0; lead];
            data.extend_from_slice(bytes);
            let encoded = engine.encode(&data);
            let start = (lead * 8).div_ceil(6);
            let stable = data.len() * 8 / 6;
            forms.push(encoded[start..stable].to_owned());
            forms.push(encoded[start..].trim_end_matches('=').to_owned());
            forms.push(encoded[start..].to_owned());
        }
    }
    let json = json_string_body(value);
    let ascii: String = json.chars().map(json_escape_non_ascii).collect();
    let every: String = value.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
    for escaped in [json, ascii, every] {
        let upper = uppercase_escapes(&escaped);
        for form in [escaped, upper] {
            forms.push(form.replace('/', "\\/"));
            forms.push(form);
        }
    }
    // A form inside a JSON string (an API's error message) or a URL
    // component is escaped once more; the guest would undo that layer.
    let nested: Vec<String> = forms
        .iter()
        .flat_map(|form| {
            let json = json_string_body(form);
            [json.replace('/', "\\/"), json, percent_encoded(form)]
        })
        .collect();
    forms.extend(nested);
    forms.sort();
    forms.dedup();
    forms
}

/// `text` as it stands between the quotes of a JSON string.
fn json_string_body(text: &str) -> String {
    let json = serde_json::to_string(text).expect("a string serialises");
    json[1..json.len() - 1].to_owned()
}

/// `c` as JSON writes it with only ASCII allowed (`\uXXXX`, a surrogate
/// pair beyond the BMP).
fn json_escape_non_ascii(c: char) -> String {
    if c.is_ascii() {
        c.to_string()
    } else {
        c.encode_utf16(&mut [0; 2]).iter().map(|u| format!("\\u{u:04x}")).collect()
    }
}

/// `text` with the `digits` characters after each `mark` lowercased.
fn lowercase_escapes(text: &str, mark: char, digits: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut left = 0;
    for c in text.chars() {
        if left > 0 {
            out.push(c.to_ascii_lowercase());
            left -= 1;
        } else {
            out.push(c);
            if c == mark {
                left = digits;
            }
        }
    }
    out
}

/// `text` with the hex digits of every `\uXXXX` escape in upper case.
fn uppercase_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("\\u") {
        let end = (i + 6).min(rest.len());
        out.push_str(&rest[..i + 2]);
        out.push_str(&rest[i + 2..end].to_ascii_uppercase());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Every form of every registered secret, compiled.
struct Matcher {
    automaton: AhoCorasick,
    patterns: Vec<Vec<u8>>,
    longest: usize,
}

impl Matcher {
    /// The length of the longest tail of `buf` that could be the start of
    /// a form, so it must wait for more bytes before it can be judged.
    fn partial_tail(&self, buf: &[u8]) -> usize {
        let from = buf.len().saturating_sub(self.longest.saturating_sub(1));
        (from..buf.len())
            .find(|&s| self.patterns.iter().any(|p| p.starts_with(&buf[s..])))
            .map_or(0, |s| buf.len() - s)
    }
}

struct Registry {
    values: Vec<String>,
    matcher: Option<Arc<Matcher>>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry { values: Vec::new(), matcher: None });
/// Set once the first secret is registered: the fast path reads only this.
static ANY: AtomicBool = AtomicBool::new(false);

fn matcher() -> Option<Arc<Matcher>> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).matcher.clone()
}

/// Marks `value` as secret for the rest of the process. A value too weak
/// to be told apart from ordinary text is refused (and not registered).
pub fn register(value: &str) -> Result<(), WeakSecret> {
    check_strength(value)?;
    if REGISTRY.read().unwrap_or_else(|e| e.into_inner()).values.iter().any(|v| v == value) {
        return Ok(());
    }
    let mut registry = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if registry.values.iter().any(|v| v == value) {
        return Ok(());
    }
    registry.values.push(value.to_owned());
    let mut patterns: Vec<Vec<u8>> =
        registry.values.iter().flat_map(|v| forms(v)).map(String::into_bytes).collect();
    patterns.sort();
    patterns.dedup();
    let automaton = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .expect("the forms of a few secrets fit an automaton");
    let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
    registry.matcher = Some(Arc::new(Matcher { automaton, patterns, longest }));
    ANY.store(true, Ordering::Release);
    Ok(())
}

/// Whether any secret is registered: a caller that must first serialise
/// something to redact it can skip that work while none is.
pub fn active() -> bool {
    ANY.load(Ordering::Acquire)
}

/// `text` with every form of every registered secret replaced by
/// [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let Some(matcher) = matcher() else { return Cow::Borrowed(text) };
    if matcher.automaton.find(text).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    matcher.automaton.replace_all_with(text, &mut out, |_, _, out| {
        out.push_str(REDACTED);
        true
    });
    Cow::Owned(out)
}

/// [`redact`] for bytes that need not be UTF-8.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let Some(matcher) = matcher() else { return Cow::Borrowed(bytes) };
    if matcher.automaton.find(bytes).is_none() {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    matcher.automaton.replace_all_with_bytes(bytes, &mut out, |_, _, out| {
        out.extend_from_slice(REDACTED.as_bytes());
        true
    });
    Cow::Owned(out)
}

/// Redacts a byte stream that arrives in pieces: a secret split across
/// pieces is still caught, because a tail that could be the start of a
/// form (never longer than the longest form minus one byte) is held back
/// until the next piece or [`StreamRedactor::finish`].
#[derive(Debug, Default)]
pub struct StreamRedactor {
    held: Vec<u8>,
}

impl StreamRedactor {
    /// What of the stream so far can be passed on, redacted.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(piece);
        let Some(matcher) = matcher() else { return buf };
        // Every match starting before `cut` is complete in `buf`: a longer
        // one would make the bytes from its start a partial tail.
        let cut = buf.len() - matcher.partial_tail(&buf);
        let mut out = Vec::with_capacity(buf.len());
        let mut pos = 0;
        for found in matcher.automaton.find_iter(&buf) {
            if found.start() >= cut {
                break;
            }
            out.extend_from_slice(&buf[pos..found.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            pos = found.end();
        }
        let keep = pos.max(cut);
        out.extend_from_slice(&buf[pos..keep]);
        self.held = buf.split_off(keep);
        out
    }

    /// The rest of the stream, at its end.
    pub fn finish(self) -> Vec<u8> {
        redact_bytes(&self.held).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_values_are_refused_and_never_redacted() {
        assert_eq!(check_strength("abc123"), Err(WeakSecret::TooShort));
        assert_eq!(check_strength("abababababab"), Err(WeakSecret::LowVariety));
        assert_eq!(check_strength("10.20.30.40"), Err(WeakSecret::Common));
        assert_eq!(check_strength("2026-11-23 10:50"), Err(WeakSecret::Common));
        assert_eq!(check_strength("fe80::1:2:3:4"), Err(WeakSecret::Common));
        assert_eq!(register("192.168.100.200"), Err(WeakSecret::Common));
        assert_eq!(redact("ping 192.168.100.200"), "ping 192.168.100.200");
        assert!(check_strength("sk-a1b2c3d4").is_ok());
    }

    #[test]
    fn every_form_is_redacted() {
        let secret = "Ab+/ é\"x@1#9";
        register(secret).unwrap();
        let samples = [
            secret.to_owned(),
            "Ab%2B%2F%20%C3%A9%22x%401%239".to_owned(),
            "Ab%2b%2f+%c3%a9%22x%401%239".to_owned(),
            hex::encode(secret),
            hex::encode_upper(secret),
            STANDARD.encode(secret),
            URL_SAFE.encode(format!("u:{secret}")),
            STANDARD.encode(format!("user:{secret}!")).trim_end_matches('=').to_owned(),
            STANDARD.encode(format!("x{secret}tail")),
            serde_json::to_string(secret).unwrap(),
            "Ab+\\/ \\u00e9\\\"x@1#9".to_owned(),
            "Ab+/ \\u00E9\\\"x@1#9".to_owned(),
        ];
        for sample in samples {
            let text = format!("before {sample} after");
            let out = redact(&text);
            assert!(out.contains(REDACTED), "{sample} not caught: {out}");
            assert!(!out.contains("x@1#9") && !out.contains("x%401"), "{out}");
        }
    }

    #[test]
    fn streams_are_redacted_across_every_split() {
        let secret = "stream-key-7Qz9";
        register(secret).unwrap();
        let b64 = STANDARD.encode(format!("user:{secret}"));
        let text = format!("a {secret} b {b64} c {} d", percent_encoded(secret)).into_bytes();
        let whole = redact_bytes(&text).into_owned();
        assert!(!String::from_utf8_lossy(&whole).contains("7Qz9"));
        for split in 0..text.len() {
            let mut stream = StreamRedactor::default();
            let mut out = stream.push(&text[..split]);
            out.extend(stream.push(&text[split..]));
            out.extend(stream.finish());
            assert_eq!(out, whole, "split at {split}");
        }
        let mut bytewise = StreamRedactor::default();
        let mut out: Vec<u8> = text.iter().flat_map(|b| bytewise.push(&[*b])).collect();
        out.extend(bytewise.finish());
        assert_eq!(out, whole);
    }

    #[test]
    fn a_stream_without_a_partial_form_is_passed_on_at_once() {
        register("prompt-key-Xy42").unwrap();
        let mut stream = StreamRedactor::default();
        assert_eq!(stream.push(b"data: {\"a\":1}\n\n"), b"data: {\"a\":1}\n\n");
        assert_eq!(stream.push(b"data: prompt-k"), b"data: ");
        assert_eq!(stream.push(b"ey-Xy42!\n"), b"[REDACTED]!\n");
    }
}
