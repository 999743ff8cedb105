//! `pincer setup` installs the pinned CLI from the npm registry into the data
//! directory and registers the starter group; the installed CLI then runs,
//! and what setup made is private to its user.

use std::process::Command;

use pincer::claude::install::PINNED_VERSION;

#[test]
fn setup_installs_the_pinned_cli_and_a_starter_group() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("PINCER_TEST_CLAUDE")
            .output()
            .unwrap()
    };
    let out = run(&["setup"]);
    assert!(out.status.success(), "setup failed: {}", String::from_utf8_lossy(&out.stderr));

    let binary = dir.path().join("data/claude/node_modules/.bin/claude");
    #[allow(clippy::disallowed_methods)]
    let version = Command::new(&binary).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with(PINNED_VERSION));
    assert!(dir.path().join("groups/main/CLAUDE.md").exists());
    assert!(dir.path().join("groups/global/CLAUDE.md").exists());

    // Private from the first start: the data, the database, the lock and the CLI's folder.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("data"), 0o700);
    assert_eq!(mode("data/pincer.db"), 0o600);
    assert_eq!(mode("data/claude"), 0o700);
    assert_eq!(mode("groups/main"), 0o700);

    let listed = run(&["groups", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).starts_with("main\t"), "{listed:?}");
    // Running it again is harmless: the install is refreshed, the group kept.
    assert!(run(&["setup"]).status.success());
}
