//! A tool call in the words a person reads ("Reading notes.md", "Running
//! `cargo test`", "Fetching docs.rs"), without anything that could be a
//! secret: a command's first words only (no `VAR=value` before it, nothing
//! after `|`, `;` or `&&`, nothing after its first flag, nothing from the
//! first quoted, `$`-expanded or token-like word on), a file's last two path
//! components, a URL's host.
//!
//! Pure and cheap: called once per tool call, never per stdout line.

use crate::claude::protocol::ToolKind;

/// The most a summary quotes of a command, a query or a description.
const MAX_QUOTED: usize = 40;
/// The most words a summary quotes of a command.
const COMMAND_WORDS: usize = 3;

/// What the agent is doing, in words.
pub fn words(tool: &ToolKind) -> String {
    match tool {
        ToolKind::Bash { command } => match command_head(command) {
            Some(head) => format!("Running `{head}`"),
            None => "Running a command".to_owned(),
        },
        ToolKind::Read { path } => with_file("Reading", path),
        ToolKind::Write { path } => with_file("Writing", path),
        ToolKind::Edit { path } | ToolKind::NotebookEdit { path } => with_file("Editing", path),
        ToolKind::Glob { pattern } => with_quote("Finding files", pattern),
        ToolKind::Grep { pattern } => with_quote("Searching the files for", pattern),
        ToolKind::WebSearch { query } => match clip(query) {
            Some(query) => format!("Searching the web: {query}"),
            None => "Searching the web".to_owned(),
        },
        ToolKind::WebFetch { url } => match host(url) {
            Some(host) => format!("Fetching {host}"),
            None => "Fetching a web page".to_owned(),
        },
        ToolKind::Agent { name: Some(name), .. } => with_text("Asking a teammate", name),
        ToolKind::Agent { description, subagent_type, name: None } => {
            let what = if description.trim().is_empty() { subagent_type.as_deref().unwrap_or("") } else { description };
            with_text("Starting a subagent", what)
        }
        ToolKind::TodoWrite => "Updating the to-do list".to_owned(),
        ToolKind::Mcp { server, tool } => match (clip(server), clip(tool)) {
            (Some(server), Some(tool)) => format!("Using {server}: {tool}"),
            _ => "Using a tool".to_owned(),
        },
        ToolKind::Other(name) => match clip(name) {
            Some(name) => format!("Using {name}"),
            None => "Using a tool".to_owned(),
        },
    }
}

/// Another piece of text the CLI reports about a task (a task's description,
/// a progress line), made as safe as the words of a call: cut to a few
/// words, nothing from a token-like word on.
pub fn safe_text(text: &str) -> Option<String> {
    clip(text)
}

fn with_file(verb: &str, path: &str) -> String {
    match short_path(path) {
        Some(path) => format!("{verb} {path}"),
        None => format!("{verb} a file"),
    }
}

fn with_quote(what: &str, pattern: &str) -> String {
    match clip(pattern) {
        Some(pattern) => format!("{what} `{pattern}`"),
        None => what.to_owned(),
    }
}

fn with_text(what: &str, text: &str) -> String {
    match clip(text) {
        Some(text) => format!("{what}: {text}"),
        None => what.to_owned(),
    }
}

/// The last two components of a path ("src/main.rs"), or its name alone
/// when the two would be long.
fn short_path(path: &str) -> Option<String> {
    let mut parts = path.trim().trim_end_matches('/').rsplit('/').filter(|p| !p.is_empty());
    let name = parts.next().filter(|n| !looks_secret(n))?;
    let name = cut(name, MAX_QUOTED);
    match parts.next() {
        Some(dir) if dir.len() + name.len() < MAX_QUOTED && !looks_secret(dir) => Some(format!("{dir}/{name}")),
        _ => Some(name.to_owned()),
    }
}

/// A command's first few words: the first command of a chain (past any
/// `cd DIR`), without leading `VAR=value` assignments, up to the first word
/// that might carry a secret or expand to one.
fn command_head(command: &str) -> Option<String> {
    let segments = command.split(['|', ';', '&', '\n', '>', '<', '(', ')', '`']);
    let mut words = segments
        .map(|segment| segment.split_whitespace().skip_while(|w| is_assignment(w)).peekable())
        .find_map(|mut words| match words.peek() {
            None | Some(&"cd") => None,
            Some(_) => Some(words),
        })?;
    let mut head = String::new();
    for word in words.by_ref().take(COMMAND_WORDS) {
        let unsafe_word = word.contains(['"', '\'', '$', '=', '\\', '@']) || word.contains("://") || looks_secret(word);
        if unsafe_word || head.len() + 1 + word.len() > MAX_QUOTED {
            break;
        }
        if !head.is_empty() {
            head.push(' ');
        }
        head.push_str(word);
        // What follows a flag may be its value: a password, a header, a token.
        if word.starts_with('-') {
            break;
        }
    }
    (!head.is_empty()).then_some(head)
}

/// `NAME=value` before a command (the environment it runs with).
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Free text cut to [`MAX_QUOTED`] at a word boundary, stopping before the
/// first word that looks like a secret (with "…" when cut).
fn clip(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut cut_short = false;
    for word in text.split_whitespace() {
        if looks_secret(word) || out.len() + 1 + word.len() > MAX_QUOTED {
            cut_short = true;
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.is_empty() {
        // One long word with nothing secret-like about it: its start still says something.
        let first = text.split_whitespace().next().filter(|w| !looks_secret(w))?;
        return Some(format!("{}…", cut(first, MAX_QUOTED)));
    }
    if cut_short {
        out.push('…');
    }
    Some(out)
}

/// A word that could be a token, a key or a password: a known key prefix, a
/// JWT, or a long run mixing letters and digits with no path or word shape.
fn looks_secret(word: &str) -> bool {
    const PREFIXES: [&str; 10] = ["sk-", "sk_", "ghp_", "gho_", "ghs_", "github_pat_", "xox", "glpat-", "AKIA", "eyJ"];
    let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if PREFIXES.iter().any(|p| word.starts_with(p)) && word.len() >= 8 {
        return true;
    }
    let digits = word.chars().filter(char::is_ascii_digit).count();
    let letters = word.chars().filter(char::is_ascii_alphabetic).count();
    let mixed = digits >= 3 && letters >= 3;
    (word.len() >= 16 && mixed && !word.contains(['/', '.'])) || word.len() >= 32
}

/// A URL's host, without userinfo, port, path or query.
fn host(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = parsed.host_str()?.trim_start_matches("www.");
    (!host.is_empty()).then(|| cut(host, MAX_QUOTED).to_owned())
}

/// The first `max` bytes of `s`, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests;
