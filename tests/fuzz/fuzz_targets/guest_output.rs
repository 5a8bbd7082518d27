//! The WIT boundary: a guest whose answer (discriminants, pointers, lengths,
//! string bytes, image lists) is the fuzzer's input, run through the real
//! host path. The host must answer every call with an output or a typed
//! error that names the tool, and serve the next well-formed call.
#![no_main]

use reson_fuzz::guest::{Guest, well_formed};
use std::sync::LazyLock;

static GUEST: LazyLock<Guest> = LazyLock::new(Guest::start);

// Built and loaded before the first input, outside its deadline.
libfuzzer_sys::fuzz_target!(init: LazyLock::force(&GUEST), |data: &[u8]| {
    if let Err(e) = GUEST.call(data) {
        let message = e.to_string();
        assert!(
            message.contains("output") || message.contains("raw-output"),
            "an error that does not say which tool: {message}"
        );
    }
    let alive = GUEST.call(&well_formed("still here")).expect("the guest still serves");
    assert_eq!(alive.text, "still here");
});
