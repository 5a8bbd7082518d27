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

pub use crate::text::untrusted;

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
