//! Snapshots of a folder an agent may have filled with anything.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn group() -> GroupName {
    "team".parse().unwrap()
}

#[test]
fn a_folder_goes_through_a_snapshot_whole_but_for_links_and_fifos() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("team");
    std::fs::create_dir_all(folder.join("notes/old")).unwrap();
    std::fs::write(folder.join("CLAUDE.md"), "# memory\n").unwrap();
    std::fs::write(folder.join("notes/old/a.txt"), "a").unwrap();
    std::fs::write(folder.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(folder.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", folder.join("passwd")).unwrap();
    std::os::unix::fs::symlink("/etc", folder.join("etc")).unwrap();
    nix::unistd::mkfifo(&folder.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();

    let entries = take(&folder).unwrap();
    let paths: Vec<&str> = entries
        .iter()
        .map(|e| match e {
            Entry::Folder { path } | Entry::File { path, .. } => path.as_str(),
        })
        .collect();
    assert_eq!(paths, ["CLAUDE.md", "notes", "notes/old", "notes/old/a.txt", "run.sh"], "no link, no FIFO");
    let decoded = decode(&encode(&entries)).expect("its own bytes");
    assert_eq!(decoded, entries);

    // Another node: its folder for the group holds something else.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join("team")).unwrap();
    std::fs::write(other.path().join("team/CLAUDE.md"), "# starter\n").unwrap();
    std::fs::write(other.path().join("team/stale.txt"), "x").unwrap();
    restore(other.path(), &group(), &decoded).unwrap();
    let moved = other.path().join("team");
    assert_eq!(std::fs::read_to_string(moved.join("CLAUDE.md")).unwrap(), "# memory\n");
    assert_eq!(std::fs::read_to_string(moved.join("notes/old/a.txt")).unwrap(), "a");
    assert!(!moved.join("stale.txt").exists(), "the folder is the snapshot's, not a mix");
    assert_eq!(std::fs::metadata(moved.join("run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
    let beside: Vec<_> = std::fs::read_dir(other.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(beside, ["team"], "nothing left beside it");
}

#[test]
fn a_folder_over_the_cap_is_not_snapshotted_and_bad_bytes_are_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let big = std::fs::File::create(dir.path().join("big")).unwrap();
    big.set_len(CAP_BYTES + 1).unwrap();
    assert!(matches!(take(dir.path()), Err(SnapshotError::TooBig)));

    let escaping = encode(&[Entry::File { path: "../escape".into(), executable: false, bytes: vec![] }]);
    assert_eq!(decode(&escaping), None, "a path out of the folder");
    let mut cut = encode(&[Entry::File { path: "a".into(), executable: false, bytes: vec![1, 2, 3] }]);
    cut.pop();
    assert_eq!(decode(&cut), None, "bytes cut short");
}

#[test]
fn a_restore_never_writes_through_a_link_in_the_group_folder() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "mine").unwrap();
    // The agent left its folder a link elsewhere: the restore replaces the
    // link, it does not write into what it points at.
    std::os::unix::fs::symlink(outside.path(), dir.path().join("team")).unwrap();
    let entries = [Entry::File { path: "CLAUDE.md".into(), executable: false, bytes: b"moved".to_vec() }];
    restore(dir.path(), &group(), &entries).unwrap();
    let there: Vec<_> = std::fs::read_dir(outside.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(there, ["keep.txt"], "nothing written or removed outside");
    assert!(dir.path().join("team").is_dir() && !dir.path().join("team").is_symlink());
    assert_eq!(std::fs::read_to_string(dir.path().join("team/CLAUDE.md")).unwrap(), "moved");
}
