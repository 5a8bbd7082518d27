//! `reson skills`, `reson experiences` and `reson traces reflect`: what the
//! agent knows and learns.

use super::exit;
use super::run::{ModelArgs, grant_script, traces_dir};
use super::term::{say, say_err};
use clap::{Args, Subcommand};
use reson::experience::{self, ExperienceStore, Rating};
use reson::plugin::{Options, Runtime};
use reson::provider::LlmParams;
use reson::skills::Skills;
use reson::trace::{Durability, FileTraceStore};
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum SkillsCommand {
    /// Every skill, with where it came from.
    List,
}

#[derive(Subcommand)]
pub(crate) enum ExperiencesCommand {
    /// Every experience, best rated first within its category.
    List,
    /// Count one rating of an experience: helpful or harmful.
    Rate {
        /// The experience's id.
        id: String,
        /// helpful or harmful.
        rating: Rating,
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
fn skills(options: &Options) -> anyhow::Result<Skills> {
    Ok(Skills::from_config(&options.config)?)
}

fn store(options: &Options) -> ExperienceStore {
    ExperienceStore::from_config(&options.config)
}

pub(crate) fn skills_command(
    options: &Options,
    command: &SkillsCommand,
) -> anyhow::Result<ExitCode> {
    match command {
        SkillsCommand::List => {
            for skill in skills(options)?.all() {
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
    options: &Options,
    command: &ExperiencesCommand,
) -> anyhow::Result<ExitCode> {
    let store = store(options);
    match command {
        ExperiencesCommand::List => {
            let all = store.list().await?;
            if all.is_empty() {
                say!("no experiences in {}", store.path().display());
            }
            for e in &all {
                say!(
                    "{}  {:<12} +{} -{}  intent: {}  state: {}",
                    e.id,
                    e.category,
                    e.metrics.helpful,
                    e.metrics.harmful,
                    e.tags.intent.join(","),
                    e.tags.state.join(",")
                );
                say!("    {}", e.rule.replace('\n', "\n    "));
            }
        }
        ExperiencesCommand::Rate { id, rating } => match store.rate(id, *rating).await {
            Ok(e) => say!("{}: helpful {}, harmful {}", e.id, e.metrics.helpful, e.metrics.harmful),
            Err(e @ experience::ExperienceError::UnknownId(_)) => {
                say_err!("error: {e}");
                return Ok(ExitCode::from(exit::USAGE));
            }
            Err(e) => return Err(e.into()),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// What `traces reflect` grants before the runtime loads plugins.
pub(crate) fn prepare_reflect(options: &mut Options, args: &ReflectArgs) -> anyhow::Result<()> {
    args.model.grant_vendor(options)?;
    grant_script(options, args.model.script.as_deref())
}

pub(crate) async fn reflect(runtime: &Runtime, args: &ReflectArgs) -> anyhow::Result<ExitCode> {
    args.model.preflight(runtime)?;
    let traces = FileTraceStore::open(traces_dir(runtime.options()), Durability::Batched)?;
    let provider = args.model.provider(runtime);
    let params = LlmParams { model: args.model.model.clone(), ..LlmParams::default() };
    let store = store(runtime.options());
    let reflection =
        experience::reflect(&traces, &provider, params, &store, &args.id, args.focus.as_deref())
            .await;
    let reflection = match reflection {
        Ok(r) => r,
        Err(
            e @ (experience::ExperienceError::NoTrace(_)
            | experience::ExperienceError::NotReady { .. }),
        ) => {
            say_err!("error: {e}");
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
    say_err!("{} experiences added to {}", reflection.experiences.len(), store.path().display());
    Ok(ExitCode::SUCCESS)
}
