//! `reson serve`: the HTTP + WebSocket API and the trace viewer page.

use super::Host;
use super::run::{self, ModelArgs};
use super::term::{say, say_err};
use clap::Args;
use reson::api::{RunDefaults, Server, ServerConfig};
use reson::config::Config;
use reson::plugin::Options;
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0: any free port) [default: [server] addr, else 127.0.0.1:8000]
    #[arg(long)]
    addr: Option<SocketAddr>,
    /// Bearer token every /api request must carry; required off loopback [default: [server] token]
    #[arg(long, env = "RESON_SERVER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Defaults of runs whose request names no provider, model or preset.
    #[command(flatten)]
    model: ModelArgs,
}

/// What the command line grants, applied before the runtime loads plugins;
/// an unsafe address is refused before then.
pub(crate) fn prepare_options(
    options: &mut Options,
    config: &Config,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    server_config(config, args).validate()?;
    keep_browser_warm(options);
    args.model.grant_vendor(options)?;
    grant_uploads(options)?;
    run::grant_script(options, args.model.script.as_deref())
}

/// How long the server keeps its browser up without a trace using it,
/// unless `[sandbox] warm_browser_ms` says.
const WARM_BROWSER_MS: u64 = 300_000;

/// A server runs trace after trace: their browsers are contexts in one
/// kept up between them, unless `[sandbox] warm_browser_ms` says otherwise.
fn keep_browser_warm(options: &mut Options) {
    options.config.sandbox.warm_browser_ms.get_or_insert(WARM_BROWSER_MS);
}

/// The directory PDFs sent with run requests pass through, each for the
/// moment the `pdf` plugin reads it.
fn uploads_dir(options: &Options) -> std::path::PathBuf {
    options.cache_dir.join("uploads")
}

/// Grants the `pdf` plugin read access to the uploads directory, and
/// makes it.
fn grant_uploads(options: &mut Options) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let dir = uploads_dir(options);
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
    super::grants::grant_read(options, "pdf", dir);
    Ok(())
}

/// `[server]`, with the command line's address and token over it.
fn server_config(config: &Config, args: &ServeArgs) -> ServerConfig {
    let mut server = ServerConfig::from_config(config);
    if let Some(addr) = args.addr {
        server.addr = addr;
    }
    if let Some(token) = args.token.clone().filter(|t| !t.is_empty()) {
        server.token = Some(token);
    }
    server
}

pub(crate) async fn run(runtime: &Host, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config = server_config(&runtime.config, args);
    config.uploads_dir = uploads_dir(runtime.runtime.options()).canonicalize().ok();
    config.defaults = RunDefaults {
        provider: args.model.provider_name().to_owned(),
        model: args.model.model_name(runtime),
        preset: args.model.preset.clone(),
        system_prompt: Some(run::SYSTEM_PROMPT.to_owned()),
        ..RunDefaults::default()
    };
    // `[store]`: files here, or a database other hosts may share.
    let stores = super::open_stores(&runtime.config).await?;
    config.database = stores.database;
    // Registered before the server answers anything, so that no signal
    // from then on ends the process without stopping its runs.
    let stop = super::signals::StopRequests::new()?;
    // Installs and new builds count without a restart; the server
    // announces them (log, watch sockets) as they land.
    let _watcher = runtime.watch()?;
    let server = Server::bind(runtime.runtime.clone(), stores.traces, config).await?;
    // The first line on stdout: tests and scripts read the port from it.
    say!("listening on http://{}", server.local_addr());
    let shutdown = async move {
        stop.first().await;
        say_err!("shutting down: stopping the running traces");
    };
    server.serve(shutdown).await?;
    // The browser kept up between runs, and its files, go with the server.
    runtime.runtime.close_browsers().await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson::config::PluginsConfig;

    #[test]
    fn the_server_keeps_its_browser_warm_unless_the_config_says() {
        let warm = |set: Option<u64>| {
            let mut config = PluginsConfig::default();
            config.sandbox.warm_browser_ms = set;
            let mut options = Options::from_config(config);
            keep_browser_warm(&mut options);
            options.config.sandbox.warm_browser_ms
        };
        assert_eq!(warm(None), Some(WARM_BROWSER_MS));
        assert_eq!(warm(Some(0)), Some(0), "0 turns it off");
        assert_eq!(warm(Some(1000)), Some(1000));
    }
}
