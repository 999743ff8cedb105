//! Where the real Claude Code CLI is for end-to-end tests, and the environment that
//! runs it offline against the fake Messages API (`fake_api.rs`).
//!
//! Tests never skip when the CLI is missing: a green run must mean the real CLI ran.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Overrides the CLI location (e.g. a `node_modules/.bin/claude` of your own).
pub const CLAUDE_BIN_ENV: &str = "PINCER_TEST_CLAUDE";

/// Variables to remove from the child's environment: the CLI refuses to start
/// nested (`CLAUDECODE`), and the others would send it to a real account or a
/// different backend instead of the fake API.
pub const ENV_TO_REMOVE: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
];

/// The "real" API key of the tests: the fake API sees it, a sandboxed agent never does.
pub const TEST_API_KEY: &str = "sk-ant-test";

/// `$PINCER_TEST_CLAUDE`, else the CLI `pincer setup` installs into `data/claude`.
pub fn claude_bin() -> PathBuf {
    if let Some(path) = std::env::var_os(CLAUDE_BIN_ENV) {
        return PathBuf::from(path);
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/claude/node_modules/.bin/claude");
    if installed.exists() {
        return installed;
    }
    panic!(
        "the claude CLI is not installed for tests: run `cargo run -- setup` (installs the \
         pinned CLI into data/claude) or set {CLAUDE_BIN_ENV}"
    );
}

/// The environment that points the CLI at `base_url` with a scratch `home` (session
/// files land in `home/.claude`) and turns off all other network traffic. Apply it
/// on top of the inherited environment minus [`ENV_TO_REMOVE`].
pub fn cli_env(base_url: &str, home: &Path) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", base_url.to_string()),
        ("ANTHROPIC_API_KEY", TEST_API_KEY.to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        ("HOME", home.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The flags for a long-lived stream-json session (add `--allowedTools`,
/// `--permission-prompt-tool stdio`, `--replay-user-messages`, … as needed).
pub fn stream_json_args() -> Vec<String> {
    ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// `claude --version` of the CLI under test, as `(major, minor, patch)`.
pub fn cli_version() -> (u32, u32, u32) {
    #[allow(clippy::disallowed_methods)] // asks the CLI under test its version
    let out = std::process::Command::new(claude_bin()).arg("--version").output().expect("claude --version runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().next().unwrap_or_default().split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}
