//! The indicator loops under paused time, following a scripted turn.

use std::sync::atomic::AtomicUsize;

use tokio::sync::watch;

use super::*;

/// A turn flag the test flips.
struct Flag(watch::Receiver<bool>);

impl Turn for Flag {
    fn in_progress(&self) -> bool {
        *self.0.borrow()
    }
    async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
}

fn group(n: usize) -> GroupName {
    format!("g{n}").parse().unwrap()
}

/// Counts the `show(false)` calls, which each loop makes as it ends.
fn counting(offs: &Arc<AtomicUsize>) -> impl Fn(bool) -> std::future::Ready<Result<(), String>> + Send + 'static {
    let offs = offs.clone();
    move |on| {
        if !on {
            offs.fetch_add(1, Ordering::SeqCst);
        }
        std::future::ready(Ok(()))
    }
}

/// Lets the loops run until `n` of them ended.
async fn until_ended(offs: &AtomicUsize, n: usize) {
    while offs.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The entry leaves as the task ends, just after its last `show(false)`.
    tokio::task::yield_now().await;
}

#[tokio::test(start_paused = true)]
async fn the_loops_of_groups_whose_turns_ended_leave_the_map() {
    let typing = Typing::default();
    let offs = Arc::new(AtomicUsize::new(0));
    let mut turns = Vec::new();
    for n in 0..50 {
        let (tx, rx) = watch::channel(true);
        typing.start(&group(n), Flag(rx), Duration::from_secs(4), counting(&offs));
        turns.push(tx);
    }
    assert_eq!(typing.len(), 50);
    for tx in &turns {
        tx.send_replace(false);
    }
    until_ended(&offs, 50).await;
    assert_eq!(typing.len(), 0, "no entry for a group that is not working");
}

#[tokio::test(start_paused = true)]
async fn a_group_typing_again_gets_a_new_loop_and_its_entry_stays_while_it_runs() {
    let typing = Typing::default();
    let offs = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = watch::channel(true);
    typing.start(&group(1), Flag(rx), Duration::from_secs(4), counting(&offs));
    tx.send_replace(false);
    until_ended(&offs, 1).await;

    let (tx, rx) = watch::channel(true);
    typing.start(&group(1), Flag(rx), Duration::from_secs(4), counting(&offs));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(typing.len(), 1, "still typing");
    tx.send_replace(false);
    until_ended(&offs, 2).await;
    assert_eq!(typing.len(), 0);
}
