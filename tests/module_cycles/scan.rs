//! What one Rust source file declares and names, read from its text alone.
//! Pure functions over a string; touches nothing else of the test.
//!
//! Not a Rust parser: comments, strings and character literals are blanked
//! out first, then a walk over the text tracks braces and inline `mod x { … }`
//! blocks, and reads per module: the items it defines at its own level, the
//! `mod` it declares, its `use` declarations (use trees with `{…}` groups,
//! `self`, `as` and globs), the other paths its code writes (`a::b::c`), and
//! the bare words it uses (for the names a glob import brings in). Whatever
//! sits under `#[cfg(test)]` (a test module, a test-only helper) is skipped:
//! test code may name anything without making a cycle.

use std::collections::{BTreeMap, BTreeSet};

/// One module a file defines: the file's own, or an inline `mod x { … }` in it.
#[derive(Debug, Default, Clone)]
pub struct Scanned {
    pub module: Vec<String>,
    /// Items defined at the module's own level: functions, types, traits,
    /// constants, statics, `macro_rules!`.
    pub defs: BTreeSet<String>,
    /// The `mod x;` and `mod x { … }` declared here: whether under `#[cfg(test)]`.
    pub mods: BTreeMap<String, bool>,
    pub uses: Vec<Use>,
    /// The other paths its code writes, as written.
    pub paths: Vec<Written>,
    /// Each word that starts a path or stands alone (not a field or a
    /// method), with the line it is first on.
    pub words: BTreeMap<String, usize>,
}

/// One leaf of a `use` tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// As written: `["super", "queue", "Job"]`; for a glob, the module it empties.
    pub path: Vec<String>,
    /// The name it brings in (the alias, if any); `None` for a glob or `as _`.
    pub name: Option<String>,
    pub glob: bool,
    /// At the module's level, so it adds a name to the module (not in a body).
    pub item: bool,
    pub line: usize,
}

/// A path written in code (not in a `use`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: Vec<String>,
    pub line: usize,
}

/// One leaf of a use tree or path: its segments, its name, whether a glob.
type Leaf = (Vec<String>, Option<String>, bool);

/// Every module `code` defines, the file's own first; `module` is the path of
/// the file's module (`["sandbox", "egress"]` for `src/sandbox/egress.rs`).
pub fn scan(module: &[String], code: &str) -> Vec<Scanned> {
    let chars: Vec<char> = blank_literals(code).chars().collect();
    let mut lines = Vec::with_capacity(chars.len() + 1);
    let mut line = 1;
    for c in &chars {
        lines.push(line);
        line += usize::from(*c == '\n');
    }
    lines.push(line);
    let first = Scanned { module: module.to_vec(), ..Scanned::default() };
    let mut walk = Walk { chars, lines, depth: 0, frames: vec![(0, 0)], out: vec![first], test_next: false };
    walk.run();
    walk.out
}

/// The walk over one file's blanked text.
struct Walk {
    chars: Vec<char>,
    /// The line of each char.
    lines: Vec<usize>,
    depth: usize,
    /// Open modules, innermost last: (index in `out`, brace depth of its body).
    frames: Vec<(usize, usize)>,
    out: Vec<Scanned>,
    /// A `#[cfg(test)]` was just read: the next item is test code.
    test_next: bool,
}

impl Walk {
    fn run(&mut self) {
        let mut i = 0;
        while i < self.chars.len() {
            i = match self.chars[i] {
                '{' => {
                    self.depth += 1;
                    i + 1
                }
                '}' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.frames.len() > 1 && self.frames.last().is_some_and(|&(_, body)| body > self.depth) {
                        self.frames.pop();
                    }
                    i + 1
                }
                '#' => self.attribute(i),
                // Not inside a word, nor a lifetime's name (`'static`).
                c if is_ident_start(c)
                    && (i == 0 || !is_ident_char(self.chars[i - 1]) && self.chars[i - 1] != '\'') =>
                {
                    self.word(i)
                }
                _ => i + 1,
            };
        }
    }

    /// `#[…]` or `#![…]`: notes a `cfg(test)`; returns where it ends.
    fn attribute(&mut self, at: usize) -> usize {
        let open = skip_ws(&self.chars, at + 1 + usize::from(self.chars.get(at + 1) == Some(&'!')));
        if self.chars.get(open) != Some(&'[') {
            return at + 1;
        }
        let end = matching(&self.chars, open, '[', ']');
        let text: String = self.chars[open + 1..end.saturating_sub(1)].iter().filter(|c| !c.is_whitespace()).collect();
        if self.chars.get(at + 1) != Some(&'!') && (text == "cfg(test)" || text.starts_with("cfg(all(test,")) {
            self.test_next = true;
        }
        end
    }

    /// A word at `at`: an item keyword, a `use`, a path, or a bare word.
    fn word(&mut self, at: usize) -> usize {
        let (word, end) = ident(&self.chars, at);
        if self.test_next {
            self.test_next = false;
            // `pub(crate) mod tests;` too.
            let (keyword, mut after) = (word.clone(), end);
            let (keyword, after) = if keyword == "pub" {
                after = skip_ws(&self.chars, after);
                if self.chars.get(after) == Some(&'(') {
                    after = matching(&self.chars, after, '(', ')');
                }
                ident(&self.chars, skip_ws(&self.chars, after))
            } else {
                (keyword, after)
            };
            if keyword == "mod" && self.at_module_level() {
                let (name, _) = ident(&self.chars, skip_ws(&self.chars, after));
                self.top().mods.insert(name, true);
            }
            return skip_item(&self.chars, at);
        }
        let line = self.lines[at];
        if word == "use" {
            let (leaves, after) = tree(&self.chars, end, Vec::new());
            let item = self.at_module_level();
            for (path, name, glob) in leaves {
                self.top().uses.push(Use { path, name, glob, item, line });
            }
            return after;
        }
        if self.at_module_level() {
            if let Some(after) = self.item(&word, at, end) {
                return after;
            }
        }
        if starts_sep(&self.chars, skip_ws(&self.chars, end)) {
            let (leaves, after) = tree(&self.chars, at, Vec::new());
            self.top().paths.extend(leaves.into_iter().map(|(path, _, _)| Written { path, line }));
            self.top().words.entry(word).or_insert(line);
            return after;
        }
        let before = self.chars[..at].iter().rev().find(|c| !c.is_whitespace());
        let next = skip_ws(&self.chars, end);
        let field = before == Some(&'.') || (self.chars.get(next) == Some(&':') && !starts_sep(&self.chars, next));
        if !field {
            self.top().words.entry(word).or_insert(line);
        }
        end
    }

    /// An item keyword at the module's level: records what it defines and
    /// returns where to go on, or `None` for any other word.
    fn item(&mut self, word: &str, at: usize, end: usize) -> Option<usize> {
        let name_at = skip_ws(&self.chars, end);
        let (name, after) = ident(&self.chars, name_at);
        match word {
            "mod" => {
                let brace = skip_ws(&self.chars, after);
                self.top().mods.insert(name.clone(), false);
                if self.chars.get(brace) == Some(&'{') {
                    let mut module = self.top().module.clone();
                    module.push(name);
                    self.out.push(Scanned { module, ..Scanned::default() });
                    self.depth += 1;
                    self.frames.push((self.out.len() - 1, self.depth));
                    return Some(brace + 1);
                }
                Some(after)
            }
            "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const" | "static" => {
                // `*const T`, `const fn`, `static mut X`, `fn(u8)` types.
                let pointer = at > 0 && self.chars[..at].iter().rev().find(|c| !c.is_whitespace()) == Some(&'*');
                let name = if name == "mut" { ident(&self.chars, skip_ws(&self.chars, after)).0 } else { name };
                let keyword = matches!(name.as_str(), "fn" | "unsafe" | "async" | "extern" | "");
                if !pointer && !keyword {
                    self.top().defs.insert(name);
                }
                Some(end)
            }
            "macro_rules" if self.chars.get(end) == Some(&'!') => {
                let (name, after) = ident(&self.chars, skip_ws(&self.chars, end + 1));
                self.top().defs.insert(name);
                Some(after)
            }
            _ => None,
        }
    }

    fn at_module_level(&self) -> bool {
        self.frames.last().is_some_and(|&(_, body)| body == self.depth)
    }

    fn top(&mut self) -> &mut Scanned {
        let index = self.frames.last().map_or(0, |&(index, _)| index);
        &mut self.out[index]
    }
}

/// Just past the item (or field, or statement) starting at `at`: its `;` or
/// `,`, its `{ … }` block, or before the `}` that closes what holds it.
fn skip_item(chars: &[char], at: usize) -> usize {
    let mut nesting = 0usize;
    let mut i = at;
    while i < chars.len() {
        match chars[i] {
            '(' | '[' => nesting += 1,
            ')' | ']' => nesting = nesting.saturating_sub(1),
            ';' | ',' if nesting == 0 => return i + 1,
            '{' if nesting == 0 => return matching(chars, i, '{', '}'),
            '}' if nesting == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Just past the `close` that matches the `open` at `at`.
fn matching(chars: &[char], at: usize, open: char, close: char) -> usize {
    let mut depth = 0usize;
    for (k, &c) in chars.iter().enumerate().skip(at) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    chars.len()
}

/// The leaves of the use tree (or plain path) starting at `start`, each
/// prefixed with `prefix`, and where it ends. `a::{b, c::{d, self}, e as f, *}`
/// gives `a::b` (b), `a::c::d` (d), `a::c` (c), `a::e` (f), `a` (glob).
pub fn tree(chars: &[char], start: usize, prefix: Vec<String>) -> (Vec<Leaf>, usize) {
    let i = skip_ws(chars, start);
    if chars.get(i) == Some(&'{') {
        let mut out = Vec::new();
        let mut i = i + 1;
        loop {
            i = skip_ws(chars, i);
            match chars.get(i) {
                None => return (out, i),
                Some('}') => return (out, i + 1),
                Some(',') => i += 1,
                Some(_) => {
                    let (leaves, after) = tree(chars, i, prefix.clone());
                    out.extend(leaves);
                    i = after.max(i + 1);
                }
            }
        }
    }
    if chars.get(i) == Some(&'*') {
        return (vec![(prefix, None, true)], i + 1);
    }
    let (word, end) = ident(chars, i);
    if word.is_empty() {
        return (vec![(prefix, None, false)], i);
    }
    let mut path = prefix;
    if word != "self" || path.is_empty() {
        path.push(word);
    }
    let sep = skip_ws(chars, end);
    if starts_sep(chars, sep) {
        let next = skip_ws(chars, sep + 2);
        if chars.get(next).is_some_and(|&c| c == '{' || c == '*' || is_ident_start(c)) {
            return tree(chars, next, path);
        }
    }
    let (after_word, after) = ident(chars, skip_ws(chars, end));
    if after_word == "as" {
        let (alias, alias_end) = ident(chars, skip_ws(chars, after));
        let name = (alias != "_").then_some(alias);
        return (vec![(path, name, false)], alias_end);
    }
    let name = path.last().cloned();
    (vec![(path, name, false)], end)
}

/// `code` with every comment, string and character literal replaced by spaces
/// (newlines kept, so line numbers still hold).
pub fn blank_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out: Vec<char> = chars.clone();
    for (start, end) in literal_spans(&chars) {
        for c in &mut out[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    out.into_iter().collect()
}

/// Where each comment, string and character literal of `chars` starts and
/// ends (char indices, end exclusive), in order. A span's first char tells
/// which: `/` a comment, `'` or `b'` a character, anything else a string.
pub fn literal_spans(chars: &[char]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            chars[i..].iter().position(|&c| c == '\n').map_or(chars.len(), |n| i + n)
        } else if c == '/' && next == Some('*') {
            block_comment_end(chars, i)
        } else if c == '"' {
            string_end(chars, i + 1)
        } else if c == '\'' {
            match char_literal_end(chars, i) {
                Some(end) => end,
                None => {
                    i += 1;
                    continue;
                }
            }
        } else if is_ident_start(c) && (i == 0 || !is_ident_char(chars[i - 1])) {
            let (word, end) = ident(chars, i);
            let hashes = chars[end..].iter().take_while(|&&c| c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && chars.get(end + hashes) == Some(&'"') {
                raw_string_end(chars, end + hashes + 1, hashes)
            } else if matches!(word.as_str(), "b" | "c") && chars.get(end) == Some(&'"') {
                string_end(chars, end + 1)
            } else if word == "b" && chars.get(end) == Some(&'\'') {
                char_literal_end(chars, end).unwrap_or(end)
            } else {
                i = end;
                continue;
            }
        } else {
            i += 1;
            continue;
        };
        spans.push((i, end));
        i = end;
    }
    spans
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// Just past the closing quote of a string whose body starts at `i`.
fn string_end(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

fn raw_string_end(chars: &[char], mut i: usize, hashes: usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
            return i + 1 + hashes;
        }
        i += 1;
    }
    chars.len()
}

/// Just past a character literal opening at `start`, or `None` for a lifetime.
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    match chars.get(start + 1) {
        Some('\\') => {
            let close = chars[start + 3..].iter().position(|&c| c == '\'')?;
            Some(start + 3 + close + 1)
        }
        Some(_) if chars.get(start + 2) == Some(&'\'') => Some(start + 3),
        _ => None,
    }
}

fn ident(chars: &[char], start: usize) -> (String, usize) {
    // `$crate` is `crate` to a reader.
    let start = if chars.get(start) == Some(&'$') { start + 1 } else { start };
    if !chars.get(start).is_some_and(|&c| is_ident_start(c)) {
        return (String::new(), start);
    }
    let len = chars[start..].iter().take_while(|&&c| is_ident_char(c)).count();
    (chars[start..start + len].iter().collect(), start + len)
}

fn starts_sep(chars: &[char], i: usize) -> bool {
    chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':')
}

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}
