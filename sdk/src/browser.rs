//! The host's headless browser, for tool plugins granted `browser` URL
//! patterns. The plugin never touches the browser: it asks the host, which
//! checks every request the page makes against the grant.
//!
//! ```no_run
//! use reson_sdk::browser::{self, Locator};
//!
//! # fn demo() -> Result<(), reson_sdk::ToolError> {
//! let page = browser::current_or_open("https://docs.example.org/")?;
//! browser::fill(page.id, &Locator::css("input[name=q]"), "wasm", true)?;
//! let text = browser::read(page.id, browser::ReadFormat::Markdown, None, None)?;
//! # let _ = text; Ok(())
//! # }
//! ```

use crate::ToolError;
pub use crate::bindings::tool_world::reson::plugin::browser::{
    BrowserError, FormField, Link, Locator, PageId, PageInfo, PageText, ReadFormat, RoleName,
    WaitCondition, back, click, close, fill, form_fields, links, navigate, open, pages, read,
    screenshot, wait,
};

impl Locator {
    /// The first element matching a CSS selector.
    pub fn css(selector: impl Into<String>) -> Self {
        Self::Css(selector.into())
    }

    /// The first element of an ARIA role whose accessible name contains
    /// `name` (any case), or of the role alone.
    pub fn role(role: impl Into<String>, name: Option<String>) -> Self {
        Self::Role(RoleName { role: role.into(), name })
    }
}

/// What went wrong, in words for the model (the generated `Display` is
/// the debug form).
pub fn message(err: &BrowserError) -> String {
    match err {
        BrowserError::Denied(why) => why.clone(),
        BrowserError::Timeout => "timed out".to_owned(),
        BrowserError::NotFound(what) => format!("no element matches {what}"),
        BrowserError::TooLarge(cap) => {
            format!("over the host's cap of {cap} (bytes, or open pages)")
        }
        BrowserError::Failed(why) => why.clone(),
    }
}

impl From<BrowserError> for ToolError {
    fn from(err: BrowserError) -> Self {
        match err {
            BrowserError::Denied(_) => Self::Denied(message(&err)),
            _ => Self::Failed(message(&err)),
        }
    }
}

/// `text` a page chose (a title, a URL, a link's text), labelled for the
/// model as the host labels page content: `⟦untrusted WHAT: text⟧`, or
/// with the text on lines of its own between the marks when it has several.
/// The host hands out no page text that holds a mark (`⟦`, `⟧` or a
/// look-alike); they are escaped here too, so that whatever the text, it
/// cannot close its label and speak as the plugin. `what` is the plugin's
/// own words.
pub fn untrusted(what: &str, text: &str) -> String {
    let mut body = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\u{27e6}' | '\u{27e7}' | '\u{301a}' | '\u{301b}') {
            body.extend(c.escape_unicode());
        } else {
            body.push(c);
        }
    }
    if body.contains('\n') {
        format!("\u{27e6}untrusted {what}:\n{body}\n\u{27e7}")
    } else {
        format!("\u{27e6}untrusted {what}: {body}\u{27e7}")
    }
}

/// The session's newest page, or a new one at `url` when none is open.
pub fn current_or_open(url: &str) -> Result<PageInfo, BrowserError> {
    match pages().pop() {
        Some(page) => Ok(page),
        None => open(url),
    }
}

/// The session's newest page, if any.
pub fn current() -> Option<PageInfo> {
    pages().pop()
}
