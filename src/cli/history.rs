//! `pincer history NAME`: what was persisted for a group, oldest first, as
//! lines for people or JSON objects for scripts.

use crate::app;
use crate::config::Config;
use crate::store::{Delivery, HistoryEntry};

pub async fn execute(config: &Config, group: &str, json: bool, limit: u32) -> anyhow::Result<()> {
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
