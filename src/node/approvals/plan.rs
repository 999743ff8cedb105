//! What each side of the approvals bridge does at one look at the store,
//! decided without I/O: the asking node passes verdicts on and forgets rows
//! nobody waits for; the gateway shows what no live gateway shows, ends
//! what it need not show any more, and deletes rows long expired. A prompt
//! it ends is either withdrawn (another gateway shows the row now and
//! settles it: this one leaves the message alone) or ended (the row expired
//! or is gone: the prompt says it was denied).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::domain::ApprovalAnswer;
use crate::store::{Asked, Unanswered};

/// How often each side looks at the store (a hint wakes it sooner).
pub const LOOK: Duration = Duration::from_millis(250);

/// A row expired this long ago is stale: whoever asked is gone (a node
/// that died asking), so any gateway deletes it.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// What the asking node does at one look.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AskingPlan {
    /// Verdicts to pass to the sessions waiting for them.
    pub deliver: Vec<(i64, ApprovalAnswer)>,
    /// Rows to delete (and forget, if still in memory): passed on, given up
    /// by their session, or left by an earlier process of this node.
    pub forget: Vec<i64>,
}

/// The plan for this node's `rows`, given `waiting`: the rows this process
/// asked, each with whether its session still waits for the answer.
pub fn asking_plan(rows: &[Asked], waiting: &HashMap<i64, bool>) -> AskingPlan {
    let mut plan = AskingPlan::default();
    let mut seen = HashSet::new();
    for row in rows {
        seen.insert(row.id);
        match (waiting.get(&row.id), &row.answer) {
            (Some(true), Some(answer)) => {
                plan.deliver.push((row.id, answer.clone()));
                plan.forget.push(row.id);
            }
            (Some(true), None) => {}
            // Given up (timeout, the session ended), or not this process's.
            (Some(false), _) | (None, _) => plan.forget.push(row.id),
        }
    }
    let mut given_up: Vec<i64> =
        waiting.iter().filter(|(id, waits)| !**waits && !seen.contains(id)).map(|(id, _)| *id).collect();
    given_up.sort_unstable();
    plan.forget.extend(given_up);
    plan
}

/// What the gateway does at one look.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShowPlan {
    /// Rows to mark shown and show, oldest first.
    pub show: Vec<i64>,
    /// Prompts of this gateway another gateway shows now: left to it, untouched.
    pub withdraw: Vec<i64>,
    /// Prompts of this gateway whose row expired or is gone (its session gave
    /// up, or the verdict was passed on): told it was denied.
    pub end: Vec<i64>,
    /// Rows to delete: expired more than [`STALE_AFTER`] ago.
    pub stale: Vec<i64>,
}

/// What a gateway holding its lease at `epoch` does with the unanswered
/// `rows` of its platform, `showing` those prompts now and showing at most
/// `cap` at once. `complete`: `rows` are all the unanswered rows (the look
/// was not cut short), so a prompt whose row is missing was answered or deleted.
pub fn show_plan(rows: &[Unanswered], epoch: i64, showing: &HashSet<i64>, cap: usize, complete: bool) -> ShowPlan {
    let stale_us = i64::try_from(STALE_AFTER.as_micros()).unwrap_or(i64::MAX);
    let mut plan = ShowPlan::default();
    let mut seen = HashSet::new();
    for row in rows {
        seen.insert(row.id);
        let shown_here = showing.contains(&row.id);
        if row.remaining_us < -stale_us {
            plan.stale.push(row.id);
            if shown_here {
                plan.end.push(row.id);
            }
        } else if shown_here && row.shown_epoch.is_some_and(|e| e != epoch) {
            plan.withdraw.push(row.id);
        } else if !shown_here && row.remaining_us > 0 {
            plan.show.push(row.id);
        }
    }
    if complete {
        let mut gone: Vec<i64> = showing.iter().filter(|id| !seen.contains(id)).copied().collect();
        gone.sort_unstable();
        plan.end.extend(gone);
    }
    let ending = plan.withdraw.len() + plan.end.len();
    let room = cap.saturating_sub(showing.len().saturating_sub(ending));
    plan.show.truncate(room);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Approval;

    fn answer() -> ApprovalAnswer {
        ApprovalAnswer { verdict: Approval::Allow, by: "telegram:42 (Alice)".into() }
    }

    fn asked(id: i64, answered: bool) -> Asked {
        Asked { id, answer: answered.then(answer) }
    }

    #[test]
    fn the_asking_node_passes_verdicts_on_once_and_forgets_what_nobody_waits_for() {
        let waiting = HashMap::from([(1, true), (2, true), (3, false), (5, false)]);
        let rows = [asked(1, true), asked(2, false), asked(3, false), asked(4, true)];
        let plan = asking_plan(&rows, &waiting);
        assert_eq!(plan.deliver, vec![(1, answer())], "only a verdict someone waits for");
        // 1 passed on, 3 given up, 4 an earlier process's, 5 given up and its row already gone.
        assert_eq!(plan.forget, vec![1, 3, 4, 5]);
        assert_eq!(asking_plan(&[], &HashMap::new()), AskingPlan::default());
    }

    fn row(id: i64, shown_epoch: Option<i64>, remaining_s: i64) -> Unanswered {
        Unanswered { id, shown_epoch, remaining_us: remaining_s * 1_000_000 }
    }

    #[test]
    fn a_gateway_shows_what_no_live_gateway_shows_and_keeps_its_own() {
        let rows = [row(1, None, 60), row(2, Some(3), 60), row(3, Some(4), 60), row(4, Some(4), 60)];
        // Epoch 4 is ours: 3 shown by us and still on screen; 4 marked by us
        // but not on screen (the queue was full): shown again; 2 by an older gateway.
        let plan = show_plan(&rows, 4, &HashSet::from([3]), 64, true);
        assert_eq!(plan, ShowPlan { show: vec![1, 2, 4], ..ShowPlan::default() });
    }

    #[test]
    fn a_gateway_withdraws_prompts_shown_by_another_ends_expired_or_gone_ones_and_deletes_stale_rows() {
        let stale = -(STALE_AFTER.as_secs() as i64) - 1;
        let rows = [row(1, Some(5), 60), row(2, Some(4), stale), row(3, None, -1), row(6, Some(4), 60)];
        let showing = HashSet::from([1, 2, 6, 7]);
        let plan = show_plan(&rows, 4, &showing, 64, true);
        // 1 shown under epoch 5: another gateway settles it, so this one leaves it alone.
        assert_eq!(plan.withdraw, vec![1]);
        // 2 stale (a real timeout), 7 gone (its session gave up, or its verdict was passed on).
        assert_eq!(plan.end, vec![2, 7]);
        assert_eq!(plan.stale, vec![2]);
        assert!(plan.show.is_empty(), "an expired row is not shown: {plan:?}");
        // A look cut short says nothing of the rows it did not read.
        let plan = show_plan(&rows[..1], 4, &showing, 64, false);
        assert_eq!((plan.withdraw, plan.end), (vec![1], vec![]));
    }

    #[test]
    fn an_expired_row_shown_by_another_gateway_is_its_to_settle() {
        // Expired, not yet stale, and another gateway marked it: withdrawn, not ended here.
        let plan = show_plan(&[row(1, Some(5), -1)], 4, &HashSet::from([1]), 64, true);
        assert_eq!((plan.withdraw, plan.end), (vec![1], vec![]));
    }

    #[test]
    fn a_gateway_shows_at_most_cap_prompts_at_once() {
        let rows: Vec<_> = (1..=10).map(|id| row(id, None, 60)).collect();
        let showing = HashSet::from([1, 2, 3]);
        assert_eq!(show_plan(&rows, 1, &showing, 5, true).show, vec![4, 5]);
        assert!(show_plan(&rows, 1, &showing, 3, true).show.is_empty());
        // A prompt ended frees its place at once.
        let plan = show_plan(&rows[1..], 1, &showing, 3, true);
        assert_eq!((plan.end, plan.show), (vec![1], vec![4]));
    }
}
