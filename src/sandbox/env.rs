//! The sandboxed agent's environment, built from an allowlist: nothing of
//! pincer's own environment (the Telegram token, the API key, `PINCER_*`)
//! is inherited. Its shell and `PATH` are pincer's confining wrappers
//! (`confine.rs`).

use std::collections::BTreeMap;

use super::confine;

/// Taken over from pincer's environment when set: locale and time zone only.
const PASSED_THROUGH: &[&str] = &["LANG", "LC_ALL", "LC_CTYPE", "TZ"];

/// Set by pincer itself; a `claude.env` entry of the same name is ignored.
pub const RESERVED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_UNIX_SOCKET",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "HOME",
    "PATH",
    "SHELL",
    "CLAUDE_CODE_SHELL",
    "XDG_RUNTIME_DIR",
    "USER",
    "LOGNAME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// `XDG_RUNTIME_DIR` inside a sandbox, where the CLI cannot open its
/// messaging inbox: nothing can be made in `/proc`, and the CLI takes that
/// refusal (`ENOENT`) as final. A folder it merely may not write (`EACCES`,
/// `EROFS`) makes it fall back to `/tmp/cc-socks-UID`, open to every process
/// in the sandbox. (Seen on 2.1.330; 2.1.197 has no inbox.)
pub const NO_INBOX: &str = "/proc";

/// The agent's environment: a fixed base, the locale from `host`, the
/// operator's `claude.env` (minus [`RESERVED`] names), the credential
/// proxy's socket (a path inside the sandbox: the CLI speaks HTTP over it,
/// needing no network) with this session's placeholder key, and the egress
/// proxy's address inside the sandbox when it has one (`http://127.0.0.1:3128`).
pub fn agent_env(
    host: impl Fn(&str) -> Option<String>,
    claude_env: &BTreeMap<String, String>,
    home: &str,
    api_socket: &str,
    placeholder: &str,
    egress: Option<&str>,
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for name in PASSED_THROUGH {
        if let Some(value) = host(name) {
            env.insert((*name).to_owned(), value);
        }
    }
    for (k, v) in claude_env {
        if RESERVED.contains(&k.as_str()) {
            tracing::debug!(key = %k, "claude.env entry ignored inside the sandbox: pincer sets it");
        } else if confine::is_loader_variable(k) {
            // It would load code into the CLI itself; the wrapper drops them for commands (`confine::early`).
            tracing::warn!(key = %k, "claude.env entry ignored inside the sandbox: a loader variable");
        } else {
            env.insert(k.clone(), v.clone());
        }
    }
    let fixed = [
        ("HOME", home),
        ("PATH", confine::PATH),
        ("USER", "agent"),
        ("LOGNAME", "agent"),
        // Every shell the CLI starts, and so every command the agent runs, confines itself first.
        ("SHELL", confine::SHELL),
        ("CLAUDE_CODE_SHELL", confine::SHELL),
        // The CLI (2.1.330) opens a messaging inbox, a Unix socket in
        // `$XDG_RUNTIME_DIR/cc-socks` (else in `/tmp`), which takes user
        // messages from any process that can connect, with or without the
        // token it hands its shells: the agent's own code included.
        ("XDG_RUNTIME_DIR", NO_INBOX),
        ("TMPDIR", "/tmp"),
        ("ANTHROPIC_API_KEY", placeholder),
    ];
    for (k, v) in fixed {
        env.insert(k.to_owned(), v.to_owned());
    }
    // The URL only names the Host header; every byte goes through the socket.
    env.insert("ANTHROPIC_BASE_URL".to_owned(), "http://localhost".to_owned());
    env.insert("ANTHROPIC_UNIX_SOCKET".to_owned(), api_socket.to_owned());
    if let Some(proxy) = egress {
        set_egress_proxy(&mut env, proxy);
    }
    env.into_iter().collect()
}

/// The egress proxy for every tool that reads a proxy variable. Both
/// spellings: curl takes `http_proxy` only in lower case, most other tools
/// take either. The sandbox's own loopback stays direct, and so does the
/// model (`localhost` over the credential proxy's socket).
fn set_egress_proxy(env: &mut BTreeMap<String, String>, proxy: &str) {
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.insert(name.to_owned(), proxy.to_owned());
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.insert(name.to_owned(), "localhost,127.0.0.1,::1".to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowlisted_names_reach_the_agent() {
        let host = |name: &str| match name {
            "LANG" => Some("C.UTF-8".to_owned()),
            "PINCER_TELEGRAM__TOKEN" | "ANTHROPIC_API_KEY" => Some("secret".to_owned()),
            _ => None,
        };
        let claude_env: BTreeMap<String, String> = [
            ("DISABLE_AUTOUPDATER", "1"),
            ("ANTHROPIC_API_KEY", "sk-real"),
            ("ANTHROPIC_BASE_URL", "https://elsewhere"),
            ("HOME", "/root"),
            ("CLAUDE_CODE_SHELL", "/bin/bash"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let env: BTreeMap<_, _> =
            agent_env(host, &claude_env, "/home/agent", "/run/pincer/api.sock", "pincer-placeholder", None)
                .into_iter()
                .collect();
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["DISABLE_AUTOUPDATER"], "1");
        assert_eq!(env["ANTHROPIC_API_KEY"], "pincer-placeholder");
        assert_eq!(env["ANTHROPIC_BASE_URL"], "http://localhost", "not the operator's");
        assert_eq!(env["HOME"], "/home/agent");
        assert_eq!(env["CLAUDE_CODE_SHELL"], "/opt/pincer/confine/bash", "not the operator's");
        assert_eq!(env["SHELL"], "/opt/pincer/confine/bash");
        assert_eq!(env["XDG_RUNTIME_DIR"], "/proc", "where the CLI cannot open its messaging inbox");
        assert!(env["PATH"].starts_with("/opt/pincer/confine:"), "git is found there first");
        assert!(!env.contains_key("PINCER_TELEGRAM__TOKEN"));
        assert!(!env.values().any(|v| v == "secret" || v == "sk-real"), "{env:?}");
        assert_eq!(env["ANTHROPIC_UNIX_SOCKET"], "/run/pincer/api.sock");
        assert!(!env.keys().any(|k| k.to_ascii_lowercase().contains("proxy")), "no egress proxy given: {env:?}");
    }

    #[test]
    fn the_egress_proxy_is_every_tools_proxy_but_not_the_models() {
        let operator: BTreeMap<String, String> =
            [("HTTPS_PROXY".to_owned(), "http://corp:8080".to_owned())].into_iter().collect();
        let env: BTreeMap<_, _> =
            agent_env(|_| None, &operator, "/home/agent", "/run/pincer/api.sock", "p", Some("http://127.0.0.1:3128"))
                .into_iter()
                .collect();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            assert_eq!(env[name], "http://127.0.0.1:3128", "{name}: the operator's own proxy is unreachable inside");
        }
        let direct: Vec<&str> = env["no_proxy"].split(',').collect();
        assert!(direct.contains(&"localhost") && direct.contains(&"127.0.0.1"), "{direct:?}");
        assert_eq!(env["NO_PROXY"], env["no_proxy"]);
    }
}
