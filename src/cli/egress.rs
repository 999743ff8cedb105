//! `pincer egress NAME`: what a group's agent asked the egress proxy for,
//! newest last, like `pincer history`.

use crate::app;
use crate::config::Config;
use crate::store::EgressDecision;

pub async fn execute(config: &Config, group: &str, json: bool, limit: u32) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let record = store.groups().group(group).await?;
    let decisions = store.egress().egress_decisions(&record.name, limit).await?;
    if decisions.is_empty() && !json {
        println!("no egress decisions for `{group}` yet: its agent has asked the egress proxy for nothing");
    }
    for d in decisions {
        if json {
            println!("{}", serde_json::to_string(&d)?);
        } else {
            println!("{}", render(&d));
        }
    }
    Ok(())
}

/// `2026-01-02T03:04:05Z  allowed  connect github.com:443 → 140.82.121.4  ↑517 B ↓6120 B`.
pub fn render(d: &EgressDecision) -> String {
    let at = crate::domain::printable_time(crate::domain::from_unix_us(d.at_us));
    let address = d.address.as_ref().map_or_else(String::new, |a| format!(" → {a}"));
    let bytes = if d.bytes_up > 0 || d.bytes_down > 0 {
        format!("  ↑{} B ↓{} B", d.bytes_up, d.bytes_down)
    } else {
        String::new()
    };
    let reason = d.reason.as_ref().map_or_else(String::new, |r| format!(": {r}"));
    format!("{at}  {:<7}  {:<7} {}:{}{address}{bytes}{reason}", d.verdict.as_str(), d.via.as_str(), d.host, d.port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EgressVerdict, EgressVia};

    #[test]
    fn a_line_says_when_what_where_how_much_and_why() {
        let mut d = EgressDecision {
            group: "team".parse().unwrap(),
            at_us: 1_700_000_000_000_000,
            closed_at_us: 1_700_000_001_000_000,
            via: EgressVia::Connect,
            host: "github.com".into(),
            port: 443,
            verdict: EgressVerdict::Allowed,
            reason: None,
            address: Some("140.82.121.4".into()),
            bytes_up: 517,
            bytes_down: 6120,
        };
        assert_eq!(render(&d), "2023-11-14T22:13:20Z  allowed  connect github.com:443 → 140.82.121.4  ↑517 B ↓6120 B");
        d.verdict = EgressVerdict::Refused;
        d.address = None;
        (d.bytes_up, d.bytes_down) = (0, 0);
        d.reason = Some("not in allow_domains".into());
        assert_eq!(render(&d), "2023-11-14T22:13:20Z  refused  connect github.com:443: not in allow_domains");
    }
}
