//! `pincer groups add|set|list`: register, change and list groups. A change
//! is in the store first; a running pincer is then told through its control
//! socket.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use crate::app;
use crate::config::Config;
use crate::control::{self, wire::Change};
use crate::domain::activity::ProgressMode;
use crate::domain::{ChatAddress, GroupName, ToolsFor};
use crate::store::{GroupRecord, GroupSettings, Store, StoreError};

#[derive(Debug, Subcommand)]
pub enum GroupsCmd {
    /// Register a group and create its folder with a starter CLAUDE.md.
    Add {
        name: String,
        #[command(flatten)]
        options: GroupOptions,
    },
    /// Change a registered group: each option given replaces its old value.
    Set {
        name: String,
        #[command(flatten)]
        options: GroupOptions,
        /// Unbind the group from its chat (its replies then wait for `pincer chat NAME`).
        #[arg(long = "no-chat", alias = "no-telegram", conflicts_with_all = ["telegram", "whatsapp"])]
        no_chat: bool,
    },
    /// List registered groups.
    List,
}

/// A group's settings on the command line.
#[derive(Debug, Args)]
pub struct GroupOptions {
    /// Tools this group's agent may use without asking (repeatable); default: claude.allowed_tools.
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// Bind the group to this Telegram chat id (send /chatid in the chat to learn it).
    #[arg(long, allow_negative_numbers = true)]
    telegram: Option<i64>,
    /// Bind only this forum topic (thread id) of the chat.
    #[arg(long, requires = "telegram")]
    topic: Option<i64>,
    /// Bind the group to this WhatsApp group, by its JID (…@g.us; /chatid in the group tells it).
    #[arg(long, conflicts_with = "telegram")]
    whatsapp: Option<String>,
    /// What a message must start with to engage the agent (default: @<assistant_name>).
    #[arg(long, conflicts_with = "no_trigger")]
    trigger: Option<String>,
    /// Every message engages the agent, not just triggered ones.
    #[arg(long)]
    no_trigger: bool,
    /// Who may approve tool calls in the chat (repeatable): a Telegram user id
    /// (/chatid tells yours) or a WhatsApp phone number with country code.
    #[arg(long = "admin", allow_hyphen_values = true)]
    admins: Vec<String>,
    /// The main group: its agent may also act on other groups (message them, schedule for them, list them).
    #[arg(long, conflicts_with = "not_main")]
    main: bool,
    /// No longer the main group.
    #[arg(long)]
    not_main: bool,
    /// Whose messages may make the agent use tools: `everyone` (default), or `admins` (a turn holding a
    /// member's message gets only claude.member_tools; anything else asks an admin).
    #[arg(long, value_name = "everyone|admins")]
    tools: Option<ToolsFor>,
    /// What the chat is shown of the agent's work: `off`, `status` (a message for a slow turn, a line
    /// for background work), `verbose` (also the last steps), or `default` (progress.mode).
    #[arg(long, value_enum)]
    progress: Option<ProgressChoice>,
    /// USD the agent may spend a day (as the CLI reports cost), or `default` ([budget] daily_usd).
    /// Reached: messages wait until midnight (`timezone`) or until it is raised.
    #[arg(long, value_name = "USD|default", allow_negative_numbers = true)]
    budget_daily: Option<String>,
    /// USD a calendar month, or `default`.
    #[arg(long, value_name = "USD|default")]
    budget_monthly: Option<String>,
    /// Turns a day (for subscription users), or `default`.
    #[arg(long, value_name = "N|default")]
    budget_turns: Option<String>,
}

/// `--budget-daily 5`: cents, or `None` for `default`.
fn usd_option(flag: &str, given: &str) -> anyhow::Result<Option<u64>> {
    if given == "default" {
        return Ok(None);
    }
    let usd: f64 = given
        .trim_start_matches('$')
        .parse()
        .with_context(|| format!("{flag} {given:?}: give USD, e.g. 5 or 2.50, or `default`"))?;
    crate::domain::budget::cents(usd).map(Some).with_context(|| format!("{flag} {given:?}: give 0 or more USD"))
}

/// `--progress`: a mode of the group's own, or the configured one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProgressChoice {
    Off,
    Status,
    Verbose,
    Default,
}

impl ProgressChoice {
    fn mode(self) -> Option<ProgressMode> {
        match self {
            ProgressChoice::Off => Some(ProgressMode::Off),
            ProgressChoice::Status => Some(ProgressMode::Status),
            ProgressChoice::Verbose => Some(ProgressMode::Verbose),
            ProgressChoice::Default => None,
        }
    }
}

impl GroupOptions {
    /// Applies the options given on top of `settings`.
    fn apply(&self, settings: &mut GroupSettings) -> anyhow::Result<()> {
        if !self.allow.is_empty() {
            settings.allowed_tools = Some(self.allow.clone());
        }
        if let Some(chat_id) = self.telegram {
            settings.chat = Some(ChatAddress::telegram(chat_id, self.topic));
        }
        if let Some(jid) = &self.whatsapp {
            settings.chat = Some(ChatAddress::whatsapp_group(jid)?);
        }
        if let Some(trigger) = &self.trigger {
            if trigger.trim().is_empty() {
                bail!("--trigger must not be empty; use --no-trigger to engage on every message");
            }
            settings.trigger = Some(trigger.trim().to_owned());
            settings.requires_trigger = true;
        }
        if self.no_trigger {
            settings.requires_trigger = false;
        }
        if !self.admins.is_empty() {
            settings.admins = self.admins.iter().map(|a| admin_id(a)).collect::<anyhow::Result<_>>()?;
        }
        if self.main || self.not_main {
            settings.main = self.main;
        }
        if let Some(tools) = self.tools {
            settings.tools = tools;
        }
        if let Some(choice) = self.progress {
            settings.progress = choice.mode();
        }
        if let Some(given) = &self.budget_daily {
            settings.budget.daily_cents = usd_option("--budget-daily", given)?;
        }
        if let Some(given) = &self.budget_monthly {
            settings.budget.monthly_cents = usd_option("--budget-monthly", given)?;
        }
        if let Some(given) = &self.budget_turns {
            settings.budget.daily_turns = match given.as_str() {
                "default" => None,
                n => Some(
                    n.parse().with_context(|| format!("--budget-turns {n:?}: give a number of turns, or `default`"))?,
                ),
            };
        }
        Ok(())
    }
}

/// An admin as stored: the digits of a Telegram user id or of a phone number
/// (`+49 151 1234-5678` → `4915112345678`, the user part of its WhatsApp JID).
fn admin_id(given: &str) -> anyhow::Result<String> {
    crate::domain::number_digits(given).with_context(|| {
        format!(
            "--admin {given:?}: give a Telegram user id (digits; /chatid in the chat tells yours) or a WhatsApp \
             phone number with its country code, e.g. +4915112345678"
        )
    })
}

/// Runs one `pincer groups` command.
pub async fn execute(config: &Config, command: GroupsCmd) -> anyhow::Result<()> {
    match command {
        GroupsCmd::Add { name, options } => add(config, &name, &options).await,
        GroupsCmd::Set { name, options, no_chat } => set(config, &name, &options, no_chat).await,
        GroupsCmd::List => list(config).await,
    }
}

async fn add(config: &Config, name: &str, options: &GroupOptions) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let mut settings = GroupSettings::default();
    options.apply(&mut settings)?;
    let name = add_group(&store, config, name, &settings).await.map_err(|e| match e.downcast_ref::<StoreError>() {
        Some(StoreError::GroupExists(g)) => {
            anyhow::anyhow!("group `{g}` is already registered: change it with `pincer groups set {g} ...`")
        }
        _ => e,
    })?;
    println!("registered group `{name}` with its folder {}", config.groups_dir.join(name.as_str()).display());
    println!("{}", describe(&store.groups().group(name.as_str()).await?, config));
    control::client::tell(config, Change::Group { group: name.to_string() }).await;
    Ok(())
}

async fn set(config: &Config, name: &str, options: &GroupOptions, no_chat: bool) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let mut record = store.groups().group(name).await?;
    options.apply(&mut record.settings)?;
    if no_chat {
        record.settings.chat = None;
    }
    store.groups().save_group_settings(&record.name, &record.settings).await?;
    println!("{}", describe(&store.groups().group(name).await?, config));
    control::client::tell(config, Change::Group { group: record.name.to_string() }).await;
    Ok(())
}

pub async fn add_group(
    store: &Store,
    config: &Config,
    name: &str,
    settings: &GroupSettings,
) -> anyhow::Result<GroupName> {
    let name: GroupName = name.parse()?;
    app::register_group(store, config, &name, settings).await?;
    Ok(name)
}

/// One line per group for `groups list` (tab-separated).
fn describe(g: &GroupRecord, config: &Config) -> String {
    let s = &g.settings;
    let chat = s.chat.as_ref().map_or_else(|| "no chat".to_owned(), ChatAddress::to_string);
    let trigger = match (&s.trigger, s.requires_trigger) {
        (_, false) => "every message".to_owned(),
        (Some(t), true) => format!("trigger {t}"),
        (None, true) => format!("trigger @{}", config.assistant_name),
    };
    let admins = if s.admins.is_empty() { "no admins".to_owned() } else { format!("admins {}", s.admins.join(",")) };
    let tools = s.allowed_tools.as_ref().map_or_else(|| "default tools".to_owned(), |t| t.join(","));
    let session = g.session_id.as_deref().unwrap_or("no session yet");
    let state = match (&g.active, &g.inactive_reason) {
        (true, _) => String::new(),
        (false, reason) => format!("\tINACTIVE ({})", reason.as_deref().unwrap_or("chat gone")),
    };
    let main = if s.main { "\tMAIN" } else { "" };
    let tools_for = match s.tools {
        ToolsFor::Everyone => "tools for everyone".to_owned(),
        ToolsFor::Admins => format!("tools for admins (members: {})", config.claude.member_tools.join(",")),
    };
    let progress = match s.progress {
        Some(mode) => format!("progress {}", progress_word(mode)),
        None => format!("progress {} (default)", progress_word(config.progress.mode)),
    };
    let budget = s.budget.over(config.budget.budget()).describe();
    format!(
        "{}\t{chat}\t{trigger}\t{admins}\t{tools}\t{tools_for}\t{progress}\t{budget}\t{session}{state}{main}",
        g.name
    )
}

fn progress_word(mode: ProgressMode) -> &'static str {
    match mode {
        ProgressMode::Off => "off",
        ProgressMode::Status => "status",
        ProgressMode::Verbose => "verbose",
    }
}

async fn list(config: &Config) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let groups = store.groups().groups().await?;
    if groups.is_empty() {
        println!("no groups yet: add one with `pincer groups add NAME`");
    }
    for g in groups {
        println!("{}", describe(&g, config));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `pincer groups …` as the command line parses it.
    #[derive(Debug, Parser)]
    struct Groups {
        #[command(subcommand)]
        command: GroupsCmd,
    }

    fn parse(args: &[&str]) -> Result<Groups, clap::Error> {
        Groups::try_parse_from([&["groups"], args].concat())
    }

    fn options(args: &[&str]) -> GroupOptions {
        match parse(&[&["set", "g"], args].concat()).unwrap().command {
            GroupsCmd::Set { options, .. } => options,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tools_for_admins_is_set_and_kept() {
        let mut settings = GroupSettings::default();
        options(&["--tools", "admins"]).apply(&mut settings).unwrap();
        assert_eq!(settings.tools, ToolsFor::Admins);
        options(&["--trigger", "@bot"]).apply(&mut settings).unwrap();
        assert_eq!(settings.tools, ToolsFor::Admins, "an option not given keeps its value");
        options(&["--tools", "everyone"]).apply(&mut settings).unwrap();
        assert_eq!(settings.tools, ToolsFor::Everyone);
        let e = parse(&["set", "g", "--tools", "members"]).unwrap_err();
        assert!(e.to_string().contains("use `everyone` or `admins`"), "{e}");
    }

    #[test]
    fn progress_is_set_kept_and_given_back_to_the_default() {
        let mut settings = GroupSettings::default();
        options(&["--progress", "verbose"]).apply(&mut settings).unwrap();
        assert_eq!(settings.progress, Some(ProgressMode::Verbose));
        options(&["--tools", "admins"]).apply(&mut settings).unwrap();
        assert_eq!(settings.progress, Some(ProgressMode::Verbose), "an option not given keeps its value");
        options(&["--progress", "off"]).apply(&mut settings).unwrap();
        assert_eq!(settings.progress, Some(ProgressMode::Off));
        options(&["--progress", "default"]).apply(&mut settings).unwrap();
        assert_eq!(settings.progress, None);
        let e = parse(&["set", "g", "--progress", "loud"]).unwrap_err();
        assert!(e.to_string().contains("off, status, verbose, default"), "{e}");
        let g = record(settings);
        assert!(describe(&g, &Config::default()).contains("\tprogress status (default)\t"));
    }

    fn record(settings: GroupSettings) -> GroupRecord {
        GroupRecord {
            name: "g".parse().unwrap(),
            created_at_us: 0,
            session_id: None,
            settings,
            active: true,
            inactive_reason: None,
        }
    }

    #[test]
    fn budget_options_set_a_groups_own_parts_and_default_hands_one_back() {
        let mut settings = GroupSettings::default();
        options(&["--budget-daily", "2.50", "--budget-turns", "40"]).apply(&mut settings).unwrap();
        assert_eq!(settings.budget.daily_cents, Some(250));
        assert_eq!(settings.budget.daily_turns, Some(40));
        options(&["--budget-daily", "default", "--budget-monthly", "$30"]).apply(&mut settings).unwrap();
        assert_eq!((settings.budget.daily_cents, settings.budget.monthly_cents), (None, Some(3000)));
        let e = options(&["--budget-daily", "-1"]).apply(&mut settings).unwrap_err();
        assert!(format!("{e:#}").contains("give 0 or more USD"), "{e:#}");
        let e = options(&["--budget-daily", "lots"]).apply(&mut settings).unwrap_err();
        assert!(format!("{e:#}").contains("give USD, e.g. 5 or 2.50, or `default`"), "{e:#}");
        let mut config = Config::default();
        config.budget.daily_usd = Some(5.0);
        let g = record(settings);
        assert!(
            describe(&g, &config).contains("\tbudget $5.00/day, $30.00/month, 40 turns/day\t"),
            "{}",
            describe(&g, &config)
        );
    }
}
