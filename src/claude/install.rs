//! `pincer setup`: installs the pinned Claude Code CLI from npm into the data
//! directory, where command resolution finds it from then on.
//!
//! It uses the ordinary `npm` client, so a registry mirror configured for npm
//! (`npm_config_registry`, `.npmrc`) is honoured, and it checks the installed
//! binary's `--version` before it reports success.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

/// The CLI version pincer is tested with. Change it here only.
pub const PINNED_VERSION: &str = "2.1.332";
/// The oldest CLI version pincer is tested with.
pub const OLDEST_SUPPORTED: &str = "2.1.197";

/// `x.y.z` from what `claude --version` prints (`2.1.332 (Claude Code)`).
fn version_triple(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split_whitespace().next()?.split('.').map(|p| p.parse::<u32>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(triple)
}

/// Whether a `claude --version` lies between [`OLDEST_SUPPORTED`] and
/// [`PINNED_VERSION`]; `None` when it cannot be read.
pub fn in_tested_range(version: &str) -> Option<bool> {
    let v = version_triple(version)?;
    let oldest = version_triple(OLDEST_SUPPORTED)?;
    let pinned = version_triple(PINNED_VERSION)?;
    Some(oldest <= v && v <= pinned)
}

/// What `doctor` and `run` say about a CLI version.
pub fn range_note(version: &str) -> String {
    let range = format!("tested with {OLDEST_SUPPORTED} to {PINNED_VERSION}");
    match in_tested_range(version) {
        Some(true) => format!("in the tested range ({range})"),
        Some(false) => format!(
            "OUTSIDE the tested range ({range}): its protocol may differ; `pincer setup` installs {PINNED_VERSION}"
        ),
        None => format!("version unknown ({range})"),
    }
}
/// The npm package of the CLI.
pub const NPM_PACKAGE: &str = "@anthropic-ai/claude-code";

/// Where `pincer setup` puts the CLI inside `data_dir`.
pub fn install_prefix(data_dir: &Path) -> PathBuf {
    data_dir.join("claude")
}

/// The executable `pincer setup` installs.
pub fn installed_binary(data_dir: &Path) -> PathBuf {
    install_prefix(data_dir).join("node_modules/.bin/claude")
}

/// Installing failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("`npm` was not found on the PATH: install Node.js (18 or newer) with npm, then run `pincer setup` again")]
    NoNpm,
    #[error("`npm install {package}` failed ({status}):\n{output}")]
    NpmFailed { package: String, status: String, output: String },
    #[error("the installed CLI at {path} reports version {found:?}, expected {expected}")]
    WrongVersion { path: PathBuf, found: String, expected: String },
    #[error("could not run {what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// Installs `version` of the CLI under `data_dir` and returns the binary's path.
pub async fn install(data_dir: &Path, version: &str) -> Result<PathBuf, InstallError> {
    let npm = which::which("npm").map_err(|_| InstallError::NoNpm)?;
    let prefix = install_prefix(data_dir);
    // data_dir too, when setup is the first to make it: private from the start.
    crate::private::create_dir(&prefix)
        .map_err(|source| InstallError::Io { what: format!("mkdir {}", prefix.display()), source })?;
    let package = format!("{NPM_PACKAGE}@{version}");
    tracing::info!(%package, prefix = %prefix.display(), "installing the Claude Code CLI with npm");
    #[allow(clippy::disallowed_methods)] // npm is a one-shot tool, not a session
    let out = Command::new(npm)
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
        .arg(&prefix)
        .arg(&package)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| InstallError::Io { what: "npm".into(), source })?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stdout));
        return Err(InstallError::NpmFailed { package, status: out.status.to_string(), output });
    }
    let binary = installed_binary(data_dir);
    let found = version_of(&binary).await?;
    if !found.starts_with(version) {
        return Err(InstallError::WrongVersion { path: binary, found, expected: version.to_owned() });
    }
    Ok(binary)
}

/// What `claude --version` prints, e.g. `2.1.332 (Claude Code)`.
pub async fn version_of(binary: &Path) -> Result<String, InstallError> {
    #[allow(clippy::disallowed_methods)] // a one-shot `--version`
    let out = Command::new(binary)
        .arg("--version")
        .env("DISABLE_AUTOUPDATER", "1")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| InstallError::Io { what: format!("{} --version", binary.display()), source })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn versions_are_placed_against_the_tested_range() {
        assert_eq!(in_tested_range("2.1.332 (Claude Code)"), Some(true));
        assert_eq!(in_tested_range("2.1.330 (Claude Code)"), Some(true));
        assert_eq!(in_tested_range("2.1.197 (Claude Code)"), Some(true));
        assert_eq!(in_tested_range("2.1.250"), Some(true));
        assert_eq!(in_tested_range("2.1.196 (Claude Code)"), Some(false));
        assert_eq!(in_tested_range("2.1.333 (Claude Code)"), Some(false));
        assert_eq!(in_tested_range("2.2.0 (Claude Code)"), Some(false));
        assert_eq!(in_tested_range("--version failed"), None);
        assert!(range_note("3.0.0").contains("OUTSIDE the tested range"));
    }
}
