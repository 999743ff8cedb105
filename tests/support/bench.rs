//! What the benches share: a reply shaped like an agent's, percentile rows,
//! and the stored times of a group's results.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pincer::domain::GroupName;
use pincer::store::{HistoryEntry, Store};

/// A Markdown reply of about `kib` KiB, shaped like what an agent writes
/// (headings, emphasis, inline code, a list, a fenced code block).
pub fn agent_reply(kib: usize) -> String {
    let block = "## Findings\n\nThe **build** failed in `src/app.rs` because of *one* missing import:\n\n\
                 - first point, with a [link](https://example.com)\n- second point\n\n\
                 ```rust\nfn main() {\n    println!(\"hello <world> & friends\");\n}\n```\n\n";
    block.repeat((kib * 1024).div_ceil(block.len()))
}

/// Prints median, p95, p99 (nearest rank) and the max of `samples` under `title`.
pub fn print_row(title: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!("\n{title}");
    print_table(&samples);
    let ms: Vec<String> = samples.iter().map(|d| format!("{:.2}", d.as_secs_f64() * 1000.0)).collect();
    println!("samples_ms {}", ms.join(" "));
}

/// [`print_row`] for many samples (a load run's thousands): the same table,
/// the count in the title, and no samples line.
pub fn print_summary_row(title: &str, mut samples: Vec<Duration>) {
    if samples.is_empty() {
        println!("\n{title}: no samples");
        return;
    }
    samples.sort();
    println!("\n{title} (n = {})", samples.len());
    print_table(&samples);
}

/// The percentile table of `sorted` (not empty).
fn print_table(sorted: &[Duration]) {
    let n = sorted.len();
    let at = |p: f64| sorted[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    println!("| median | p95 | p99 | max |");
    println!("| --- | --- | --- | --- |");
    println!("| {:.1?} | {:.1?} | {:.1?} | {:.1?} |", at(0.5), at(0.95), at(0.99), sorted[n - 1]);
}

/// Ties `Instant`s to the wall clock the store's times use.
#[derive(Clone, Copy)]
pub struct WallClock(SystemTime, Instant);

impl WallClock {
    pub fn now() -> WallClock {
        WallClock(SystemTime::now(), Instant::now())
    }

    /// `at` as unix microseconds.
    pub fn micros(&self, at: Instant) -> i64 {
        let wall = self.0 + at.duration_since(self.1);
        wall.duration_since(UNIX_EPOCH).expect("after 1970").as_micros() as i64
    }
}

/// Per reply after the first (the warm-up): when it reached the chat (`sent`)
/// minus when its result was stored.
pub async fn result_to_delivered(store: &Store, group: &str, sent: &[Instant], clock: WallClock) -> Vec<Duration> {
    let group: GroupName = group.parse().expect("a group name");
    let results: Vec<i64> = store
        .history()
        .history(&group, 10_000)
        .await
        .expect("the history")
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { at_us, .. } => Some(*at_us),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), sent.len(), "one reply per result");
    let gaps = results.iter().zip(sent).skip(1).map(|(stored, at)| (clock.micros(*at) - stored).max(0) as u64);
    gaps.map(Duration::from_micros).collect()
}
