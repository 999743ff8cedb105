//! The egress proxy's decisions log: one row per connection a group's agent
//! asked for, written when it was refused or when its connection closed (so
//! the row carries the bytes), read by `pincer egress NAME`.

use serde::Serialize;
use sqlx::Row;

use super::error::{readable, StoreError};
use super::handles::EgressLog;
use crate::domain::GroupName;

/// How the agent asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressVia {
    /// `CONNECT host:port`: a byte tunnel (TLS inside, not looked into).
    Connect,
    /// An absolute-form plain HTTP request, forwarded.
    Http,
}

impl EgressVia {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressVia::Connect => "connect",
            EgressVia::Http => "http",
        }
    }

    fn parse(s: &str) -> EgressVia {
        if s == "http" {
            EgressVia::Http
        } else {
            EgressVia::Connect
        }
    }
}

/// What became of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressVerdict {
    Allowed,
    /// By the group's policy, or because the destination is never reachable.
    Refused,
    /// Allowed, but the name did not resolve or the destination did not answer.
    Failed,
}

impl EgressVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            EgressVerdict::Allowed => "allowed",
            EgressVerdict::Refused => "refused",
            EgressVerdict::Failed => "failed",
        }
    }

    fn parse(s: &str) -> EgressVerdict {
        match s {
            "allowed" => EgressVerdict::Allowed,
            "failed" => EgressVerdict::Failed,
            _ => EgressVerdict::Refused,
        }
    }
}

/// One row of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EgressDecision {
    pub group: GroupName,
    /// When the request came in (unix µs).
    pub at_us: i64,
    /// When it was refused, or its connection closed.
    pub closed_at_us: i64,
    pub via: EgressVia,
    pub host: String,
    pub port: u16,
    pub verdict: EgressVerdict,
    pub reason: Option<String>,
    /// The vetted address connected to.
    pub address: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl EgressLog {
    pub async fn record_egress(&self, d: &EgressDecision) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO egress_decisions (group_name, at_us, closed_at_us, via, host, port, verdict, reason, address, bytes_up, bytes_down)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(d.group.as_str())
        .bind(d.at_us)
        .bind(d.closed_at_us)
        .bind(d.via.as_str())
        .bind(&d.host)
        .bind(i64::from(d.port))
        .bind(d.verdict.as_str())
        .bind(&d.reason)
        .bind(&d.address)
        .bind(i64::try_from(d.bytes_up).unwrap_or(i64::MAX))
        .bind(i64::try_from(d.bytes_down).unwrap_or(i64::MAX))
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// The group's newest `limit` decisions, oldest first (by when the request came in).
    pub async fn egress_decisions(&self, group: &GroupName, limit: u32) -> Result<Vec<EgressDecision>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM (
                 SELECT id, at_us, closed_at_us, via, host, port, verdict, reason, address, bytes_up, bytes_down
                   FROM egress_decisions WHERE group_name = $1 ORDER BY at_us DESC, id DESC LIMIT $2
             ) ORDER BY at_us ASC, id ASC",
        )
        .bind(group.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("egress_decisions", &rows, |r| {
            Ok(EgressDecision {
                group: group.clone(),
                at_us: r.try_get("at_us")?,
                closed_at_us: r.try_get("closed_at_us")?,
                via: EgressVia::parse(&r.try_get::<String, _>("via")?),
                host: r.try_get("host")?,
                port: u16::try_from(r.try_get::<i64, _>("port")?).unwrap_or(0),
                verdict: EgressVerdict::parse(&r.try_get::<String, _>("verdict")?),
                reason: r.try_get("reason")?,
                address: r.try_get("address")?,
                bytes_up: u64::try_from(r.try_get::<i64, _>("bytes_up")?).unwrap_or(0),
                bytes_down: u64::try_from(r.try_get::<i64, _>("bytes_down")?).unwrap_or(0),
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GroupSettings;

    fn decision(group: &GroupName, at_us: i64, host: &str, verdict: EgressVerdict) -> EgressDecision {
        EgressDecision {
            group: group.clone(),
            at_us,
            closed_at_us: at_us + 10,
            via: EgressVia::Connect,
            host: host.to_owned(),
            port: 443,
            verdict,
            reason: None,
            address: Some("192.0.2.1".to_owned()),
            bytes_up: 5_000_000_000,
            bytes_down: 7,
        }
    }

    #[tokio::test]
    async fn decisions_come_back_newest_last_limited_to_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("p.db")).await.unwrap();
        let team: GroupName = "team".parse().unwrap();
        let other: GroupName = "other".parse().unwrap();
        store.groups().add_group(&team, &GroupSettings::default()).await.unwrap();
        store.groups().add_group(&other, &GroupSettings::default()).await.unwrap();
        // Written when each closed, so not in the order they came in.
        store.egress().record_egress(&decision(&team, 30, "c.test", EgressVerdict::Failed)).await.unwrap();
        store.egress().record_egress(&decision(&team, 10, "a.test", EgressVerdict::Allowed)).await.unwrap();
        store.egress().record_egress(&decision(&other, 15, "x.test", EgressVerdict::Allowed)).await.unwrap();
        store.egress().record_egress(&decision(&team, 20, "b.test", EgressVerdict::Refused)).await.unwrap();

        let all = store.egress().egress_decisions(&team, 10).await.unwrap();
        let hosts: Vec<&str> = all.iter().map(|d| d.host.as_str()).collect();
        assert_eq!(hosts, ["a.test", "b.test", "c.test"]);
        assert_eq!(all[1], decision(&team, 20, "b.test", EgressVerdict::Refused));
        let newest = store.egress().egress_decisions(&team, 2).await.unwrap();
        assert_eq!(newest.iter().map(|d| d.host.as_str()).collect::<Vec<_>>(), ["b.test", "c.test"]);
    }
}
