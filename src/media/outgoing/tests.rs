//! Against real folders in a temp dir: what is copied, how it goes, and
//! what is refused.

use std::io::Cursor;
use std::os::unix::fs::symlink;

use super::*;

struct Rig {
    dir: tempfile::TempDir,
    outgoing: Outgoing,
    group: GroupName,
}

impl Rig {
    fn folder(&self) -> PathBuf {
        self.dir.path().join("groups/team")
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.folder().join(name), bytes).unwrap();
    }
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("groups/team")).unwrap();
    std::fs::create_dir_all(dir.path().join("groups/other")).unwrap();
    std::fs::write(dir.path().join("groups/other/secret.txt"), "OTHER GROUP").unwrap();
    let outgoing = Outgoing::new(&dir.path().join("groups"), &dir.path().join("data"));
    Rig { dir, outgoing, group: "team".parse().unwrap() }
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image::RgbImage::new(width, height).write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn a_file_is_copied_and_the_copy_outlives_the_agents_file() {
    let r = rig();
    r.write("report.pdf", b"%PDF-1.7 report");
    let file = r.outgoing.take(&r.group, "report.pdf", Platform::Telegram).unwrap();
    assert_eq!((file.name.as_str(), file.kind, file.bytes), ("report.pdf", FileKind::Document, 15));
    assert_eq!(file.from, "report.pdf");
    assert!(file.path.starts_with(r.dir.path().join("data/outgoing/team")), "{file:?}");
    std::fs::remove_file(r.folder().join("report.pdf")).unwrap();
    assert_eq!(std::fs::read(&file.path).unwrap(), b"%PDF-1.7 report");
    forget(&file);
    assert!(!file.path.exists());
    // As the sandboxed agent names it, too.
    r.write("chart.png", &png(40, 30));
    let chart = r.outgoing.take(&r.group, "/workspace/group/chart.png", Platform::Telegram).unwrap();
    assert_eq!((chart.kind, chart.from.as_str()), (FileKind::Photo, "chart.png"));
}

#[test]
fn how_a_file_goes_is_read_from_its_bytes_not_its_name() {
    let r = rig();
    r.write("photo.png", &png(64, 48));
    r.write("not-a-photo.png", b"just text");
    r.write("song.txt", b"ID3\x04\x00\x00rest of an mp3");
    r.write("panorama.png", &png(2100, 100));
    r.write("huge.png", &png(6000, 4500));
    let kind = |name: &str| r.outgoing.take(&r.group, name, Platform::Telegram).unwrap().kind;
    assert_eq!(kind("photo.png"), FileKind::Photo);
    assert_eq!(kind("not-a-photo.png"), FileKind::Document);
    assert_eq!(kind("song.txt"), FileKind::Audio);
    assert_eq!(kind("panorama.png"), FileKind::Document, "wider than 20:1 is no Telegram photo");
    assert_eq!(kind("huge.png"), FileKind::Document, "more than 10,000 pixels of sides is no Telegram photo");
}

#[test]
fn files_outside_the_folder_links_and_empty_files_are_refused_with_why() {
    let r = rig();
    symlink(r.dir.path().join("groups/other/secret.txt"), r.folder().join("link.txt")).unwrap();
    r.write("empty.txt", b"");
    let refused = |asked: &str| r.outgoing.take(&r.group, asked, Platform::Telegram).unwrap_err().to_string();
    assert!(
        refused("../other/secret.txt").contains("outside the group's folder"),
        "{}",
        refused("../other/secret.txt")
    );
    assert!(refused("link.txt").contains("is a link"));
    assert!(refused("/etc/passwd").contains("outside the group's folder"));
    assert!(refused("missing.txt").contains("does not exist"));
    assert!(refused("empty.txt").contains("is empty"));
    assert!(
        std::fs::read_dir(r.dir.path().join("data/outgoing/team")).map_or(0, Iterator::count) == 0,
        "no copy is left of a refused file"
    );
}

#[test]
fn a_file_larger_than_the_platform_takes_is_refused_and_a_large_photo_goes_as_a_document() {
    let r = rig();
    let file = File::create(r.folder().join("big.bin")).unwrap();
    file.set_len(50 * 1024 * 1024 + 1).unwrap();
    let refused = r.outgoing.take(&r.group, "big.bin", Platform::Telegram).unwrap_err().to_string();
    assert!(refused.contains("50.0 MB") && refused.contains("telegram"), "{refused}");
    // A WhatsApp document may be 100 MB: the same file goes there.
    let taken = r.outgoing.take(&r.group, "big.bin", Platform::WhatsApp).unwrap();
    assert_eq!(taken.kind, FileKind::Document);
    // A real PNG padded past a Telegram photo's 10 MB is a document.
    let mut padded = png(100, 100);
    padded.resize(11 * 1024 * 1024, 0);
    r.write("padded.png", &padded);
    assert_eq!(r.outgoing.take(&r.group, "padded.png", Platform::Telegram).unwrap().kind, FileKind::Document);
}

#[test]
fn a_sweep_removes_only_the_copies_no_queued_message_holds() {
    let r = rig();
    r.write("a.txt", b"a");
    r.write("b.txt", b"b");
    let kept = r.outgoing.take(&r.group, "a.txt", Platform::Console).unwrap();
    let left = r.outgoing.take(&r.group, "b.txt", Platform::Console).unwrap();
    let keep = HashSet::from([kept.path.clone()]);
    assert_eq!(r.outgoing.sweep(&keep), 1);
    assert!(kept.path.exists() && !left.path.exists());
}

#[test]
fn first_bytes_tell_the_kind() {
    assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
    assert_eq!(sniff(b"\x89PNG\r\n\x1a\n"), Some("image/png"));
    assert_eq!(sniff(&[0xFF, 0xFB, 0x90]), Some("audio/mpeg"));
    assert_eq!(sniff(b"\0\0\0\x20ftypM4A \0\0"), Some("audio/mp4"));
    assert_eq!(sniff(b"%PDF-1.7"), Some("application/pdf"));
    assert_eq!(sniff(b"GIF89a"), None);
    assert_eq!(sniff(b""), None);
    assert_eq!(mime_of(b"GIF89a", "x.gif"), "image/gif", "by name when the bytes do not say");
    assert_eq!(mime_of(b"%PDF-1.7", "notes.txt"), "application/pdf", "the bytes win over the name");
    assert!(fits_a_photo((4000, 3000)) && !fits_a_photo((0, 10)) && !fits_a_photo((5001, 5000)));
}

#[test]
fn copies_waiting_past_the_cap_refuse_the_next_file_until_they_are_sent() {
    let mut r = rig();
    r.outgoing.cap = 1024 * 1024;
    r.write("big.bin", &[7u8; 300 * 1024]);
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(r.outgoing.take(&r.group, "big.bin", Platform::WhatsApp).unwrap());
    }
    let refused = r.outgoing.take(&r.group, "big.bin", Platform::WhatsApp).unwrap_err().to_string();
    assert!(refused.contains("3 file(s)") && refused.contains("once they are delivered"), "{refused}");
    forget(&taken.pop().unwrap());
    assert!(r.outgoing.take(&r.group, "big.bin", Platform::WhatsApp).is_ok(), "room again once one was sent");
}
