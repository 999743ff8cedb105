//! The `pincer` binary keeps its files private and its own folder names for
//! itself: what a first command creates is owner-only, a start tightens an
//! install an older pincer left open (0755/0644) and says so in one log
//! line, `pincer doctor` tells which, and `groups add global` is refused (a
//! `global` group an older pincer registered never starts an agent).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use crate::support::fake_api::{self, FakeApi};
use crate::support::harness::{spawn_pincer_run_logging, Sandbox};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `pincer --config CONFIG args…` in the sandbox's folder.
fn pincer(sandbox: &Sandbox, args: &[&str]) -> Output {
    let config = sandbox.write_config();
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    std::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .current_dir(sandbox.root())
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .output()
        .expect("the pincer binary runs")
}

#[tokio::test]
async fn what_the_first_command_creates_is_private_and_global_is_no_group_name() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let added = pincer(&sandbox, &["groups", "add", "team"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let data = &sandbox.config.data_dir;
    assert_eq!(mode(data), 0o700);
    assert_eq!(mode(&data.join("pincer.db")), 0o600);
    assert_eq!(mode(&sandbox.group_dir("team")), 0o700, "the umask covers the group's folder too");

    let refused = pincer(&sandbox, &["groups", "add", "global"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("the group name `global` is reserved"), "{said}");
    assert!(said.contains("Choose another name, e.g. `global-chat`"), "{said}");
    let listed = pincer(&sandbox, &["groups", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.starts_with("team\t") && !listed.contains("global"), "{listed}");
}

#[tokio::test]
async fn a_start_tightens_an_old_install_and_says_so_in_one_line() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    sandbox.add_group("team", None).await;
    let data = sandbox.config.data_dir.clone();
    std::fs::create_dir_all(data.join("homes/team/.claude")).unwrap();
    std::fs::write(data.join("pincer.lock"), "").unwrap();
    for dir in ["", "homes", "homes/team"] {
        chmod(&data.join(dir), 0o755);
    }
    for file in ["pincer.db", "pincer.lock"] {
        chmod(&data.join(file), 0o644);
    }
    let doctor = pincer(&sandbox, &["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(report.contains("file modes: NOT private: "), "{report}");

    let config = sandbox.write_config();
    let log = sandbox.root().join("pincer.log");
    let args: [&std::ffi::OsStr; 2] = ["--config".as_ref(), config.as_ref()];
    let child = spawn_pincer_run_logging(sandbox.root(), &args, &[], Some(&log)).await;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("pincer.db")), 0o600);
    assert_eq!(mode(&data.join("pincer.lock")), 0o600);
    assert_eq!(mode(&data.join("homes")), 0o700);
    assert_eq!(mode(&data.join("homes/team")), 0o700);
    assert_eq!(mode(&data.join("homes/team/.claude")), 0o755, "inside a private home, nothing is changed");
    let logged = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = logged.lines().filter(|l| l.contains("made pincer's files private")).collect();
    assert_eq!(lines.len(), 1, "{logged}");
    assert!(lines[0].contains("pincer.db 0644→0600") && lines[0].contains("homes/team 0755→0700"), "{}", lines[0]);
    drop(child);

    let doctor = pincer(&sandbox, &["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(report.contains("file modes: private"), "{report}");
}

#[tokio::test]
async fn a_group_named_global_from_an_older_store_never_starts_an_agent() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    // Registered before the name was reserved: straight into the store.
    let store = pincer::app::open_store(&sandbox.config).await.unwrap();
    let global: pincer::domain::GroupName = "global".parse().unwrap();
    store.groups().add_group(&global, &Default::default()).await.unwrap();
    store.close().await;

    let pincer = sandbox.start().await;
    pincer.send(&global, "write the shared memory").await;
    let told = pincer.next_outbound().await.text;
    assert!(told.contains("the group name `global` is reserved"), "{told}");
    assert!(told.contains("pincer groups set global --no-chat"), "says what to do: {told}");
    assert!(api.requests().is_empty(), "no agent ran");
    pincer.stop().await;
}
