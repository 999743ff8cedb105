//! The command line: what each `pincer` subcommand does, in terms of the
//! library. `main` only parses, loads config, sets up logging and calls [`execute`].

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::bail;
use clap::{Parser, Subcommand};
use tokio::io::BufReader;
use tokio_util::sync::CancellationToken;

use crate::app::{self, Engine};
use crate::channel::console::{self, ChatEnd, ConsoleOptions};
use crate::claude::install;
use crate::config::Config;
use crate::domain::GroupName;
use crate::groups;
use crate::store::{HistoryEntry, Store, StoreError};

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
    },
    /// Register and list groups.
    Groups {
        #[command(subcommand)]
        command: GroupsCmd,
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
    /// Install the pinned Claude Code CLI from npm into the data directory, and a starter group.
    Setup {
        /// Install this CLI version instead of the pinned one.
        #[arg(long, default_value = install::PINNED_VERSION)]
        version: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupsCmd {
    /// Register a group and create its folder with a starter CLAUDE.md.
    Add {
        name: String,
        /// Tools this group's agent may use (repeatable); default: claude.allowed_tools.
        #[arg(long = "allow")]
        allow: Vec<String>,
    },
    /// List registered groups.
    List,
}

/// Runs one subcommand.
pub async fn execute(cli: Cli, config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Run => app::run(config, shutdown).await,
        Cmd::Chat { group, wait } => chat(config, &group, wait, shutdown).await,
        Cmd::Groups { command: GroupsCmd::Add { name, allow } } => {
            let store = app::open_store(&config).await?;
            let name = add_group(&store, &config, &name, &allow).await?;
            println!("registered group `{name}` with its folder {}", config.groups_dir.join(name.as_str()).display());
            Ok(())
        }
        Cmd::Groups { command: GroupsCmd::List } => list_groups(&config).await,
        Cmd::History { group, json, limit } => history(&config, &group, json, limit).await,
        Cmd::Setup { version } => setup(&config, &version).await,
    }
}

async fn add_group(store: &Store, config: &Config, name: &str, allow: &[String]) -> anyhow::Result<GroupName> {
    let name: GroupName = name.parse()?;
    app::register_group(store, config, &name, (!allow.is_empty()).then_some(allow)).await?;
    Ok(name)
}

async fn list_groups(config: &Config) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let groups = store.groups().await?;
    if groups.is_empty() {
        println!("no groups yet: add one with `pincer groups add NAME`");
    }
    for g in groups {
        let tools = g.allowed_tools.map_or_else(|| "default tools".to_owned(), |t| t.join(","));
        let session = g.session_id.unwrap_or_else(|| "no session yet".to_owned());
        println!("{}\t{}\t{}", g.name, session, tools);
    }
    Ok(())
}

async fn chat(config: Config, group: &str, wait: Option<Duration>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let group: GroupName = group.parse()?;
    let opts = ConsoleOptions {
        group,
        sender: std::env::var("USER").unwrap_or_else(|_| "console".to_owned()),
        wait_limit: wait.unwrap_or(config.console.wait_limit),
    };
    let engine = Engine::start(config, shutdown.clone()).await?;
    let input = BufReader::new(tokio::io::stdin());
    let end = console::chat(&engine, &opts, input, tokio::io::stdout(), shutdown).await;
    engine.stop().await;
    match end? {
        ChatEnd::Done | ChatEnd::Shutdown => Ok(()),
        ChatEnd::WaitLimit => bail!("background work was still running after the wait limit"),
    }
}

async fn history(config: &Config, group: &str, json: bool, limit: u32) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let record = store.group(group).await?;
    for entry in store.history(&record.name, limit).await? {
        if json {
            println!("{}", serde_json::to_string(&entry)?);
        } else {
            println!("{}", render(&entry));
        }
    }
    Ok(())
}

fn render(entry: &HistoryEntry) -> String {
    let at = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_micros(entry.at_us().max(0).unsigned_abs()));
    match entry {
        HistoryEntry::Inbound { source, sender, text, state, .. } => {
            format!("{at}  in      {source}/{sender} ({state}): {text}")
        }
        HistoryEntry::Result { subtype, is_error, text, total_cost_usd, duration_ms, session_id, origin, .. } => {
            let mark = if *is_error { "error" } else { "result" };
            let cost = total_cost_usd.map_or_else(String::new, |c| format!("  ${c:.4}"));
            let dur = duration_ms.map_or_else(String::new, |d| format!("  {d}ms"));
            let origin = origin.as_ref().map_or_else(String::new, |o| format!("  ({o})"));
            let session = session_id.as_deref().unwrap_or("-");
            format!(
                "{at}  {mark:<6}  {subtype}{cost}{dur}{origin}  session {session}: {}",
                text.as_deref().unwrap_or("")
            )
        }
        HistoryEntry::Task { subtype, task_id, task_type, status, summary, description, .. } => {
            let parts: Vec<&str> =
                [task_id, task_type, status, description, summary].into_iter().filter_map(|p| p.as_deref()).collect();
            format!("{at}  task    {subtype}  {}", parts.join("  "))
        }
    }
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
    match add_group(&store, config, STARTER_GROUP, &[]).await {
        Ok(name) => println!("registered the starter group `{name}`"),
        Err(e) if matches!(e.downcast_ref::<StoreError>(), Some(StoreError::GroupExists(_))) => {
            groups::create(&config.groups_dir, &STARTER_GROUP.parse()?, &config.assistant_name)?;
        }
        Err(e) => return Err(e),
    }
    println!("ready: `pincer chat {STARTER_GROUP}` talks to the starter group (set ANTHROPIC_API_KEY first)");
    Ok(())
}
