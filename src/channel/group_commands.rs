//! `/tasks` and `/budget` in a group's chat, the same on every platform: the
//! words after the command are parsed here ([`TasksAction::parse`],
//! [`BudgetAction::parse`]) and carried out on the group's own tasks and
//! budget only. Anyone may look; changing takes an admin: for tasks when the
//! group has admins (as `/stop`), for the budget always, since it is the
//! operator's cap on spending and a group without admins has nobody to trust
//! with it.

use std::time::SystemTime;

use super::Ports;
use crate::domain::budget::{cents, Budget, Periods};
use crate::domain::schedule::{Schedule, ScheduleId};
use crate::domain::GroupName;
use crate::scheduler::manage::{self, ManageError};
use crate::store::{GroupRecord, StoreError};

/// How long a task's prompt is shown in the chat's list.
const PROMPT_CHARS: usize = 60;

/// `/tasks [run|pause|resume ID]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TasksAction {
    List,
    Run(i64),
    Pause(i64),
    Resume(i64),
}

/// `/budget [daily USD|monthly USD|turns N|… default]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetAction {
    Show,
    /// A part of the group's own budget; `None` gives it back to `[budget]`.
    Daily(Option<u64>),
    Monthly(Option<u64>),
    Turns(Option<u32>),
}

pub const TASKS_USAGE: &str = "Use /tasks to list this group's scheduled tasks, or /tasks run ID, /tasks pause ID, \
                               /tasks resume ID (admins).";
pub const BUDGET_USAGE: &str = "Use /budget to see what this group spent, or (admins) /budget daily 5, \
                                /budget monthly 30, /budget turns 40, or /budget daily default to use pincer's default.";

impl TasksAction {
    /// The action the words after `/tasks` name; `Err` is the usage to answer with.
    pub fn parse(args: &str) -> Result<TasksAction, &'static str> {
        let words: Vec<&str> = args.split_whitespace().collect();
        let id = |w: &str| w.trim_start_matches('#').parse::<i64>().ok().filter(|id| *id > 0);
        match words.as_slice() {
            [] | ["list"] => Ok(TasksAction::List),
            [verb, n] => match (verb.to_lowercase().as_str(), id(n)) {
                ("run", Some(id)) => Ok(TasksAction::Run(id)),
                ("pause", Some(id)) => Ok(TasksAction::Pause(id)),
                ("resume", Some(id)) => Ok(TasksAction::Resume(id)),
                _ => Err(TASKS_USAGE),
            },
            _ => Err(TASKS_USAGE),
        }
    }

    fn changes(self) -> bool {
        self != TasksAction::List
    }
}

impl BudgetAction {
    /// The action the words after `/budget` name; `Err` is the usage to answer with.
    pub fn parse(args: &str) -> Result<BudgetAction, &'static str> {
        let words: Vec<String> = args.split_whitespace().map(str::to_lowercase).collect();
        let usd = |w: &str| -> Result<Option<u64>, &'static str> {
            if w == "default" {
                return Ok(None);
            }
            let amount: f64 = w.trim_start_matches('$').parse().map_err(|_| BUDGET_USAGE)?;
            cents(amount).map(Some).ok_or(BUDGET_USAGE)
        };
        match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            [] => Ok(BudgetAction::Show),
            ["daily", v] => Ok(BudgetAction::Daily(usd(v)?)),
            ["monthly", v] => Ok(BudgetAction::Monthly(usd(v)?)),
            ["turns", "default"] => Ok(BudgetAction::Turns(None)),
            ["turns", n] => n.parse().map(|n| BudgetAction::Turns(Some(n))).map_err(|_| BUDGET_USAGE),
            _ => Err(BUDGET_USAGE),
        }
    }

    /// `budget` with this change made.
    fn apply(self, mut budget: Budget) -> Budget {
        match self {
            BudgetAction::Show => {}
            BudgetAction::Daily(c) => budget.daily_cents = c,
            BudgetAction::Monthly(c) => budget.monthly_cents = c,
            BudgetAction::Turns(t) => budget.daily_turns = t,
        }
        budget
    }
}

/// Carries out `/tasks` for `group`: the answer for its chat.
pub(super) async fn tasks(ports: &Ports, group: &GroupRecord, action: TasksAction, by_admin: bool) -> String {
    if action.changes() && !group.settings.admins.is_empty() && !by_admin {
        return "Only this group's admins can run, pause or resume its tasks.".to_owned();
    }
    let store = &ports.directory.schedules;
    let done = match action {
        TasksAction::List => return list(ports, &group.name).await,
        TasksAction::Run(id) | TasksAction::Pause(id) | TasksAction::Resume(id) => {
            let id = ScheduleId(id);
            match store.schedule(id).await {
                Ok(s) if s.group == group.name => {}
                Ok(_) | Err(StoreError::UnknownSchedule(_)) => {
                    return format!("This group has no task #{id}. {TASKS_USAGE}")
                }
                Err(e) => return failed(&group.name, e),
            }
            match action {
                TasksAction::Run(_) => manage::run_now(store, id).await,
                TasksAction::Pause(_) => manage::pause(store, id).await,
                _ => manage::resume(store, id, &ports.limits).await,
            }
        }
    };
    match done {
        Ok(s) => {
            ports.scheduler.poke();
            let what = match action {
                TasksAction::Run(_) => "runs now",
                TasksAction::Pause(_) => "is paused",
                _ => "is resumed",
            };
            format!("Task #{} {what}.\n{}", s.id, line(&s))
        }
        Err(ManageError::Store(e)) => failed(&group.name, e),
        Err(e) => format!("{e}."),
    }
}

async fn list(ports: &Ports, group: &GroupName) -> String {
    let tasks = match ports.directory.schedules.schedules(Some(group)).await {
        Ok(tasks) => tasks,
        Err(e) => return failed(group, e),
    };
    let shown: Vec<String> = tasks.iter().map(line).collect();
    if shown.is_empty() {
        return "This group has no scheduled tasks. Ask the agent to schedule one.".to_owned();
    }
    format!("Scheduled tasks:\n{}\n\n{TASKS_USAGE}", shown.join("\n"))
}

/// One task as the chat reads it.
fn line(s: &Schedule) -> String {
    // One line each, whatever the prompt holds.
    let prompt = crate::domain::one_line(&s.prompt, PROMPT_CHARS);
    let next = s.next_run.map_or_else(
        || "no next run".to_owned(),
        |t| format!("next {}", t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    );
    let failing = if s.failures > 0 { format!(" · failed {} in a row", s.failures) } else { String::new() };
    format!("#{} [{}] {} · {next}{failing} · {prompt}", s.id, s.status.as_str(), s.trigger.describe())
}

/// Carries out `/budget` for `group`: the answer for its chat.
pub(super) async fn budget(ports: &Ports, group: &GroupRecord, action: BudgetAction, by_admin: bool) -> String {
    let store = &ports.directory.groups;
    let default = ports.live.budget();
    if action != BudgetAction::Show {
        if group.settings.admins.is_empty() {
            return format!(
                "Only a group's admins can change its budget, and this group has none: the operator can set \
                 it with `pincer groups set {} --budget-daily AMOUNT`.",
                group.name
            );
        }
        if !by_admin {
            return "Only this group's admins can change its budget.".to_owned();
        }
        let mut settings = group.settings.clone();
        settings.budget = action.apply(settings.budget);
        if let Err(e) = store.save_group_settings(&group.name, &settings).await {
            return failed(&group.name, e);
        }
        // The session looks at its budget again now: held messages go on at once.
        ports.router.settings_changed(&group.name).await;
        ports.scheduler.poke();
        tracing::info!(group = %group.name, budget = ?settings.budget, "budget changed from the chat");
        let budget = settings.budget.over(default);
        return format!("Budget changed: {}.\n{}", parts(budget), spent_line(ports, &group.name, budget).await);
    }
    let budget = group.settings.budget.over(default);
    format!(
        "This group's budget: {}.\n{}\n\n{BUDGET_USAGE}",
        parts(budget),
        spent_line(ports, &group.name, budget).await
    )
}

/// "$5.00/day, 40 turns/day", or "none".
fn parts(budget: Budget) -> String {
    budget.parts().unwrap_or_else(|| "none".to_owned())
}

/// "Spent today: $1.20 and 4 turns; this month: $9.80."
async fn spent_line(ports: &Ports, group: &GroupName, budget: Budget) -> String {
    let periods = Periods::at(SystemTime::now(), ports.zone);
    match ports.directory.budgets.budget_spent(group, &periods).await {
        Ok(spent) => {
            let state = match crate::domain::budget::reached(&budget, &spent, &periods) {
                Some(_) => " It is reached: messages wait until it opens again or is raised.",
                None => "",
            };
            format!(
                "Spent today: ${:.2} and {} turns; this month: ${:.2}.{state}",
                spent.today_usd, spent.today_turns, spent.month_usd
            )
        }
        Err(e) => failed(group, e),
    }
}

fn failed(group: &GroupName, e: StoreError) -> String {
    tracing::error!(%group, %e, "a chat command could not read or write the store");
    "pincer could not read or write its database just now; try again in a moment.".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_words_parse_and_anything_else_gets_the_usage() {
        assert_eq!(TasksAction::parse(""), Ok(TasksAction::List));
        assert_eq!(TasksAction::parse(" list "), Ok(TasksAction::List));
        assert_eq!(TasksAction::parse("run 3"), Ok(TasksAction::Run(3)));
        assert_eq!(TasksAction::parse("Pause #12"), Ok(TasksAction::Pause(12)));
        assert_eq!(TasksAction::parse("resume 4"), Ok(TasksAction::Resume(4)));
        for bad in ["cancel 3", "run", "run x", "run -1", "run 0", "pause 1 2", "delete everything"] {
            assert_eq!(TasksAction::parse(bad), Err(TASKS_USAGE), "{bad}");
        }
    }

    #[test]
    fn budget_words_parse_to_cents_or_the_default() {
        assert_eq!(BudgetAction::parse(""), Ok(BudgetAction::Show));
        assert_eq!(BudgetAction::parse("daily 5"), Ok(BudgetAction::Daily(Some(500))));
        assert_eq!(BudgetAction::parse("Monthly $30.50"), Ok(BudgetAction::Monthly(Some(3050))));
        assert_eq!(BudgetAction::parse("turns 40"), Ok(BudgetAction::Turns(Some(40))));
        assert_eq!(BudgetAction::parse("daily default"), Ok(BudgetAction::Daily(None)));
        assert_eq!(BudgetAction::parse("turns default"), Ok(BudgetAction::Turns(None)));
        for bad in ["daily", "daily -1", "daily lots", "turns 1.5", "weekly 3", "daily 5 6", "daily NaN"] {
            assert_eq!(BudgetAction::parse(bad), Err(BUDGET_USAGE), "{bad}");
        }
        let own = BudgetAction::Daily(Some(100)).apply(Budget { daily_turns: Some(3), ..Budget::default() });
        assert_eq!(own, Budget { daily_cents: Some(100), daily_turns: Some(3), ..Budget::default() });
    }
}
