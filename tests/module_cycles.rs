//! No dependency cycle between pincer's top-level modules, nor between the
//! parts of each chat adapter (`channel::telegram`, `channel::whatsapp`).
//!
//! A cycle lets any module in it reach any other, so none of them can be read,
//! tested or changed alone. This test reads every file under `src/`, collects
//! the `crate::…`, `super::…` and `self::…` paths it writes, and fails naming
//! the cycle and the lines that make it. Pure std, well under a second.

#[path = "module_cycles/graph.rs"]
mod graph;
#[path = "module_cycles/scan.rs"]
mod scan;

use std::path::{Path, PathBuf};

use graph::{children_graph, cycles, describe, Graph, Source};

/// Modules whose children must not depend on each other in a cycle, besides
/// the crate's top-level modules.
const CHECKED_PARENTS: &[&[&str]] = &[&[], &["channel", "telegram"], &["channel", "whatsapp"]];

/// Edges allowed to close a cycle for now, each with why: `(parent, from, to, reason)`.
/// Empty is the goal; an entry that no longer exists fails the test, so the
/// list cannot outlive its reason.
const KNOWN_CYCLE_EDGES: &[(&str, &str, &str, &str)] = &[];

#[test]
fn no_module_cycle() {
    let sources = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(sources.len() > 50, "src/ was read ({} files)", sources.len());
    let failures = failures(&sources, CHECKED_PARENTS, KNOWN_CYCLE_EDGES);
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// Each cycle among the children of each of `parents`, once the `known`
/// edges are taken out, and each known edge that does not exist.
fn failures(sources: &[Source], parents: &[&[&str]], known: &[(&str, &str, &str, &str)]) -> Vec<String> {
    let mut failures = Vec::new();
    for parent in parents {
        let name = if parent.is_empty() { "crate".to_owned() } else { parent.join("::") };
        let mut graph = children_graph(sources, parent);
        for (known_parent, from, to, reason) in known.iter().filter(|k| k.0 == name) {
            if graph.get_mut(*from).and_then(|edges| edges.remove(*to)).is_none() {
                failures.push(format!("{known_parent}: the known edge {from} -> {to} ({reason}) is gone: drop it"));
            }
        }
        for cycle in cycles(&graph) {
            failures.push(format!("{name}: a module cycle {}", describe(&graph, &cycle)));
        }
    }
    failures
}

/// The layering the cycles were broken by: `domain` needs nothing, `config`
/// only `domain`, and the scheduler reaches the sessions only through its
/// `Submit` port. Prints the graph for ARCHITECTURE.md's code map
/// (`cargo test --test module_cycles -- --nocapture`).
#[test]
fn domain_and_config_are_leaves_and_the_scheduler_names_no_session() {
    let sources = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let graph = children_graph(&sources, &[]);
    for (from, edges) in &graph {
        println!("{from} -> {}", edges.keys().cloned().collect::<Vec<_>>().join(" "));
    }
    let needs = |module: &str| graph[module].keys().cloned().collect::<Vec<_>>();
    assert_eq!(needs("domain"), Vec::<String>::new());
    assert_eq!(needs("config"), ["domain"]);
    for above in ["router", "session", "tools", "channel", "app"] {
        assert!(!graph["scheduler"].contains_key(above), "scheduler -> {above}: {:?}", graph["scheduler"][above]);
    }
}

/// Every `.rs` file under `root` with the module path it defines. `main.rs`
/// is left out: it is the binary's crate, and names the library as `pincer::`.
fn read_tree(root: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut todo: Vec<PathBuf> = vec![root.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("src/ is readable").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                if relative == "main.rs" {
                    continue;
                }
                let code = std::fs::read_to_string(&path).expect("a source file is UTF-8");
                files.push(Source { module: module_of(&relative), file: format!("src/{relative}"), code });
            }
        }
    }
    files
}

/// `sandbox/egress.rs` and `sandbox/egress/mod.rs` define `sandbox::egress`; `lib.rs` the root.
fn module_of(relative: &str) -> Vec<String> {
    let mut module: Vec<String> = relative.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

fn source(module: &str, code: &str) -> Source {
    Source {
        module: module.split("::").map(str::to_owned).collect(),
        file: format!("{module}.rs"),
        code: code.to_owned(),
    }
}

fn edges(graph: &Graph) -> Vec<String> {
    graph.iter().flat_map(|(from, to)| to.keys().map(move |to| format!("{from}->{to}"))).collect()
}

#[test]
fn a_cycle_is_found_and_named_with_its_lines() {
    let sources = [
        source("a", "use crate::b::Thing;\n"),
        source("b", "//! b\n\npub fn f() { crate::c::g() }\n"),
        source("c", "use crate::{d, a::{self, X as Y}};\n"),
        source("d", "pub struct D;\n"),
    ];
    let graph = children_graph(&sources, &[]);
    assert_eq!(edges(&graph), ["a->b", "b->c", "c->a", "c->d"]);
    let found = cycles(&graph);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, ["a", "b", "c", "a"]);
    assert_eq!(found[0].members, ["a", "b", "c"]);
    let text = describe(&graph, &found[0]);
    assert!(text.contains("a -> b -> c -> a") && text.contains("b -> c: b.rs:3"), "{text}");
}

#[test]
fn a_graph_without_cycle_passes() {
    let sources = [source("a", "use crate::b::X;"), source("b", "use crate::c::Y;"), source("c", "")];
    assert!(cycles(&children_graph(&sources, &[])).is_empty());
}

#[test]
fn siblings_are_seen_through_super_and_full_paths() {
    let sources = [
        source("channel::telegram", "mod inbound;\nmod outbound;\npub use inbound::Update;"),
        source("channel::telegram::inbound", "use super::outbound::send;"),
        source("channel::telegram::outbound", "fn f() { crate::channel::telegram::inbound::g(); super::Update; }"),
        source("channel::whatsapp", "use super::telegram::x;"),
    ];
    let graph = children_graph(&sources, &["channel", "telegram"]);
    assert_eq!(edges(&graph), ["inbound->outbound", "outbound->inbound"]);
    assert_eq!(cycles(&graph).len(), 1);
}

#[test]
fn comments_strings_and_test_modules_are_read_right() {
    let code = r##"
        // use crate::b;
        /* crate::b /* nested */ crate::b */
        const S: &str = "crate::b \" crate::b";
        const R: &str = r#"crate::b "# ;
        const C: char = '"'; fn f<'a>(x: &'a str) { crate::c::f(); }
        #[cfg(test)]
        mod tests {
            use super::*;
            use super::super::d;
        }
    "##;
    let module: Vec<String> = vec!["a".into(), "x".into()];
    let found: Vec<(String, usize)> =
        scan::references(&module, code).into_iter().map(|r| (r.path.join("::"), r.line)).collect();
    assert_eq!(found, [("c::f".to_owned(), 6), ("a::x".to_owned(), 9), ("a::d".to_owned(), 10)]);
}

#[test]
fn a_known_edge_lets_its_cycle_pass_and_fails_once_gone() {
    let sources = [source("a", "use crate::b::X;"), source("b", "use crate::a::Y;"), source("c", "")];
    let top: &[&[&str]] = &[&[]];
    assert_eq!(failures(&sources, top, &[]).len(), 1);
    assert!(failures(&sources, top, &[("crate", "b", "a", "being rewritten")]).is_empty());
    let stale = failures(&sources, top, &[("crate", "a", "b", "x"), ("crate", "c", "a", "gone")]);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].contains("c -> a (gone) is gone"), "{stale:?}");
}

#[test]
fn every_module_caught_in_a_cycle_is_named() {
    let sources =
        [source("a", "use crate::b::X;"), source("b", "use crate::{a::Y, c::Z};"), source("c", "use crate::b::W;")];
    let graph = children_graph(&sources, &[]);
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "one component");
    let text = describe(&graph, &found[0]);
    assert!(text.starts_with("a -> b -> a (one of the cycles among a, b, c)"), "{text}");
}
