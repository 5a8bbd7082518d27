//! `reson skills`, `reson experiences` and `reson traces reflect`: what the
//! agent knows and learns.

use super::run::{ModelArgs, grant_script};
use super::term::{say, say_err, say_error, say_part};
use super::{Host, exit};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use reson::config::Config;
use reson::experience::{self, ExperienceStore, FileExperienceStore, Rating};
use reson::plugin::Options;
use reson::provider::LlmParams;
use reson::skills::Skills;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum SkillsCommand {
    /// Every skill, with where it came from.
    List,
}

#[derive(Subcommand)]
pub(crate) enum ExperiencesCommand {
    /// Every experience, best rated first within its category.
    List {
        /// Only what this user's runs may see: global, every agent type's
        /// and the user's own.
        #[arg(long, value_name = "UID")]
        user: Option<String>,
    },
    /// Count one rating of an experience: helpful or harmful.
    Rate {
        /// The experience's id.
        id: String,
        /// helpful or harmful.
        rating: Rating,
    },
    /// Write every experience in the markdown form of experiences.md.
    Export {
        /// Write it here (replacing the file) instead of to stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Add the experiences of a markdown file (as `export` writes) to the
    /// configured store; ids it already has are skipped if identical.
    Import {
        /// The markdown file.
        file: PathBuf,
    },
}

/// `reson traces reflect`.
#[derive(Args)]
pub(crate) struct ReflectArgs {
    /// The trace.
    pub(crate) id: String,
    /// What to reflect on in particular.
    #[arg(long)]
    focus: Option<String>,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
}

/// The skills of the configured directories.
fn skills(config: &Config) -> anyhow::Result<Skills> {
    Ok(Skills::from_config(config)?)
}

pub(crate) fn skills_command(config: &Config, command: &SkillsCommand) -> anyhow::Result<ExitCode> {
    match command {
        SkillsCommand::List => {
            for skill in skills(config)?.all() {
                let category = if skill.category.is_empty() { "-" } else { &skill.category };
                say!(
                    "{:<16} {:<12} {:<40} {}",
                    skill.name,
                    category,
                    skill.origin,
                    skill.description
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn experiences_command(
    config: &Config,
    command: &ExperiencesCommand,
) -> anyhow::Result<ExitCode> {
    let store = super::open_stores(config).await?.experiences;
    match command {
        ExperiencesCommand::List { user } => {
            let mut all = store.list().await?;
            if let Some(uid) = user {
                let visible = reson::scope::Visible::caller(Some(uid), false);
                all.retain(|e| visible.sees(&e.scope));
            }
            if all.is_empty() {
                say!("no experiences in {}", store.describe());
            }
            for e in &all {
                say!(
                    "{}  {:<12} +{} -{}  intent: {}  state: {}  scope: {}  used: {}",
                    e.id,
                    e.category,
                    e.metrics.helpful,
                    e.metrics.harmful,
                    e.tags.intent.join(","),
                    e.tags.state.join(","),
                    e.scope,
                    e.usage_count
                );
                say!("    {}", e.rule.replace('\n', "\n    "));
            }
        }
        ExperiencesCommand::Rate { id, rating } => match store.rate(id, *rating).await {
            Ok(e) => say!("{}: helpful {}, harmful {}", e.id, e.metrics.helpful, e.metrics.harmful),
            Err(e @ experience::ExperienceError::UnknownId(_)) => {
                say_error!("{e}");
                return Ok(ExitCode::from(exit::USAGE));
            }
            Err(e) => return Err(e.into()),
        },
        ExperiencesCommand::Export { out } => {
            let all = store.list().await?;
            let markdown = experience::to_markdown(&all);
            match out {
                Some(path) => {
                    write_file(path, &markdown)?;
                    say_err!("wrote {} experiences to {}", all.len(), path.display());
                }
                None => say_part!("{markdown}"),
            }
        }
        ExperiencesCommand::Import { file } => return import(&*store, file).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// `experiences import`: the file's experiences the store lacks, in one
/// append; one it has that differs is reported and nothing is written.
async fn import(store: &dyn ExperienceStore, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    if !file.exists() {
        say_error!("no file {}", file.display());
        return Ok(ExitCode::from(exit::USAGE));
    }
    let incoming = match FileExperienceStore::new(file).list().await {
        Ok(all) => all,
        Err(e @ experience::ExperienceError::Malformed { .. }) => {
            say_error!("{e}");
            return Ok(ExitCode::from(exit::USAGE));
        }
        Err(e) => return Err(e.into()),
    };
    let existing = store.list().await?;
    let mut new = Vec::new();
    let mut same = 0;
    for e in incoming {
        match existing.iter().find(|x| x.id == e.id) {
            Some(x) if *x == e => same += 1,
            Some(_) => {
                say_error!(
                    "experience {} differs from the one in {}: nothing imported",
                    e.id,
                    store.describe()
                );
                return Ok(ExitCode::from(exit::CONFLICT));
            }
            None => new.push(e),
        }
    }
    let added = new.len();
    store.append(new).await?;
    say!("{added} experiences imported into {}, {same} already there", store.describe());
    Ok(ExitCode::SUCCESS)
}

/// Replaces `path` with `text` through a temporary file beside it, so a
/// reader never sees half of it.
fn write_file(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(".".as_ref());
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    file.as_file().sync_all().with_context(|| format!("writing {}", path.display()))?;
    file.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// What `traces reflect` grants before the runtime loads plugins.
pub(crate) fn prepare_reflect(options: &mut Options, args: &ReflectArgs) -> anyhow::Result<()> {
    args.model.grant_vendor(options)?;
    grant_script(options, args.model.script.as_deref())
}

pub(crate) async fn reflect(runtime: &Host, args: &ReflectArgs) -> anyhow::Result<ExitCode> {
    args.model.preflight(runtime)?;
    let stores = super::open_stores(&runtime.config).await?;
    let provider = args.model.provider(runtime);
    let params = LlmParams { model: args.model.model.clone(), ..LlmParams::default() };
    let store = stores.experiences;
    let reflection = experience::reflect(
        &*stores.traces,
        &provider,
        params,
        &*store,
        &args.id,
        args.focus.as_deref(),
    )
    .await;
    let reflection = match reflection {
        Ok(r) => r,
        Err(
            e @ (experience::ExperienceError::NoTrace(_)
            | experience::ExperienceError::NotReady { .. }),
        ) => {
            say_error!("{e}");
            return Ok(ExitCode::from(exit::USAGE));
        }
        Err(e) => return Err(e.into()),
    };
    say_err!(
        "reflected on {} in messages {} and {} (a side branch; the head is unchanged)",
        reflection.trace_id,
        reflection.prompt_sequence,
        reflection.answer_sequence
    );
    for e in &reflection.experiences {
        say!("{}  {}  {}", e.id, e.category, e.rule.replace('\n', " "));
    }
    say_err!("{} experiences added to {}", reflection.experiences.len(), store.describe());
    Ok(ExitCode::SUCCESS)
}
