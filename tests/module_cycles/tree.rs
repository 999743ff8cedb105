//! The crate's module tree, built from every file's scan, and where a path
//! really leads: through `use` and `pub use` chains and globs to the module
//! that defines the item. Pure; touches only `scan`.

use std::collections::BTreeMap;

use crate::scan::{scan, Scanned, Use};

/// One source file: the module path it defines and its text.
pub struct Source {
    pub module: Vec<String>,
    pub file: String,
    pub code: String,
}

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// To a module itself (`use crate::store;`).
    Module(Vec<String>),
    /// To an item, defined in this module (or unknown to the scan, and taken
    /// as the module's own: a macro-made item, say).
    Item(Vec<String>, String),
}

/// One name a module's code uses, once resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub from: Vec<String>,
    pub to: Target,
    pub file: String,
    pub line: usize,
}

struct Node {
    file: String,
    /// Under `#[cfg(test)]`, itself or an ancestor.
    test: bool,
    scanned: Scanned,
}

/// Every module of the crate, by path (`[]`: the crate root).
pub struct Tree {
    nodes: BTreeMap<Vec<String>, Node>,
}

/// How many `use` hops a path may take: more is a loop.
const MAX_HOPS: usize = 32;

impl Tree {
    pub fn new(sources: &[Source]) -> Tree {
        let mut nodes = BTreeMap::new();
        for source in sources {
            for scanned in scan(&source.module, &source.code) {
                let node = Node { file: source.file.clone(), test: false, scanned };
                nodes.insert(node.scanned.module.clone(), node);
            }
        }
        let paths: Vec<Vec<String>> = nodes.keys().cloned().collect();
        // Parents come before their children in this order.
        for path in paths.iter().filter(|p| !p.is_empty()) {
            let (parent, name) = path.split_at(path.len() - 1);
            let test = nodes.get(parent).is_some_and(|p| p.test || p.scanned.mods.get(&name[0]) == Some(&true));
            nodes.get_mut(path).unwrap().test = test;
        }
        Tree { nodes }
    }

    /// The modules that are not test code, with the file each is in.
    pub fn modules(&self) -> impl Iterator<Item = (&Vec<String>, &str)> {
        self.nodes.iter().filter(|(_, n)| !n.test).map(|(path, n)| (path, n.file.as_str()))
    }

    /// The modules `parent` contains directly, test modules left out.
    pub fn children(&self, parent: &[String]) -> Vec<String> {
        self.modules()
            .filter(|(path, _)| path.len() == parent.len() + 1 && path.starts_with(parent))
            .map(|(path, _)| path[parent.len()].clone())
            .collect()
    }

    /// Every name the code of every non-test module uses, resolved.
    pub fn references(&self) -> Vec<Reference> {
        let mut out = Vec::new();
        for (module, node) in self.nodes.iter().filter(|(_, n)| !n.test) {
            let s = &node.scanned;
            let mut add = |to: Option<Target>, line: usize| {
                if let Some(to) = to {
                    out.push(Reference { from: module.clone(), to, file: node.file.clone(), line });
                }
            };
            for used in &s.uses {
                add(self.absolute(module, &used.path).and_then(|p| self.resolve(&p, 0)), used.line);
            }
            for written in &s.paths {
                add(self.absolute(module, &written.path).and_then(|p| self.resolve(&p, 0)), written.line);
            }
            for (target, line) in self.glob_words(module, s) {
                add(Some(target), line);
            }
        }
        out
    }

    /// The names a module's globs bring in that its code uses as bare words.
    fn glob_words(&self, module: &[String], s: &Scanned) -> Vec<(Target, usize)> {
        let mut out = Vec::new();
        for glob in s.uses.iter().filter(|u| u.glob) {
            let Some(Target::Module(source)) = self.absolute(module, &glob.path).and_then(|p| self.resolve(&p, 0))
            else {
                continue;
            };
            if source == module {
                continue;
            }
            for (word, &line) in &s.words {
                let own = s.defs.contains(word) || s.mods.contains_key(word) || named(s, word).is_some();
                if !own && self.has_name(&source, word, 0) {
                    let path = [source.clone(), vec![word.clone()]].concat();
                    out.extend(self.resolve(&path, 0).map(|t| (t, line)));
                }
            }
        }
        out
    }

    /// `written` from the crate root, as the code in `here` means it: `crate`,
    /// `self` and `super` paths, and those that start with a name `here` has
    /// (a child module, an item, a `use`d name). `None`: another crate's.
    pub fn absolute(&self, here: &[String], written: &[String]) -> Option<Vec<String>> {
        let first = written.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => here.to_vec(),
            name if self.has_own_name(here, name) => here.to_vec(),
            _ => return None,
        };
        let mut rest = written.iter().peekable();
        if first == "crate" {
            rest.next();
        }
        while let Some(segment) = rest.peek() {
            match segment.as_str() {
                "super" => {
                    base.pop()?;
                }
                "self" => {}
                _ => break,
            }
            rest.next();
        }
        base.extend(rest.cloned());
        Some(base)
    }

    /// Where the path from the crate root leads; `None`: out of the crate.
    pub fn resolve(&self, path: &[String], hops: usize) -> Option<Target> {
        if hops > MAX_HOPS {
            return None;
        }
        let mut here: Vec<String> = Vec::new();
        for (k, segment) in path.iter().enumerate() {
            here.push(segment.clone());
            if self.nodes.contains_key(&here) {
                continue;
            }
            here.pop();
            let node = self.nodes.get(&here)?;
            let rest = &path[k + 1..];
            if node.scanned.defs.contains(segment) {
                return Some(Target::Item(here, segment.clone()));
            }
            if let Some(used) = named(&node.scanned, segment) {
                let target = self.absolute(&here, &used.path)?;
                return self.resolve(&[target, rest.to_vec()].concat(), hops + 1);
            }
            for source in self.glob_sources(&here, hops) {
                if self.has_name(&source, segment, hops + 1) {
                    return self.resolve(&[source, path[k..].to_vec()].concat(), hops + 1);
                }
            }
            return Some(Target::Item(here, segment.clone()));
        }
        Some(Target::Module(here))
    }

    /// The crate's modules that `module`'s glob imports (`use x::*`) empty.
    fn glob_sources(&self, module: &[String], hops: usize) -> Vec<Vec<String>> {
        let Some(node) = self.nodes.get(module) else { return Vec::new() };
        let globs = node.scanned.uses.iter().filter(|u| u.glob && u.item);
        let targets = globs.filter_map(|u| self.absolute(module, &u.path).and_then(|p| self.resolve(&p, hops + 1)));
        targets.filter_map(|t| if let Target::Module(m) = t { Some(m) } else { None }).filter(|m| m != module).collect()
    }

    /// Whether `module` has `name`: a child module, an item, a `use`d name,
    /// or one of its globs'.
    fn has_name(&self, module: &[String], name: &str, hops: usize) -> bool {
        if hops > MAX_HOPS {
            return false;
        }
        self.has_own_name(module, name)
            || self.glob_sources(module, hops).iter().any(|source| self.has_name(source, name, hops + 1))
    }

    /// Whether `module` has `name` itself (not through a glob).
    fn has_own_name(&self, module: &[String], name: &str) -> bool {
        let Some(node) = self.nodes.get(module) else { return false };
        let s = &node.scanned;
        s.mods.contains_key(name) || s.defs.contains(name) || named(s, name).is_some()
    }
}

/// The module-level `use` that brings in `name`.
fn named<'s>(s: &'s Scanned, name: &str) -> Option<&'s Use> {
    s.uses.iter().find(|u| u.item && u.name.as_deref() == Some(name))
}
