//! The approval gate against the agent's own moves, with the real CLI in the
//! bwrap sandbox (and a file tool unconfined): a member has the agent write
//! the shell's start-up files (refused by path, though `Write` is allowed),
//! then a read-only command runs (pincer's hook asks an admin, where the CLI
//! alone would have run it). What the agent tries is decided and stored.

use pincer::config::SandboxMode;
use pincer::domain::GroupName;
use pincer::store::GroupSettings;
use serde_json::json;

use crate::sandbox::require_bwrap;
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox};

/// What the planted start-up files would run, and what the command prints when it runs.
const PLANTED: &str = "touch /workspace/group/planted-ran";
const RAN: &str = "read-only-ran";

fn script(outside: &str) -> fake_api::Script {
    let write = |path: &str| Reply::tool_use("Write", json!({"file_path": path, "content": format!("{PLANTED}\n")}));
    fake_api::scripted(vec![
        ("PLANT_BASHRC", write("/home/agent/.bashrc")),
        ("PLANT_PROFILE", write("../../home/agent/.bash_profile")),
        ("PLANT_SNAPSHOT", write("/home/agent/.claude/shell-snapshots/snapshot-bash-0-x.sh")),
        ("WRITE_NOTES", write("notes/todo.md")),
        ("WRITE_OUTSIDE", Reply::tool_use("Write", json!({"file_path": outside, "content": "x"}))),
        ("READ_ONLY", Reply::bash(&format!("echo {RAN}"), "print")),
    ])
}

/// The reply to one needle: the tool's result as the model saw it.
async fn ask(pincer: &Running, group: &GroupName, needle: &str) -> String {
    pincer.send(group, &format!("please {needle}")).await;
    let reply = pincer.next_outbound().await.text;
    assert!(reply.starts_with("AFTER_TOOL: TOOL_RESULT("), "{needle}: the tool call came back: {reply}");
    reply
}

/// A group where `Write` is allowed by name, Bash is not, and admins decide
/// the rest (the default config's tools; its members are not admins).
fn member_group() -> GroupSettings {
    GroupSettings {
        allowed_tools: Some(["Read", "Write", "Edit", "Glob", "Grep"].map(String::from).to_vec()),
        admins: vec!["4242".into()],
        ..GroupSettings::default()
    }
}

#[tokio::test]
async fn a_member_cannot_plant_start_up_files_and_a_read_only_command_asks_an_admin() {
    require_bwrap().await;
    let api = FakeApi::start(script("/home/agent/todo.txt")).await;
    let mut sandbox = Sandbox::new(&api);
    // No channel runs to show a prompt: an asked call is denied when this passes.
    sandbox.config.claude.approval_timeout = std::time::Duration::from_secs(2);
    let group = sandbox.add_group_with("alpha", member_group()).await;
    let home = sandbox.config.data_dir.join("homes/alpha");
    let pincer = sandbox.start().await;

    for needle in ["PLANT_BASHRC", "PLANT_PROFILE", "PLANT_SNAPSHOT"] {
        let reply = ask(&pincer, &group, needle).await;
        assert!(reply.contains("err=True") && reply.contains("may not write"), "{needle}: refused by path: {reply}");
    }
    for file in [".bashrc", ".bash_profile"] {
        let content = std::fs::read_to_string(home.join(file)).unwrap_or_default();
        assert!(!content.contains(PLANTED), "{file} was written: {content}");
    }
    let reply = ask(&pincer, &group, "WRITE_NOTES").await;
    assert!(reply.contains("err=False"), "the group's folder is the agent's: {reply}");
    assert!(sandbox.group_dir("alpha").join("notes/todo.md").exists());
    // Outside the folder: an admin decides. Nobody answers here, so it is
    // denied when the approval times out, and nothing is written.
    let reply = ask(&pincer, &group, "WRITE_OUTSIDE").await;
    assert!(reply.contains("err=True"), "{reply}");
    assert!(!home.join("todo.txt").exists());

    // The CLI runs `echo` without asking anyone; pincer's hook asks the admins.
    let reply = ask(&pincer, &group, "READ_ONLY").await;
    assert!(reply.contains("err=True") && !reply.ends_with(RAN), "ran without an admin: {reply}");
    assert!(!sandbox.group_dir("alpha").join("planted-ran").exists(), "no planted code ran");
    let decisions = pincer.store().journal().decisions(&group).await.unwrap();
    let bash: Vec<_> = decisions.iter().filter(|d| d.tool_name == "Bash").collect();
    assert!(!bash.is_empty() && bash.iter().all(|d| !d.allowed), "the read-only command was decided: {decisions:?}");
    let refused = decisions.iter().filter(|d| d.tool_name == "Write" && !d.allowed).count();
    assert!(refused >= 4, "every refused write is on record: {decisions:?}");
    pincer.stop().await;
}

/// A group that may never run Bash is not offered it; unconfined, a file
/// tool outside the group's folder is refused (not asked).
#[tokio::test]
async fn unconfined_a_write_outside_the_folder_is_refused_and_bash_is_not_offered() {
    let outside_dir = tempfile::tempdir().unwrap();
    let outside = outside_dir.path().join("outside.txt");
    let api = FakeApi::start(script(outside.to_str().unwrap())).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.mode = SandboxMode::None;
    let settings = GroupSettings { allowed_tools: Some(vec!["Write".into()]), ..GroupSettings::default() };
    let group = sandbox.add_group_with("alpha", settings).await;
    let pincer = sandbox.start().await;

    let reply = ask(&pincer, &group, "WRITE_OUTSIDE").await;
    assert!(reply.contains("err=True") && reply.contains("unconfined"), "{reply}");
    assert!(!outside.exists());
    let offered = api.main_requests().last().unwrap().body()["tools"].clone();
    let names: Vec<&str> = offered.as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"Write") && !names.contains(&"Bash"), "{names:?}");
    pincer.stop().await;
}
