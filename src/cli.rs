//! The command line: what each `pincer` subcommand does, in terms of the
//! library. `main` only parses, loads config, sets up logging and calls [`execute`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use tokio::io::BufReader;
use tokio_util::sync::CancellationToken;

use crate::app::{self, Engine};
use crate::channel::console::{term, ChatEnd, ConsoleOptions};
use crate::channel::whatsapp::link;
use crate::claude::install;
use crate::config::Config;
use crate::control::{self, wire::Change};
use crate::domain::activity::ProgressMode;
use crate::domain::{ChatAddress, GroupName, ToolsFor};
use crate::groups;
use crate::lock::LockError;
use crate::store::{Delivery, GroupRecord, GroupSettings, HistoryEntry, Store, StoreError};
use crate::tasks_cli::{self, TasksCmd};

/// The group `pincer setup` registers, so `pincer chat` works right away.
pub const STARTER_GROUP: &str = "main";

#[derive(Debug, Parser)]
#[command(name = "pincer", version, about = "Gives each chat group a long-lived Claude Code agent.")]
pub struct Cli {
    /// Config file (default: ./pincer.toml if it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the daemon until Ctrl-C or SIGTERM.
    Run,
    /// Chat with a group's agent in the terminal (reads stdin, one message a line).
    Chat {
        #[arg(default_value = STARTER_GROUP)]
        group: String,
        /// After input ends, wait this long for replies and background work (default: console.wait_limit).
        #[arg(long, value_parser = humantime::parse_duration)]
        wait: Option<Duration>,
        /// Send this file with the first line typed (repeat for several; with no line, they go alone).
        #[arg(long, value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
    },
    /// Register, change and list groups.
    Groups {
        #[command(subcommand)]
        command: GroupsCmd,
    },
    /// Link pincer to a WhatsApp account as a device, see the link, or undo it.
    Whatsapp {
        #[command(subcommand)]
        command: WhatsappCmd,
    },
    /// Scheduled prompts: add, list, pause, resume, cancel, run now, and the run log.
    Tasks {
        #[command(subcommand)]
        command: TasksCmd,
    },
    /// Print what was persisted for a group, oldest first.
    History {
        group: String,
        /// One JSON object per line, with a `kind` field.
        #[arg(long)]
        json: bool,
        /// Only the newest N entries.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Print what a group's agent asked the egress proxy for (allowed, refused, bytes), newest last.
    Egress {
        group: String,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Only the newest N decisions.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// One screen: the daemon, each platform, what waits, and per group its state and cost.
    Status {
        /// As JSON, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Make the running pincer read pincer.toml again (as SIGHUP does): it
    /// applies progress, budgets, egress policies and the log level at once,
    /// and says which other changes need a restart.
    Reload,
    /// Report which sandbox modes work here and why not, what `auto` picks, and the CLI found.
    Doctor,
    /// Inside a sandbox: carry connections from the sandbox's loopback to a
    /// Unix socket pincer serves (started by pincer itself, not by people).
    #[command(hide = true)]
    Forward {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        to: PathBuf,
    },
    /// Copy the store, the WhatsApp device store, the agents' conversations and the groups'
    /// folders into DIR (new or empty), consistently, while pincer runs; with a manifest.
    Backup { dir: PathBuf },
    /// Run pincer under systemd: `pincer service print` writes a unit for this install.
    Service {
        #[command(subcommand)]
        command: ServiceCmd,
    },
    /// Install the pinned Claude Code CLI from npm into the data directory, and a starter group.
    Setup {
        /// Install this CLI version instead of the pinned one.
        #[arg(long, default_value = install::PINNED_VERSION)]
        version: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServiceCmd {
    /// Print a systemd unit (Type=notify, watchdog, restart on failure) that runs this pincer
    /// with this config, data dir and groups dir.
    Print {
        /// The account it runs as (default: the one running this command).
        #[arg(long)]
        user: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WhatsappCmd {
    /// Pair pincer as a linked device: shows a QR code to scan with the phone (or a pairing code
    /// with --phone), waits for the pairing, says which number it is linked as. `pincer run`
    /// then serves WhatsApp.
    Link {
        /// Pair by a code entered on the phone instead of a QR code: the account's number, with country code.
        #[arg(long)]
        phone: Option<String>,
    },
    /// The linked number, whether the running pincer is connected, and the last message seen.
    Status,
    /// Remove the device from the account (when WhatsApp can be reached) and delete its keys here.
    Unlink,
}

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

/// The unit `pincer service print` writes: every path made absolute from here.
fn service_unit(config_file: Option<&Path>, config: &Config, user: Option<String>) -> anyhow::Result<String> {
    let here = std::env::current_dir().context("cannot read the current directory")?;
    let absolute = |p: &Path| if p.is_absolute() { p.to_owned() } else { here.join(p) };
    let default_file = Path::new(crate::config::DEFAULT_CONFIG_FILE);
    let config_file = config_file.or_else(|| default_file.exists().then_some(default_file)).map(absolute);
    let user = match user {
        Some(user) => user,
        None => nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .context("cannot tell who runs this: give --user NAME")?,
    };
    let spec = crate::service::UnitSpec {
        exe: std::env::current_exe().context("cannot tell where the pincer executable is")?,
        config: config_file,
        work_dir: here.clone(),
        data_dir: absolute(&config.data_dir),
        groups_dir: absolute(&config.groups_dir),
        user,
        shutdown_grace: config.claude.shutdown_grace,
    };
    Ok(crate::service::unit(&spec)?)
}

/// Runs one subcommand.
pub async fn execute(cli: Cli, config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Run => app::run(config, shutdown).await,
        Cmd::Status { json } => crate::status_cli::run(&config, json).await,
        Cmd::Reload => match crate::control::client::reload(&config.data_dir).await {
            Ok(Some(said)) => {
                println!("{said}");
                Ok(())
            }
            Ok(None) => {
                println!("pincer is not running on {}: it reads pincer.toml when it starts", config.data_dir.display());
                Ok(())
            }
            Err(why) => anyhow::bail!("the running pincer did not reload: {why}"),
        },
        Cmd::Backup { dir } => {
            let manifest = crate::backup::run(&config, &dir).await?;
            let bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
            println!(
                "backed up {} files ({}) into {}; restore: see the README's \"Backups\"",
                manifest.files.len(),
                crate::domain::media::human_bytes(bytes),
                dir.display()
            );
            if !manifest.skipped.is_empty() {
                println!("left out (not files): {}", manifest.skipped.join(", "));
            }
            Ok(())
        }
        Cmd::Service { command: ServiceCmd::Print { user } } => {
            print!("{}", service_unit(cli.config.as_deref(), &config, user)?);
            Ok(())
        }
        Cmd::Chat { group, wait, attach } => chat(config, &group, wait, &attach, shutdown).await,
        Cmd::Groups { command: GroupsCmd::Add { name, options } } => {
            let store = app::open_store(&config).await?;
            let mut settings = GroupSettings::default();
            options.apply(&mut settings)?;
            let name = add_group(&store, &config, &name, &settings).await.map_err(|e| {
                match e.downcast_ref::<StoreError>() {
                    Some(StoreError::GroupExists(g)) => {
                        anyhow::anyhow!("group `{g}` is already registered: change it with `pincer groups set {g} ...`")
                    }
                    _ => e,
                }
            })?;
            println!("registered group `{name}` with its folder {}", config.groups_dir.join(name.as_str()).display());
            println!("{}", describe(&store.groups().group(name.as_str()).await?, &config));
            control::client::tell(&config, Change::Group { group: name.to_string() }).await;
            Ok(())
        }
        Cmd::Groups { command: GroupsCmd::Set { name, options, no_chat } } => {
            let store = app::open_store(&config).await?;
            let mut record = store.groups().group(&name).await?;
            options.apply(&mut record.settings)?;
            if no_chat {
                record.settings.chat = None;
            }
            store.groups().save_group_settings(&record.name, &record.settings).await?;
            println!("{}", describe(&store.groups().group(&name).await?, &config));
            control::client::tell(&config, Change::Group { group: record.name.to_string() }).await;
            Ok(())
        }
        Cmd::Groups { command: GroupsCmd::List } => list_groups(&config).await,
        Cmd::Tasks { command } => tasks_cli::execute(command, &config).await,
        Cmd::Whatsapp { command } => whatsapp(&config, command).await,
        Cmd::History { group, json, limit } => history(&config, &group, json, limit).await,
        Cmd::Egress { group, json, limit } => crate::egress_cli::execute(&config, &group, json, limit).await,
        Cmd::Setup { version } => setup(&config, &version).await,
        Cmd::Forward { listen, to } => Ok(crate::sandbox::forward::run(listen, to).await?),
        Cmd::Doctor => {
            let report = crate::sandbox::doctor::report(&config).await;
            print!("{}", report.text);
            if config.telegram.token.is_some() {
                println!("telegram: {}", telegram_health(&config).await);
            }
            let whatsapp = link::status(&config).await.unwrap_or_else(|e| format!("cannot tell: {e:#}"));
            println!("whatsapp: {}", whatsapp.replace('\n', "; "));
            println!("store: {}", store_space(&config).await);
            if !report.ok {
                bail!("the configured sandbox cannot start agents here (see above)");
            }
            Ok(())
        }
    }
}

/// Whether the store gives back the space retention frees (`pincer doctor`).
async fn store_space(config: &Config) -> String {
    if !config.database_path().exists() {
        return "not made yet (the first start makes it; it gives freed space back)".to_owned();
    }
    let store = match app::open_store(config).await {
        Ok(store) => store,
        Err(e) => return format!("cannot tell: {e:#}"),
    };
    match store.retention().space_mode().await {
        Ok(mode) => mode.describe(store.path()),
        Err(e) => format!("cannot tell: {e}"),
    }
}

/// Telegram's connection as the running (or last) pincer saw it.
async fn telegram_health(config: &Config) -> String {
    let health = match app::open_store(config).await {
        Ok(store) => store.channels().channel_health(crate::domain::Platform::Telegram).await,
        Err(e) => return format!("cannot tell: {e:#}"),
    };
    match health {
        Ok(Some(h)) => {
            let at = crate::domain::printable_time(crate::domain::from_unix_us(h.changed_at_us));
            let detail = h.detail.map_or_else(String::new, |d| format!(": {d}"));
            format!("{} since {at}{detail}", h.state)
        }
        Ok(None) => "configured; not served yet (`pincer run`)".to_owned(),
        Err(e) => format!("cannot tell: {e:#}"),
    }
}

async fn whatsapp(config: &Config, command: WhatsappCmd) -> anyhow::Result<()> {
    match command {
        WhatsappCmd::Link { phone } => {
            let number = link::link(config, phone.as_deref(), &mut std::io::stdout()).await?;
            println!(
                "linked as +{number}; `pincer run` serves WhatsApp from its next start (restart it if it runs); \
                 register groups with `pincer groups add NAME --whatsapp JID`"
            );
        }
        WhatsappCmd::Status => println!("{}", link::status(config).await?),
        WhatsappCmd::Unlink => println!("{}", link::unlink(config).await?),
    }
    Ok(())
}

async fn add_group(store: &Store, config: &Config, name: &str, settings: &GroupSettings) -> anyhow::Result<GroupName> {
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

async fn list_groups(config: &Config) -> anyhow::Result<()> {
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

async fn chat(
    config: Config,
    group: &str,
    wait: Option<Duration>,
    attach: &[std::path::PathBuf],
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let group: GroupName = group.parse()?;
    if attach.len() > crate::domain::media::MAX_ATTACHMENTS {
        bail!("attach at most {} files to one message", crate::domain::media::MAX_ATTACHMENTS);
    }
    // Checked before anything starts: a typo is said at once.
    let attach = attach.iter().map(|p| crate::media::local::checked(p)).collect::<Result<Vec<_>, _>>();
    let mut opts = ConsoleOptions {
        group,
        sender: std::env::var("USER").unwrap_or_else(|_| "console".to_owned()),
        wait_limit: wait.unwrap_or(config.console.wait_limit),
        attached: false,
        attach: attach.map_err(|why| anyhow::anyhow!(why))?,
    };
    // Whatever the chat switches to non-blocking goes back when it ends.
    let _restore = term::Restore::new();
    let input = BufReader::new(term::input());
    let end = match crate::lock::DataLock::acquire(&config.data_dir).await {
        // No daemon: this chat runs its own engine, and holds the lock so none starts meanwhile.
        Ok(_lock) => {
            let engine = Engine::start_console(config, opts.group.clone(), shutdown.clone()).await?;
            let end = app::console_chat(&engine, &opts, input, term::output(), shutdown).await;
            engine.stop().await;
            end?
        }
        // A daemon serves this data: talk to its live session, never start a second CLI.
        Err(held @ LockError::Held { .. }) => {
            let stream = control::client::connect(&config.data_dir).await.map_err(|e| {
                anyhow::anyhow!(
                    "{held}. It does not take terminal chats on {} ({e}): if it is `pincer run`, it may \
                     still be starting (try again in a moment); if it is a `pincer chat` in another terminal, \
                     end that one first",
                    control::socket_path(&config.data_dir).display()
                )
            })?;
            opts.attached = true;
            control::client::chat(stream, &opts, input, term::output(), shutdown).await?
        }
        Err(e) => return Err(e.into()),
    };
    match end {
        ChatEnd::Done | ChatEnd::Shutdown => Ok(()),
        ChatEnd::WaitLimit => bail!("background work was still running after the wait limit"),
    }
}

async fn history(config: &Config, group: &str, json: bool, limit: u32) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let record = store.groups().group(group).await?;
    for entry in store.history().history(&record.name, limit).await? {
        if json {
            println!("{}", serde_json::to_string(&entry)?);
        } else {
            println!("{}", render(&entry));
        }
    }
    Ok(())
}

fn render(entry: &HistoryEntry) -> String {
    let at = crate::domain::printable_time(crate::domain::from_unix_us(entry.at_us()));
    match entry {
        HistoryEntry::Inbound { source, sender, text, state, media, .. } => {
            let mut line = format!("{at}  in      {source}/{sender} ({state}): {text}");
            for attachment in media {
                line.push_str(&format!("\n                    {}", attachment.describe()));
            }
            line
        }
        HistoryEntry::Result {
            subtype, is_error, text, cost_usd, duration_ms, session_id, origin, delivery, ..
        } => {
            let mark = if *is_error { "error" } else { "result" };
            let cost = cost_usd.map_or_else(String::new, |c| format!("  ${c:.4}"));
            let dur = duration_ms.map_or_else(String::new, |d| format!("  {d}ms"));
            let origin = origin.as_ref().map_or_else(String::new, |o| format!("  ({o})"));
            let session = session_id.as_deref().unwrap_or("-");
            format!(
                "{at}  {mark:<6}  {subtype}{cost}{dur}{origin}  session {session}: {}{}",
                text.as_deref().unwrap_or(""),
                delivered(delivery)
            )
        }
        HistoryEntry::Task { subtype, task_id, task_type, status, summary, description, .. } => {
            let parts: Vec<&str> =
                [task_id, task_type, status, description, summary].into_iter().filter_map(|p| p.as_deref()).collect();
            format!("{at}  task    {subtype}  {}", parts.join("  "))
        }
        HistoryEntry::Message { sent_by, text, file: None, delivery, .. } => {
            format!("{at}  message from {sent_by}'s agent: {text}{}", delivered(delivery))
        }
        HistoryEntry::Message { sent_by, text, file: Some(file), delivery, .. } => {
            let size = crate::domain::media::human_bytes(file.bytes);
            let caption = if text.is_empty() { String::new() } else { format!(": {text}") };
            let from = crate::domain::one_line(&file.from, 200);
            format!(
                "{at}  {} \"{}\" ({size}, {from} in the folder) from {sent_by}'s agent{caption}{}",
                file.kind,
                file.name,
                delivered(delivery)
            )
        }
        HistoryEntry::Notice { text, delivery, .. } => format!("{at}  pincer  {text}{}", delivered(delivery)),
    }
}

/// `  [delivered (telegram -100123)]`: the delivery state after a message for the chat.
fn delivered(delivery: &Option<Delivery>) -> String {
    delivery.as_ref().map_or_else(String::new, |d| format!("  [{d}]"))
}

async fn setup(config: &Config, version: &str) -> anyhow::Result<()> {
    println!(
        "installing {}@{version} into {} ...",
        install::NPM_PACKAGE,
        install::install_prefix(&config.data_dir).display()
    );
    let binary = install::install(&config.data_dir, version).await?;
    println!("installed {}", binary.display());
    let store = app::open_store(config).await?;
    match add_group(&store, config, STARTER_GROUP, &GroupSettings::default()).await {
        Ok(name) => println!("registered the starter group `{name}`"),
        Err(e) if matches!(e.downcast_ref::<StoreError>(), Some(StoreError::GroupExists(_))) => {
            groups::create(&config.groups_dir, &STARTER_GROUP.parse()?, &config.assistant_name)?;
        }
        Err(e) => return Err(e),
    }
    crate::private::tighten(config);
    println!("ready: `pincer chat {STARTER_GROUP}` talks to the starter group (set ANTHROPIC_API_KEY first)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> GroupOptions {
        let cli = Cli::try_parse_from([&["pincer", "groups", "set", "g"], args].concat()).unwrap();
        match cli.command {
            Cmd::Groups { command: GroupsCmd::Set { options, .. } } => options,
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
        let e = Cli::try_parse_from(["pincer", "groups", "set", "g", "--tools", "members"]).unwrap_err();
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
        let e = Cli::try_parse_from(["pincer", "groups", "set", "g", "--progress", "loud"]).unwrap_err();
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
