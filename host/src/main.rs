//! The `reson` command line.

mod cli;

// Many runs' tasks allocate and free across the runtime's threads, where
// the system allocator contends for its arenas.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Before the runtime's threads: this process may be a jail made ahead,
    // waiting for its command.
    let _spares = reson::jail::serve_spares();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(cli::main()),
        Err(e) => {
            eprintln!("reson: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
