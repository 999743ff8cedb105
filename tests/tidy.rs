//! The house rules, kept: what the code reached stays reached (issue 46,
//! like rust-analyzer's `tidy.rs`). Reads files as text (the same blanking of
//! comments and literals as `module_cycles`), builds nothing, well under a
//! second. Each rule fails naming every offender, why the rule exists and
//! what to do instead. Fix what it finds; there is no list of exceptions.

#[path = "module_cycles/scan.rs"]
#[allow(dead_code)]
mod scan;

use std::path::{Path, PathBuf};

use scan::{blank_literals, literal_spans};

/// One file read: its path from the repository root, its text, and its text
/// with comments and literals blanked.
struct File {
    path: String,
    code: String,
    blanked: String,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir` (relative to the repository root), sorted.
fn read(dir: &str) -> Vec<File> {
    let mut files = Vec::new();
    let mut todo: Vec<PathBuf> = vec![root().join(dir)];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder is readable") {
            let path = entry.expect("a source folder is readable").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let code = std::fs::read_to_string(&path).expect("a source file is UTF-8");
                let relative = path.strip_prefix(root()).unwrap().to_string_lossy().replace('\\', "/");
                files.push(File { path: relative, blanked: blank_literals(&code), code });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    assert!(files.len() > 5, "{dir} was read ({} files)", files.len());
    files
}

/// The 1-based line of char index `at`.
fn line_of(chars: &[char], at: usize) -> usize {
    1 + chars[..at].iter().filter(|&&c| c == '\n').count()
}

/// Just past the brace matching the `{` at `open`, in blanked text.
fn matching_brace(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

/// The next `{` or `;` from `at`; `None` if a `;` (or nothing) comes first.
fn body_from(chars: &[char], at: usize) -> Option<usize> {
    let stop = chars[at..].iter().position(|&c| c == '{' || c == ';')? + at;
    (chars[stop] == '{').then_some(stop)
}

/// Whether a word starts at `i` (not inside a longer identifier).
fn word_at(chars: &[char], i: usize, word: &str) -> bool {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    let w: Vec<char> = word.chars().collect();
    chars[i..].starts_with(&w) && (i == 0 || !ident(&chars[i - 1])) && !chars.get(i + w.len()).is_some_and(ident)
}

/// The char ranges of a blanked file that are test code: whatever item
/// follows a `#[cfg(test)]`. A whole file is test code when its name says so
/// (`tests.rs`, or under a `tests/` folder of `src/`).
fn test_ranges(file: &File, chars: &[char]) -> Vec<(usize, usize)> {
    if file.path.ends_with("/tests.rs") || file.path.contains("/tests/") {
        return vec![(0, chars.len())];
    }
    let mark: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut ranges = Vec::new();
    for i in 0..chars.len() {
        if chars[i..].starts_with(&mark) {
            let end = body_from(chars, i).map_or(i, |open| matching_brace(chars, open));
            ranges.push((i, end));
        }
    }
    ranges
}

/// Each function of a file outside test code: its name, first line and length in lines.
fn functions(file: &File) -> Vec<(String, usize, usize)> {
    let chars: Vec<char> = file.blanked.chars().collect();
    let tests = test_ranges(file, &chars);
    let mut found = Vec::new();
    for i in 0..chars.len() {
        if !word_at(&chars, i, "fn") || tests.iter().any(|(s, e)| (*s..*e).contains(&i)) {
            continue;
        }
        let name: String = chars[i + 2..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        // `fn(…)` as a type has no name and no body of its own.
        if name.is_empty() {
            continue;
        }
        if let Some(open) = body_from(&chars, i) {
            let (first, last) = (line_of(&chars, i), line_of(&chars, matching_brace(&chars, open) - 1));
            found.push((name, first, last - first + 1));
        }
    }
    found
}

/// The first line of each place a file's code (comments and literals aside) names `word`.
fn names(file: &File, word: &str) -> Option<usize> {
    let chars: Vec<char> = file.blanked.chars().collect();
    (0..chars.len()).find(|&i| word_at(&chars, i, word)).map(|i| line_of(&chars, i))
}

/// The line of the first string literal of a file that reads as SQL: an
/// upper-case statement's keywords (`SELECT … FROM`, `INSERT INTO`,
/// `UPDATE … SET`, `DELETE FROM`, `CREATE TABLE`, `VACUUM`, `LISTEN`).
fn sql_literal(file: &File) -> Option<usize> {
    let chars: Vec<char> = file.code.chars().collect();
    for (start, end) in literal_spans(&chars) {
        let text: String = chars[start..end].iter().collect();
        if text.starts_with('/') || text.starts_with('\'') || text.starts_with("b'") {
            continue;
        }
        let words: Vec<&str> = text.split(|c: char| !c.is_alphanumeric() && c != '_').collect();
        let has = |w: &str| words.contains(&w);
        let pair = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
        if (has("SELECT") && has("FROM"))
            || pair("INSERT", "INTO")
            || pair("DELETE", "FROM")
            || (has("UPDATE") && has("SET"))
            || pair("CREATE", "TABLE")
            || has("VACUUM")
            || has("LISTEN")
        {
            return Some(line_of(&chars, start));
        }
    }
    None
}

fn under(path: &str, folders: &[&str]) -> bool {
    folders.iter().any(|f| path.starts_with(f))
}

fn fail(failures: Vec<String>, why: &str) {
    assert!(failures.is_empty(), "\n{}\n\n{why}\n", failures.join("\n"));
}

#[test]
fn no_production_function_is_over_80_lines() {
    let mut failures = Vec::new();
    for file in read("src") {
        for (name, line, len) in functions(&file).into_iter().filter(|f| f.2 > 80) {
            failures.push(format!("{}:{line}: fn {name} is {len} lines", file.path));
        }
    }
    fail(
        failures,
        "A function over 80 lines does several things that cannot be named, read or tested apart. \
         Split it into steps with names (aim for under 50 lines); decisions go into small pure types.",
    );
}

#[test]
fn no_test_support_file_is_over_800_lines() {
    let failures: Vec<String> = read("tests/support")
        .iter()
        .map(|f| (f, f.code.lines().count()))
        .filter(|(_, lines)| *lines > 800)
        .map(|(f, lines)| format!("{}: {lines} lines", f.path))
        .collect();
    fail(
        failures,
        "The test harness is read by everyone who writes a test; a file over 800 lines holds several \
         fakes or helpers. Split it by what each part stands in for (one fake, one helper per file).",
    );
}

#[test]
fn sql_and_sqlx_only_under_store() {
    let mut failures = Vec::new();
    for file in read("src").iter().filter(|f| !f.path.starts_with("src/store/")) {
        if let Some(line) = names(file, "sqlx") {
            failures.push(format!("{}:{line}: names sqlx", file.path));
        }
        if let Some(line) = sql_literal(file) {
            failures.push(format!("{}:{line}: holds SQL text", file.path));
        }
    }
    fail(
        failures,
        "The store is the only module that speaks SQL, so the schema, the two databases' dialects and \
         the fencing of writes are seen in one place. Give `store` a method (or, for a test, a helper in \
         `store::testing`) and call that; a test inspects or breaks the store only through it.",
    );
}

/// The chat libraries and the folder each may be named in.
const CHAT_LIBRARIES: [(&str, &str); 5] = [
    ("teloxide", "src/channel/telegram/"),
    ("whatsapp_rust", "src/channel/whatsapp/"),
    ("whatsapp_rust_sqlite_storage", "src/channel/whatsapp/"),
    ("wacore", "src/channel/whatsapp/"),
    ("waproto", "src/channel/whatsapp/"),
];

/// Where anyhow may be named: the glue.
const ANYHOW_HOMES: [&str; 5] = ["src/app/", "src/app.rs", "src/cli/", "src/cli.rs", "src/main.rs"];

/// The first line naming anyhow other than through a chat library's own
/// re-export (`whatsapp_rust::anyhow`, which that library's traits ask for:
/// the chat-library rule keeps it in its adapter).
fn names_anyhow(file: &File) -> Option<usize> {
    let mut text = file.blanked.clone();
    for (library, _) in CHAT_LIBRARIES {
        let reexport = format!("{library}::anyhow");
        text = text.replace(&reexport, &" ".repeat(reexport.len()));
    }
    names(&File { path: file.path.clone(), code: String::new(), blanked: text }, "anyhow")
}

#[test]
fn anyhow_only_in_app_and_cli() {
    let failures: Vec<String> = read("src")
        .iter()
        .filter(|f| !under(&f.path, &ANYHOW_HOMES))
        .filter_map(|f| names_anyhow(f).map(|line| format!("{}:{line}: names anyhow", f.path)))
        .collect();
    fail(
        failures,
        "Below `app` and `cli`, an error is part of a module's interface: callers match on it and the \
         user reads it. Return a `thiserror` enum whose messages say what happened and what to do; \
         `app` and `cli` add their context with anyhow. (A chat library's trait that asks for anyhow \
         is met through the library's own re-export, e.g. `whatsapp_rust::anyhow`, in its adapter.)",
    );
}

#[test]
fn chat_libraries_only_in_their_adapters() {
    let mut failures = Vec::new();
    for file in read("src") {
        for (word, home) in CHAT_LIBRARIES.iter().filter(|(_, home)| !file.path.starts_with(home)) {
            if let Some(line) = names(&file, word) {
                failures.push(format!("{}:{line}: names {word} (its home is {home})", file.path));
            }
        }
    }
    fail(
        failures,
        "A chat library's types stop at its adapter, so a new version or another platform changes one \
         folder. Give the adapter a function in pincer's own types and call that.",
    );
}

#[test]
fn architecture_is_under_400_lines() {
    let lines = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md").lines().count();
    assert!(
        lines < 400,
        "ARCHITECTURE.md is {lines} lines. It is the map a newcomer reads in one sitting: keep one line per \
         module and the invariants; move detail to the module's `//!` or to docs/."
    );
}

/// The house's figures, printed (`cargo test --test tidy house_figures -- --nocapture`):
/// functions over 50 and 80 lines, the largest files, files naming anyhow. Asserts nothing.
#[test]
fn house_figures() {
    let src = read("src");
    let lengths: Vec<usize> = src.iter().flat_map(|f| functions(f).into_iter().map(|(_, _, len)| len)).collect();
    let over = |n: usize| lengths.iter().filter(|&&len| len > n).count();
    println!("functions in src/: {}, over 50 lines: {}, over 80: {}", lengths.len(), over(50), over(80));
    for dir in ["src", "tests/support"] {
        let mut sizes: Vec<(usize, String)> =
            read(dir).iter().map(|f| (f.code.lines().count(), f.path.clone())).collect();
        sizes.sort_by(|a, b| b.cmp(a));
        let top: Vec<String> = sizes.iter().take(5).map(|(n, p)| format!("{p} {n}")).collect();
        println!("largest under {dir}/: {}", top.join(", "));
    }
    let anyhow = src.iter().filter(|f| names(f, "anyhow").is_some()).count();
    println!(
        "files naming anyhow: {anyhow} (of which outside app/, cli/, main.rs: {})",
        src.iter().filter(|f| names_anyhow(f).is_some() && !under(&f.path, &ANYHOW_HOMES)).count()
    );
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md").lines().count();
    println!("ARCHITECTURE.md: {arch} lines");
}

/// The readers above, on text whose answer is known.
mod readers {
    use super::*;

    fn file(path: &str, code: &str) -> File {
        File { path: path.to_owned(), code: code.to_owned(), blanked: blank_literals(code) }
    }

    #[test]
    fn functions_are_measured_outside_test_code_only() {
        let code =
            "fn a() {\n    let s = \"}\";\n}\n\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\ntrait T { fn c(); }\n";
        assert_eq!(functions(&file("src/x.rs", code)), [("a".to_owned(), 1, 3)]);
        assert!(functions(&file("src/x/tests.rs", code)).is_empty());
    }

    #[test]
    fn sql_is_found_in_strings_not_in_comments_or_prose() {
        let sql = file("src/x.rs", "const Q: &str = \"\\\nSELECT 1 FROM leases\";\n");
        assert_eq!(sql_literal(&sql), Some(1));
        let prose =
            file("src/x.rs", "/// `VACUUM INTO`, a SELECT FROM\nfn f() { g(\"select a group from the list\"); }\n");
        assert_eq!(sql_literal(&prose), None);
        assert_eq!(names(&file("src/x.rs", "// sqlx\nuse sqlx::Row;\n"), "sqlx"), Some(2));
        assert_eq!(names(&file("src/x.rs", "let my_sqlx = 1;"), "sqlx"), None);
    }

    #[test]
    fn anyhow_through_a_chat_library_is_the_library_s() {
        let hook = "fn on(&self) -> whatsapp_rust::anyhow::Result<()> {}\n";
        assert_eq!(names_anyhow(&file("src/channel/whatsapp/a.rs", hook)), None);
        let own = "use whatsapp_rust::Client;\nfn f() -> anyhow::Result<()> {}\n";
        assert_eq!(names_anyhow(&file("src/channel/whatsapp/a.rs", own)), Some(2));
    }
}
