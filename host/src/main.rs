//! The `reson` command line.

mod cli;

// Many runs' tasks allocate and free across the runtime's threads, where
// the system allocator contends for its arenas.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::main().await
}
