//! `reson knowledge`: add, list, search and remove the knowledge runs
//! save and find, in the store `[store]` names. The command line is the
//! host's operator: without `--user` it sees every scope.

use super::exit;
use super::term::{say, say_err, say_error, say_json};
use clap::Subcommand;
use reson::config::Config;
use reson::knowledge::{Draft, Entry, KnowledgeError};
use reson::scope::{Scope, Visible};
use std::io::Read as _;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Save an entry (a new version of one, with --id).
    Add {
        /// What it is about, in a few words.
        title: String,
        /// The note; read from stdin when absent or `-`.
        content: Option<String>,
        /// A keyword; repeat for several.
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Save it in this user's scope (`user:NAME`).
        #[arg(long, conflicts_with = "scope")]
        user: Option<String>,
        /// Save it in this scope: global, user:NAME or agent:TYPE [default: global].
        #[arg(long)]
        scope: Option<String>,
        /// Replace the entry with this id (or create it under this id).
        #[arg(long)]
        id: Option<String>,
        /// Print the entry as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every entry, oldest first.
    List {
        /// Only what this user sees through the API: global, agent:*, user:NAME.
        #[arg(long)]
        user: Option<String>,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// The entries matching some words, best first.
    Search {
        /// Plain words (no query syntax).
        query: String,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only what this user sees through the API: global, agent:*, user:NAME.
        #[arg(long)]
        user: Option<String>,
        /// One JSON array, with each hit's score and snippet.
        #[arg(long)]
        json: bool,
    },
    /// Remove an entry.
    Remove {
        /// The entry's id.
        id: String,
        /// Only if this user sees it through the API (global, agent:*, user:NAME).
        #[arg(long)]
        user: Option<String>,
    },
}

/// The scopes `--user` lets the command see.
fn visible(user: &Option<String>) -> Visible {
    match user {
        Some(uid) => Visible::caller(Some(uid), false),
        None => Visible::everything(),
    }
}

fn line(e: &Entry) -> String {
    let tags = if e.tags.is_empty() { String::new() } else { format!(" [{}]", e.tags.join(", ")) };
    format!("{}  {:<16} {}{tags}", e.id, e.scope.to_string(), e.title)
}

pub(crate) async fn run(config: &Config, command: &Command) -> anyhow::Result<ExitCode> {
    let store = super::open_stores(config).await?.knowledge;
    let done = match command {
        Command::Add { title, content, tags, user, scope, id, json } => {
            let content = match content.as_deref() {
                Some(text) if text != "-" => text.to_owned(),
                _ => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text)?;
                    text
                }
            };
            let scope = match (user, scope) {
                (Some(uid), _) => format!("user:{uid}").parse::<Scope>(),
                (None, Some(scope)) => scope.parse::<Scope>(),
                (None, None) => Ok(Scope::Global),
            };
            let draft = scope.map(|scope| Draft {
                id: id.clone(),
                scope: Some(scope),
                title: title.clone(),
                content,
                tags: tags.clone(),
                source: None,
            });
            match draft {
                Ok(draft) => store.save(draft).await.map(|entry| {
                    if *json {
                        say_json(
                            &serde_json::to_string_pretty(&entry).expect("an entry serialises"),
                        );
                    } else {
                        say!("saved {}", line(&entry));
                    }
                }),
                Err(e) => Err(KnowledgeError::from(e)),
            }
        }
        Command::List { user, json } => store.list(&visible(user)).await.map(|all| {
            if *json {
                say_json(&serde_json::to_string_pretty(&all).expect("entries serialise"));
            } else if all.is_empty() {
                say_err!("no knowledge in {}", store.describe());
            } else {
                for e in &all {
                    say!("{}", line(e));
                }
            }
        }),
        Command::Search { query, limit, user, json } => {
            store.search(query, &visible(user), *limit).await.map(|hits| {
                if *json {
                    say_json(&serde_json::to_string_pretty(&hits).expect("hits serialise"));
                } else if hits.is_empty() {
                    say_err!("nothing matches `{query}`");
                } else {
                    for h in &hits {
                        say!("{:>7.3}  {}", h.score, line(&h.entry));
                        say!("         {}", h.snippet);
                    }
                }
            })
        }
        Command::Remove { id, user } => {
            store.remove(id, &visible(user)).await.map(|entry| say!("removed {}", line(&entry)))
        }
    };
    match done {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(
            e @ (KnowledgeError::UnknownId(_)
            | KnowledgeError::Invalid(_)
            | KnowledgeError::TooLarge { .. }),
        ) => {
            say_error!("{e}");
            Ok(ExitCode::from(exit::USAGE))
        }
        Err(e) => Err(e.into()),
    }
}
