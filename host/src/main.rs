//! The `reson` command line.

mod cli;

// The allowance every bounded time in the tests is stated against.
#[cfg(test)]
#[path = "../../tests/support/margin.rs"]
mod margin;

// Many runs' tasks allocate and free across the runtime's threads, where
// the system allocator contends for its arenas.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::main().await
}
