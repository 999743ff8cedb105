//! `pincer backup DIR` while a turn runs, then a restore that serves: the
//! copy is consistent, links stay links, and the restored pincer answers
//! with its history intact.

use std::time::Duration;

use pincer::store::HistoryEntry;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{Sandbox, PATIENCE};

fn team() -> TgChat {
    TgChat { id: -100_400, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 43, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_dir(&source, &target);
        } else {
            std::fs::copy(&source, &target).unwrap();
        }
    }
}

#[tokio::test]
async fn a_backup_taken_during_a_turn_restores_into_a_pincer_that_serves_with_its_history() {
    // Replies take 3 s: the backup is taken while the second turn runs.
    let api = FakeApi::start(fake_api::delayed(Duration::from_secs(3), fake_api::echo())).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.serve_telegram_group(&bot, "team", team().id).await;
    std::os::unix::fs::symlink("/etc", sandbox.group_dir("team").join("etc-link")).unwrap();
    let pincer = sandbox.spawn_daemon();
    bot.say(&team(), &alice(), "remember BEFORE");
    bot.wait_for("the first reply", |bot| !bot.sent(team().id).is_empty()).await;
    bot.say(&team(), &alice(), "while the BACKUP runs");
    let turns = api.main_requests().len();
    tokio::time::timeout(PATIENCE, async {
        while api.main_requests().len() == turns {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second turn started");

    let dir = sandbox.root().join("backup");
    let manifest = pincer::backup::run(&sandbox.config, &dir).await.unwrap();
    // (A slow first turn may also have shown a status message: only replies count.)
    let replies = |bot: &FakeBot| bot.sent(team().id).into_iter().filter(|m| m.text.starts_with("ECHO:")).count();
    assert_eq!(replies(&bot), 1, "taken while the turn ran: {:?}", bot.sent(team().id));
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"data/pincer.db") && paths.contains(&"groups/team/CLAUDE.md"), "{paths:?}");
    assert!(manifest.files.iter().all(|f| f.sha256.len() == 64), "every file has its checksum");
    let link = std::fs::read_link(dir.join("groups/team/etc-link")).expect("the link is a link");
    assert_eq!(link, std::path::PathBuf::from("/etc"), "copied as a link, not what it points to");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(written["files"].as_array().unwrap().len(), manifest.files.len());
    let refused = pincer::backup::run(&sandbox.config, &dir).await.unwrap_err();
    assert!(refused.to_string().contains("is not empty"), "{refused}");
    bot.wait_for("the second reply", |bot| bot.sent(team().id).len() == 2).await;
    pincer.stop().await;

    // Restore into a fresh place (as the README says: copy back while pincer is stopped).
    let api2 = FakeApi::start(fake_api::echo()).await;
    let mut restored = Sandbox::new(&api2);
    restored.use_telegram(&bot);
    copy_dir(&dir.join("data"), &restored.config.data_dir);
    copy_dir(&dir.join("groups"), &restored.config.groups_dir);
    let pincer = restored.spawn_daemon();
    bot.say(&team(), &alice(), "AFTER the restore");
    bot.wait_for("an answer from the restored pincer", |bot| {
        bot.sent(team().id).iter().any(|s| s.text.contains("AFTER the restore"))
    })
    .await;
    let store = restored.store().await;
    let history = store.history(&"team".parse().unwrap(), 100).await.unwrap();
    let said: Vec<&str> = history
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Inbound { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(said.iter().any(|t| t.contains("remember BEFORE")), "the history came back: {said:?}");
    pincer.stop().await;
}
