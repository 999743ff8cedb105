//! Which modules a Rust source file refers to, read from its text alone.
//!
//! Not a Rust parser: comments, strings and character literals are blanked
//! out first, then every path that starts with `crate::`, `$crate::`, `super::`
//! or `self::` is read (use trees with `{…}` groups included) and resolved
//! against the module the text sits in, tracking inline `mod name { … }`
//! blocks so that a test module's `use super::*` means its own file.
//!
//! What it cannot see: a path that reaches another module only through a
//! re-export (`super::Thing` where the parent did `pub use sibling::Thing`)
//! counts as a use of the parent. That is the parent's own edge, so a cycle
//! hidden that way still needs the parent to name the sibling.

/// A path from the crate root, with the 1-based line it was written on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub path: Vec<String>,
    pub line: usize,
}

/// Every module path `code` names, resolved from `module` (the path of the
/// module the file defines: `["sandbox", "egress"]` for `src/sandbox/egress.rs`).
pub fn references(module: &[String], code: &str) -> Vec<Reference> {
    let chars: Vec<char> = blank_literals(code).chars().collect();
    let mut out = Vec::new();
    // Inline `mod x {` blocks: each with the brace depth that closes it.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == '}' {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            i += 1;
            continue;
        }
        if !is_ident_start(c) || (i > 0 && (is_ident_char(chars[i - 1]) || chars[i - 1] == '\'')) {
            i += 1;
            continue;
        }
        let (word, end) = ident(&chars, i);
        if word == "mod" {
            let (name, after) = ident(&chars, skip_ws(&chars, end));
            let brace = skip_ws(&chars, after);
            if !name.is_empty() && chars.get(brace) == Some(&'{') {
                inline.push((name, depth));
                depth += 1;
                i = brace + 1;
                continue;
            }
        }
        if matches!(word.as_str(), "crate" | "super" | "self") && starts_sep(&chars, skip_ws(&chars, end)) {
            let line = 1 + chars[..i].iter().filter(|&&c| c == '\n').count();
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline.iter().map(|(name, _)| name.clone()));
            let (trees, after) = tree(&chars, i, Vec::new());
            for relative in trees {
                if let Some(path) = resolve(&here, &relative) {
                    out.push(Reference { path, line });
                }
            }
            i = after;
            continue;
        }
        i = end;
    }
    out
}

/// `relative` (its first segment `crate`, `self` or `super`) from the crate root.
fn resolve(here: &[String], relative: &[String]) -> Option<Vec<String>> {
    let mut segments = relative.iter().peekable();
    let mut base: Vec<String> = match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        _ => here.to_vec(),
    };
    while let Some(segment) = segments.peek() {
        match segment.as_str() {
            "super" => {
                base.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    base.extend(segments.cloned());
    Some(base)
}

/// The paths of the use tree (or plain path) starting at `start`, each prefixed
/// with `prefix`, and where it ends. `a::{b, c::{d, self}, e as f}` gives
/// `a::b`, `a::c::d`, `a::c`, `a::e`; a glob gives its module.
fn tree(chars: &[char], start: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
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
                    let (paths, after) = tree(chars, i, prefix.clone());
                    out.extend(paths);
                    // `x as y`: the alias names nothing new.
                    let (word, end) = ident(chars, skip_ws(chars, after));
                    i = if word == "as" { ident(chars, skip_ws(chars, end)).1 } else { after.max(i + 1) };
                }
            }
        }
    }
    if chars.get(i) == Some(&'*') {
        return (vec![prefix], i + 1);
    }
    let (word, end) = ident(chars, i);
    if word.is_empty() {
        return (vec![prefix], i);
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
    (vec![path], end)
}

/// `code` with every comment, string and character literal replaced by spaces
/// (newlines kept, so line numbers still hold).
pub fn blank_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let blank = |out: &mut String, span: &[char]| {
        out.extend(span.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            chars[i..].iter().position(|&c| c == '\n').map_or(chars.len(), |n| i + n)
        } else if c == '/' && next == Some('*') {
            block_comment_end(&chars, i)
        } else if c == '"' {
            string_end(&chars, i + 1)
        } else if c == '\'' {
            match char_literal_end(&chars, i) {
                Some(end) => end,
                None => {
                    out.push(c);
                    i += 1;
                    continue;
                }
            }
        } else if is_ident_start(c) && (i == 0 || !is_ident_char(chars[i - 1])) {
            let (word, end) = ident(&chars, i);
            let hashes = chars[end..].iter().take_while(|&&c| c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && chars.get(end + hashes) == Some(&'"') {
                raw_string_end(&chars, end + hashes + 1, hashes)
            } else if matches!(word.as_str(), "b" | "c") && chars.get(end) == Some(&'"') {
                string_end(&chars, end + 1)
            } else if word == "b" && chars.get(end) == Some(&'\'') {
                char_literal_end(&chars, end).unwrap_or(end)
            } else {
                out.extend(&chars[i..end]);
                i = end;
                continue;
            }
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        blank(&mut out, &chars[i..end]);
        i = end;
    }
    out
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
