//! The dependency graph between the children of one module, and its cycles.

use std::collections::{BTreeMap, BTreeSet};

use crate::scan::references;

/// One source file: the module path it defines and its text.
pub struct Source {
    pub module: Vec<String>,
    pub file: String,
    pub code: String,
}

/// Where one edge was first seen, to name it in a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub file: String,
    pub line: usize,
}

/// `from -> to -> first place seen` between the children of one parent.
pub type Graph = BTreeMap<String, BTreeMap<String, Evidence>>;

/// The graph between the direct children of `parent` (`[]` for the crate's
/// top-level modules): an edge `a -> b` when a file inside child `a` names
/// child `b` or anything in it. Items of `parent` itself are not nodes.
pub fn children_graph(sources: &[Source], parent: &[&str]) -> Graph {
    let inside = |module: &[String]| {
        module.len() > parent.len() && module.iter().zip(parent).all(|(segment, want)| segment == want)
    };
    let children: BTreeSet<&str> =
        sources.iter().filter(|s| inside(&s.module)).map(|s| s.module[parent.len()].as_str()).collect();
    let mut graph = Graph::new();
    for source in sources.iter().filter(|s| inside(&s.module)) {
        let from = &source.module[parent.len()];
        graph.entry(from.clone()).or_default();
        for reference in references(&source.module, &source.code) {
            if !inside(&reference.path) {
                continue;
            }
            let to = reference.path[parent.len()].as_str();
            if to != from && children.contains(to) {
                let evidence = Evidence { file: source.file.clone(), line: reference.line };
                graph.get_mut(from).unwrap().entry(to.to_owned()).or_insert(evidence);
            }
        }
    }
    graph
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
/// is, and which other modules are caught in it too.
pub fn describe(graph: &Graph, cycle: &Cycle) -> String {
    let mut text = cycle.path.join(" -> ");
    if cycle.members.len() + 1 > cycle.path.len() {
        text.push_str(&format!(" (one of the cycles among {})", cycle.members.join(", ")));
    }
    for pair in cycle.path.windows(2) {
        let evidence = &graph[&pair[0]][&pair[1]];
        text.push_str(&format!("\n    {} -> {}: {}:{}", pair[0], pair[1], evidence.file, evidence.line));
    }
    text
}
