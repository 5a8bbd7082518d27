//! What the fuzz targets (`fuzz_targets/`) share: turning fuzzer bytes into
//! command lines, asking a real bash what a line runs, and the hostile guest
//! driven through the host. Each target links at most one plugin crate, so
//! nothing here uses one.

pub mod bash;
pub mod guest;
pub mod lines;
pub mod mcp;
pub mod server;
