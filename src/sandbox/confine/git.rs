//! What pincer's `git` wrapper pins before it execs the real git: no
//! configuration the agent can write (a repository's, one it includes, the
//! home's) names a program that runs.
//!
//! git reads its configuration from files in this order: system, global,
//! repository, worktree; then the command's own, which wins: first
//! `GIT_CONFIG_COUNT` (`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`), then
//! `GIT_CONFIG_PARAMETERS`, then the command line's `-c` (seen on git 2.47).
//! So the pins go into `GIT_CONFIG_COUNT` after any the caller set, and also
//! at the end of `GIT_CONFIG_PARAMETERS` when the caller set that, so no
//! variable in the environment undoes them. A `-c` in argv still can: it is
//! in the command the admin approved, in plain sight. A caller's `GIT_DIR`
//! only chooses which repository's files are read; the pins win over all of
//! them.
//!
//! Two kinds of key name a program (git-config(1), gitattributes(5),
//! git-archive(1), git-interpret-trailers(1), git-send-email(1)):
//! - keys of fixed name ([`FIXED`]), pinned in every run;
//! - keys under a name the configuration chooses (`filter.<driver>.clean`,
//!   `diff.<driver>.textconv`, `alias.<name>`, `credential.<url>.helper`, …),
//!   which no fixed list can name. The wrapper lists the configuration that
//!   run will read (`git config --list -z`, includes followed, which runs no
//!   program) and pins each of those names [`pin_for`] knows. Each gets a
//!   value that runs nothing planted: an empty filter is no filter, a
//!   textconv of `cat` is the file itself, a merge driver is git's own merge.
//!
//! `safe.bareRepository=explicit` keeps git from taking a folder the agent
//! writes for a bare repository (`HEAD`, `objects/`, `refs/` and a `config`
//! need no `.git` in any path).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The external diff a configuration names runs this instead: it tells the
/// agent why there is no diff and how to get one; `#` ends the command line
/// before the arguments git appends.
pub const NO_EXTERNAL_DIFF: &str = "echo 'pincer did not run the external diff this configuration names; \
     git diff --no-ext-diff shows the change' >&2 #";

/// Keys of fixed name that name a program or a hook, with a value that runs
/// nothing planted; pinned in every run.
pub const FIXED: &[(&str, &str)] = &[
    // A folder is a bare repository only when named (`--git-dir`, `GIT_DIR`).
    ("safe.bareRepository", "explicit"),
    ("core.fsmonitor", "false"),
    // No hooks: `/dev/null/<hook>` never exists.
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    // `:` is git's "no editor": the text stays as it is.
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", "ssh"),
    ("core.alternateRefsCommand", "true"),
    ("diff.external", NO_EXTERNAL_DIFF),
    ("interactive.diffFilter", "cat"),
    ("gpg.program", ""),
    ("gpg.ssh.defaultKeyCommand", ""),
    // An empty helper empties the list of helpers before it.
    ("credential.helper", ""),
    // Checked before `protocol.allow`: `ext::` URLs (a `url.<base>.insteadOf` away) run a command.
    ("protocol.ext.allow", "never"),
    ("uploadpack.packObjectsHook", ""),
    ("imap.tunnel", ""),
    ("instaweb.httpd", ""),
];

/// `core.gitProxy` takes the first value that matches, so no later pin
/// overrides it; this variable, when set (even empty), makes git read none.
pub const PROXY_COMMAND: &str = "GIT_PROXY_COMMAND";

/// The pin for a key the configuration holds (`name` as `git config --list`
/// prints it: section and key in lower case), given its value; `None` when
/// the key names no program or its value runs none.
pub fn pin_for(name: &str, value: Option<&str>) -> Option<&'static str> {
    let (section, rest) = name.split_once('.')?;
    let (sub, key) = match rest.rsplit_once('.') {
        Some((sub, key)) => (Some(sub), key),
        None => (None, rest),
    };
    let bang = value.is_some_and(|v| v.trim_start().starts_with('!'));
    match (section, sub.is_some(), key) {
        ("filter", true, "clean" | "smudge" | "process") => Some(""),
        ("filter", true, "required") => Some("false"),
        ("diff", true, "command") => Some(NO_EXTERNAL_DIFF),
        ("diff", true, "textconv") => Some("cat"),
        ("merge", true, "driver") => Some("git merge-file %A %O %B"),
        ("alias", _, _) if bang => Some(""),
        ("submodule", true, "update") if bang => Some("none"),
        ("credential", true, "helper") | ("gpg", true, "program") => Some(""),
        ("difftool" | "mergetool" | "man" | "browser", true, "cmd" | "path") => Some(""),
        ("guitool", true, "cmd") | ("tar", true, "command") | ("trailer", true, "command" | "cmd") => Some(""),
        ("remote", true, "uploadpack") => Some("git-upload-pack"),
        ("remote", true, "receivepack") => Some("git-receive-pack"),
        ("remote", true, "vcs") => Some(""),
        ("sendemail", _, "tocmd" | "cccmd" | "sendmailcmd" | "smtpserver") => Some(""),
        // `pager.<command>`: a program, or whether to page through `core.pager`.
        ("pager", false, _) => Some("false"),
        _ => None,
    }
}

/// The keys and values of `git config --list -z`: each entry ends with a
/// NUL, its name and value split by the first newline (no newline: a key
/// with no value, such as a bare `[core] bare`).
pub fn parse_listing(out: &[u8]) -> Vec<(String, Option<String>)> {
    out.split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let text = String::from_utf8_lossy(entry);
            match text.split_once('\n') {
                Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                None => (text.into_owned(), None),
            }
        })
        .collect()
}

/// Every pin for one run: [`FIXED`], then one per listed key [`pin_for`] names.
pub fn pins(listed: &[(String, Option<String>)]) -> Vec<(String, String)> {
    let mut pins: Vec<(String, String)> = FIXED.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    for (name, value) in listed {
        if let Some(pin) = pin_for(name, value.as_deref()) {
            if !pins.iter().any(|(k, _)| k == name) {
                pins.push((name.clone(), pin.to_owned()));
            }
        }
    }
    pins
}

/// git's options before the command that choose which configuration it
/// reads (`-C`, `-c`, `--config-env`, `--git-dir`, `--work-tree`, `--bare`),
/// from `args` (argv without `argv[0]`): the listing run needs the same.
pub fn config_options(args: &[OsString]) -> Vec<OsString> {
    const WITH_VALUE: &[&str] = &["-C", "-c", "--config-env", "--git-dir", "--work-tree", "--namespace"];
    const KEPT_JOINED: &[&str] = &["--config-env=", "--git-dir=", "--work-tree="];
    const OTHER_WITH_VALUE: &[&str] = &["--shallow-file", "--attr-source", "--super-prefix"];
    let mut kept = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let text = arg.to_string_lossy();
        if !text.starts_with('-') || text == "--" {
            break;
        }
        if WITH_VALUE.contains(&text.as_ref()) {
            if text != "--namespace" {
                kept.push(arg.clone());
                kept.extend(args.get(i + 1).cloned());
            }
            i += 2;
            continue;
        }
        if text == "--bare" || KEPT_JOINED.iter().any(|p| text.starts_with(p)) {
            kept.push(arg.clone());
        } else if OTHER_WITH_VALUE.contains(&text.as_ref()) {
            i += 1;
        }
        i += 1;
    }
    kept
}

/// Why the caller's environment cannot carry the pins.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("GIT_CONFIG_COUNT is {0:?}, not a number (git would refuse it too)")]
    Count(String),
}

/// The environment the real git runs with: the caller's, its own
/// `GIT_CONFIG_COUNT` entries kept, the pins after them (and after its
/// `GIT_CONFIG_PARAMETERS`, when it set one), and an empty
/// [`PROXY_COMMAND`] unless it set one.
pub fn environment(
    mut env: Vec<(OsString, OsString)>,
    pins: &[(String, String)],
) -> Result<Vec<(OsString, OsString)>, EnvError> {
    let get = |env: &[(OsString, OsString)], name: &str| {
        env.iter().find(|(k, _)| k.as_bytes() == name.as_bytes()).map(|(_, v)| v.clone())
    };
    let first = match get(&env, "GIT_CONFIG_COUNT") {
        None => 0,
        Some(count) if count.is_empty() => 0,
        Some(count) => {
            count.to_str().and_then(|c| c.parse::<usize>().ok()).ok_or_else(|| EnvError::Count(count_text(&count)))?
        }
    };
    let params = get(&env, "GIT_CONFIG_PARAMETERS");
    let proxy_set = get(&env, PROXY_COMMAND).is_some();
    let ours = |k: &OsString| {
        let k = k.as_bytes();
        k == b"GIT_CONFIG_COUNT" || k == b"GIT_CONFIG_PARAMETERS" || numbered(k, first)
    };
    env.retain(|(k, _)| !ours(k));
    for (i, (key, value)) in pins.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{}", first + i).into(), key.into()));
        env.push((format!("GIT_CONFIG_VALUE_{}", first + i).into(), value.into()));
    }
    env.push(("GIT_CONFIG_COUNT".into(), (first + pins.len()).to_string().into()));
    if let Some(params) = params {
        let mut params = params.into_vec();
        for (key, value) in pins {
            params.extend_from_slice(format!(" {}={}", sq_quote(key), sq_quote(value)).as_bytes());
        }
        env.push(("GIT_CONFIG_PARAMETERS".into(), OsString::from_vec(params)));
    }
    if !proxy_set {
        env.push((PROXY_COMMAND.into(), OsString::new()));
    }
    Ok(env)
}

/// `GIT_CONFIG_KEY_n` or `GIT_CONFIG_VALUE_n` with `n` at or past `first`:
/// the caller's stale entries beyond its count, which the pins replace.
fn numbered(name: &[u8], first: usize) -> bool {
    let n = name.strip_prefix(b"GIT_CONFIG_KEY_").or_else(|| name.strip_prefix(b"GIT_CONFIG_VALUE_"));
    n.and_then(|n| std::str::from_utf8(n).ok()).and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| n >= first)
}

fn count_text(count: &OsStr) -> String {
    count.to_string_lossy().chars().take(40).collect()
}

/// Quoted as git's `sq_quote` does, for `GIT_CONFIG_PARAMETERS`.
fn sq_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// For `pincer doctor`: what every sandboxed git runs with.
pub fn summary() -> String {
    let fixed: Vec<&str> = FIXED.iter().map(|(k, _)| *k).filter(|k| *k != "safe.bareRepository").collect();
    format!(
        "every git a sandboxed agent runs reads safe.bareRepository=explicit (a folder is never taken for a bare \
         repository unless named) and pins, over any configuration the agent can write, {}; and, in each run, \
         every filter, diff and merge driver, `!` alias, credential helper, gpg, tool, tar and trailer command \
         and remote program its configuration defines (found with `git config --list`, which runs none); \
         core.gitProxy is read from none ({PROXY_COMMAND} is set empty)",
        fixed.join(", ")
    )
}

#[cfg(test)]
mod tests;
