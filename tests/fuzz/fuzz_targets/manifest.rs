//! Plugin manifests (`reson-plugin.toml`, written by whoever wrote the
//! plugin). Beyond "never panics": what a manifest requests reads back
//! the same after the lock file writes it, and asks for nothing beyond
//! itself.
#![no_main]

use reson_sandbox::manifest::{Manifest, Requests};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(manifest) = Manifest::parse(text) else { return };
    let requests = &manifest.requests;
    assert!(requests.growth_over(requests).is_empty(), "{requests:?} grows over itself");
    let written = toml::to_string(requests).expect("requests serialize");
    let read: Requests = toml::from_str(&written).expect("written requests read back");
    assert_eq!(&read, requests, "requests changed through the lock file: {written}");
});
