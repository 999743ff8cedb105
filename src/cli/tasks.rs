//! `pincer tasks ...`: scheduled prompts from the command line. The rules are
//! the ones the agent's tools follow (`scheduler::manage`); a running pincer
//! is told of a change through its control socket and acts on it at once.

use chrono::SecondsFormat;
use clap::{ArgGroup, Args, Subcommand};

use crate::app;
use crate::config::Config;
use crate::control::wire::Change;
use crate::domain::schedule::{ContextMode, ScheduleId, Trigger};
use crate::scheduler::limits::Limits;
use crate::scheduler::manage;
use crate::store::{NewSchedule, RunRecord, Store};

#[derive(Debug, Subcommand)]
pub enum TasksCmd {
    /// Schedule a prompt for a group: --cron, --every or --at, and --prompt.
    Add(AddArgs),
    /// List scheduled tasks, of one group or of all.
    List { group: Option<String> },
    /// Pause a task until it is resumed.
    Pause { id: i64 },
    /// Resume a paused task; its next run counts from now.
    Resume { id: i64 },
    /// Cancel a task for good (its run log stays).
    Cancel { id: i64 },
    /// Run an active task as soon as the running pincer looks (within scheduler.poll_interval).
    RunNow { id: i64 },
    /// Print a task's run log: start, duration, outcome, cost, result or error.
    Runs { id: i64 },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("when").required(true).args(["cron", "every", "at"])))]
pub struct AddArgs {
    group: String,
    /// Five cron fields, e.g. "0 9 * * 1-5" (09:00 on weekdays).
    #[arg(long)]
    cron: Option<String>,
    /// Time zone of --cron and of a local --at time (default: `timezone` in pincer.toml).
    #[arg(long)]
    tz: Option<String>,
    /// Run every so often, e.g. 2h or 30m.
    #[arg(long)]
    every: Option<String>,
    /// Run once, at an RFC 3339 time or a local time such as 2026-12-01T09:00.
    #[arg(long)]
    at: Option<String>,
    /// What the agent is asked when the task runs.
    #[arg(long)]
    prompt: String,
    /// Run in a fresh session that neither sees nor changes the group's conversation.
    #[arg(long)]
    isolated: bool,
}

pub async fn execute(command: TasksCmd, config: &Config) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let limits = Limits::from(&config.scheduler);
    let changed = match command {
        TasksCmd::Add(args) => add(&store, args, config, &limits).await?,
        TasksCmd::List { group } => list(&store, group).await?,
        TasksCmd::Pause { id } => print(manage::pause(&store.schedules(), ScheduleId(id)).await?),
        TasksCmd::Resume { id } => print(manage::resume(&store.schedules(), ScheduleId(id), &limits).await?),
        TasksCmd::Cancel { id } => print(manage::cancel(&store.schedules(), ScheduleId(id)).await?),
        TasksCmd::RunNow { id } => print(manage::run_now(&store.schedules(), ScheduleId(id)).await?),
        TasksCmd::Runs { id } => runs(&store, id).await?,
    };
    store.close().await;
    if changed {
        crate::control::client::tell(config, Change::Schedules).await;
    }
    Ok(())
}

/// `tasks add`; true: a schedule changed.
async fn add(store: &Store, args: AddArgs, config: &Config, limits: &Limits) -> anyhow::Result<bool> {
    if args.every.is_some() && args.tz.is_some() {
        anyhow::bail!("--tz applies to --cron and --at; an --every interval needs no time zone");
    }
    let tz = args.tz.as_deref().unwrap_or(&config.timezone);
    let trigger = match (&args.cron, &args.every, &args.at) {
        (Some(cron), _, _) => Trigger::cron(cron, tz)?,
        (_, Some(every), _) => Trigger::interval(every)?,
        (_, _, Some(at)) => Trigger::once(at, tz)?,
        _ => unreachable!("clap requires one of --cron, --every, --at"),
    };
    let group = store.groups().group(&args.group).await?.name;
    let context = if args.isolated { ContextMode::Isolated } else { ContextMode::Group };
    let new = NewSchedule { group, prompt: args.prompt, trigger, context };
    let schedule = manage::add(&store.schedules(), new, limits).await?;
    println!("scheduled {}", schedule.describe());
    Ok(true)
}

async fn list(store: &Store, group: Option<String>) -> anyhow::Result<bool> {
    let group = match group {
        Some(name) => Some(store.groups().group(&name).await?.name),
        None => None,
    };
    let tasks = store.schedules().schedules(group.as_ref()).await?;
    if tasks.is_empty() {
        println!("no scheduled tasks: add one with `pincer tasks add GROUP --every 1d --prompt \"...\"`");
    }
    for t in tasks {
        println!("{}", t.describe());
    }
    Ok(false)
}

async fn runs(store: &Store, id: i64) -> anyhow::Result<bool> {
    store.schedules().schedule(ScheduleId(id)).await?;
    let runs = store.schedules().runs(ScheduleId(id)).await?;
    if runs.is_empty() {
        println!("task #{id} has not run yet");
    }
    for run in runs {
        println!("{}", render_run(&run));
    }
    Ok(false)
}

fn print(schedule: crate::domain::schedule::Schedule) -> bool {
    println!("{}", schedule.describe());
    true
}

fn render_run(run: &RunRecord) -> String {
    let started = run.started.to_rfc3339_opts(SecondsFormat::Secs, true);
    let duration = run.duration_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms}ms"));
    let cost = run.cost_usd.map_or_else(String::new, |c| format!("  ${c:.4}"));
    let text: String = run.text.as_deref().unwrap_or("").chars().take(200).collect();
    format!("{started}  {:<7}  {duration}{cost}  {}", run.outcome, text.replace('\n', " "))
}
