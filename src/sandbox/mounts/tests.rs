//! The allowlist's checks against real folders and symlinks in a temp dir.

use std::path::{Path, PathBuf};

use super::*;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        // Canonical from the start, so paths written into allowlists are real paths.
        let f = Fixture { dir };
        for d in ["shared/photos", "home/.ssh", "data", "groups/alpha", "other"] {
            std::fs::create_dir_all(f.path(d)).unwrap();
        }
        std::os::unix::fs::symlink(f.path("other"), f.path("shared/link")).unwrap();
        f
    }

    fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn protected(&self) -> Protected {
        Protected(vec![self.path("data"), self.path("groups")])
    }

    fn one(&self, host: &Path, extra: &str) -> Result<MountTable, MountError> {
        let text = format!("[[mount]]\ngroup = \"alpha\"\nhost = \"{}\"\n{extra}", host.display());
        parse(&text, &self.protected())
    }

    fn identity(&self, rel: &str) -> Identity {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.path(rel)).unwrap();
        Identity { dev: meta.dev(), ino: meta.ino() }
    }

    /// `shared/photos` loaded as group alpha's mount.
    fn photos(&self) -> Mount {
        self.one(&self.path("shared/photos"), "").unwrap().for_group("alpha")[0].clone()
    }

    fn refused(&self, host: &Path, extra: &str) -> String {
        match self.one(host, extra) {
            Ok(t) => panic!("{} was accepted: {t:?}", host.display()),
            Err(e) => e.to_string(),
        }
    }
}

#[test]
fn a_plain_folder_is_mounted_read_only_unless_allowed() {
    let f = Fixture::new();
    let table = f.one(&f.path("shared/photos"), "").unwrap();
    let identity = f.identity("shared/photos");
    assert_eq!(
        table.for_group("alpha"),
        [Mount { host: f.path("shared/photos"), name: "photos".into(), writable: false, identity }]
    );
    assert!(table.for_group("beta").is_empty(), "other groups get nothing");
    let table = f.one(&f.path("shared/photos"), "writable = true\nname = \"pics\"\n").unwrap();
    assert!(table.for_group("alpha")[0].writable);
    assert_eq!(table.for_group("alpha")[0].name, "pics");
}

#[test]
fn dot_dot_and_relative_paths_are_refused() {
    let f = Fixture::new();
    let sneaky = PathBuf::from(format!("{}/shared/../data", f.root().display()));
    assert!(f.refused(&sneaky, "").contains(".."));
    assert!(f.refused(Path::new("shared/photos"), "").contains("absolute"));
}

#[test]
fn symlink_escapes_are_refused() {
    let f = Fixture::new();
    let err = f.refused(&f.path("shared/link"), "");
    assert!(err.contains("symlink"), "{err}");
}

#[test]
fn the_deny_list_covers_the_path_and_what_a_folder_holds() {
    let f = Fixture::new();
    assert!(f.refused(&f.path("home/.ssh"), "").contains(".ssh"));
    let err = f.refused(&f.path("home"), "");
    assert!(err.contains("holds `.ssh`"), "{err}");
    // The file's own deny list adds to the default one.
    std::fs::write(f.path("shared/photos/secret.txt"), "x").unwrap();
    let text = format!(
        "deny = [\"secret.txt\"]\n[[mount]]\ngroup = \"alpha\"\nhost = \"{}\"\n",
        f.path("shared/photos").display()
    );
    assert!(parse(&text, &f.protected()).unwrap_err().to_string().contains("secret.txt"));
}

#[test]
fn pincer_data_and_group_folders_are_off_limits() {
    let f = Fixture::new();
    assert!(f.refused(&f.path("data"), "").contains("overlaps"));
    assert!(f.refused(&f.path("groups/alpha"), "").contains("overlaps"));
    // A folder holding the data folder would expose it too.
    assert!(f.refused(&f.root(), "").contains("overlaps"));
}

#[test]
fn missing_paths_bad_names_and_unknown_keys_are_refused() {
    let f = Fixture::new();
    assert!(f.refused(&f.path("nope"), "").contains("cannot resolve"));
    assert!(f.refused(&f.path("shared/photos"), "name = \"../x\"\n").contains("mount name"));
    assert!(matches!(f.one(&f.path("shared/photos"), "rw = true\n"), Err(MountError::Parse { .. })));
}

#[test]
fn an_allowlist_inside_the_groups_folder_is_refused() {
    let f = Fixture::new();
    let file = f.path("groups/alpha/mounts.toml");
    std::fs::write(&file, "").unwrap();
    let err = load(&file, &f.protected(), &f.path("groups")).unwrap_err();
    assert!(matches!(err, MountError::InsideGroups(_)), "{err}");
    let outside = f.path("mounts.toml");
    std::fs::write(&outside, "").unwrap();
    assert!(load(&outside, &f.protected(), &f.path("groups")).unwrap().for_group("alpha").is_empty());
}

/// What a reopened descriptor is: its device and inode.
fn identity_of(fd: &std::os::fd::OwnedFd) -> Identity {
    let stat = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(fd)).unwrap();
    Identity { dev: stat.st_dev, ino: stat.st_ino }
}

#[test]
fn an_unchanged_mount_is_reopened_as_the_folder_loaded() {
    let f = Fixture::new();
    let mount = f.photos();
    assert_eq!(identity_of(&reopen(&mount).unwrap()), f.identity("shared/photos"));
}

#[test]
fn a_mount_swapped_for_a_symlink_after_loading_is_refused_never_followed() {
    let f = Fixture::new();
    let mount = f.photos();
    std::fs::rename(f.path("shared/photos"), f.path("shared/photos.old")).unwrap();
    std::os::unix::fs::symlink(f.path("other"), f.path("shared/photos")).unwrap();
    let err = reopen(&mount).unwrap_err();
    assert!(matches!(err, MountError::Changed { .. }), "{err}");
    assert!(err.to_string().contains("is a symlink now"), "{err}");
}

#[test]
fn a_folder_above_the_mount_swapped_for_a_symlink_is_refused() {
    let f = Fixture::new();
    let mount = f.photos();
    // A look-alike tree elsewhere, reached through `shared` as a symlink.
    std::fs::create_dir_all(f.path("other/photos")).unwrap();
    std::fs::rename(f.path("shared"), f.path("shared.old")).unwrap();
    std::os::unix::fs::symlink(f.path("other"), f.path("shared")).unwrap();
    let err = reopen(&mount).unwrap_err().to_string();
    assert!(err.contains("shared is a symlink now"), "{err}");
}

#[test]
fn a_mount_replaced_by_another_folder_is_refused() {
    let f = Fixture::new();
    let mount = f.photos();
    std::fs::rename(f.path("shared/photos"), f.path("shared/photos.old")).unwrap();
    std::fs::create_dir(f.path("shared/photos")).unwrap();
    let err = reopen(&mount).unwrap_err().to_string();
    assert!(err.contains("another file or folder"), "{err}");
    std::fs::remove_dir(f.path("shared/photos")).unwrap();
    let err = reopen(&mount).unwrap_err().to_string();
    assert!(err.contains("cannot open"), "a missing folder: {err}");
}
