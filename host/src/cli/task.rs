//! `reson task`: plan a goal (or take a plan), then execute it step by step.

use super::term::{
    Stream, clean, paint, plural, say, say_err, say_error, say_part, style, write_out,
};
use super::{Host, exit};
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use reson::agent::{
    AgentBuilder, BasicAgent, FailurePolicy, Hooks, Plan, PlanParser, PluginPlanParser, StepStatus,
    TaskAgent,
};
use reson::plugin::Options;
use reson::provider::LlmParams;
use reson::telemetry::Telemetry;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args)]
pub(crate) struct TaskArgs {
    /// The goal.
    goal: String,
    /// Plan parser plugin.
    #[arg(long, default_value = "json-plan")]
    parser: String,
    /// Execute this plan (in the parser's format) instead of asking the model for one.
    #[arg(long)]
    plan: Option<PathBuf>,
    #[command(flatten)]
    model: super::run::ModelArgs,
    /// What to do when a step fails.
    #[arg(long, value_enum, default_value_t = OnFailure::Stop)]
    on_failure: OnFailure,
    /// With no terminal to ask at: answer every `ask` at once with never,
    /// once or all (as for `reson run`)
    #[arg(long, value_name = "never|once|all")]
    approve: Option<reson::agent::Unattended>,
}

#[derive(Clone, Copy, ValueEnum)]
enum OnFailure {
    Stop,
    Skip,
    Continue,
}

const SYSTEM_PROMPT: &str = "You are a careful agent working through a plan one step at a time. \
                             Use the tools, then say briefly what the step achieved.";

pub(crate) fn prepare_options(options: &mut Options, args: &TaskArgs) -> anyhow::Result<()> {
    args.model.grant_vendor(options)?;
    super::run::grant_script(options, args.model.script.as_deref())
}

pub(crate) async fn run(runtime: &Host, args: &TaskArgs) -> anyhow::Result<ExitCode> {
    args.model.preflight(runtime)?;
    let store = super::open_stores(&runtime.config).await?.traces;
    let (_, permissions, unattended) =
        super::run::permissions(runtime, &args.model.preset, args.approve)?;
    let telemetry = Telemetry::from_config(&runtime.config.agent.telemetry)?;
    let bundle = AgentBuilder::new()
        .provider(Arc::new(args.model.provider(runtime)))
        .tools(super::mcp::tools(runtime).await)
        .hooks(Hooks::none())
        .store(store)
        .params(LlmParams { model: args.model.model_name(runtime), ..LlmParams::default() })
        .permissions(permissions)
        .telemetry(telemetry.clone())
        .asker(super::run::asker(runtime)?)
        .build()?;
    let parser = Arc::new(PluginPlanParser::new(runtime.runtime.clone(), args.parser.clone()));
    let policy = match args.on_failure {
        OnFailure::Stop => FailurePolicy::Stop,
        OnFailure::Skip => FailurePolicy::Skip,
        OnFailure::Continue => FailurePolicy::Continue,
    };
    let agent = Arc::new(BasicAgent::new("task", SYSTEM_PROMPT));
    let mut task = TaskAgent::new(agent, bundle, parser.clone())?.with_failure_policy(policy);
    let mut printer = Printer::default();
    let outcome = match &args.plan {
        Some(path) => {
            // A small file, read inline: nothing else runs meanwhile.
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("plan {}", path.display()))?;
            let plan = parser.parse(&text, &args.goal).await?;
            task.execute_plan(plan, |p| printer.show(p)).await
        }
        None => task.run(&args.goal, |p| printer.show(p)).await,
    };
    if let Err(e) = telemetry.shutdown(super::run::TELEMETRY_WAIT).await {
        tracing::warn!("{e}");
    }
    match outcome {
        Ok(outcome) => {
            say_part!("\n{}", outcome.plan.render());
            if let Some(id) = &outcome.trace_id {
                say_err!("trace {id}");
            }
            let denied = unattended.as_ref().map_or(0, |u| u.denied());
            Ok(if !outcome.succeeded {
                ExitCode::from(exit::TOOL_FAILED)
            } else if denied > 0 {
                say_err!(
                    "{} denied for want of an answer (no terminal): see --approve",
                    plural(denied, "call was", "calls were")
                );
                ExitCode::from(exit::DENIED)
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(e) => {
            say_error!("{e}");
            Ok(ExitCode::from(exit::TOOL_FAILED))
        }
    }
}

/// Prints each step when its status changes.
#[derive(Default)]
struct Printer {
    seen: Vec<String>,
}

impl Printer {
    fn show(&mut self, plan: &Plan) {
        if self.seen.is_empty() {
            say!("plan for: {}", plan.goal);
            say_part!("{}", plan.render());
            self.seen = plan.steps.iter().map(|s| s.status().to_string()).collect();
            return;
        }
        for (step, seen) in plan.steps.iter().zip(self.seen.iter_mut()) {
            let now = step.status().to_string();
            if now != *seen {
                let (detail, style) = match step.status() {
                    StepStatus::Completed { response } => {
                        (format!(": {}", first_line(response)), style::GOOD)
                    }
                    StepStatus::Failed { error } => (format!(": {error}"), style::BAD),
                    _ => (String::new(), style::PENDING),
                };
                let step_of = clean(&format!("[{}/{}]", step.index + 1, plan.steps.len()));
                let now = paint(Stream::Out, style, &clean(&now));
                let rest = clean(&format!("{}{detail}", step.description));
                write_out(&format!("{step_of} {now} {rest}\n"));
                *seen = now;
            }
        }
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(100).collect()
}
