//! Store tests against a real SQLite file in a temp dir.

use super::*;
use crate::domain::{Inbound, Source};

async fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
    (dir, store)
}

fn group(name: &str) -> GroupName {
    name.parse().unwrap()
}

#[tokio::test]
async fn groups_register_once() {
    let (_dir, store) = temp_store().await;
    store.add_group(&group("a"), None).await.unwrap();
    let again = store.add_group(&group("a"), None).await.unwrap_err();
    assert!(matches!(again, StoreError::GroupExists(_)));
    let tools = vec!["Bash".to_owned()];
    store.add_group(&group("b"), Some(&tools)).await.unwrap();
    let all = store.groups().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].allowed_tools.as_deref(), Some(&tools[..]));
    assert!(matches!(store.group("zzz").await, Err(StoreError::UnknownGroup(_))));
}

#[tokio::test]
async fn history_merges_kinds_in_order_and_limits_to_newest() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.add_group(&g, None).await.unwrap();
    store.insert_inbound(&Inbound::new(g.clone(), Source::Console, "me", "hi")).await.unwrap();
    let task = TaskFrame {
        subtype: "task_started".into(),
        session_id: Some("s".into()),
        task_id: Some("t1".into()),
        task_type: Some("local_bash".into()),
        status: None,
        summary: None,
        description: Some("bg sleep".into()),
    };
    store.record_task_frame(&g, &task, "{}").await.unwrap();
    let result = TurnResult {
        session_id: Some("s".into()),
        subtype: "success".into(),
        is_error: false,
        text: Some("hello".into()),
        total_cost_usd: Some(0.5),
        duration_ms: Some(12),
        num_turns: Some(1),
        origin: None,
        errors: vec![],
    };
    store.record_result(&g, &result, "{}").await.unwrap();

    let all = store.history(&g, 100).await.unwrap();
    let kinds: Vec<_> = all.iter().map(|e| serde_json::to_value(e).unwrap()["kind"].clone()).collect();
    assert_eq!(kinds, ["inbound", "task", "result"]);
    match &all[1] {
        HistoryEntry::Task { description, summary, task_id, .. } => {
            assert_eq!(description.as_deref(), Some("bg sleep"));
            assert_eq!(summary, &None);
            assert_eq!(task_id.as_deref(), Some("t1"));
        }
        other => panic!("expected a task, got {other:?}"),
    }
    let last_two = store.history(&g, 2).await.unwrap();
    assert_eq!(last_two, all[1..].to_vec());
}
