//! No dependency cycle at any level of pincer's module tree, and no child
//! that reaches back up into its parent's own file in the folders whose door
//! must stay a door.
//!
//! A cycle lets any module in it reach any other, so none of them can be read,
//! tested or changed alone. This test reads every file under `src/`, finds
//! each path its non-test code writes (`use` trees, `crate::…`, `super::…`,
//! `self::…`, paths through a child module or a `use`d name, and the words a
//! glob brings in), follows `use`/`pub use` chains to the module that defines
//! the item, and checks the children of every module (with `self`, the
//! module's own file, as one more node). It fails naming the cycle and the
//! lines that make it. Pure std, well under a second.

#[path = "module_cycles/graph.rs"]
mod graph;
#[path = "module_cycles/scan.rs"]
mod scan;
#[path = "module_cycles/tree.rs"]
mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use graph::{cycles, describe, floors, level_graphs, level_name, place, Evidence, Graph, SELF};
use tree::{Source, Tree};

/// Edges allowed to close a cycle for now, each with why: `(level, from, to, reason)`,
/// `level` as [`level_name`] writes it and `self` for the level module's own file.
/// Empty is the goal; an entry that no longer exists fails the test, so the
/// list cannot outlive its reason.
const KNOWN_CYCLE_EDGES: &[(&str, &str, &str, &str)] = &[
    ("channel", "group_commands", SELF, DOOR_AND_BASEMENT),
    ("channel", "progress", SELF, DOOR_AND_BASEMENT),
    ("domain", "media", SELF, DOOR_AND_BASEMENT),
    ("sandbox", "docker", SELF, DOOR_AND_BASEMENT),
    ("sandbox", "egress", SELF, DOOR_AND_BASEMENT),
    ("sandbox", "launch", SELF, DOOR_AND_BASEMENT),
    ("sandbox::launch", "prepare", SELF, DOOR_AND_BASEMENT),
    ("session", "actor", SELF, DOOR_AND_BASEMENT),
    ("session", "intake", SELF, DOOR_AND_BASEMENT),
    ("session", "supervisor", SELF, DOOR_AND_BASEMENT),
];

const DOOR_AND_BASEMENT: &str = "the door also defines what its children use; outside issue 35's three folders";

/// The folders whose children must not name an item of the folder's own file
/// (`mod.rs` or `x.rs` beside `x/`): there the door is only a door.
const DOOR_ONLY: &[&str] = &["store", "channel::telegram", "config"];

/// Children allowed to reach into their parent's own file for now:
/// `(level, child, reason)`. Same rules as [`KNOWN_CYCLE_EDGES`].
const KNOWN_PARENT_IMPORTS: &[(&str, &str, &str)] = &[];

#[test]
fn no_module_cycle_at_any_level() {
    let levels = level_graphs(&Tree::new(&read_src()));
    assert!(levels.len() > 20, "the module tree was read ({} levels)", levels.len());
    let failures = cycle_failures(&levels, KNOWN_CYCLE_EDGES);
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

#[test]
fn no_child_names_an_item_of_its_door() {
    let levels = level_graphs(&Tree::new(&read_src()));
    let failures = parent_failures(&levels, DOOR_ONLY, KNOWN_PARENT_IMPORTS);
    assert!(failures.is_empty(), "\n{}\n", failures.join("\n"));
}

/// Each cycle at each level once the `known` edges are taken out, and each
/// known edge that does not exist.
fn cycle_failures(levels: &BTreeMap<Vec<String>, Graph>, known: &[(&str, &str, &str, &str)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (level, graph) in levels {
        let name = level_name(level);
        let mut graph = graph.clone();
        for (_, from, to, reason) in known.iter().filter(|k| k.0 == name) {
            if graph.get_mut(*from).and_then(|edges| edges.remove(*to)).is_none() {
                failures.push(format!("{name}: the known edge {from} -> {to} ({reason}) is gone: drop it"));
            }
        }
        for cycle in cycles(&graph) {
            failures.push(format!("{name}: a module cycle {}", describe(&graph, &cycle)));
        }
    }
    let levels: Vec<String> = levels.keys().map(|l| level_name(l)).collect();
    for (level, from, to, _) in known.iter().filter(|k| !levels.iter().any(|l| l == k.0)) {
        failures.push(format!("{level}: the known edge {from} -> {to} is at no level: drop it"));
    }
    failures
}

/// Each child of a `door_only` level that names an item of the level's own
/// file, but for the `known` ones, and each known one that does not.
fn parent_failures(
    levels: &BTreeMap<Vec<String>, Graph>,
    door_only: &[&str],
    known: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut failures = Vec::new();
    let checked = || levels.iter().filter(|(l, _)| door_only.contains(&level_name(l).as_str()));
    for (level, graph) in checked() {
        let name = level_name(level);
        for (child, edges) in graph.iter().filter(|(child, _)| *child != SELF) {
            let allowed = known.iter().any(|k| k.0 == name && k.1 == child);
            if let Some(places) = edges.get(SELF).filter(|_| !allowed) {
                let lines: Vec<String> = places.iter().map(|p| format!("\n    {}", place(p))).collect();
                failures.push(format!("{name}: {child} names its parent's own items:{}", lines.concat()));
            }
        }
    }
    for (level, child, reason) in known {
        let graph = checked().find(|(l, _)| level_name(l) == *level).map(|(_, g)| g);
        match graph.and_then(|g| g.get(*child)).filter(|_| *child != SELF) {
            None => failures
                .push(format!("{level}: the known import {child} -> self is of no child of a checked folder: drop it")),
            Some(edges) if !edges.contains_key(SELF) => {
                failures.push(format!("{level}: the known import {child} -> self ({reason}) is gone: drop it"));
            }
            Some(_) => {}
        }
    }
    failures
}

/// The layering the cycles were broken by: `domain` needs nothing, `cluster`
/// only `domain`, `config` only those two, and the scheduler reaches the
/// sessions only through its `Submit` port. Prints the top-level graph for ARCHITECTURE.md's code map,
/// its floors, and the arrows back up into a parent's own file per level
/// (`cargo test --test module_cycles -- --nocapture`).
#[test]
fn domain_and_config_are_leaves_and_the_scheduler_names_no_session() {
    let levels = level_graphs(&Tree::new(&read_src()));
    let graph = &levels[&Vec::new()];
    for (from, edges) in graph.iter().filter(|(from, edges)| *from != SELF || !edges.is_empty()) {
        println!("{from} -> {}", edges.keys().cloned().collect::<Vec<_>>().join(" "));
    }
    println!("floors: {}", floors(graph).map_or("none (a cycle)".to_owned(), |f| f.to_string()));
    println!("levels checked: {}", levels.len());
    for (level, graph) in &levels {
        let up: Vec<&Vec<Evidence>> = graph.values().filter_map(|edges| edges.get(SELF)).collect();
        let lines: BTreeSet<(&str, usize)> =
            up.iter().flat_map(|p| p.iter()).map(|p| (p.file.as_str(), p.line)).collect();
        if !up.is_empty() {
            println!("arrows back up in {}: {} lines in {} children", level_name(level), lines.len(), up.len());
        }
    }
    let needs = |module: &str| graph[module].keys().cloned().collect::<Vec<_>>();
    assert_eq!(needs("domain"), Vec::<String>::new());
    // `cluster` is vocabulary too (pure, on `domain` only): `[cluster]` checks its keys by its rules.
    assert_eq!(needs("cluster"), ["domain"]);
    assert_eq!(needs("config"), ["cluster", "domain"]);
    for above in ["router", "session", "tools", "channel", "app"] {
        assert!(!graph["scheduler"].contains_key(above), "scheduler -> {above}: {:?}", graph["scheduler"][above]);
    }
}

fn read_src() -> Vec<Source> {
    let sources = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(sources.len() > 50, "src/ was read ({} files)", sources.len());
    sources
}

/// Every `.rs` file under `root` with the module path it defines, in file
/// order. `main.rs` is left out: it is the binary's crate, and names the
/// library as `pincer::`.
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
    files.sort_by(|a, b| a.file.cmp(&b.file));
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

#[path = "module_cycles/tests.rs"]
mod tests;
