//! Store tests against a real SQLite file in a temp dir.

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::SqliteConnection;

use super::*;
use crate::domain::{ChatAddress, GroupName, Inbound, InboundId, Platform, Source, TaskFrame, TurnResult};

/// The tests' PostgreSQL server (one per test process, started on first use).
#[path = "../../tests/support/postgres.rs"]
pub(crate) mod postgres;

/// The cluster's `nodes` table, as tests outside the store see it.
#[path = "tests_nodes.rs"]
pub(crate) mod nodes;

/// Which backend a store test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    /// The backend of the test running in this task: set by [`on_both!`];
    /// tests outside it (other modules') get SQLite.
    pub(crate) static BACKEND: Backend;
}

/// Declares a store test that runs twice, as `NAME::sqlite` and
/// `NAME::postgres`: [`temp_store`] and [`store_with`] inside it open a
/// fresh store on each backend in turn.
macro_rules! on_both {
    ($(#[$meta:meta])* async fn $name:ident() $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn test() $body

            #[tokio::test]
            async fn sqlite() {
                $crate::store::tests::BACKEND.scope($crate::store::tests::Backend::Sqlite, test()).await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::store::tests::BACKEND.scope($crate::store::tests::Backend::Postgres, test()).await
            }
        }
    };
}
pub(crate) use on_both;

/// A fresh store on this test's backend ([`BACKEND`]): a SQLite file in the
/// returned temp dir, or an empty database on the tests' PostgreSQL.
pub(crate) async fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let location = match BACKEND.try_with(|b| *b).unwrap_or(Backend::Sqlite) {
        Backend::Sqlite => Location::File(dir.path().join("pincer.db")),
        Backend::Postgres => Location::Postgres(postgres::server().fresh_database()),
    };
    let store = Store::connect(&location).await.unwrap();
    (dir, store)
}

/// A store in a temp dir with `group` registered: for other modules' tests.
pub(crate) async fn store_with(group: &GroupName) -> (tempfile::TempDir, Store) {
    let (dir, store) = temp_store().await;
    store.groups().add_group(group, &GroupSettings::default()).await.unwrap();
    (dir, store)
}

/// A successful turn's result with `text`, and nothing else known.
pub(crate) fn success(text: &str) -> TurnResult {
    TurnResult {
        session_id: Some("s".into()),
        subtype: "success".into(),
        is_error: false,
        text: Some(text.into()),
        total_cost_usd: None,
        duration_ms: None,
        num_turns: None,
        origin: None,
        errors: vec![],
        usage: Default::default(),
    }
}

fn group(name: &str) -> GroupName {
    name.parse().unwrap()
}

on_both! {
async fn groups_register_once() {
    let (_dir, store) = temp_store().await;
    store.groups().add_group(&group("a"), &GroupSettings::default()).await.unwrap();
    let again = store.groups().add_group(&group("a"), &GroupSettings::default()).await.unwrap_err();
    assert!(matches!(again, StoreError::GroupExists(_)));
    let tools = vec!["Bash".to_owned()];
    let settings = GroupSettings { allowed_tools: Some(tools.clone()), ..GroupSettings::default() };
    store.groups().add_group(&group("b"), &settings).await.unwrap();
    let all = store.groups().groups().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].settings.allowed_tools.as_deref(), Some(&tools[..]));
    assert_eq!(all[1].settings.tools, crate::domain::ToolsFor::Everyone, "today's policy by default");
    let admins_only = GroupSettings { tools: crate::domain::ToolsFor::Admins, ..settings };
    store.groups().save_group_settings(&group("b"), &admins_only).await.unwrap();
    assert_eq!(store.groups().group("b").await.unwrap().settings, admins_only);
    assert!(matches!(store.groups().group("zzz").await, Err(StoreError::UnknownGroup(_))));
}
}

on_both! {
async fn history_merges_kinds_in_order_and_limits_to_newest() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    store
        .queue()
        .insert_inbound(&Inbound::new(g.clone(), Source::Console, "me", "hi"), InboundState::Queued)
        .await
        .unwrap();
    let task = TaskFrame {
        subtype: "task_started".into(),
        session_id: Some("s".into()),
        task_id: Some("t1".into()),
        task_type: Some("local_bash".into()),
        status: None,
        summary: None,
        description: Some("bg sleep".into()),
    };
    store.journal().record_task_frame(&g, &task, "{}").await.unwrap();
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
        usage: Default::default(),
    };
    store.outbox().record_result(&g, &result, Some(0.25), "{}", None, &[]).await.unwrap();

    let all = store.history().history(&g, 100).await.unwrap();
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
    let last_two = store.history().history(&g, 2).await.unwrap();
    assert_eq!(last_two, all[1..].to_vec());
}
}

on_both! {
async fn chat_bindings_prefer_the_thread_and_stay_unique() {
    let (_dir, store) = temp_store().await;
    let whole = ChatAddress::telegram(-100, None);
    let topic = ChatAddress::telegram(-100, Some(7));
    let bind = |at: &ChatAddress| GroupSettings { chat: Some(at.clone()), ..GroupSettings::default() };
    store.groups().add_group(&group("whole"), &bind(&whole)).await.unwrap();
    store.groups().add_group(&group("topic"), &bind(&topic)).await.unwrap();
    let taken = store.groups().add_group(&group("dup"), &bind(&whole)).await.unwrap_err();
    assert!(matches!(&taken, StoreError::ChatTaken(g) if g == "whole"), "{taken}");
    assert!(
        matches!(store.groups().group("dup").await, Err(StoreError::UnknownGroup(_))),
        "a failed add leaves nothing"
    );

    let find = |topic| store.group_for_chat_owned(ChatAddress::telegram(-100, topic));
    assert_eq!(find(Some(7)).await.unwrap().unwrap().name.as_str(), "topic");
    assert_eq!(find(Some(8)).await.unwrap().unwrap().name.as_str(), "whole");
    assert_eq!(find(None).await.unwrap().unwrap().name.as_str(), "whole");
    assert!(store.groups().group_for_chat(&ChatAddress::telegram(-200, None)).await.unwrap().is_none());
    let console = ChatAddress::console(&group("whole"));
    assert!(store.groups().group_for_chat(&console).await.unwrap().is_none(), "another platform, same id text");

    store.groups().move_chat(Platform::Telegram, "-100", "-1001").await.unwrap();
    let moved = store.groups().group_for_chat(&ChatAddress::telegram(-1001, Some(7))).await.unwrap().unwrap();
    assert_eq!(moved.name.as_str(), "topic");
    assert_eq!(moved.settings.chat, Some(ChatAddress::telegram(-1001, Some(7))));

    let g = group("whole");
    store.groups().set_group_active(&g, false, Some("bot was kicked")).await.unwrap();
    let record = store.groups().group("whole").await.unwrap();
    assert!(!record.active);
    assert_eq!(record.inactive_reason.as_deref(), Some("bot was kicked"));
    store.groups().allow_tool(&g, "Bash", &["Read".to_owned()]).await.unwrap();
    store.groups().allow_tool(&g, "Bash", &[]).await.unwrap();
    let tools = store.groups().group("whole").await.unwrap().settings.allowed_tools.unwrap();
    assert_eq!(tools, vec!["Read".to_owned(), "Bash".to_owned()]);
}
}

impl Store {
    /// `group_for_chat` taking its address by value, for closures in tests.
    async fn group_for_chat_owned(&self, at: ChatAddress) -> Result<Option<GroupRecord>, StoreError> {
        self.groups().group_for_chat(&at).await
    }
}

#[tokio::test]
async fn telegram_chats_of_an_older_store_become_chat_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let mut before = sqlx::migrate!("./migrations");
    before.migrations = before.migrations.iter().filter(|m| m.version < 5).cloned().collect::<Vec<_>>().into();
    before.run(&pool).await.unwrap();
    for (name, chat, topic) in [("a", -100_i64, None), ("b", -100, Some(7_i64)), ("c", 42, None)] {
        sqlx::query("INSERT INTO groups (name, created_at_us) VALUES ($1, 0)").bind(name).execute(&pool).await.unwrap();
        sqlx::query("INSERT INTO telegram_chats (group_name, chat_id, topic_id) VALUES ($1, $2, $3)")
            .bind(name)
            .bind(chat)
            .bind(topic)
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;

    let store = Store::open(&path).await.unwrap();
    let chats: Vec<_> = store.groups().groups().await.unwrap().into_iter().map(|g| g.settings.chat).collect();
    assert_eq!(
        chats,
        [
            Some(ChatAddress::telegram(-100, None)),
            Some(ChatAddress::telegram(-100, Some(7))),
            Some(ChatAddress::telegram(42, None))
        ]
    );
    let found = store.groups().group_for_chat(&ChatAddress::telegram(-100, Some(7))).await.unwrap().unwrap();
    assert_eq!(found.name.as_str(), "b");
}

on_both! {
async fn observed_messages_are_taken_once_as_context_of_the_next_message_after_them() {
    let (_dir, store) = temp_store().await;
    let g = group("chat");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let say = |text: &str| {
        let mut msg = Inbound::new(g.clone(), Source::Chat(crate::domain::Platform::Telegram), "Bob", text);
        msg.sender_id = Some(format!("id-{text}"));
        msg
    };
    for text in ["one", "two", "three"] {
        store.queue().insert_inbound(&say(text), InboundState::Observed).await.unwrap();
    }
    let first = store.queue().insert_inbound(&say("to the agent"), InboundState::Queued).await.unwrap();
    // Said after the first message: context of the next one, not of it.
    store.queue().insert_inbound(&say("four"), InboundState::Observed).await.unwrap();
    let second = store.queue().insert_inbound(&say("again"), InboundState::Queued).await.unwrap();

    let taken = store.queue().take_context(&g, 2, first).await.unwrap();
    let texts: Vec<&str> = taken.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, ["two", "three"], "the newest, oldest first");
    assert_eq!(taken.lines[0].sender_id.as_deref(), Some("id-two"), "the agent is told whether they are admins");
    assert_eq!(taken.omitted, 1);
    let again = store.queue().take_context(&g, 2, first).await.unwrap();
    assert!(again.lines.is_empty());
    assert_eq!(again.omitted, 0);
    let next = store.queue().take_context(&g, 2, second).await.unwrap();
    assert_eq!(next.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["four"]);
    assert_eq!(store.budgets().group_cost(&g).await.unwrap(), 0.0);
}
}

on_both! {
async fn the_queue_gives_a_groups_messages_in_order_and_fails_what_cannot_be_read() {
    let (_dir, store) = temp_store().await;
    let (a, b) = (group("a"), group("b"));
    for g in [&a, &b] {
        store.groups().add_group(g, &GroupSettings::default()).await.unwrap();
    }
    let chat = |g: &GroupName, text: &str| Inbound::new(g.clone(), Source::Chat(Platform::Telegram), "ann", text);
    store.queue().insert_inbound(&chat(&b, "seen elsewhere"), InboundState::Observed).await.unwrap();
    let one = store.queue().insert_inbound(&chat(&a, "one"), InboundState::Queued).await.unwrap();
    store.queue().insert_inbound(&chat(&b, "other group"), InboundState::Queued).await.unwrap();
    store.queue().insert_inbound(&chat(&a, "seen"), InboundState::Observed).await.unwrap();
    raw(
        &store,
        "INSERT INTO inbound (group_name, at_us, source, sender, text, state) VALUES ('a', 1, 'carrier pigeon', 'x', 'odd', 'queued')",
    )
    .await;
    let three = store.queue().insert_inbound(&chat(&a, "three"), InboundState::Queued).await.unwrap();
    let four = store.queue().insert_inbound(&chat(&a, "four"), InboundState::Queued).await.unwrap();

    let first = store.queue().queued_inbound(&a, InboundId(0), 3).await.unwrap();
    let texts: Vec<&str> = first.iter().map(|p| p.msg.text.as_str()).collect();
    assert_eq!(texts, ["one", "three"], "the unreadable row is left out, the other group's too");
    assert_eq!(first[0].id, one);
    let has_context: Vec<bool> = first.iter().map(|p| p.has_context).collect();
    assert_eq!(has_context, [false, true], "only a line of its own group, said before it, is context");
    store.queue().take_context(&a, 10, three).await.unwrap();
    let rest = store.queue().queued_inbound(&a, three, 3).await.unwrap();
    assert_eq!(rest.iter().map(|p| p.id).collect::<Vec<_>>(), [four]);
    assert!(!rest[0].has_context, "the line went with the message before");
    // The unreadable row was failed, so it never stands in the queue again.
    let again = store.queue().queued_inbound(&a, InboundId(0), 10).await.unwrap();
    assert_eq!(again.len(), 3);
}
}

on_both! {
async fn a_restart_queues_again_what_was_written_but_fails_scheduled_and_console_lines() {
    let (_dir, store) = temp_store().await;
    let (a, b) = (group("a"), group("b"));
    for g in [&a, &b] {
        store.groups().add_group(g, &GroupSettings::default()).await.unwrap();
    }
    let chat = |g: &GroupName, text: &str| Inbound::new(g.clone(), Source::Chat(Platform::Telegram), "ann", text);
    let written = store.queue().insert_inbound(&chat(&b, "written"), InboundState::Sent).await.unwrap();
    store.queue().insert_inbound(&chat(&a, "waiting"), InboundState::Queued).await.unwrap();
    store.queue().insert_inbound(&chat(&b, "waiting too"), InboundState::Queued).await.unwrap();
    store.queue().insert_inbound(&chat(&a, "done"), InboundState::Answered).await.unwrap();
    let scheduled = Inbound::new(a.clone(), Source::Scheduled, "schedule", "report");
    let scheduled = store.queue().insert_inbound(&scheduled, InboundState::Sent).await.unwrap();
    let console = Inbound::new(a.clone(), Source::Console, "me", "hi");
    let console = store.queue().insert_inbound(&console, InboundState::Queued).await.unwrap();

    let recovered = store.queue().recover_after_restart(chrono::Utc::now()).await.unwrap();
    let left = |group: &str, written_again, waiting| GroupLeft { group: group.into(), written_again, waiting };
    assert_eq!(recovered.groups, [left("b", 1, 2), left("a", 0, 1)], "per group, in the order of their oldest message");
    let b_queue: Vec<InboundId> =
        store.queue().queued_inbound(&b, InboundId(0), 10).await.unwrap().iter().map(|p| p.id).collect();
    assert_eq!(b_queue[0], written, "the written one first, as before");
    for id in [scheduled, console] {
        let state: String = sqlx::query_scalar("SELECT state FROM inbound WHERE id = $1")
            .bind(id.0)
            .fetch_one(&store.db.pool)
            .await
            .unwrap();
        assert_eq!(state, "failed");
    }
    // A supervised restart of one group's session puts back only its own written chat messages.
    store.queue().set_inbound_state(&b_queue, InboundState::Sent).await.unwrap();
    assert_eq!(store.queue().requeue_sent(&a).await.unwrap(), 0);
    assert_eq!(store.queue().requeue_sent(&b).await.unwrap(), 2);
}
}

on_both! {
async fn a_second_copy_of_a_platform_message_is_refused() {
    let (_dir, store) = temp_store().await;
    let g = group("wa");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let mut msg = Inbound::new(g.clone(), Source::Chat(Platform::WhatsApp), "Bob", "hi");
    msg.external_id = Some("3EB0ABC".into());
    store.queue().insert_inbound(&msg, InboundState::Queued).await.unwrap();
    let again = store.queue().insert_inbound(&msg, InboundState::Observed).await.unwrap_err();
    assert!(matches!(&again, StoreError::Duplicate(id) if id == "3EB0ABC"), "{again}");
    let other_platform = Inbound { source: Source::Chat(Platform::Telegram), ..msg.clone() };
    store.queue().insert_inbound(&other_platform, InboundState::Queued).await.unwrap();
    let without_id = Inbound { external_id: None, ..msg };
    store.queue().insert_inbound(&without_id, InboundState::Queued).await.unwrap();
    store.queue().insert_inbound(&without_id, InboundState::Queued).await.unwrap();
}
}

on_both! {
async fn sent_ids_and_channel_health_are_kept() {
    let (_dir, store) = temp_store().await;
    let g = group("wa");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let at = ChatAddress::whatsapp_group("120363001@g.us").unwrap();
    assert!(!store.channels().was_sent(&at, "3EB0").await.unwrap());
    store.channels().record_sent(&at, "3EB0").await.unwrap();
    store.channels().record_sent(&at, "3EB0").await.unwrap();
    assert!(store.channels().was_sent(&at, "3EB0").await.unwrap());
    assert!(!store.channels().was_sent(&ChatAddress::whatsapp_group("120363002@g.us").unwrap(), "3EB0").await.unwrap());

    assert_eq!(store.channels().channel_health(Platform::WhatsApp).await.unwrap(), None);
    store.channels().set_channel_health(Platform::WhatsApp, "connected", None, Some("4915112345678")).await.unwrap();
    store.channels().note_inbound(Platform::WhatsApp).await.unwrap();
    store
        .channels()
        .set_channel_health(Platform::WhatsApp, "logged_out", Some("logged out on the phone"), None)
        .await
        .unwrap();
    let health = store.channels().channel_health(Platform::WhatsApp).await.unwrap().unwrap();
    assert_eq!((health.state.as_str(), health.linked_as.as_deref()), ("logged_out", Some("4915112345678")));
    assert_eq!(health.detail.as_deref(), Some("logged out on the phone"));
    assert!(health.last_inbound_us.is_some());
}
}

on_both! {
async fn tools_allowed_at_the_same_time_all_stay_allowed() {
    let (_dir, store) = temp_store().await;
    let g = group("busy");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let tools: Vec<String> = (0..12).map(|i| format!("Tool{i}")).collect();
    let default = ["Read".to_owned()];
    let groups = store.groups();
    let adds = tools.iter().map(|t| groups.allow_tool(&g, t, &default));
    for added in futures_util::future::join_all(adds).await {
        added.unwrap();
    }
    let allowed = store.groups().group("busy").await.unwrap().settings.allowed_tools.unwrap();
    assert_eq!(allowed.len(), 13, "{allowed:?}");
    assert!(tools.iter().all(|t| allowed.contains(t)) && allowed[0] == "Read", "{allowed:?}");
    assert!(matches!(store.groups().allow_tool(&group("nobody"), "Bash", &[]).await, Err(StoreError::UnknownGroup(_))));
}
}

on_both! {
async fn a_result_settles_its_messages_in_its_own_transaction() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let chat = |text: &str| Inbound::new(g.clone(), Source::Chat(Platform::Telegram), "ann", text);
    let (one, two, three) = (
        store.queue().insert_inbound(&chat("one"), InboundState::Sent).await.unwrap(),
        store.queue().insert_inbound(&chat("two"), InboundState::Sent).await.unwrap(),
        store.queue().insert_inbound(&chat("three"), InboundState::Sent).await.unwrap(),
    );
    let result = success("done");
    let settles = [(one, InboundState::Answered), (two, InboundState::Failed)];
    store.outbox().record_result(&g, &result, None, "{}", None, &settles).await.unwrap();
    // Nothing else was written: what a restart would send again is only the unsettled one.
    let recovered = store.queue().recover_after_restart(chrono::Utc::now()).await.unwrap();
    assert_eq!(recovered.groups, [GroupLeft { group: "a".into(), written_again: 1, waiting: 1 }]);
    let again: Vec<InboundId> =
        store.queue().queued_inbound(&g, InboundId(0), 10).await.unwrap().iter().map(|p| p.id).collect();
    assert_eq!(again, [three]);
}
}

/// Runs raw SQL on the store, as an operator's sqlite3 (or another program) would.
async fn raw(store: &Store, sql: &str) {
    sqlx::query(sql).execute(&store.db.pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Writes a value of the wrong type, as only SQLite's columns take one:
/// whether it was written. PostgreSQL's typed columns refuse the write itself.
async fn mistyped(store: &Store, sql: &str) -> bool {
    match BACKEND.try_with(|b| *b).unwrap_or(Backend::Sqlite) {
        Backend::Sqlite => {
            raw(store, sql).await;
            true
        }
        Backend::Postgres => {
            let refused = sqlx::query(sql).execute(&store.db.pool).await;
            assert!(refused.is_err(), "PostgreSQL took a value of the wrong type: {sql}");
            false
        }
    }
}

on_both! {
async fn group_rows_changed_outside_pincer_are_skipped_or_refused_never_a_panic() {
    let (_dir, store) = temp_store().await;
    store.groups().add_group(&group("ok"), &GroupSettings::default()).await.unwrap();
    // A name pincer never accepts, and a flag that is text where a number belongs.
    raw(&store, "INSERT INTO groups (name, created_at_us) VALUES ('Bad Name/..', 0)").await;
    let typed =
        mistyped(&store, "INSERT INTO groups (name, created_at_us, is_main) VALUES ('typed', 'yesterday', x'00')").await;

    let names: Vec<String> = store.groups().groups().await.unwrap().into_iter().map(|g| g.name.to_string()).collect();
    assert_eq!(names, ["ok"], "the readable groups, the others logged and left out");
    for name in ["Bad Name/..", "typed"].into_iter().take(if typed { 2 } else { 1 }) {
        let e = store.groups().group(name).await.unwrap_err();
        assert!(matches!(e, StoreError::BadRow { table: "groups", .. }), "{name}: {e:?}");
        assert!(e.to_string().contains("sqlite3"), "says what to do: {e}");
    }
    raw(&store, "INSERT INTO chat_bindings (group_name, platform, chat) VALUES ('Bad Name/..', 'telegram', '7')").await;
    let at = ChatAddress::telegram(7, None);
    assert!(matches!(store.groups().group_for_chat(&at).await, Err(StoreError::BadRow { .. })));
}
}

on_both! {
async fn other_rows_changed_outside_pincer_are_skipped_never_a_panic() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    raw(&store, "INSERT INTO groups (name, created_at_us) VALUES ('Bad Name', 0)").await;
    // A message pincer was still to answer, with a time that is text.
    store
        .queue()
        .insert_inbound(&Inbound::new(g.clone(), Source::Console, "me", "hi"), InboundState::Queued)
        .await
        .unwrap();
    raw(&store, "UPDATE inbound SET source = 'telegram'").await;
    mistyped(
        &store,
        "INSERT INTO inbound (group_name, at_us, source, sender, text, sent_at_us, state)
                 VALUES ('a', 1, 'telegram', 'x', 'odd', 'noon', 'queued')",
    )
    .await;
    raw(
        &store,
        "INSERT INTO inbound (group_name, at_us, source, sender, text, state)
                 VALUES ('Bad Name', 1, 'telegram', 'x', 'odd', 'queued')",
    )
    .await;
    store.queue().recover_after_restart(chrono::Utc::now()).await.unwrap();
    let left = store.queue().queued_inbound(&g, InboundId(0), 10).await.unwrap();
    assert_eq!(left.iter().map(|p| p.msg.text.as_str()).collect::<Vec<_>>(), ["hi"]);

    // Schedules: a bad group, a time that is text; both are left out, and named when asked for.
    let schedule = |prompt: &str| crate::store::NewSchedule {
        group: g.clone(),
        prompt: prompt.into(),
        trigger: crate::domain::schedule::Trigger::interval("1h").unwrap(),
        context: crate::domain::schedule::ContextMode::Group,
    };
    let good = store.schedules().add_schedule(&schedule("good"), None).await.unwrap();
    let odd = store.schedules().add_schedule(&schedule("odd"), None).await.unwrap();
    let gone = store.schedules().add_schedule(&schedule("gone"), None).await.unwrap();
    let soon = mistyped(&store, &format!("UPDATE schedules SET next_run_us = 'soon' WHERE id = {}", odd.id.0)).await;
    raw(&store, &format!("UPDATE schedules SET group_name = 'Bad Name' WHERE id = {}", gone.id.0)).await;
    let active: Vec<_> = store.schedules().active_schedules().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(active, if soon { vec![good.id] } else { vec![good.id, odd.id] });
    if soon {
        assert!(matches!(store.schedules().schedule(odd.id).await, Err(StoreError::BadRow { table: "schedules", .. })));
    }
    let run = format!(
        "INSERT INTO schedule_runs (schedule_id, group_name, started_us, outcome) VALUES ({}, 'a', 'then', 'ok')",
        good.id.0
    );
    mistyped(&store, &run).await;
    assert!(store.schedules().runs(good.id).await.unwrap().is_empty());
}
}

on_both! {
async fn context_and_history_rows_changed_outside_pincer_are_skipped_never_a_panic() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    store
        .queue()
        .insert_inbound(&Inbound::new(g.clone(), Source::Console, "me", "fine"), InboundState::Observed)
        .await
        .unwrap();
    let odd_time = mistyped(
        &store,
        "INSERT INTO inbound (group_name, at_us, source, sender, text, sent_at_us, state)
                 VALUES ('a', 2, 'telegram', 'x', 'odd time', 'noon', 'observed')",
    )
    .await;
    mistyped(
        &store,
        "INSERT INTO inbound (group_name, at_us, source, sender, text, state)
                 VALUES ('a', 'later', 'telegram', 'x', 'odd order', 'answered')",
    )
    .await;
    let taken = store.queue().take_context(&g, 10, InboundId(i64::MAX)).await.unwrap();
    assert_eq!(taken.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["fine"]);
    let included: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inbound WHERE state = 'included'")
        .fetch_one(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(included, 1 + i64::from(odd_time), "both were taken, so neither comes back as context");
    let history = store.history().history(&g, 10).await.unwrap();
    assert!(history.iter().all(|e| !matches!(e, HistoryEntry::Inbound { text, .. } if text == "odd order")));
    assert!(!history.is_empty());
}
}

on_both! {
/// The message path has a connection of its own: with every connection of
/// the shared pool lent out (long reads: history, a backup, `pincer status`),
/// a message is still stored, pulled and answered, and its reply read and
/// marked delivered.
async fn a_message_goes_through_while_every_shared_connection_is_lent_out() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let mut lent = Vec::new();
    for _ in 0..store.db.pool.options().get_max_connections() {
        lent.push(store.db.pool.acquire().await.unwrap());
    }
    let result = success("hello");
    let path = async {
        let msg = Inbound::new(g.clone(), Source::Console, "me", "hi");
        let id = store.queue().insert_inbound(&msg, InboundState::Queued).await.unwrap();
        let pulled: Vec<InboundId> =
            store.queue().queued_inbound(&g, InboundId(0), 10).await.unwrap().iter().map(|p| p.id).collect();
        assert_eq!(pulled, [id]);
        store.queue().set_inbound_state(&[id], InboundState::Sent).await.unwrap();
        let out = Enqueue { kind: crate::domain::OutboundKind::Reply, text: "hello", console: true };
        store
            .outbox()
            .record_result(&g, &result, None, "{}", Some(out), &[(id, InboundState::Answered)])
            .await
            .unwrap();
        let row = store.outbox().next_queued(&ChatAddress::console(&g)).await.unwrap().expect("the reply waits");
        assert_eq!(store.outbox().outbox_delivered(&row.seen(), 1).await.unwrap(), Marked::Recorded);
    };
    // Through the shared pool it would wait for a connection (30 s, then fail).
    tokio::time::timeout(std::time::Duration::from_secs(10), path)
        .await
        .expect("the message path does not wait for the shared pool");
    drop(lent);
}
}

on_both! {
/// A result, its reply and the states it settles go to SQLite as one
/// statement list: the reply's row carries its result, and each message gets
/// its own state.
async fn a_results_reply_row_carries_its_result_and_each_message_its_state() {
    let (_dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let chat = |text: &str| Inbound::new(g.clone(), Source::Console, "ann", text);
    let one = store.queue().insert_inbound(&chat("one"), InboundState::Sent).await.unwrap();
    let two = store.queue().insert_inbound(&chat("two"), InboundState::Sent).await.unwrap();
    // An earlier result without a reply, so the reply's result is not the first row.
    store.outbox().record_result(&g, &success("earlier"), None, "{}", None, &[]).await.unwrap();
    let out = Enqueue { kind: crate::domain::OutboundKind::Reply, text: "both", console: true };
    let settles = [(one, InboundState::Answered), (two, InboundState::Failed)];
    let reply = store.outbox().record_result(&g, &success("both"), None, "{}", Some(out), &settles).await.unwrap();

    let (result_id, text): (i64, String) = sqlx::query_as("SELECT id, text FROM results ORDER BY id DESC LIMIT 1")
        .fetch_one(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(text, "both");
    let carried: Option<i64> = sqlx::query_scalar("SELECT result_id FROM outbox WHERE id = $1")
        .bind(reply.expect("a reply row").0)
        .fetch_one(&store.db.pool)
        .await
        .unwrap();
    assert_eq!(carried, Some(result_id));
    let states: Vec<String> =
        sqlx::query_scalar("SELECT state FROM inbound ORDER BY id").fetch_all(&store.db.pool).await.unwrap();
    assert_eq!(states, ["answered", "failed"]);
}
}

/// Whether a write through the shared pool goes through at once: no
/// transaction left open on the message path's connection holds SQLite's
/// write lock (a writer would wait out its 5 s busy timeout, then fail).
async fn writes_go_through(store: &Store, name: &str) {
    let (name, settings) = (group(name), GroupSettings::default());
    tokio::time::timeout(std::time::Duration::from_secs(3), store.groups().add_group(&name, &settings))
        .await
        .expect("no write lock is left held")
        .expect("the write succeeds");
}

/// A result's statement list that fails half-way (here its group is
/// unknown, which its row's foreign key refuses after `BEGIN`) leaves
/// nothing written and no transaction open behind it.
#[tokio::test]
async fn a_result_that_fails_half_way_leaves_no_row_and_no_lock_behind() {
    let (_dir, store) = temp_store().await;
    let out = Enqueue { kind: crate::domain::OutboundKind::Reply, text: "lost", console: true };
    let failed = store.outbox().record_result(&group("nobody"), &success("lost"), None, "{}", Some(out), &[]).await;
    assert!(failed.is_err(), "{failed:?}");
    writes_go_through(&store, "a").await;
    // The message path's connection works, and what it writes is committed.
    let msg = Inbound::new(group("a"), Source::Console, "ann", "hi");
    store.queue().insert_inbound(&msg, InboundState::Queued).await.unwrap();
    let seen: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inbound").fetch_one(&store.db.pool).await.unwrap();
    assert_eq!(seen, 1);
    let results: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM results").fetch_one(&store.db.pool).await.unwrap();
    assert_eq!(results, 0);
}

/// A borrower dropped inside a transaction of its own (its future
/// cancelled) has that transaction rolled back at once, not when the next
/// message comes.
#[tokio::test]
async fn a_transaction_left_open_by_a_dropped_borrower_is_rolled_back_at_once() {
    let (_dir, store) = temp_store().await;
    {
        let mut hot = store.db.hot.lock().await.unwrap();
        hot.unsettled();
        sqlx::query("BEGIN IMMEDIATE; INSERT INTO groups (name, created_at_us) VALUES ('half', 0)")
            .execute(&mut *hot)
            .await
            .unwrap();
    }
    writes_go_through(&store, "a").await;
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM groups").fetch_all(&store.db.pool).await.unwrap();
    assert_eq!(names, ["a"], "the dropped borrower's row is gone");
}

/// A second connection to the store's file, as another program would open
/// one (its own 5 s busy timeout).
async fn other_connection(dir: &tempfile::TempDir) -> SqliteConnection {
    use sqlx::ConnectOptions;
    SqliteConnectOptions::new().filename(dir.path().join("pincer.db")).connect().await.unwrap()
}

async fn names_seen_afresh(dir: &tempfile::TempDir, sql: &str) -> Vec<String> {
    let mut fresh = other_connection(dir).await;
    sqlx::query_scalar(sql).fetch_all(&mut fresh).await.unwrap()
}

/// `/readyz` whose client goes away while another program holds the write
/// lock: the check is dropped half-way, waiting for the lock. Once the lock
/// is free, writes through the store go through and are committed (a fresh
/// connection reads them), instead of waiting behind (or landing inside) a
/// transaction the check left open on a pooled connection.
#[tokio::test]
async fn a_readiness_check_dropped_while_the_database_is_locked_leaves_no_transaction_open() {
    use sqlx::Executor;
    let (dir, store) = temp_store().await;
    let mut locker = other_connection(&dir).await;
    locker.execute("BEGIN IMMEDIATE").await.unwrap();
    // The check waits for the lock (up to its 5 s busy timeout): dropped meanwhile.
    let dropped = tokio::time::timeout(std::time::Duration::from_millis(500), store.health().writable()).await;
    assert!(dropped.is_err(), "the check was still waiting for the lock");
    locker.execute("ROLLBACK").await.unwrap();
    // The dropped check's connection comes back to the pool once its thread
    // is done with what the check had sent (its `BEGIN`, which now gets the lock).
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while store.db.pool.num_idle() < store.db.pool.size() as usize {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the check's connection came back");

    // Through every pooled connection the next borrowers may get.
    let g0 = group("g0");
    for n in 0..4 {
        writes_go_through(&store, &format!("g{n}")).await;
        let journal = store.journal();
        let event = journal.record_session_event(&g0, "probe_gone", None, None);
        tokio::time::timeout(std::time::Duration::from_secs(3), event)
            .await
            .expect("no write lock is left held")
            .expect("the write succeeds");
    }
    let groups = names_seen_afresh(&dir, "SELECT name FROM groups ORDER BY name").await;
    assert_eq!(groups, ["g0", "g1", "g2", "g3"], "committed, not inside a transaction left open");
    let events = names_seen_afresh(&dir, "SELECT kind FROM session_events").await;
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(store.health().writable().await, "and the next check finds the store writable");
}

/// Whatever leaves a transaction open on a pooled connection (a borrower
/// cancelled between its own `BEGIN` and `COMMIT`), the pool rolls it back
/// as the connection is given back: another program's write goes through at
/// once, and the half-done transaction's row is gone.
#[tokio::test]
async fn a_pooled_connection_given_back_inside_a_transaction_is_rolled_back() {
    use sqlx::Executor;
    let (dir, store) = temp_store().await;
    {
        let mut conn = store.db.pool.acquire().await.unwrap();
        conn.execute("BEGIN IMMEDIATE; INSERT INTO groups (name, created_at_us) VALUES ('half', 0)").await.unwrap();
    }
    let mut other = other_connection(&dir).await;
    let write = other.execute("INSERT INTO groups (name, created_at_us) VALUES ('other', 0)");
    tokio::time::timeout(std::time::Duration::from_secs(3), write)
        .await
        .expect("the write lock was let go")
        .expect("the write succeeds");
    let groups = names_seen_afresh(&dir, "SELECT name FROM groups").await;
    assert_eq!(groups, ["other"], "the dropped borrower's row is gone");
    writes_go_through(&store, "a").await;
}

/// The message path's connection has the same hazard: a result's statement
/// list (`BEGIN IMMEDIATE` … `COMMIT`) dropped while it waits for the write
/// lock. Its transaction is rolled back once it begins, so later writes go
/// through and are committed, and nothing of the dropped result is stored.
#[tokio::test]
async fn a_result_dropped_while_the_database_is_locked_leaves_no_transaction_open() {
    use sqlx::Executor;
    let (dir, store) = temp_store().await;
    let g = group("a");
    store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let mut locker = other_connection(&dir).await;
    locker.execute("BEGIN IMMEDIATE").await.unwrap();
    let out = Enqueue { kind: crate::domain::OutboundKind::Reply, text: "dropped", console: true };
    let result = success("dropped");
    let outbox = store.outbox();
    let storing = outbox.record_result(&g, &result, None, "{}", Some(out), &[]);
    let dropped = tokio::time::timeout(std::time::Duration::from_millis(500), storing).await;
    assert!(dropped.is_err(), "the result was still waiting for the lock");
    locker.execute("ROLLBACK").await.unwrap();

    let msg = Inbound::new(g.clone(), Source::Console, "ann", "after");
    let queue = store.queue();
    let stored =
        tokio::time::timeout(std::time::Duration::from_secs(3), queue.insert_inbound(&msg, InboundState::Queued));
    stored.await.expect("no write lock is left held").expect("the write succeeds");
    writes_go_through(&store, "b").await;
    assert_eq!(names_seen_afresh(&dir, "SELECT text FROM inbound").await, ["after"]);
    assert!(names_seen_afresh(&dir, "SELECT text FROM results").await.is_empty(), "nothing of the dropped result");
    assert!(names_seen_afresh(&dir, "SELECT text FROM outbox").await.is_empty());
}

/// Two cluster nodes on one PostgreSQL: a result is written under the
/// group's lease; once another node took the lease over (the first one's row
/// expired), the first one's result, message states, context taken,
/// journal, notices and session id are rolled back and refused, and the lease is forgotten, so its next write is
/// refused without a round trip.
#[tokio::test]
async fn the_writes_of_a_node_whose_lease_moved_on_are_rolled_back() {
    use crate::cluster::fence::LeaseName;
    use crate::cluster::node_id::NodeId;
    let url = postgres::server().fresh_database();
    let location = Location::Postgres(url);
    let (a, b) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let g = group("team");
    a.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
    let (node_a, node_b) = (NodeId::new("node-a").unwrap(), NodeId::new("node-b").unwrap());
    let ttl = 10_000_000;
    let incarnation_a = a.cluster().unwrap().register(&node_a, 4, ttl, 0).await.unwrap().expect("registered");
    let lease = LeaseName::group(&g);
    assert_eq!(a.leases().claim(&lease, &node_a, incarnation_a).await.unwrap(), Some(1));
    let incarnation_b = b.cluster().unwrap().register(&node_b, 4, ttl, 0).await.unwrap().expect("registered");
    assert_eq!(b.leases().claim(&lease, &node_b, incarnation_b).await.unwrap(), None, "held by a live node");
    let written = a.outbox().record_result(&g, &success("by a"), None, "{}", None, &[]).await;
    assert!(written.is_ok(), "{written:?}");

    // Node A stops renewing (frozen); once its row expired, B takes over.
    raw(&a, "UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-a'").await;
    assert_eq!(b.leases().claim(&lease, &node_b, incarnation_b).await.unwrap(), Some(2));
    let out = Enqueue { kind: crate::domain::OutboundKind::Reply, text: "late", console: true };
    let late = a.outbox().record_result(&g, &success("late"), None, "{}", Some(out), &[]).await;
    assert!(matches!(&late, Err(StoreError::Fenced(name)) if name == "team"), "{late:?}");
    let again = a.outbox().record_result(&g, &success("later"), None, "{}", None, &[]).await;
    assert!(matches!(again, Err(StoreError::Fenced(_))), "{again:?}");
    // The group's other writes from A: its journal, a notice, its session id.
    let fenced = |r: Result<(), StoreError>| matches!(r, Err(StoreError::Fenced(_)));
    assert!(fenced(a.journal().record_session_event(&g, "started", Some("s-a"), None).await));
    let notice = Enqueue { kind: crate::domain::OutboundKind::Notice, text: "late notice", console: true };
    assert!(fenced(a.outbox().enqueue(&g, notice).await.map(drop)));
    assert!(fenced(a.groups().set_session_id(&g, Some("s-a")).await));
    let msg = Inbound::new(g.clone(), Source::Console, "ann", "hi");
    let id = b.queue().insert_inbound(&msg, InboundState::Sent).await.unwrap();
    assert!(fenced(a.queue().settle(&g, &[id], InboundState::Answered).await));
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM inbound").fetch_all(&b.db.pool).await.unwrap();
    assert_eq!(states, ["sent"], "the message's state is not A's to settle any more");
    let seen = Inbound::new(g.clone(), Source::Console, "ann", "context");
    b.queue().insert_inbound(&seen, InboundState::Observed).await.unwrap();
    let taken = a.queue().take_context(&g, 10, InboundId(i64::MAX)).await;
    assert!(matches!(taken, Err(StoreError::Fenced(_))), "{taken:?}");
    assert_eq!(b.queue().take_context(&g, 10, InboundId(i64::MAX)).await.unwrap().lines.len(), 1, "left for B");
    let texts: Vec<String> =
        sqlx::query_scalar("SELECT text FROM results ORDER BY id").fetch_all(&b.db.pool).await.unwrap();
    assert_eq!(texts, ["by a"], "nothing of the fenced writes");
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(&b.db.pool).await.unwrap();
    assert_eq!(rows, 0);
    assert!(b.journal().session_events(&g).await.unwrap().is_empty());
    assert_eq!(b.groups().group("team").await.unwrap().session_id, None);
    let written = b.outbox().record_result(&g, &success("by b"), None, "{}", None, &[]).await;
    assert!(written.is_ok(), "the new holder writes: {written:?}");
    b.journal().record_session_event(&g, "started", Some("s-b"), None).await.unwrap();
    b.groups().set_session_id(&g, Some("s-b")).await.unwrap();
}
