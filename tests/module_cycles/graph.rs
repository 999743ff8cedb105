//! The dependency graph at every level of the module tree, and its cycles.
//! Pure; touches only `tree`.
//!
//! At the level of a module P, the nodes are P's children (each with all it
//! contains) and `self`, the items of P's own file. A resolved reference
//! from module M to module or item T is an edge at exactly one level: the
//! deepest module holding both, P. From M's child of P (or `self` if M is P)
//! to T's child of P (or `self` if T is an item of P's own file). So a child
//! naming an item of its parent's file is an edge `child -> self`, a door's
//! `pub use child::X` an edge `self -> child`, and a re-exported item counts
//! where it is defined, not where it is re-exported.

use std::collections::{BTreeMap, BTreeSet};

use crate::tree::{Target, Tree};

/// The node standing for a module's own file at its level.
pub const SELF: &str = "self";

/// Where one edge was first seen, to name it in a failure.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Evidence {
    pub file: String,
    pub line: usize,
    /// The item the line names (empty for a module).
    pub item: String,
}

/// `from -> to -> every place seen, first first` between the nodes of one level.
pub type Graph = BTreeMap<String, BTreeMap<String, Vec<Evidence>>>;

/// The graph at the level of every module that has children, by the
/// module's path (`[]`: the crate's top level).
pub fn level_graphs(tree: &Tree) -> BTreeMap<Vec<String>, Graph> {
    let mut levels: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for (module, _) in tree.modules() {
        let children = tree.children(module);
        if !children.is_empty() {
            let graph = levels.entry(module.clone()).or_default();
            graph.entry(SELF.to_owned()).or_default();
            for child in children {
                graph.entry(child).or_default();
            }
        }
    }
    for reference in tree.references() {
        let (to, item) = match &reference.to {
            Target::Module(path) => (path, String::new()),
            Target::Item(path, name) => (path, name.clone()),
        };
        let from = &reference.from;
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        let level = &from[..common];
        let node = |path: &Vec<String>| path.get(common).cloned().unwrap_or_else(|| SELF.to_owned());
        let (from_node, to_node) = (node(from), node(to));
        // A module naming an ancestor module (not an item of it) needs nothing of it.
        let names_an_ancestor = to.len() == common && item.is_empty();
        if from_node == to_node || names_an_ancestor {
            continue;
        }
        let Some(graph) = levels.get_mut(level) else { continue };
        let evidence = Evidence { file: reference.file.clone(), line: reference.line, item };
        graph.entry(from_node).or_default().entry(to_node).or_default().push(evidence);
    }
    for graph in levels.values_mut() {
        for places in graph.values_mut().flat_map(|edges| edges.values_mut()) {
            places.sort();
            places.dedup();
        }
    }
    levels
}

/// A level's name: `crate`, or the module's path.
pub fn level_name(level: &[String]) -> String {
    if level.is_empty() {
        "crate".to_owned()
    } else {
        level.join("::")
    }
}

/// A set of modules that all reach each other, and one cycle through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// `[a, b, …, a]`: a shortest cycle from the component's smallest node.
    pub path: Vec<String>,
    /// Every module of the component, sorted.
    pub members: Vec<String>,
}

/// One [`Cycle`] per strongly connected component of more than one node.
pub fn cycles(graph: &Graph) -> Vec<Cycle> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<&String> = BTreeSet::new();
    for start in graph.keys() {
        if seen.contains(start) {
            continue;
        }
        // The component of `start`: reachable from it and reaching it.
        let forward = reachable(graph, start);
        let component: BTreeSet<&String> =
            forward.iter().copied().filter(|n| reachable(graph, n).contains(start)).collect();
        seen.extend(component.iter().copied());
        if component.len() > 1 {
            let members = component.iter().map(|m| (*m).clone()).collect();
            out.push(Cycle { path: shortest_cycle(graph, start, &component), members });
        }
    }
    out
}

/// How many floors the graph stands on: the most nodes on one path that
/// only goes down (a graph with a cycle has no floors: `None`).
pub fn floors(graph: &Graph) -> Option<usize> {
    fn height<'g>(graph: &'g Graph, node: &'g String, memo: &mut BTreeMap<&'g String, usize>) -> usize {
        if let Some(&h) = memo.get(node) {
            return h;
        }
        let below = graph.get(node).into_iter().flat_map(|e| e.keys()).map(|n| height(graph, n, memo)).max();
        let h = 1 + below.unwrap_or(0);
        memo.insert(node, h);
        h
    }
    if !cycles(graph).is_empty() {
        return None;
    }
    let mut memo = BTreeMap::new();
    graph.keys().map(|n| height(graph, n, &mut memo)).max()
}

fn reachable<'g>(graph: &'g Graph, start: &'g String) -> BTreeSet<&'g String> {
    let mut found = BTreeSet::from([start]);
    let mut todo = vec![start];
    while let Some(node) = todo.pop() {
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            if found.insert(next) {
                todo.push(next);
            }
        }
    }
    found
}

/// A breadth-first walk inside `component` back to `start`.
fn shortest_cycle(graph: &Graph, start: &String, component: &BTreeSet<&String>) -> Vec<String> {
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut frontier = std::collections::VecDeque::from([start]);
    while let Some(node) = frontier.pop_front() {
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            if next == start {
                let mut path = vec![start.clone(), node.clone()];
                let mut at = node;
                while let Some(&previous) = came_from.get(at) {
                    path.push(previous.clone());
                    at = previous;
                }
                path.reverse();
                return path;
            }
            if component.contains(next) && !came_from.contains_key(next) && next != start {
                came_from.insert(next, node);
                frontier.push_back(next);
            }
        }
    }
    unreachable!("a node of a component of two or more lies on a cycle")
}

/// A cycle as the lines a reader needs to break it: each edge and where it
/// is first, and which other modules are caught in it too.
pub fn describe(graph: &Graph, cycle: &Cycle) -> String {
    let mut text = cycle.path.join(" -> ");
    if cycle.members.len() + 1 > cycle.path.len() {
        text.push_str(&format!(" (one of the cycles among {})", cycle.members.join(", ")));
    }
    for pair in cycle.path.windows(2) {
        let places = &graph[&pair[0]][&pair[1]];
        text.push_str(&format!("\n    {} -> {}: {}", pair[0], pair[1], place(&places[0])));
        if places.len() > 1 {
            text.push_str(&format!(" (and {} more)", places.len() - 1));
        }
    }
    text
}

/// `file:line (item)`.
pub fn place(evidence: &Evidence) -> String {
    match evidence.item.as_str() {
        "" => format!("{}:{}", evidence.file, evidence.line),
        item => format!("{}:{} ({item})", evidence.file, evidence.line),
    }
}
