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
pub const PINNED_VERSION: &str = "2.1.330";
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
    std::fs::create_dir_all(&prefix)
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

/// What `claude --version` prints, e.g. `2.1.330 (Claude Code)`.
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
