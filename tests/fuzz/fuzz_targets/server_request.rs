//! One HTTP request to a real `reson serve`; see `reson_fuzz::server`.
#![no_main]

libfuzzer_sys::fuzz_target!(|request: reson_fuzz::server::Request| {
    reson_fuzz::server::run(&request);
});
