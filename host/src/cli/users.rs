//! `reson users`: the tokens of `reson serve`'s users, in the token file
//! (`[server] token_file`). A running server sees each change from its next
//! request.

use super::term::say;
use anyhow::Context as _;
use clap::Subcommand;
use reson::api::users::{Role, TokenFile, hash_token};
use reson::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Add a token for a user and print it, once: only its hash is stored.
    Add {
        /// The user's name (the `uid` of their runs).
        uid: String,
        /// An admin: sees and drives every user's runs.
        #[arg(long)]
        admin: bool,
        /// The token file [default: [server] token_file].
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Revoke a token by its id, or every token of a user by name.
    Revoke {
        /// A token id (`tok_…`) or a user's name.
        id_or_uid: String,
        /// The token file [default: [server] token_file].
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// The tokens: id, user, role, when added (never the tokens).
    List {
        /// The token file [default: [server] token_file].
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Print the SHA-256 of a token read from stdin, for `[server.users]`.
    Hash,
}

/// The token file named on the command line, else in the config.
fn token_file(config: &Config, file: Option<&PathBuf>) -> anyhow::Result<TokenFile> {
    let path = match file {
        Some(path) => path.clone(),
        None => config.agent.resolve(config.server.token_file.as_deref().context(
            "no token file: set [server] token_file in reson.toml, or pass --file PATH",
        )?),
    };
    Ok(TokenFile::new(path))
}

pub(crate) fn run(config: &Config, command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Add { uid, admin, file } => {
            let file = token_file(config, file.as_ref())?;
            let role = if *admin { Role::Admin } else { Role::User };
            let (entry, token) = file.add(uid, role)?;
            say!(
                "added token {} for {} ({}) to {}",
                entry.id,
                entry.uid,
                role_name(entry.role),
                file.path().display()
            );
            say!("token (shown once, keep it secret): {token}");
        }
        Command::Revoke { id_or_uid, file } => {
            let file = token_file(config, file.as_ref())?;
            for entry in file.revoke(id_or_uid)? {
                say!("revoked token {} of {}", entry.id, entry.uid);
            }
        }
        Command::List { file } => {
            let file = token_file(config, file.as_ref())?;
            let all = file.list()?;
            if all.is_empty() {
                say!("no tokens in {}", file.path().display());
            }
            for entry in all {
                say!(
                    "{}  {:<16}  {:<5}  {}",
                    entry.id,
                    entry.uid,
                    role_name(entry.role),
                    entry.created_at
                );
            }
        }
        Command::Hash => {
            let mut token = String::new();
            std::io::stdin().read_line(&mut token).context("reading the token from stdin")?;
            let token = token.trim_end_matches(['\n', '\r']);
            anyhow::ensure!(!token.is_empty(), "no token on stdin");
            say!("{}", hash_token(token));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Admin => "admin",
    }
}
