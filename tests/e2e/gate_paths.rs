//! The gate against paths spelled to slip past it, with the real CLI in the
//! bwrap sandbox: a member's turn has the agent `Write` (and `Edit`) files
//! that would run as code or steer the CLI, spelled with `~`, white space,
//! `.git` and `.claude`, itself and through a subagent (`Task`). Each is
//! refused or asked of an admin (nobody answers here, so denied), none is
//! written, and each decision is stored.

use pincer::domain::GroupName;
use pincer::store::GroupSettings;
use serde_json::json;

use crate::sandbox::require_bwrap;
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox};

/// What the planted files would hold.
const PLANTED: &str = "planted-by-a-member";

/// (needle, the path as the model spells it, where it would land: "home/…" or "group/…").
const TARGETS: &[(&str, &str, &str)] = &[
    ("NPMRC", "~/.npmrc", "home/.npmrc"),
    ("BASHRC", "~/.bashrc", "home/.bashrc"),
    ("PROFILE", "  ~/.profile ", "home/.profile"),
    (
        "USERSITE",
        "~/.local/lib/python3.11/site-packages/usercustomize.py",
        "home/.local/lib/python3.11/site-packages/usercustomize.py",
    ),
    ("GITCONFIG", ".git/config", "group/.git/config"),
    ("GITFILE", "sub/.git", "group/sub/.git"),
    ("SKILL", ".claude/skills/x/SKILL.md", "group/.claude/skills/x/SKILL.md"),
    ("SETTINGS", ".claude/settings.json", "group/.claude/settings.json"),
];

fn script() -> fake_api::Script {
    let mut rules: Vec<(&'static str, Reply)> = Vec::new();
    for (needle, path, _) in TARGETS {
        let write = Reply::tool_use("Write", json!({"file_path": path, "content": format!("{PLANTED}\n")}));
        let edit =
            Reply::tool_use("Edit", json!({"file_path": path, "old_string": "", "new_string": format!("{PLANTED}\n")}));
        // A subagent is asked with a prompt of its own: its needle starts the subagent's turn.
        let sub: &'static str = Box::leak(format!("SUBAGENT_WRITES_{needle}").into_boxed_str());
        let task = Reply::tool_use(
            "Task",
            json!({"description": "write a file", "prompt": sub, "subagent_type": "general-purpose"}),
        );
        rules.push((Box::leak(format!("DIRECT_WRITE_{needle}").into_boxed_str()), write.clone()));
        rules.push((Box::leak(format!("DIRECT_EDIT_{needle}").into_boxed_str()), edit));
        rules.push((Box::leak(format!("VIA_AGENT_{needle}").into_boxed_str()), task));
        rules.push((sub, write));
    }
    fake_api::scripted(rules)
}

/// A group where file tools and subagents are allowed by name and admins
/// decide the rest; its members are not admins.
fn member_group() -> GroupSettings {
    GroupSettings {
        allowed_tools: Some(["Read", "Write", "Edit", "Glob", "Grep", "Task", "Agent"].map(String::from).to_vec()),
        admins: vec!["4242".into()],
        ..GroupSettings::default()
    }
}

/// The reply to one needle's turn. A subagent may run in the background
/// (2.1.332): its end comes as a turn of its own (echoed), skipped here.
async fn turn(pincer: &Running, group: &GroupName, needle: &str) -> String {
    pincer.send(group, &format!("please {needle}")).await;
    loop {
        let text = pincer.next_outbound().await.text;
        if text.starts_with("AFTER_TOOL: ") {
            return text;
        }
        assert!(text.contains("task-notification"), "{needle}: an unexpected reply: {text}");
    }
}

/// The stored `Write` decisions on the file `name` (the CLI may hand the
/// hook its own spelling or the expanded path: the name is in both).
async fn writes_of(pincer: &Running, group: &GroupName, name: &str) -> Vec<pincer::domain::PermissionDecision> {
    let decisions = pincer.store().journal().decisions(group).await.unwrap();
    decisions.into_iter().filter(|d| d.tool_name == "Write" && d.input.contains(name)).collect()
}

#[tokio::test]
async fn a_member_cannot_plant_code_or_cli_files_by_any_spelling_nor_through_a_subagent() {
    require_bwrap().await;
    let api = FakeApi::start(script()).await;
    let mut sandbox = Sandbox::new(&api);
    // No channel runs to show a prompt: an asked call is denied when this passes.
    sandbox.config.claude.approval_timeout = std::time::Duration::from_secs(2);
    let group = sandbox.add_group_with("alpha", member_group()).await;
    let home = sandbox.config.data_dir.join("homes/alpha");
    let folder = sandbox.group_dir("alpha");
    std::fs::create_dir_all(folder.join("sub")).unwrap();
    let pincer = sandbox.start().await;

    for (needle, path, _) in TARGETS {
        for how in ["DIRECT_WRITE", "DIRECT_EDIT", "VIA_AGENT"] {
            let reply = turn(&pincer, &group, &format!("{how}_{needle}")).await;
            println!("{how} {path:?}: {reply}");
        }
    }
    // A background subagent's write is decided when it runs: wait for each on record.
    for (_, path, lands) in TARGETS {
        let name = lands.rsplit('/').next().unwrap();
        let mut on_path = writes_of(&pincer, &group, name).await;
        for _ in 0..600 {
            if on_path.len() >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            on_path = writes_of(&pincer, &group, name).await;
        }
        for d in &on_path {
            println!("decided {} allowed={} by={} input={}", d.tool_name, d.allowed, d.decided_by, d.input);
        }
        assert!(on_path.len() >= 2, "{path:?}: the write and the subagent's are on record: {on_path:?}");
        assert!(on_path.iter().all(|d| !d.allowed), "{path:?}: none allowed: {on_path:?}");
        let host = match lands.split_once('/').unwrap() {
            ("home", rest) => home.join(rest),
            (_, rest) => folder.join(rest),
        };
        let content = std::fs::read_to_string(&host).unwrap_or_default();
        assert!(!content.contains(PLANTED), "{path:?} was written at {}", host.display());
    }
    pincer.stop().await;
}
