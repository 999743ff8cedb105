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
    store.add_group(&group("a"), &GroupSettings::default()).await.unwrap();
    let again = store.add_group(&group("a"), &GroupSettings::default()).await.unwrap_err();
    assert!(matches!(again, StoreError::GroupExists(_)));
    let tools = vec!["Bash".to_owned()];
    let settings = GroupSettings { allowed_tools: Some(tools.clone()), ..GroupSettings::default() };
    store.add_group(&group("b"), &settings).await.unwrap();
    let all = store.groups().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].settings.allowed_tools.as_deref(), Some(&tools[..]));
    assert!(matches!(store.group("zzz").await, Err(StoreError::UnknownGroup(_))));
}

#[tokio::test]
async fn history_merges_kinds_in_order_and_limits_to_newest() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.add_group(&g, &GroupSettings::default()).await.unwrap();
    store.insert_inbound(&Inbound::new(g.clone(), Source::Console, "me", "hi"), InboundState::Queued).await.unwrap();
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
    store.record_result(&g, &result, Some(0.25), "{}").await.unwrap();

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

#[tokio::test]
async fn telegram_bindings_prefer_the_topic_and_stay_unique() {
    let (_dir, store) = temp_store().await;
    let whole = TelegramTarget { chat_id: -100, topic_id: None };
    let topic = TelegramTarget { chat_id: -100, topic_id: Some(7) };
    let bind = |target| GroupSettings { telegram: Some(target), ..GroupSettings::default() };
    store.add_group(&group("whole"), &bind(whole)).await.unwrap();
    store.add_group(&group("topic"), &bind(topic)).await.unwrap();
    let taken = store.add_group(&group("dup"), &bind(whole)).await.unwrap_err();
    assert!(matches!(&taken, StoreError::ChatTaken(g) if g == "whole"), "{taken}");
    assert!(matches!(store.group("dup").await, Err(StoreError::UnknownGroup(_))), "a failed add leaves nothing");

    let find = |topic| store.group_for_telegram(-100, topic);
    assert_eq!(find(Some(7)).await.unwrap().unwrap().name.as_str(), "topic");
    assert_eq!(find(Some(8)).await.unwrap().unwrap().name.as_str(), "whole");
    assert_eq!(find(None).await.unwrap().unwrap().name.as_str(), "whole");
    assert!(store.group_for_telegram(-200, None).await.unwrap().is_none());

    store.move_telegram_chat(-100, -1001).await.unwrap();
    assert_eq!(store.group_for_telegram(-1001, Some(7)).await.unwrap().unwrap().name.as_str(), "topic");

    let g = group("whole");
    store.set_group_active(&g, false, Some("bot was kicked")).await.unwrap();
    let record = store.group("whole").await.unwrap();
    assert!(!record.active);
    assert_eq!(record.inactive_reason.as_deref(), Some("bot was kicked"));
    store.allow_tool(&g, "Bash", &["Read".to_owned()]).await.unwrap();
    store.allow_tool(&g, "Bash", &[]).await.unwrap();
    let tools = store.group("whole").await.unwrap().settings.allowed_tools.unwrap();
    assert_eq!(tools, vec!["Read".to_owned(), "Bash".to_owned()]);
}

#[tokio::test]
async fn observed_messages_are_taken_once_as_context() {
    let (_dir, store) = temp_store().await;
    let g = group("chat");
    store.add_group(&g, &GroupSettings::default()).await.unwrap();
    for text in ["one", "two", "three"] {
        let msg = Inbound::new(g.clone(), Source::Telegram, "Bob", text);
        store.insert_inbound(&msg, InboundState::Observed).await.unwrap();
    }
    let (lines, omitted) = store.take_context(&g, 2).await.unwrap();
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["two", "three"], "the newest, oldest first");
    assert_eq!(omitted, 1);
    let (again, omitted) = store.take_context(&g, 2).await.unwrap();
    assert!(again.is_empty());
    assert_eq!(omitted, 0);
    assert_eq!(store.group_cost(&g).await.unwrap(), 0.0);
}
