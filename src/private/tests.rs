//! The survey and the tightening on a temporary install laid out as an old
//! pincer left it (0755 folders, 0644 files).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A config on `root/data`, laid out with the modes of an old install.
fn old_install(root: &Path) -> Config {
    let config = Config { data_dir: root.join("data"), ..Config::default() };
    let data = &config.data_dir;
    std::fs::create_dir_all(data.join("homes/alpha/.claude")).unwrap();
    std::fs::create_dir_all(data.join("run")).unwrap();
    for file in ["pincer.db", "pincer.db-wal", "pincer.db-shm", "whatsapp.db", "pincer.lock"] {
        std::fs::write(data.join(file), "x").unwrap();
        chmod(&data.join(file), 0o644);
    }
    for dir in ["", "homes", "homes/alpha", "run"] {
        chmod(&data.join(dir), 0o755);
    }
    config
}

#[test]
fn only_group_and_other_bits_are_taken_away() {
    assert_eq!(tightened(0o755), Some(0o700));
    assert_eq!(tightened(0o644), Some(0o600));
    assert_eq!(tightened(0o640), Some(0o600));
    assert_eq!(tightened(0o2775), Some(0o2700), "special bits stay");
    assert_eq!(tightened(0o100_600), None, "the file type is ignored");
    assert_eq!(tightened(0o700), None);
    assert_eq!(tightened(0o500), None, "never loosened");
}

#[test]
fn an_old_install_is_listed_then_tightened_once() {
    let root = tempfile::tempdir().unwrap();
    let config = old_install(root.path());
    let data = config.data_dir.clone();
    // A symlink in homes/ is not a home pincer made; its target is not touched.
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    chmod(&elsewhere, 0o755);
    std::os::unix::fs::symlink(&elsewhere, data.join("homes/link")).unwrap();

    let found: Vec<(String, u32, u32)> = survey(&paths(&config))
        .into_iter()
        .map(|l| (l.path.strip_prefix(&data).unwrap().display().to_string(), l.mode, l.wanted))
        .collect();
    let expected = [
        ("", 0o755, 0o700),
        ("pincer.lock", 0o644, 0o600),
        ("run", 0o755, 0o700),
        ("homes", 0o755, 0o700),
        ("pincer.db", 0o644, 0o600),
        ("pincer.db-wal", 0o644, 0o600),
        ("pincer.db-shm", 0o644, 0o600),
        ("whatsapp.db", 0o644, 0o600),
        ("homes/alpha", 0o755, 0o700),
    ];
    let expected: Vec<(String, u32, u32)> = expected.iter().map(|(p, m, w)| ((*p).to_owned(), *m, *w)).collect();
    assert_eq!(found, expected);
    assert!(doctor_line(&config).starts_with("file modes: NOT private: "), "{}", doctor_line(&config));

    assert_eq!(tighten(&config).len(), expected.len());
    for (path, _, wanted) in &expected {
        assert_eq!(mode(&data.join(path)), *wanted, "{path}");
    }
    assert_eq!(mode(&elsewhere), 0o755, "a symlink's target is left alone");
    assert_eq!(mode(&data.join("homes/alpha/.claude")), 0o755, "inside a home: behind its 0700 folder");
    assert!(survey(&paths(&config)).is_empty());
    assert!(tighten(&config).is_empty(), "a private install is left as it is");
    assert!(doctor_line(&config).starts_with("file modes: private"));
}

#[test]
fn a_data_dir_reached_through_a_symlink_is_checked_at_its_target() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    chmod(&real, 0o755);
    std::os::unix::fs::symlink(&real, root.path().join("data")).unwrap();
    let config = Config { data_dir: root.path().join("data"), ..Config::default() };
    tighten(&config);
    assert_eq!(mode(&real), 0o700);
}

#[test]
fn folders_are_created_private_whatever_the_umask() {
    let root = tempfile::tempdir().unwrap();
    let deep = root.path().join("data/homes/alpha");
    create_dir(&deep).unwrap();
    for dir in ["data", "data/homes", "data/homes/alpha"] {
        assert_eq!(mode(&root.path().join(dir)), 0o700, "{dir}");
    }
    create_dir(&deep).expect("an existing folder is fine");
}
