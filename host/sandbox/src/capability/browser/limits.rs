//! What one browser call may cost. The call's own deadline bounds every
//! action too (see `HostState::remaining`).

use std::time::Duration;

/// Pages one session may hold open at once.
pub(super) const MAX_PAGES: usize = 8;

/// Largest screenshot returned, in bytes, whatever the plugin asks.
pub(super) const MAX_SCREENSHOT_BYTES: u64 = 8 << 20;

/// Tallest full-page screenshot, in CSS pixels; a longer page is cut.
pub(super) const MAX_SCREENSHOT_HEIGHT: f64 = 8_000.0;

/// Most bytes of text `read` returns, whatever the plugin asks.
pub(super) const MAX_READ_BYTES: u32 = 1 << 20;

/// Text `read` returns when the plugin does not say.
pub(super) const DEFAULT_READ_BYTES: u32 = 64 << 10;

/// Most links or form fields one call lists.
pub(super) const MAX_ITEMS: usize = 500;

/// How long a click or a submit waits for the page it may load.
pub(super) const SETTLE: Duration = Duration::from_secs(10);

/// How long a `wait` lasts when the plugin does not say.
pub(super) const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// How long without a request in flight counts as "the network is idle".
pub(super) const NETWORK_QUIET: Duration = Duration::from_millis(500);

/// The bytes to return of `requested`, within the host's cap.
pub(super) fn read_bytes(requested: Option<u32>) -> usize {
    requested.unwrap_or(DEFAULT_READ_BYTES).clamp(1, MAX_READ_BYTES) as usize
}

/// The screenshot cap for a plugin asking for `requested`.
pub(super) fn screenshot_bytes(requested: Option<u32>) -> u64 {
    requested.map_or(MAX_SCREENSHOT_BYTES, |r| u64::from(r).min(MAX_SCREENSHOT_BYTES))
}
