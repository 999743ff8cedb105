//! Which waiting messages the preparer starts next ([`pick`]), so that one
//! group's burst of photos does not hold up the others. Pure: the preparer
//! gives it what the store says is waiting and what it is working on.
//!
//! A message someone is waiting for goes first: one for the agent, or one
//! kept only as context that holds such a message back in its group (its
//! session takes nothing past a message still being prepared). These share
//! the slots fairly: the group with the fewest in the works goes next, then
//! the oldest. A message that is only context, with nothing behind it, waits
//! until nothing pressing waits, at most one per group at a time, and never
//! in the last free slot, which is kept for a message that comes meanwhile.

use std::collections::{HashMap, HashSet};

use crate::domain::{GroupName, InboundId};
use crate::store::Waiting;

/// A message the preparer is working on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub id: InboundId,
    pub group: GroupName,
    /// Started as context (with nothing waiting behind it).
    pub context: bool,
}

/// The messages of `waiting` (oldest first, as the store lists them) to
/// start now, in order, besides `running`, with at most `at_once` in the
/// works together.
pub fn pick(waiting: &[Waiting], running: &[Running], at_once: usize) -> Vec<Running> {
    let busy: HashSet<InboundId> = running.iter().map(|r| r.id).collect();
    let mut free = at_once.saturating_sub(running.len());
    let mut per_group: HashMap<&GroupName, usize> = HashMap::new();
    for r in running {
        *per_group.entry(&r.group).or_default() += 1;
    }
    let mut started = Vec::new();
    let mut pressing: Vec<&Waiting> = waiting.iter().filter(|w| !w.context && !busy.contains(&w.id)).collect();
    while free > 0 && !pressing.is_empty() {
        // `waiting` is oldest first, so the first of the least busy group is its oldest.
        let next = (0..pressing.len())
            .min_by_key(|&n| (per_group.get(&pressing[n].group).copied().unwrap_or(0), n))
            .expect("not empty");
        let w = pressing.remove(next);
        *per_group.entry(&w.group).or_default() += 1;
        started.push(Running { id: w.id, group: w.group.clone(), context: false });
        free -= 1;
    }
    if !pressing.is_empty() {
        return started;
    }
    let mut context_groups: HashSet<&GroupName> = running.iter().filter(|r| r.context).map(|r| &r.group).collect();
    for w in waiting.iter().filter(|w| w.context && !busy.contains(&w.id)) {
        if free <= 1 {
            break;
        }
        if context_groups.insert(&w.group) {
            started.push(Running { id: w.id, group: w.group.clone(), context: true });
            free -= 1;
        }
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(id: i64, group: &str, context: bool) -> Waiting {
        Waiting { id: InboundId(id), group: group.parse().unwrap(), album: false, context }
    }

    fn ids(started: &[Running]) -> Vec<i64> {
        started.iter().map(|r| r.id.0).collect()
    }

    #[test]
    fn a_message_for_the_agent_goes_before_older_context_and_context_takes_one_slot_a_group() {
        let mut list: Vec<Waiting> = (1..=50).map(|id| waiting(id, "alpha", true)).collect();
        list.push(waiting(51, "beta", false));
        let started = pick(&list, &[], 4);
        assert_eq!(ids(&started), [51, 1]);
        assert_eq!(started.iter().map(|r| r.context).collect::<Vec<_>>(), [false, true]);
        assert!(pick(&list, &started, 4).is_empty(), "alpha's next waits for its first");
        let after_first = vec![started[0].clone()];
        assert_eq!(ids(&pick(&list[1..], &after_first, 4)), [2], "one done, the next");
    }

    #[test]
    fn context_never_takes_the_last_free_slot() {
        let list: Vec<Waiting> =
            ["a", "b", "c", "d", "e"].iter().enumerate().map(|(n, g)| waiting(n as i64 + 1, g, true)).collect();
        let started = pick(&list, &[], 4);
        assert_eq!(ids(&started), [1, 2, 3], "one slot kept for a message that comes meanwhile");
        let mut later = list.clone();
        later.push(waiting(6, "f", false));
        assert_eq!(ids(&pick(&later, &started, 4)), [6], "and it takes it");
    }

    #[test]
    fn context_waits_while_anything_pressing_waits() {
        let running: Vec<Running> =
            (1..=4).map(|id| Running { id: InboundId(id), group: "a".parse().unwrap(), context: false }).collect();
        let mut list: Vec<Waiting> = (1..=4).map(|id| waiting(id, "a", false)).collect();
        list.extend([waiting(5, "b", true), waiting(6, "a", false)]);
        assert!(pick(&list, &running, 4).is_empty(), "no slot");
        assert_eq!(ids(&pick(&list[1..], &running[1..], 4)), [6], "one done: the pressing one first, though newer");
    }

    #[test]
    fn pressing_work_is_shared_fairly_between_groups() {
        // Alpha's context photos hold a question back, so all of them are pressing.
        let mut list: Vec<Waiting> = (1..=20).map(|id| waiting(id, "alpha", false)).collect();
        list.extend([waiting(21, "beta", false), waiting(22, "beta", false), waiting(23, "gamma", false)]);
        assert_eq!(ids(&pick(&list, &[], 4)), [1, 21, 23, 2]);
        let running = [Running { id: InboundId(1), group: "alpha".parse().unwrap(), context: false }];
        assert_eq!(ids(&pick(&list, &running, 2)), [21], "the group with none in the works first");
    }
}
