//! The wrapper's static binary (stage 0, [`super::early`]), as `build.rs`
//! built it into pincer: written once to a read-only file under pincer's
//! `run` folder, named by its content, for bwrap and Docker to bind under
//! each of [`super::NAMES`]; and checked to have no program interpreter.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The static binary, as built for this target.
pub const STAGE0: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stage0"));

/// Why the wrapper could not be put in place.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the sandbox's wrapper to {path}: {source}")]
pub struct InstallError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The wrapper's file in `dir`: `confine-<16 hex of its SHA-256>`, mode
/// 0555. Written (through a temporary file and a rename) unless a file of
/// that name and content is there already, as after a restart.
pub fn install(dir: &Path) -> Result<PathBuf, InstallError> {
    let path = dir.join(file_name());
    let failed = |source| InstallError { path: path.clone(), source };
    if std::fs::read(&path).is_ok_and(|have| have == STAGE0) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(failed)?;
    let mut temp = Leftover(dir.join(format!(".confine-{}", uuid::Uuid::new_v4().simple())));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temp.0).map_err(failed)?;
    file.write_all(STAGE0).and_then(|()| file.sync_all()).map_err(failed)?;
    drop(file);
    std::fs::set_permissions(&temp.0, std::fs::Permissions::from_mode(0o555)).map_err(failed)?;
    std::fs::rename(&temp.0, &path).map_err(failed)?;
    temp.0 = PathBuf::new();
    Ok(path)
}

/// `confine-<16 hex of the SHA-256>`, hashed once per process: every
/// sandboxed start installs the wrapper.
fn file_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let digest = Sha256::digest(STAGE0);
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("confine-{hex}")
    })
}

/// A temporary file, removed on drop unless its path was cleared (renamed into place).
struct Leftover(PathBuf);

impl Drop for Leftover {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// What an ELF file says about its loading.
#[derive(Debug, PartialEq, Eq)]
pub enum Linking {
    /// No program interpreter: the kernel starts it, no loader runs.
    Static,
    /// A program interpreter (the loader) runs first.
    Dynamic,
}

/// Whether the 64-bit little-endian ELF `elf` has a `PT_INTERP` program
/// header; `Err` when it is not one this reads.
pub fn linking(elf: &[u8]) -> Result<Linking, String> {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at =
        |at: usize| elf.get(at..at + 8).and_then(|b| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok());
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err("not a 64-bit little-endian ELF file".to_owned());
    }
    let (Some(phoff), Some(size), Some(count)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return Err("its header is cut short".to_owned());
    };
    for n in 0..count {
        let kind = phoff.checked_add(n * size).and_then(u32_at).ok_or("its program headers are cut short")?;
        if kind == PT_INTERP {
            return Ok(Linking::Dynamic);
        }
    }
    Ok(Linking::Static)
}

/// `pincer doctor`'s line on the wrapper.
pub fn summary() -> String {
    match linking(STAGE0) {
        Ok(Linking::Static) => format!(
            "static ({} KiB, no program interpreter): each command is confined before any library code runs, \
             and no loader variable (LD_PRELOAD, LD_AUDIT, …) reaches it or the command",
            STAGE0.len() / 1024
        ),
        Ok(Linking::Dynamic) => "dynamically linked: this build of pincer is broken, rebuild it".to_owned(),
        Err(why) => format!("unreadable ({why}): this build of pincer is broken, rebuild it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_wrapper_is_static_and_pincer_is_not() {
        assert_eq!(linking(STAGE0), Ok(Linking::Static));
        let own = std::fs::read("/proc/self/exe").unwrap();
        assert_eq!(linking(&own), Ok(Linking::Dynamic), "this test binary has a loader");
        assert!(linking(b"#!/bin/sh\n").is_err());
        assert!(linking(&STAGE0[..40]).is_err());
        assert!(summary().starts_with("static ("), "{}", summary());
    }

    #[test]
    fn the_wrapper_is_written_once_read_only_and_named_by_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let path = install(&run).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), STAGE0);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o555);
        assert_eq!(install(&run).unwrap(), path, "the same file again");
        assert_eq!(std::fs::read_dir(&run).unwrap().count(), 1, "no temporary file left");
        // A file of that name with other content is replaced.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "planted").unwrap();
        assert_eq!(install(&run).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), STAGE0);
    }
}
