//! `pincer chat NAME`: a terminal chat with one group's agent. With no
//! daemon it runs an engine of its own (holding the data directory's lock);
//! beside a daemon it attaches to that daemon's live session through the
//! control socket, so no second CLI is ever started.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use tokio::io::BufReader;
use tokio_util::sync::CancellationToken;

use crate::app::{self, Engine};
use crate::channel::console::{term, ChatEnd, ConsoleOptions};
use crate::config::Config;
use crate::control;
use crate::domain::GroupName;
use crate::lock::{DataLock, LockError};

/// Chats until input ends and the agent settles, or `shutdown`.
pub async fn execute(
    config: Config,
    group: &str,
    wait: Option<Duration>,
    attach: &[PathBuf],
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut opts = options(&config, group, wait, attach)?;
    // Whatever the chat switches to non-blocking goes back when it ends.
    let _restore = term::Restore::new();
    let input = BufReader::new(term::input());
    let end = match DataLock::acquire(&config.data_dir).await {
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

/// The chat's options, checked before anything starts: a typo is said at once.
fn options(config: &Config, group: &str, wait: Option<Duration>, attach: &[PathBuf]) -> anyhow::Result<ConsoleOptions> {
    let group: GroupName = group.parse()?;
    if attach.len() > crate::domain::media::MAX_ATTACHMENTS {
        bail!("attach at most {} files to one message", crate::domain::media::MAX_ATTACHMENTS);
    }
    let attach = attach.iter().map(|p| crate::media::local::checked(p)).collect::<Result<Vec<_>, _>>();
    Ok(ConsoleOptions {
        group,
        sender: std::env::var("USER").unwrap_or_else(|_| "console".to_owned()),
        wait_limit: wait.unwrap_or(config.console.wait_limit),
        attached: false,
        attach: attach.map_err(|why| anyhow::anyhow!(why))?,
    })
}
