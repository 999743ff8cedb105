//! `pincer doctor`: which sandbox modes work here and why not, the CLI found,
//! and how the chats and the store fare.

use anyhow::bail;

use crate::app;
use crate::channel::whatsapp::link;
use crate::config::Config;

/// Prints the report; fails when the configured sandbox cannot start agents.
pub async fn execute(config: &Config) -> anyhow::Result<()> {
    let report = crate::sandbox::doctor::report(config).await;
    print!("{}", report.text);
    println!("{}", crate::claude::mcp::withheld_line());
    if config.telegram.token.is_some() {
        println!("telegram: {}", telegram_health(config).await);
    }
    let whatsapp = link::status(config).await.unwrap_or_else(|e| format!("cannot tell: {e:#}"));
    println!("whatsapp: {}", whatsapp.replace('\n', "; "));
    println!("store: {}", store_space(config).await);
    if !report.ok {
        bail!("the configured sandbox cannot start agents here (see above)");
    }
    Ok(())
}

/// Whether the store gives back the space retention frees (`pincer doctor`).
async fn store_space(config: &Config) -> String {
    if config.store.url.is_none() && !config.database_path().exists() {
        return "not made yet (the first start makes it; it gives freed space back)".to_owned();
    }
    let store = match app::open_store(config).await {
        Ok(store) => store,
        Err(e) => return format!("cannot tell: {e:#}"),
    };
    match store.retention().space_mode().await {
        Ok(mode) => mode.describe(store.location()),
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
