//! `pincer backup DIR` while a turn runs, then a restore that serves: the
//! copy is consistent, links stay links, and the restored pincer answers
//! with its history intact. And what an agent can put in its folder or home
//! while the backup walks it: FIFOs, sockets, links, and entries swapped for
//! one of those between the backup's look and its use. None hangs the
//! backup or brings a host file into it.

use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use pincer::store::HistoryEntry;

use crate::support::cli::claude_bin;
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
    // Only replies in the chat: a slow turn's status message would count as one.
    sandbox.config.progress.mode = pincer::domain::activity::ProgressMode::Off;
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
    let history = store.history().history(&"team".parse().unwrap(), 100).await.unwrap();
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

/// A data and groups directory with group `team` registered, nothing running.
async fn team_sandbox() -> Sandbox {
    let sandbox = Sandbox::with_program(claude_bin(), "http://127.0.0.1:9");
    sandbox.add_group("team", None).await;
    sandbox
}

/// A host file and folder outside pincer's directories, which no backup may hold.
const HOST_SECRET: &str = "HOST SECRET";

/// `backup::run`, with a generous bound that only detects a hang: FIFOs left
/// in `fifos_in` are then opened for writing, so the walk stuck opening one
/// for reading can go on, and the test fails saying so.
async fn backup_or_fail_on_a_hang(
    sandbox: &Sandbox,
    dir: &std::path::Path,
    fifos_in: &std::path::Path,
) -> pincer::backup::Manifest {
    let run = pincer::backup::run(&sandbox.config, dir);
    tokio::pin!(run);
    match tokio::time::timeout(Duration::from_secs(30), &mut run).await {
        Ok(manifest) => manifest.expect("the backup succeeds"),
        Err(_) => {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let unblocker = std::thread::spawn({
                let (stop, fifos_in) = (stop.clone(), fifos_in.to_owned());
                move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for entry in std::fs::read_dir(&fifos_in).into_iter().flatten().flatten() {
                            let writer = std::fs::OpenOptions::new()
                                .write(true)
                                .custom_flags(nix::libc::O_NONBLOCK)
                                .open(entry.path());
                            drop(writer);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            });
            let _ = run.await;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            unblocker.join().unwrap();
            panic!("the backup hung opening a FIFO in a group's folder");
        }
    }
}

/// Every file the backup holds, by path relative to it, with its bytes.
fn files_in(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            assert!(kind.is_file() || kind.is_dir() || kind.is_symlink(), "{:?} in the backup", entry.path());
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let relative = entry.path().strip_prefix(dir).unwrap().to_owned();
                found.push((relative, std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    found
}

fn holds_host_secret(files: &[(std::path::PathBuf, Vec<u8>)]) -> Vec<&std::path::Path> {
    let secret = HOST_SECRET.as_bytes();
    files
        .iter()
        .filter(|(_, bytes)| bytes.windows(secret.len()).any(|w| w == secret))
        .map(|(p, _)| p.as_path())
        .collect()
}

/// A FIFO, a socket and links (to a host file, to a host folder) in a
/// group's folder and a CLI home: the backup finishes, names the FIFO and
/// the socket as left out, copies each link as a link, and holds no byte of
/// what they point to.
#[tokio::test]
async fn fifos_and_sockets_are_left_out_and_links_stay_links_pointing_outside() {
    let sandbox = team_sandbox().await;
    let host = sandbox.root().join("host");
    std::fs::create_dir_all(host.join("folder")).unwrap();
    std::fs::write(host.join("secret.txt"), HOST_SECRET).unwrap();
    std::fs::write(host.join("folder/inside.txt"), HOST_SECRET).unwrap();
    let group = sandbox.group_dir("team");
    let home = sandbox.config.data_dir.join("homes/team");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("session.jsonl"), "{}").unwrap();
    nix::unistd::mkfifo(&group.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    nix::unistd::mkfifo(&home.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(group.join("sock")).unwrap();
    std::os::unix::fs::symlink(host.join("secret.txt"), group.join("secret-link")).unwrap();
    std::os::unix::fs::symlink(host.join("folder"), group.join("folder-link")).unwrap();

    let dir = sandbox.root().join("backup");
    let manifest = backup_or_fail_on_a_hang(&sandbox, &dir, &group).await;

    for left_out in ["groups/team/pipe (a FIFO)", "groups/team/sock (a socket)", "data/homes/team/pipe (a FIFO)"] {
        assert!(manifest.skipped.iter().any(|s| s == left_out), "{left_out} in {:?}", manifest.skipped);
    }
    let paths: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"data/homes/team/session.jsonl") && paths.contains(&"groups/team/CLAUDE.md"), "{paths:?}");
    for (link, to) in [("secret-link", host.join("secret.txt")), ("folder-link", host.join("folder"))] {
        assert_eq!(std::fs::read_link(dir.join("groups/team").join(link)).unwrap(), to, "copied as a link");
        let recorded = (format!("groups/team/{link}"), to.display().to_string());
        assert!(manifest.links.contains(&recorded), "{:?}", manifest.links);
    }
    assert!(holds_host_secret(&files_in(&dir)).is_empty(), "no host file in the backup");
}

/// Files swapped for FIFOs while the backup walks their folder (as the
/// agent can, between the backup's look and its open): the backup never
/// blocks opening one, copies only what was still a regular file when
/// opened, and names the rest as left out.
#[tokio::test]
async fn files_swapped_for_fifos_mid_walk_do_not_hang_the_backup() {
    let sandbox = team_sandbox().await;
    let many = sandbox.group_dir("team").join("many");
    let names = plant_files(&many, 500, "real");
    let dir = sandbox.root().join("backup");
    let swapper = once_the_backup_copies_from(&dir.join("groups/team/many"), {
        let many = many.clone();
        move || {
            for name in &names {
                let _ = std::fs::remove_file(many.join(name));
                let _ = nix::unistd::mkfifo(&many.join(name), nix::sys::stat::Mode::S_IRWXU);
            }
        }
    });

    let manifest = backup_or_fail_on_a_hang(&sandbox, &dir, &many).await;
    assert!(swapper.join().unwrap(), "the files were swapped while the backup ran");
    let copied = manifest.files.iter().filter(|f| f.path.starts_with("groups/team/many/")).count();
    let left_out = manifest.skipped.iter().filter(|s| s.starts_with("groups/team/many/")).count();
    assert_eq!(copied + left_out, 500, "each file copied or named: {:?}", manifest.skipped);
    assert!(left_out > 0, "some were FIFOs by the time the backup opened them");
    for (path, bytes) in files_in(&dir).iter().filter(|(p, _)| p.starts_with("groups/team/many")) {
        assert_eq!(bytes, b"real", "{path:?} holds what the file held");
    }
}

/// A folder swapped for a link to a host folder while the backup is inside
/// it: the backup goes on in the folder it opened and copies nothing from
/// the host folder.
#[tokio::test]
async fn a_folder_swapped_for_a_link_mid_walk_brings_no_host_file_in() {
    let sandbox = team_sandbox().await;
    let many = sandbox.group_dir("team").join("many");
    plant_files(&many, 500, "real");
    // The host folder has files of the same names, for the walk to find.
    let host = sandbox.root().join("host");
    plant_files(&host, 500, HOST_SECRET);
    let dir = sandbox.root().join("backup");
    let swapper = once_the_backup_copies_from(&dir.join("groups/team/many"), {
        let (many, host) = (many.clone(), host.clone());
        move || {
            std::fs::rename(&many, many.with_file_name("many.moved")).unwrap();
            std::os::unix::fs::symlink(&host, &many).unwrap();
        }
    });

    let manifest = backup_or_fail_on_a_hang(&sandbox, &dir, &many).await;
    assert!(swapper.join().unwrap(), "the folder was swapped while the backup ran");
    let files = files_in(&dir);
    let leaked = holds_host_secret(&files);
    assert!(leaked.is_empty(), "{} host files in the backup, e.g. {:?}", leaked.len(), leaked.first());
    let copied = files.iter().filter(|(p, _)| p.starts_with("groups/team/many")).count();
    assert_eq!(copied, 500, "the folder the backup opened, whole: {:?}", manifest.skipped);
}

/// `n` files in a new folder `dir`, each holding `text`; their names.
fn plant_files(dir: &std::path::Path, n: usize, text: &str) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("f{i:03}")).collect();
    for name in &names {
        std::fs::write(dir.join(name), text).unwrap();
    }
    names
}

/// Runs `swap` (in a thread) as soon as the backup has copied a first file
/// into `copy` (it is then inside the folder, with the rest still to go);
/// joined, says whether it ran.
fn once_the_backup_copies_from(
    copy: &std::path::Path,
    swap: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    let copy = copy.to_owned();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + PATIENCE;
        while std::time::Instant::now() < deadline {
            if std::fs::read_dir(&copy).is_ok_and(|mut entries| entries.next().is_some()) {
                swap();
                return true;
            }
            // Short naps, not a spin: the other tests share the cores.
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    })
}
