//! The cycle check on small trees written here: what it finds, what it
//! resolves, and what it leaves alone.

use std::collections::BTreeMap;

use super::graph::{cycles, describe, floors, level_graphs, Graph, SELF};
use super::scan::scan;
use super::tree::{Source, Target, Tree};
use super::{cycle_failures, parent_failures};

/// `(module, code)` pairs as a crate: `""` is the root (added empty if left out).
fn crate_of(files: &[(&str, &str)]) -> Tree {
    let mut sources: Vec<Source> = files
        .iter()
        .map(|(module, code)| Source {
            module: module.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            file: format!("{}.rs", if module.is_empty() { "lib" } else { module }),
            code: (*code).to_owned(),
        })
        .collect();
    if !files.iter().any(|(module, _)| module.is_empty()) {
        sources.push(Source { module: Vec::new(), file: "lib.rs".into(), code: String::new() });
    }
    Tree::new(&sources)
}

fn levels(files: &[(&str, &str)]) -> BTreeMap<Vec<String>, Graph> {
    level_graphs(&crate_of(files))
}

fn level<'l>(levels: &'l BTreeMap<Vec<String>, Graph>, name: &str) -> &'l Graph {
    let path: Vec<String> = name.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
    &levels[&path]
}

/// `from->to` for every edge of a level.
fn edges(graph: &Graph) -> Vec<String> {
    graph.iter().flat_map(|(from, to)| to.keys().map(move |to| format!("{from}->{to}"))).collect()
}

fn path(text: &str) -> Vec<String> {
    text.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

#[test]
fn a_cycle_is_found_and_named_with_its_lines() {
    let levels = levels(&[
        ("a", "use crate::b::Thing;\n"),
        ("b", "//! b\n\npub fn f() { crate::c::g() }\n"),
        ("c", "use crate::{d, a::{self, X as Y}};\n"),
        ("d", "pub struct D;\n"),
    ]);
    let graph = level(&levels, "");
    assert_eq!(edges(graph), ["a->b", "b->c", "c->a", "c->d"]);
    let found = cycles(graph);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, ["a", "b", "c", "a"]);
    assert_eq!(found[0].members, ["a", "b", "c"]);
    let text = describe(graph, &found[0]);
    assert!(text.contains("a -> b -> c -> a") && text.contains("b -> c: b.rs:3 (g)"), "{text}");
}

#[test]
fn a_graph_without_cycle_passes_and_has_floors() {
    let levels = levels(&[("a", "use crate::b::X;"), ("b", "use crate::c::Y;"), ("c", "")]);
    let graph = level(&levels, "");
    assert!(cycles(graph).is_empty());
    assert_eq!(floors(graph), Some(3));
}

#[test]
fn siblings_are_seen_through_super_and_full_paths() {
    let levels = levels(&[
        ("channel", "mod telegram; mod whatsapp;"),
        ("channel::telegram", "mod inbound;\nmod outbound;\npub use inbound::Update;"),
        ("channel::telegram::inbound", "pub struct Update; pub fn g() {} use super::outbound::send;"),
        ("channel::telegram::outbound", "pub fn send() { crate::channel::telegram::inbound::g(); super::Update; }"),
        ("channel::whatsapp", "use super::telegram::x;"),
    ]);
    let graph = level(&levels, "channel::telegram");
    assert_eq!(edges(graph), ["inbound->outbound", "outbound->inbound", "self->inbound"]);
    assert_eq!(cycles(graph).len(), 1);
    assert_eq!(edges(level(&levels, "channel")), ["whatsapp->telegram"]);
}

#[test]
fn a_cycle_through_a_re_export_is_found() {
    // `b` names `p::A`, which the door re-exports from `a`: really `b -> a`.
    let levels = levels(&[
        ("p", "mod a;\nmod b;\npub use a::A;\n"),
        ("p::a", "pub struct A;\nuse super::b::helper;\n"),
        ("p::b", "pub fn helper() {}\nfn f(_: crate::p::A) {}\n"),
    ]);
    let graph = level(&levels, "p");
    assert_eq!(edges(graph), ["a->b", "b->a", "self->a"]);
    let found = cycles(graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].members, ["a", "b"]);
}

#[test]
fn a_chain_of_re_exports_and_a_glob_are_followed_to_the_defining_module() {
    let tree = crate_of(&[
        ("", "mod p; mod q;\npub use p::*;\n"),
        ("p", "mod deep;\npub use self::deep::Thing as Renamed;\n"),
        ("p::deep", "pub struct Thing;"),
        ("q", "use crate::Renamed;\nfn f() { Renamed; }"),
    ]);
    let target = tree.resolve(&path("Renamed"), 0);
    assert_eq!(target, Some(Target::Item(path("p::deep"), "Thing".into())));
    let levels = level_graphs(&tree);
    assert_eq!(edges(level(&levels, "")), ["q->p", "self->p"]);
    assert_eq!(edges(level(&levels, "p")), ["self->deep"]);
}

#[test]
fn a_cycle_two_levels_down_is_found() {
    let levels = levels(&[
        ("x", "mod y;"),
        ("x::y", "mod a; mod b;"),
        ("x::y::a", "use super::b::B; pub struct A;"),
        ("x::y::b", "pub struct B; fn f() -> super::a::A { todo!() }"),
    ]);
    let found = cycle_failures(&levels, &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("x::y: a module cycle a -> b -> a"), "{found:?}");
}

#[test]
fn a_test_child_using_super_glob_is_no_cycle() {
    let levels = levels(&[
        ("p", "mod a;\n#[cfg(test)]\npub(crate) mod tests;\npub use a::A;\npub struct Door;\n"),
        ("p::a", "pub struct A;\n#[cfg(test)]\nmod tests {\n    use super::super::*;\n    fn t() { Door; }\n}\n"),
        ("p::tests", "use super::*;\nfn t() { let _ = (A, Door); }\n"),
    ]);
    assert_eq!(edges(level(&levels, "p")), ["self->a"]);
    assert!(cycle_failures(&levels, &[]).is_empty());
    assert!(parent_failures(&levels, &["p"], &[]).is_empty());
}

#[test]
fn a_child_naming_its_doors_own_item_is_an_arrow_up() {
    let levels = levels(&[
        ("p", "mod a;\nmod b;\nuse crate::q::Far;\npub struct Store;\n"),
        ("p::a", "use super::Store;\n"),
        // `Far` is only imported by the door: an edge to `q`, not to the door.
        ("p::b", "use super::Far;\nimpl super::Store {}\n"),
        ("q", "pub struct Far;"),
    ]);
    assert_eq!(edges(level(&levels, "p")), ["a->self", "b->self"]);
    assert_eq!(edges(level(&levels, "")), ["p->q"]);
    let failures = parent_failures(&levels, &["p"], &[("p", "a", "being moved")]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].starts_with("p: b names its parent's own items:\n    p::b.rs:2 (Store)"), "{failures:?}");
    let stale = parent_failures(&levels, &["p"], &[("p", "a", "x"), ("p", "b", "y"), ("p", "self", "z")]);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].contains("p: the known import self -> self is of no child"), "{stale:?}");
}

#[test]
fn a_door_that_uses_a_child_and_is_used_by_it_is_a_cycle() {
    let levels = levels(&[
        ("p", "mod a;\npub struct Store;\nimpl Store { fn f() { a::help(); } }\n"),
        ("p::a", "pub fn help() {}\nfn g(_: &super::Store) {}\n"),
    ]);
    let graph = level(&levels, "p");
    assert_eq!(edges(graph), ["a->self", "self->a"]);
    assert_eq!(cycles(graph)[0].path, ["a", SELF, "a"]);
}

#[test]
fn a_glob_in_code_counts_only_the_names_used() {
    let levels = levels(&[
        ("p", "mod a;\nmod b;\nmod c;\npub use b::*;\npub use c::*;\n"),
        ("p::a", "use super::*;\nfn f() { let x = Bee; x.sea(); }\n"),
        ("p::b", "pub struct Bee;"),
        ("p::c", "pub fn sea() {}"),
    ]);
    assert_eq!(edges(level(&levels, "p")), ["a->b", "self->b", "self->c"]);
}

#[test]
fn a_known_edge_lets_its_cycle_pass_and_fails_once_gone() {
    let levels = levels(&[("a", "use crate::b::X;"), ("b", "use crate::a::Y;"), ("c", "")]);
    assert_eq!(cycle_failures(&levels, &[]).len(), 1);
    assert!(cycle_failures(&levels, &[("crate", "b", "a", "being rewritten")]).is_empty());
    let stale = cycle_failures(&levels, &[("crate", "a", "b", "x"), ("crate", "c", "a", "gone")]);
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].contains("c -> a (gone) is gone"), "{stale:?}");
    let nowhere = cycle_failures(&levels, &[("crate", "a", "b", "x"), ("zz", "c", "a", "gone")]);
    assert!(nowhere.iter().any(|f| f.contains("zz: the known edge c -> a is at no level")), "{nowhere:?}");
}

#[test]
fn every_module_caught_in_a_cycle_is_named() {
    let levels = levels(&[("a", "use crate::b::X;"), ("b", "use crate::{a::Y, c::Z};"), ("c", "use crate::b::W;")]);
    let graph = level(&levels, "");
    let found = cycles(graph);
    assert_eq!(found.len(), 1, "one component");
    let text = describe(graph, &found[0]);
    assert!(text.starts_with("a -> b -> a (one of the cycles among a, b, c)"), "{text}");
}

#[test]
fn comments_strings_and_test_code_are_read_right() {
    let code = r##"
        // use crate::b;
        /* crate::b /* nested */ crate::b */
        const S: &str = "crate::b \" crate::b";
        const R: &'static str = r#"crate::b "# ;
        const C: char = '"'; fn f<'a>(x: &'a str) { crate::c::f(); }
        #[cfg(test)]
        mod tests {
            use super::*;
            use super::super::d;
        }
        #[cfg(test)]
        fn helper() { crate::e::g(); }
        mod inner { pub fn h() { super::super::k::m(); } }
    "##;
    let scanned = scan(&path("a::x"), code);
    assert_eq!(scanned.len(), 2, "{scanned:?}");
    let (file, inner) = (&scanned[0], &scanned[1]);
    let written = |s: &super::scan::Scanned| s.paths.iter().map(|w| (w.path.join("::"), w.line)).collect::<Vec<_>>();
    assert_eq!(written(file), [("crate::c::f".to_owned(), 6)]);
    assert!(file.uses.is_empty(), "{:?}", file.uses);
    assert_eq!(file.defs.iter().collect::<Vec<_>>(), ["C", "R", "S", "f"]);
    assert_eq!(
        file.mods.iter().map(|(m, t)| (m.as_str(), *t)).collect::<Vec<_>>(),
        [("inner", false), ("tests", true)]
    );
    assert_eq!(inner.module, path("a::x::inner"));
    assert_eq!(written(inner), [("super::super::k::m".to_owned(), 14)]);
    assert_eq!(inner.defs.iter().collect::<Vec<_>>(), ["h"]);
}

#[test]
fn use_trees_give_each_name_and_path() {
    let scanned = scan(&path("m"), "pub(crate) use super::{a::{self, B as C}, d::*, e as _};\nfn f() { use x::Y; }");
    let uses: Vec<(String, Option<String>, bool, bool)> =
        scanned[0].uses.iter().map(|u| (u.path.join("::"), u.name.clone(), u.glob, u.item)).collect();
    assert_eq!(
        uses,
        [
            ("super::a".to_owned(), Some("a".to_owned()), false, true),
            ("super::a::B".to_owned(), Some("C".to_owned()), false, true),
            ("super::d".to_owned(), None, true, true),
            ("super::e".to_owned(), None, false, true),
            ("x::Y".to_owned(), Some("Y".to_owned()), false, false),
        ]
    );
}
