//! Which node a group prefers: rendezvous (highest-random-weight) hashing of
//! the group over the live nodes with a free slot, then the less loaded of
//! the top two. Pure: touches nothing.
//!
//! Rendezvous hashing moves only the groups of a node that comes or goes
//! (a 4th node takes about a quarter of the groups and nothing else moves),
//! and needs no shared ring: every node computes the same answer from the
//! same `nodes` rows. The second choice by load keeps a hot node from
//! collecting more than its share; two choices, not all, keep most groups
//! where the hash puts them, so placement barely changes as load moves.
//!
//! The weight must be the same in every process, version and machine, since
//! nodes compare their answers through the database: so a fixed hash written
//! here (FNV-1a, then SplitMix64's finalizer to spread FNV's weak high bits),
//! never std's randomly seeded `DefaultHasher`.

use std::cmp::Ordering;

use super::node_id::NodeId;

/// A live node as placement sees it: sessions running and slots it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLoad {
    pub id: NodeId,
    pub live: u64,
    pub slots: u64,
}

impl NodeLoad {
    fn has_free_slot(&self) -> bool {
        self.live < self.slots
    }

    /// `live / slots` compared exactly, without floats.
    fn load_cmp(&self, other: &NodeLoad) -> Ordering {
        let mine = u128::from(self.live) * u128::from(other.slots);
        let theirs = u128::from(other.live) * u128::from(self.slots);
        mine.cmp(&theirs)
    }
}

/// The node `group` should run on, among `nodes` (the live ones); `None`
/// when none has a free slot.
pub fn preferred_node<'a>(group: &str, nodes: &'a [NodeLoad]) -> Option<&'a NodeLoad> {
    let mut first: Option<(u64, &NodeLoad)> = None;
    let mut second: Option<(u64, &NodeLoad)> = None;
    for node in nodes.iter().filter(|n| n.has_free_slot()) {
        let candidate = (weight(group, &node.id), node);
        if first.is_none_or(|best| ranks_above(candidate, best)) {
            second = first;
            first = Some(candidate);
        } else if second.is_none_or(|next| ranks_above(candidate, next)) {
            second = Some(candidate);
        }
    }
    let (_, first) = first?;
    match second {
        Some((_, second)) if second.load_cmp(first) == Ordering::Less => Some(second),
        _ => Some(first),
    }
}

/// Higher weight first; the id breaks the (astronomically rare) tie, so the
/// order never depends on the order of the rows.
fn ranks_above(a: (u64, &NodeLoad), b: (u64, &NodeLoad)) -> bool {
    (a.0, &a.1.id) > (b.0, &b.1.id)
}

/// The stable weight of `node` for `group`. The 0xff between them is a byte
/// no UTF-8 text contains, so ("ab", "c") and ("a", "bc") differ.
pub fn weight(group: &str, node: &NodeId) -> u64 {
    let mut h = Fnv1a::new();
    h.write(group.as_bytes());
    h.write(&[0xff]);
    h.write(node.as_str().as_bytes());
    splitmix64_finish(h.0)
}

struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(Self::PRIME);
        }
    }
}

fn splitmix64_finish(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, live: u64, slots: u64) -> NodeLoad {
        NodeLoad { id: NodeId::new(id).unwrap(), live, slots }
    }

    fn idle(ids: &[&str]) -> Vec<NodeLoad> {
        ids.iter().map(|id| node(id, 0, 100)).collect()
    }

    fn owner(group: &str, nodes: &[NodeLoad]) -> String {
        preferred_node(group, nodes).unwrap().id.to_string()
    }

    #[test]
    fn the_weight_never_changes_across_builds_and_machines() {
        // Golden values: if one changes, nodes of different versions would
        // disagree on where groups belong. Never update them casually. (They
        // were checked against an independent implementation of the hash.)
        let id = NodeId::new("node-a").unwrap();
        assert_eq!(weight("family", &id), 0xaf22_2732_bef5_1d0d);
        assert_eq!(weight("", &id), 0x51e9_fb15_a1ee_f8e6);
        let nodes = idle(&["node-a", "node-b", "node-c"]);
        let owners: Vec<String> = ["family", "work", "g1", "g2", "g3"].iter().map(|g| owner(g, &nodes)).collect();
        assert_eq!(owners, ["node-a", "node-c", "node-c", "node-b", "node-c"]);
    }

    #[test]
    fn the_answer_does_not_depend_on_the_order_of_the_rows() {
        let mut nodes = vec![node("a", 1, 4), node("b", 3, 4), node("c", 0, 4), node("d", 2, 4)];
        let before: Vec<String> = (0..50).map(|i| owner(&format!("g{i}"), &nodes)).collect();
        nodes.reverse();
        let after: Vec<String> = (0..50).map(|i| owner(&format!("g{i}"), &nodes)).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn three_hundred_groups_spread_evenly_over_three_nodes() {
        let nodes = idle(&["node-a", "node-b", "node-c"]);
        let mut counts = std::collections::HashMap::<String, usize>::new();
        for i in 0..300 {
            *counts.entry(owner(&format!("group-{i}"), &nodes)).or_default() += 1;
        }
        assert_eq!(counts.len(), 3, "{counts:?}");
        assert!(counts.values().all(|&n| (70..=130).contains(&n)), "{counts:?}");
    }

    #[test]
    fn a_fourth_node_takes_about_a_quarter_of_the_groups_and_nothing_else_moves() {
        let three = idle(&["node-a", "node-b", "node-c"]);
        let four = idle(&["node-a", "node-b", "node-c", "node-d"]);
        let mut moved = 0;
        for i in 0..300 {
            let group = format!("group-{i}");
            let (before, after) = (owner(&group, &three), owner(&group, &four));
            if before != after {
                assert_eq!(after, "node-d", "{group} moved between old nodes");
                moved += 1;
            }
        }
        assert!((50..=100).contains(&moved), "{moved} of 300 moved");
    }

    #[test]
    fn a_full_node_is_skipped_and_no_free_slot_anywhere_means_no_node() {
        let nodes = vec![node("a", 0, 10), node("b", 0, 10), node("c", 0, 10)];
        let group = "family";
        let first = owner(group, &nodes);
        let full: Vec<NodeLoad> =
            nodes.iter().map(|n| if n.id.as_str() == first { node(&first, 10, 10) } else { n.clone() }).collect();
        let moved = owner(group, &full);
        assert_ne!(moved, first);
        let all_full = vec![node("a", 3, 3), node("b", 1, 1), node("c", 0, 0)];
        assert_eq!(preferred_node(group, &all_full), None);
        assert_eq!(preferred_node(group, &[]), None);
    }

    #[test]
    fn the_less_loaded_of_the_top_two_wins_and_a_tie_goes_to_the_higher_weight() {
        let ids = ["a", "b", "c"];
        let group = "work";
        let mut ranked = ids.map(|id| (weight(group, &NodeId::new(id).unwrap()), id));
        ranked.sort_by(|x, y| y.cmp(x));
        let [(_, top), (_, second), (_, third)] = ranked;
        let with = |loads: [(&str, u64, u64); 3]| owner(group, &loads.map(|(id, l, s)| node(id, l, s)));
        // Equal fractions (2/4 = 1/2): the higher weight keeps it.
        assert_eq!(with([(top, 2, 4), (second, 1, 2), (third, 0, 4)]), top);
        // The second is less loaded: it wins, and the idle third is never asked.
        assert_eq!(with([(top, 3, 4), (second, 2, 4), (third, 0, 4)]), second);
        // Loads compare as fractions, not counts: 5/10 is less than 3/4.
        assert_eq!(with([(top, 3, 4), (second, 5, 10), (third, 0, 4)]), second);
        assert_eq!(with([(top, 1, 4), (second, 2, 4), (third, 0, 4)]), top);
    }
}
