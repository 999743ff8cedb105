//! What a reload of `pincer.toml` changes: the keys that differ between the
//! running config and the one just read, split into those a running pincer
//! takes up at once and those that need a restart. Pure: the reload itself
//! (`app::reload`) applies the first kind and reports the second.
//!
//! Keys are compared as the config serializes (dotted, e.g.
//! `claude.max_live_sessions`); only names are reported, never values, since
//! some are secrets.

use serde_json::Value;

use super::root::Config;
use super::sandbox::GroupSandbox;

/// The keys a reload found changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Applied at once.
    pub applied: Vec<String>,
    /// Kept as they were until pincer is restarted.
    pub need_restart: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.need_restart.is_empty()
    }

    /// One line per kind, for the operator.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        if self.is_empty() {
            lines.push("pincer.toml read again: nothing changed.".to_owned());
        }
        if !self.applied.is_empty() {
            lines.push(format!("applied: {}", self.applied.join(", ")));
        }
        if !self.need_restart.is_empty() {
            lines.push(format!(
                "need a restart to take effect (kept as they were until then): {}",
                self.need_restart.join(", ")
            ));
        }
        lines.join("\n")
    }
}

/// Whether a running pincer applies a change of `key` (dotted) at once.
fn applies_live(key: &str) -> bool {
    let under = |section: &str| key == section || key.starts_with(&format!("{section}."));
    if under("progress") || under("budget") || under("media") || under("transcription") || key == "log.level" {
        return true;
    }
    // The egress policy: the proxy checks each new connection against the newest.
    if key == "sandbox.network" || under("sandbox.allow_domains") {
        return true;
    }
    match key.strip_prefix("sandbox.groups.").and_then(|rest| rest.split_once('.')) {
        Some((_group, field)) => field == "network" || field == "allow_domains" || field.starts_with("allow_domains."),
        None => false,
    }
}

/// The keys that differ between `running` and `read`, sorted.
pub fn changes(running: &Config, read: &Config) -> Changes {
    let (mut a, mut b) = (to_value(running), to_value(read));
    fill_groups(&mut a, &mut b);
    let mut keys = Vec::new();
    differing("", &a, &b, &mut keys);
    keys.sort();
    keys.dedup();
    let (applied, need_restart) = keys.into_iter().partition(|k| applies_live(k));
    Changes { applied, need_restart }
}

/// Takes into `running` what a reload applies from `read` (what
/// [`applies_live`] names), so `running` stays the config in effect.
pub fn take_live(running: &mut Config, read: &Config) {
    running.progress = read.progress.clone();
    running.budget = read.budget.clone();
    running.media = read.media.clone();
    running.transcription = read.transcription.clone();
    running.log.level = read.log.level.clone();
    running.sandbox.network = read.sandbox.network;
    running.sandbox.allow_domains = read.sandbox.allow_domains.clone();
    for (name, own) in &mut running.sandbox.groups {
        let new = read.sandbox.groups.get(name).cloned().unwrap_or_default();
        own.network = new.network;
        own.allow_domains = new.allow_domains;
    }
    for (name, new) in &read.sandbox.groups {
        let own = running.sandbox.groups.entry(name.clone()).or_default();
        own.network = new.network;
        own.allow_domains = new.allow_domains.clone();
    }
}

fn to_value(config: &Config) -> Value {
    serde_json::to_value(config).unwrap_or(Value::Null)
}

/// A group's sandbox table added or removed compares with the defaults, so
/// only the settings it really changes are named.
fn fill_groups(a: &mut Value, b: &mut Value) {
    let default = serde_json::to_value(GroupSandbox::default()).unwrap_or(Value::Null);
    let names: Vec<String> = [&*a, &*b]
        .iter()
        .filter_map(|v| v.pointer("/sandbox/groups").and_then(Value::as_object))
        .flat_map(|groups| groups.keys().cloned())
        .collect();
    for side in [a, b] {
        if let Some(groups) = side.pointer_mut("/sandbox/groups").and_then(Value::as_object_mut) {
            for name in &names {
                groups.entry(name.clone()).or_insert_with(|| default.clone());
            }
        }
    }
}

/// Collects the dotted paths where `a` and `b` differ, down to the leaves of
/// objects (a list is one value, except a group's settings table).
fn differing(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (va, vb) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                differing(&child, va, vb, out);
            }
        }
        _ if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::net::NetworkPolicy;

    #[test]
    fn nothing_changed_says_so() {
        let c = Config::default();
        let changes = changes(&c, &c.clone());
        assert!(changes.is_empty());
        assert!(changes.describe().contains("nothing changed"));
    }

    #[test]
    fn live_settings_are_applied_and_the_rest_need_a_restart() {
        let running = Config::default();
        let mut read = running.clone();
        read.budget.daily_usd = Some(5.0);
        read.progress.after = std::time::Duration::from_secs(9);
        read.log.level = Some("debug".into());
        read.sandbox.network = NetworkPolicy::Open;
        read.sandbox.groups.insert(
            "lab".into(),
            GroupSandbox { network: Some(NetworkPolicy::Allowlist), skip_permissions: true, ..Default::default() },
        );
        read.claude.max_live_sessions = 9;
        read.telegram.token = Some(crate::config::Secret::new("123:secret-token-value"));
        let c = changes(&running, &read);
        assert_eq!(
            c.applied,
            ["budget.daily_usd", "log.level", "progress.after", "sandbox.groups.lab.network", "sandbox.network"]
        );
        assert_eq!(
            c.need_restart,
            ["claude.max_live_sessions", "sandbox.groups.lab.skip_permissions", "telegram.token"]
        );
        let said = c.describe();
        assert!(said.contains("need a restart"), "{said}");
        assert!(!said.contains("secret-token-value"), "values are never shown: {said}");

        // What is in effect afterwards: the applied keys, and nothing else.
        let mut in_effect = running.clone();
        take_live(&mut in_effect, &read);
        let left = changes(&in_effect, &read);
        assert!(left.applied.is_empty(), "{left:?}");
        assert_eq!(left.need_restart, c.need_restart);
        assert_eq!(in_effect.claude.max_live_sessions, running.claude.max_live_sessions);
    }
}
