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
    assert_eq!(
        table.for_group("alpha"),
        [Mount { host: f.path("shared/photos"), name: "photos".into(), writable: false }]
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
