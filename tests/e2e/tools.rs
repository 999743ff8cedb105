//! Pincer's own MCP tools, called by the real CLI over the control protocol:
//! the scripted model calls `mcp__pincer__*` and pincer acts (or refuses).

use pincer::domain::OutboundKind;
use pincer::store::{GroupSettings, HistoryEntry};
use serde_json::json;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::Sandbox;

#[tokio::test]
async fn send_message_reaches_the_chat_before_the_turn_ends() {
    let script = fake_api::scripted(vec![(
        "PING",
        Reply::tool_use("mcp__pincer__send_message", json!({"text": "MIDTURN working on it"})),
    )]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    // No allowed tools and no admins: pincer's own tools are allowed anyway.
    let group = sandbox.add_group("chatty", Some(&[])).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "PING please").await;
    let first = pincer.next_outbound().await;
    assert_eq!((first.kind, first.text.as_str()), (OutboundKind::Reply, "MIDTURN working on it"));
    assert_eq!(first.group, group);
    let result = pincer.next_outbound().await;
    assert!(
        result.text.starts_with("AFTER_TOOL: TOOL_RESULT(err=False):sent to the chat of group chatty"),
        "the model saw the tool's result after the message went out: {result:?}"
    );

    // The CLI named our tools to the model under the server's name. 2.1.330
    // defers MCP tools: their names come in the conversation, their schemas
    // only through ToolSearch, so look at the whole request. 2.1.197 offers
    // them as tools, schemas included.
    let first = &api.main_requests()[0];
    let request = first.body().to_string();
    for name in ["send_message", "schedule_task", "list_tasks", "pause_task", "resume_task", "cancel_task"] {
        assert!(request.contains(&format!("mcp__pincer__{name}")), "{name} is offered");
    }
    // The CLI's session-only cron tools are withheld, so the agent schedules through pincer.
    // (Another tool's description still mentions the name, so look for it as a listed tool.)
    if offers_tool(first, "ToolSearch") {
        assert!(!request.contains(r"\nCronCreate\n"), "CronCreate is not among the deferred tools");
        assert!(request.contains(r"\nmcp__pincer__send_message"), "the deferred tools are listed one per line");
    } else {
        assert!(!offers_tool(first, "CronCreate"), "CronCreate is not offered");
        assert!(offers_tool(first, "mcp__pincer__send_message"), "send_message is offered as a tool");
    }
    let decisions = pincer.store().journal().decisions(&group).await.unwrap();
    assert!(decisions.iter().any(|d| d.tool_name == "mcp__pincer__send_message" && d.allowed), "{decisions:?}");
    // The history shows the message between the question and the turn's result.
    let history = pincer.store().history().history(&group, 100).await.unwrap();
    let kinds: Vec<String> =
        history.iter().map(|e| serde_json::to_value(e).unwrap()["kind"].as_str().unwrap().to_owned()).collect();
    let at = kinds.iter().position(|k| k == "message").expect("the agent's message is in the history");
    assert!(kinds[..at].contains(&"inbound".to_owned()) && kinds[at..].contains(&"result".to_owned()), "{kinds:?}");
    match &history[at] {
        HistoryEntry::Message { sent_by, text, delivery: Some(delivery), .. } => {
            assert_eq!((sent_by.as_str(), text.as_str()), ("chatty", "MIDTURN working on it"));
            assert_eq!(delivery.to, "console chatty", "a group without a chat keeps it for its console");
        }
        other => panic!("expected the agent's message with its delivery, got {other:?}"),
    }
    pincer.stop().await;
}

#[tokio::test]
async fn only_the_main_group_may_schedule_for_another_group() {
    let schedule_for_other = Reply::tool_use(
        "mcp__pincer__schedule_task",
        json!({"prompt": "OTHERTASK", "schedule_type": "interval", "schedule_value": "1h", "group": "other"}),
    );
    let api = FakeApi::start(fake_api::scripted(vec![("SCHEDOTHER", schedule_for_other)])).await;
    let sandbox = Sandbox::new(&api);
    let plain = sandbox.add_group("plain", None).await;
    let boss = sandbox.add_group_with("boss", GroupSettings { main: true, ..GroupSettings::default() }).await;
    let other = sandbox.add_group("other", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&plain, "SCHEDOTHER please").await;
    let refused = pincer.next_outbound().await;
    assert!(refused.text.contains("TOOL_RESULT(err=True)"), "an error tool result: {refused:?}");
    assert!(refused.text.contains("only the main group's agent may target other groups"), "{refused:?}");
    assert!(pincer.store().schedules().schedules(None).await.unwrap().is_empty(), "nothing was stored");

    pincer.send(&boss, "SCHEDOTHER please").await;
    let done = pincer.next_outbound().await;
    assert!(done.text.contains("TOOL_RESULT(err=False):scheduled: #"), "{done:?}");
    let stored = pincer.store().schedules().schedules(None).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!((&stored[0].group, stored[0].prompt.as_str()), (&other, "OTHERTASK"));
    pincer.stop().await;
}

#[tokio::test]
async fn a_group_cannot_touch_another_groups_task() {
    let api = FakeApi::start(fake_api::scripted(vec![
        ("PAUSEIT", Reply::tool_use("mcp__pincer__pause_task", json!({"id": 1}))),
        ("LISTIT", Reply::tool_use("mcp__pincer__list_tasks", json!({}))),
    ]))
    .await;
    let sandbox = Sandbox::new(&api);
    let owner = sandbox.add_group("owner", None).await;
    let intruder = sandbox.add_group("intruder", None).await;
    let pincer = sandbox.start().await;
    let trigger = pincer::domain::schedule::Trigger::interval("1h").unwrap();
    let new = pincer::store::NewSchedule {
        group: owner.clone(),
        prompt: "OWNERS-TASK".into(),
        trigger,
        context: pincer::domain::schedule::ContextMode::Group,
    };
    pincer::scheduler::manage::add(&pincer.store().schedules(), new, &Default::default()).await.unwrap();

    pincer.send(&intruder, "LISTIT").await;
    let listed = pincer.next_outbound().await;
    assert!(listed.text.contains("no scheduled tasks"), "another group's tasks are not listed: {listed:?}");
    pincer.send(&intruder, "PAUSEIT").await;
    let refused = pincer.next_outbound().await;
    assert!(refused.text.contains("err=True") && refused.text.contains("belongs to another group"), "{refused:?}");
    let task = &pincer.store().schedules().schedules(Some(&owner)).await.unwrap()[0];
    assert_eq!(task.status.as_str(), "active", "the task was not paused");

    pincer.send(&owner, "PAUSEIT").await;
    let paused = pincer.next_outbound().await;
    assert!(paused.text.contains("err=False") && paused.text.contains("[paused]"), "{paused:?}");
    pincer.stop().await;
}

#[tokio::test]
async fn a_schedule_every_second_and_the_task_past_the_most_are_refused_with_why() {
    let api = FakeApi::start(fake_api::scripted(vec![
        (
            "EVERYSECOND",
            Reply::tool_use(
                "mcp__pincer__schedule_task",
                json!({"prompt": "spam", "schedule_type": "interval", "schedule_value": "1s"}),
            ),
        ),
        (
            "ONEMORE",
            Reply::tool_use(
                "mcp__pincer__schedule_task",
                json!({"prompt": "one more", "schedule_type": "cron", "schedule_value": "0 9 * * *"}),
            ),
        ),
    ]))
    .await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("busy", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "EVERYSECOND please").await;
    let refused = pincer.next_outbound().await;
    assert!(refused.text.contains("TOOL_RESULT(err=True)"), "an error tool result: {refused:?}");
    assert!(refused.text.contains("shorter than the minimum of 5m"), "says why: {refused:?}");
    assert!(refused.text.contains("every 5m or more"), "says what to do: {refused:?}");
    assert!(pincer.store().schedules().schedules(None).await.unwrap().is_empty(), "nothing was stored");

    for i in 0..50 {
        let trigger = pincer::domain::schedule::Trigger::interval("1day").unwrap();
        let new = pincer::store::NewSchedule {
            group: group.clone(),
            prompt: format!("task {i}"),
            trigger,
            context: pincer::domain::schedule::ContextMode::Group,
        };
        pincer::scheduler::manage::add(&pincer.store().schedules(), new, &Default::default()).await.unwrap();
    }
    pincer.send(&group, "ONEMORE please").await;
    let refused = pincer.next_outbound().await;
    assert!(refused.text.contains("TOOL_RESULT(err=True)"), "{refused:?}");
    assert!(refused.text.contains("already has 50 active scheduled tasks"), "{refused:?}");
    assert!(refused.text.contains("cancel or pause one first"), "{refused:?}");
    assert_eq!(pincer.store().schedules().active_schedule_count(&group).await.unwrap(), 50);
    pincer.stop().await;
}

/// Whether `request` offers the model a tool named `name`, schema included.
fn offers_tool(request: &fake_api::ApiRequest, name: &str) -> bool {
    request.body()["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["name"] == name))
}

/// 2.1.330 defers MCP tools: a real model loads their schemas with ToolSearch
/// first. That needs no permission, and the schema it loads is ours. (2.1.197
/// has no ToolSearch and offers the schema in the first request.)
#[tokio::test]
async fn the_model_gets_pincers_tool_schemas_directly_or_through_tool_search() {
    let find = Reply::tool_use("ToolSearch", json!({"query": "select:mcp__pincer__send_message", "max_results": 5}));
    let script: fake_api::Script = std::sync::Arc::new(move |req: &fake_api::ApiRequest| {
        if !req.last_user_text().contains("FIND") || req.has_tool_result() {
            fake_api::echo()(req)
        } else if offers_tool(req, "ToolSearch") {
            find.clone()
        } else {
            Reply::text("NO TOOLSEARCH")
        }
    });
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("finder", Some(&[])).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "FIND it").await;
    let out = pincer.next_outbound().await;
    let last = api.main_requests().pop().unwrap();
    if out.text == "NO TOOLSEARCH" {
        assert!(offers_tool(&last, "mcp__pincer__send_message"), "offered with its schema from the start");
    } else {
        assert!(out.text.starts_with("AFTER_TOOL: TOOL_RESULT(err=False)"), "{out:?}");
        // pincer's hook sees it too, and lets the CLI's own bookkeeping run whatever the list says.
        let decisions = pincer.store().journal().decisions(&group).await.unwrap();
        assert!(decisions.iter().all(|d| d.allowed && d.decided_by == "policy"), "{decisions:?}");
        assert!(decisions.iter().any(|d| d.tool_name == "ToolSearch"), "{decisions:?}");
    }
    let tools = last.body()["tools"].as_array().unwrap().clone();
    let ours = tools.iter().find(|t| t["name"] == "mcp__pincer__send_message").expect("the schema was loaded");
    assert_eq!(ours["input_schema"]["required"], json!(["text"]), "{ours}");
    pincer.stop().await;
}
