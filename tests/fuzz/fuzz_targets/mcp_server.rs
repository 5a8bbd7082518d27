//! One MCP session with `reson mcp serve`'s server; see `reson_fuzz::mcp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|session: reson_fuzz::mcp::Session| {
    reson_fuzz::mcp::run(&session);
});
