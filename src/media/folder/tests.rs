//! Against real folders in a temp dir, with the links an agent could plant.

use std::io::Read;
use std::os::unix::fs::symlink;

use super::*;

struct Rig {
    _dir: tempfile::TempDir,
    group: PathBuf,
    outside: PathBuf,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("groups/team");
    let outside = dir.path().join("secrets");
    std::fs::create_dir_all(&group).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("key"), "SECRET").unwrap();
    Rig { _dir: dir, group, outside }
}

fn read(mut file: File) -> String {
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn an_attachment_is_saved_under_the_inbox_and_a_taken_name_gets_another() {
    let r = rig();
    let first = save_in_inbox(&r.group, "2026-11-25", "photo.jpg", b"one").unwrap();
    assert_eq!(first, Path::new("inbox/2026-11-25/photo.jpg"));
    assert_eq!(std::fs::read(r.group.join(&first)).unwrap(), b"one");
    let second = save_in_inbox(&r.group, "2026-11-25", "photo.jpg", b"two").unwrap();
    assert_eq!(second, Path::new("inbox/2026-11-25/2-photo.jpg"));
    assert_eq!(std::fs::read(r.group.join(&first)).unwrap(), b"one", "never overwritten");
}

#[test]
fn an_inbox_the_agent_turned_into_a_link_is_never_written_through() {
    let r = rig();
    symlink(&r.outside, r.group.join(INBOX)).unwrap();
    let refused = save_in_inbox(&r.group, "2026-11-25", "x.txt", b"planted").unwrap_err();
    assert!(matches!(refused, FolderError::Link(_)), "{refused:?}");
    assert!(!r.outside.join("2026-11-25").exists(), "nothing written outside the folder");

    let r = rig();
    std::fs::create_dir(r.group.join(INBOX)).unwrap();
    symlink(&r.outside, r.group.join(INBOX).join("2026-11-25")).unwrap();
    assert!(save_in_inbox(&r.group, "2026-11-25", "x.txt", b"planted").is_err());
    assert!(!r.outside.join("x.txt").exists());

    // A link planted where the file would go is not followed either: another name is used.
    let r = rig();
    std::fs::create_dir_all(r.group.join("inbox/2026-11-25")).unwrap();
    symlink(r.outside.join("key"), r.group.join("inbox/2026-11-25/x.txt")).unwrap();
    let saved = save_in_inbox(&r.group, "2026-11-25", "x.txt", b"mine").unwrap();
    assert_eq!(saved, Path::new("inbox/2026-11-25/2-x.txt"));
    assert_eq!(std::fs::read_to_string(r.outside.join("key")).unwrap(), "SECRET", "the target is untouched");
}

#[test]
fn names_that_are_not_single_names_are_refused() {
    let r = rig();
    for (day, name) in [("..", "x"), ("2026-11-25", "../x"), ("a/b", "x"), ("2026-11-25", ""), ("2026-11-25", "..")] {
        assert!(matches!(save_in_inbox(&r.group, day, name, b""), Err(FolderError::Outside(_))), "{day} {name}");
    }
}

#[test]
fn a_file_inside_the_folder_opens_however_the_agent_names_it() {
    let r = rig();
    std::fs::create_dir_all(r.group.join("out")).unwrap();
    std::fs::write(r.group.join("out/chart.png"), "PNG").unwrap();
    let host = r.group.join("out/chart.png");
    for asked in ["out/chart.png", "./out/chart.png", "/workspace/group/out/chart.png", host.to_str().unwrap()] {
        let (file, relative) = open_to_send(&r.group, asked).unwrap();
        assert_eq!((read(file).as_str(), relative.as_path()), ("PNG", Path::new("out/chart.png")), "{asked}");
    }
}

#[test]
fn paths_out_of_the_folder_links_and_odd_files_are_refused_with_why() {
    let r = rig();
    let other = r.group.parent().unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("secret"), "THEIRS").unwrap();
    symlink(r.outside.join("key"), r.group.join("key-link")).unwrap();
    symlink(&r.outside, r.group.join("dir-link")).unwrap();
    std::fs::create_dir(r.group.join("folder")).unwrap();
    nix::unistd::mkfifo(&r.group.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();

    let outside = |asked: &str| matches!(open_to_send(&r.group, asked), Err(FolderError::Outside(_)));
    assert!(outside("../other/secret"));
    assert!(outside("out/../../other/secret"));
    assert!(outside("/etc/passwd"));
    assert!(outside("/workspace/global/notes.md"));
    let link = |asked: &str| matches!(open_to_send(&r.group, asked), Err(FolderError::Link(_)));
    assert!(link("key-link"), "a link to a file outside");
    assert!(link("dir-link/key"), "a link to a folder outside, on the way");
    assert!(matches!(open_to_send(&r.group, "folder"), Err(FolderError::NotAFile(_))));
    assert!(matches!(open_to_send(&r.group, "fifo"), Err(FolderError::NotAFile(_))), "and it does not block");
    assert!(matches!(open_to_send(&r.group, "nothing.pdf"), Err(FolderError::Missing(_))));
    assert!(matches!(open_to_send(&r.group, ""), Err(FolderError::NotAFile(_))));
    let said = open_to_send(&r.group, "key-link").unwrap_err().to_string();
    assert!(said.contains("a link") && !said.contains("SECRET"), "{said}");
}

#[test]
fn the_inbox_is_kept_within_its_cap_oldest_first_and_nothing_else_is_touched() {
    let r = rig();
    save_in_inbox(&r.group, "2026-11-01", "old.jpg", &[0; 400]).unwrap();
    save_in_inbox(&r.group, "2026-11-02", "mid.jpg", &[0; 400]).unwrap();
    save_in_inbox(&r.group, "2026-11-03", "new.jpg", &[0; 400]).unwrap();
    std::fs::write(r.group.join("notes.md"), [0; 5000]).unwrap();
    symlink(r.outside.join("key"), r.group.join("inbox/2026-11-01/link")).unwrap();

    let pruned = prune_inbox(&r.group, 900).unwrap();
    assert_eq!(pruned, Pruned { files: 1, bytes: 400 });
    assert!(!r.group.join("inbox/2026-11-01/old.jpg").exists(), "the oldest went");
    assert!(r.group.join("inbox/2026-11-02/mid.jpg").exists() && r.group.join("inbox/2026-11-03/new.jpg").exists());
    assert!(r.group.join("inbox/2026-11-01/link").symlink_metadata().is_ok(), "a link is neither counted nor removed");
    assert_eq!(std::fs::read_to_string(r.outside.join("key")).unwrap(), "SECRET");
    assert!(r.group.join("notes.md").exists(), "the group's own files are not the inbox's");

    assert_eq!(prune_inbox(&r.group, 0).unwrap().files, 2);
    assert!(!r.group.join("inbox/2026-11-03").exists(), "an emptied day folder goes");
    assert!(r.group.join("inbox/2026-11-01").exists(), "one with something left stays");
    assert_eq!(prune_inbox(&rig().group, 0).unwrap(), Pruned::default(), "no inbox, nothing to do");
}

#[test]
fn an_inbox_that_is_a_link_is_not_pruned_through() {
    let r = rig();
    std::fs::create_dir(r.outside.join("2026-11-01")).unwrap();
    std::fs::write(r.outside.join("2026-11-01/precious"), [0; 100]).unwrap();
    symlink(&r.outside, r.group.join(INBOX)).unwrap();
    assert!(matches!(prune_inbox(&r.group, 0), Err(FolderError::Link(_))));
    assert!(r.outside.join("2026-11-01/precious").exists());
}
