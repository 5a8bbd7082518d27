//! Component files: whatever bytes lie in the plugins directory as
//! `fuzzed.wasm` (mutations of real components, core modules, garbage) are
//! loaded by a running host as a hot reload would. The load ends ready or
//! with an error naming the file; the host keeps serving its other plugin.
#![no_main]

use reson_fuzz::guest::{Guest, well_formed};
use std::sync::LazyLock;

static GUEST: LazyLock<Guest> = LazyLock::new(Guest::start);

// Built and loaded before the first input, outside its deadline.
libfuzzer_sys::fuzz_target!(init: LazyLock::force(&GUEST), |data: &[u8]| {
    if let Err(message) = GUEST.load(data) {
        assert!(message.contains("fuzzed"), "a load error that does not name the plugin: {message}");
    }
    let alive = GUEST.call(&well_formed("still here")).expect("the other plugin still serves");
    assert_eq!(alive.text, "still here");
});
