//! git in the sandbox against a repository a member planted (issue 44), with
//! the real CLI in bwrap: the agent `Write`s four ordinary files into the
//! group's folder (`HEAD`, `objects/info/keep`, `refs/heads/keep` and a
//! `config` naming the folder its work tree and an fsmonitor), which git
//! would take for a bare repository; then a command runs `git status` in the
//! folder. The command runs, and nothing planted does: pincer's git refuses
//! a folder as a bare repository unless named, and pins every key that
//! names a program (`sandbox::confine::git`).

use pincer::store::GroupSettings;
use serde_json::json;

use crate::sandbox::require_bwrap;
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox};

/// What the planted config runs, and what the command leaves when it runs.
const PLANTED: &str = "touch /workspace/group/planted-ran; true";

fn script() -> fake_api::Script {
    let write = |path: &str, content: &str| Reply::tool_use("Write", json!({"file_path": path, "content": content}));
    let config =
        format!("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = \"{PLANTED}\"\n");
    fake_api::scripted(vec![
        ("PLANT_HEAD", write("HEAD", "ref: refs/heads/main\n")),
        ("PLANT_OBJECTS", write("objects/info/keep", "")),
        ("PLANT_REFS", write("refs/heads/keep", "")),
        ("PLANT_CONFIG", write("config", &config)),
        ("GIT_STATUS", Reply::bash("cd /workspace/group && git status --short; touch approved.txt", "look")),
    ])
}

async fn ask(pincer: &Running, group: &pincer::domain::GroupName, needle: &str) -> String {
    pincer.send(group, &format!("please {needle}")).await;
    let reply = pincer.next_outbound().await.text;
    assert!(reply.starts_with("AFTER_TOOL: TOOL_RESULT("), "{needle}: the tool call came back: {reply}");
    reply
}

#[tokio::test]
async fn a_folder_planted_as_a_repository_runs_nothing_when_git_runs_there() {
    require_bwrap().await;
    let api = FakeApi::start(script()).await;
    let sandbox = Sandbox::new(&api);
    let settings = GroupSettings {
        allowed_tools: Some(["Read", "Write", "Edit", "Bash"].map(String::from).to_vec()),
        ..GroupSettings::default()
    };
    let group = sandbox.add_group_with("alpha", settings).await;
    let folder = sandbox.group_dir("alpha");
    let pincer = sandbox.start().await;

    for needle in ["PLANT_HEAD", "PLANT_OBJECTS", "PLANT_REFS", "PLANT_CONFIG"] {
        let reply = ask(&pincer, &group, needle).await;
        assert!(reply.contains("err=False"), "{needle}: ordinary files in the folder are written: {reply}");
    }
    assert!(folder.join("config").exists() && folder.join("objects/info/keep").exists());
    let reply = ask(&pincer, &group, "GIT_STATUS").await;
    assert!(reply.contains("err=False") || reply.contains("err=True"), "{reply}");
    assert!(folder.join("approved.txt").exists(), "the command itself ran: {reply}");
    assert!(!folder.join("planted-ran").exists(), "the planted fsmonitor ran: {reply}");
    pincer.stop().await;
}

/// A `.git` *file* naming a repository elsewhere in the folder, as an
/// unpacked archive or an approved command could leave it (file tools refuse
/// the name). On 2.1.197 the CLI's own `git status` at start read such a
/// repository's config; with pincer's git neither that nor a command's git
/// runs what the config names.
#[tokio::test]
async fn a_git_file_pointing_elsewhere_runs_nothing_at_start_or_when_git_runs() {
    require_bwrap().await;
    let api = FakeApi::start(script()).await;
    let sandbox = Sandbox::new(&api);
    let settings =
        GroupSettings { allowed_tools: Some(["Read", "Bash"].map(String::from).to_vec()), ..GroupSettings::default() };
    let group = sandbox.add_group_with("alpha", settings).await;
    let folder = sandbox.group_dir("alpha");
    let repo = folder.join("elsewhere");
    for dir in ["objects/info", "refs/heads"] {
        std::fs::create_dir_all(repo.join(dir)).unwrap();
    }
    std::fs::write(repo.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        repo.join("config"),
        format!("[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"{PLANTED}\"\n"),
    )
    .unwrap();
    std::fs::write(folder.join(".git"), "gitdir: elsewhere\n").unwrap();
    let pincer = sandbox.start().await;

    let reply = ask(&pincer, &group, "GIT_STATUS").await;
    assert!(folder.join("approved.txt").exists(), "the command itself ran: {reply}");
    assert!(!folder.join("planted-ran").exists(), "the planted fsmonitor ran: {reply}");
    pincer.stop().await;
}
