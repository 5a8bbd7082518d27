//! `reson.toml`. Beyond "never panics": every preset a file that parses can
//! name resolves or says why not, and its grants and paths can be read.
#![no_main]

use reson::config::Config;
use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(config) = Config::parse(text) else { return };
    for preset in ["default", "explore", "build", "analyst", "fuzzed"] {
        let _ = config.preset(preset);
    }
    let _ = config.grant("fs");
    let _ = config.resolve(Path::new("plugins"));
});
