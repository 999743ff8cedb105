//! The transcript file side, in temp dirs: slugs, appended lines, links and
//! FIFOs refused, caps, and restoring.

use std::path::Path;

use super::*;

fn place(home: &Path) -> Place {
    Place::of_view(&FileView::sandboxed("/workspace/group", "/home/agent", vec![("/home/agent".into(), home.into())]))
        .unwrap()
}

fn session() -> SessionId {
    SessionId::parse("0b3c5d1e-aaaa-4bbb-8ccc-123456789abc").unwrap()
}

fn write_transcript(home: &Path, bytes: &[u8]) -> PathBuf {
    let dir = home.join(".claude/projects/-workspace-group");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{}.jsonl", session().as_str()));
    std::fs::write(&file, bytes).unwrap();
    file
}

#[test]
fn slugs_are_the_clis() {
    // As seen with CLI 2.1.332 (a scratch HOME, `claude -p` in each folder).
    assert_eq!(slug(Path::new("/workspace/group")).unwrap(), "-workspace-group");
    assert_eq!(slug(Path::new("/tmp/slugtest/a.b/c d_e/Ünï.x")).unwrap(), "-tmp-slugtest-a-b-c-d-e--n--x");
    assert_eq!(slug(Path::new("/tmp/slugtest/e😀x")).unwrap(), "-tmp-slugtest-e--x", "one per UTF-16 unit");
    let long = format!("/{}", "a".repeat(199));
    assert_eq!(slug(Path::new(&long)).map(|s| s.len()), Some(200));
    assert_eq!(slug(Path::new(&format!("{long}b"))), None, "the CLI hashes longer ones");
}

#[test]
fn session_ids_must_be_fit_for_a_file_name() {
    assert!(SessionId::parse("0b3c5d1e-aaaa-4bbb-8ccc-123456789abc").is_some());
    for bad in ["", "../x", "a/b", "a.jsonl", "a b", &"a".repeat(65)] {
        assert_eq!(SessionId::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn an_unconfined_cli_sees_its_folder_with_links_resolved() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    std::fs::create_dir_all(real.join("team")).unwrap();
    std::os::unix::fs::symlink(&real, root.path().join("link")).unwrap();
    let view = FileView::unconfined(root.path().join("link/team"), root.path().join("home"));
    let place = Place::of_view(&view).unwrap();
    let real_team = std::fs::canonicalize(real.join("team")).unwrap();
    assert_eq!(place.slug, slug(&real_team).unwrap());
    let missing = FileView::unconfined(root.path().join("link/not-yet"), root.path().join("home"));
    let expected = slug(&std::fs::canonicalize(&real).unwrap().join("not-yet")).unwrap();
    assert_eq!(Place::of_view(&missing).unwrap().slug, expected, "a folder not made yet: its parent resolved");
}

#[test]
fn the_plan_keeps_within_the_caps() {
    assert_eq!(plan(0, 10), Ok(0..10));
    assert_eq!(plan(10, 10), Ok(10..10));
    assert_eq!(plan(11, 10), Err(Unfit::Shrunk));
    assert_eq!(plan(0, CAPTURE_CAP), Ok(0..CAPTURE_CAP));
    assert_eq!(plan(0, CAPTURE_CAP + 1), Err(Unfit::TurnTooBig));
    assert_eq!(plan(SESSION_CAP - 5, SESSION_CAP), Ok(SESSION_CAP - 5..SESSION_CAP));
    assert_eq!(plan(SESSION_CAP, SESSION_CAP + 1), Err(Unfit::SessionTooBig));
}

#[test]
fn only_complete_lines_after_the_offset_are_read() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(read_appended(&place(home.path()), &session(), 0).unwrap(), Appended::Missing);
    write_transcript(home.path(), b"{\"a\":1}\n{\"b\":2}\n{\"c\"");
    let place = place(home.path());
    assert_eq!(read_appended(&place, &session(), 0).unwrap(), Appended::Lines(b"{\"a\":1}\n{\"b\":2}\n".to_vec()));
    assert_eq!(read_appended(&place, &session(), 8).unwrap(), Appended::Lines(b"{\"b\":2}\n".to_vec()));
    assert_eq!(read_appended(&place, &session(), 16).unwrap(), Appended::Lines(Vec::new()), "a line half written");
    assert_eq!(read_appended(&place, &session(), 99).unwrap(), Appended::Unfit(Unfit::Shrunk));
    assert_eq!(local_len(&place, &session()).unwrap(), 20);
}

#[test]
fn a_longer_file_holds_the_stored_copys_last_chunk_or_not() {
    let home = tempfile::tempdir().unwrap();
    let place = place(home.path());
    assert!(!holds(&place, &session(), 0, b"{\"a\":1}\n").unwrap(), "no file");
    write_transcript(home.path(), b"{\"a\":1}\n{\"b\":2}\n{\"mine\":3}\n");
    assert!(holds(&place, &session(), 8, b"{\"b\":2}\n").unwrap(), "the same history, and a tail of its own");
    assert!(!holds(&place, &session(), 8, b"{\"B\":2}\n").unwrap(), "another node went on from byte 8");
    assert!(!holds(&place, &session(), 30, b"{\"b\":2}\n").unwrap(), "past the end");
}

#[test]
fn a_turn_past_the_cap_is_unfit() {
    let home = tempfile::tempdir().unwrap();
    let file = write_transcript(home.path(), b"");
    std::fs::File::options().write(true).open(&file).unwrap().set_len(CAPTURE_CAP + 1).unwrap();
    let read = read_appended(&place(home.path()), &session(), 0).unwrap();
    assert_eq!(read, Appended::Unfit(Unfit::TurnTooBig));
}

#[test]
fn links_and_fifos_are_never_followed_or_read() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = elsewhere.path().join("secret");
    std::fs::write(&secret, "pincer's secret\n").unwrap();
    let file = write_transcript(home.path(), b"");
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&secret, &file).unwrap();
    assert!(read_appended(&place(home.path()), &session(), 0).is_err(), "a linked transcript");
    std::fs::remove_file(&file).unwrap();
    nix::unistd::mkfifo(&file, Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    assert!(read_appended(&place(home.path()), &session(), 0).is_err(), "a FIFO, refused without blocking");
    assert!(local_len(&place(home.path()), &session()).is_err());

    // A linked `projects` folder leads out of the home: refused.
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(other.path().join(".claude")).unwrap();
    let outside = elsewhere.path().join("projects");
    std::fs::create_dir_all(outside.join("-workspace-group")).unwrap();
    std::fs::write(outside.join("-workspace-group").join(format!("{}.jsonl", session().as_str())), "x\n").unwrap();
    std::os::unix::fs::symlink(&outside, other.path().join(".claude/projects")).unwrap();
    assert!(read_appended(&place(other.path()), &session(), 0).is_err());
    assert!(restore(&place(other.path()), &session(), b"y\n").is_err(), "nothing written through the link");
    let kept = std::fs::read(outside.join("-workspace-group").join(format!("{}.jsonl", session().as_str())));
    assert_eq!(kept.unwrap(), b"x\n");
}

#[test]
fn restoring_makes_the_folders_and_replaces_a_link() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("homes/team");
    restore(&place(&home), &session(), b"{\"a\":1}\n").unwrap();
    let file = place(&home).shown(&session());
    assert_eq!(std::fs::read(&file).unwrap(), b"{\"a\":1}\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().unwrap()), 0o700);
    assert_eq!(mode(&home.join(".claude")), 0o700);

    let target = root.path().join("target");
    std::fs::write(&target, "untouched").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&target, &file).unwrap();
    restore(&place(&home), &session(), b"{\"b\":2}\n").unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"{\"b\":2}\n");
    assert!(!std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    assert_eq!(local_len(&place(&home), &session()).unwrap(), 8);
}
