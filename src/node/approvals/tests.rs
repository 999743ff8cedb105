//! The bridge on a real PostgreSQL: a request asked on one node reaches the
//! gateway's adapter, whose answer reaches the asking session once; a
//! session that gives up ends the gateway's prompt.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::asking::Asking;
use super::showing::Showing;
use super::*;
use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest, ChatAddress, GroupName};
use crate::store::tests::postgres;
use crate::store::{GroupSettings, Location, Store};

const PATIENCE: Duration = Duration::from_secs(30);

async fn registered(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.cluster().unwrap().register(&id, 4, 10_000_000, 0).await.unwrap().expect("registered");
    (id, incarnation)
}

fn request(group: &GroupName, summary: &str) -> (ApprovalAsk, oneshot::Receiver<ApprovalAnswer>) {
    let (respond, answer) = oneshot::channel();
    let request = ApprovalRequest {
        id: 1,
        group: group.clone(),
        tool_name: "Bash".into(),
        summary: summary.into(),
        provenance: None,
        timeout: Duration::from_secs(60),
        respond,
    };
    let withdrawn = CancellationToken::new();
    (ApprovalAsk { to: ChatAddress::telegram(-100, None), admins: vec![], request, withdrawn }, answer)
}

async fn rows(store: &Store, node: &NodeId) -> usize {
    store.approvals().asked_by(node).await.unwrap().len()
}

/// An asking node and a gateway holding Telegram's lease, each side's task running.
struct Pair {
    url: String,
    asker: Store,
    node: NodeId,
    group: GroupName,
    /// The asking side's queue (as the router hands requests to it).
    requests: mpsc::Sender<ApprovalAsk>,
    /// What the gateway hands its adapter.
    shown: mpsc::Receiver<ApprovalAsk>,
    stop: CancellationToken,
    tasks: (tokio::task::JoinHandle<()>, Showing),
}

impl Pair {
    async fn start() -> Pair {
        let url = postgres::server().fresh_database();
        let location = Location::Postgres(url.clone());
        let (asker, gateway) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
        let group: GroupName = "team".parse().unwrap();
        let chat = Some(ChatAddress::telegram(-100, None));
        let settings = GroupSettings { chat, admins: vec!["42".into()], ..Default::default() };
        asker.groups().add_group(&group, &settings).await.unwrap();
        let ((node, _), (g, inc_g)) = (registered(&asker, "node-a").await, registered(&gateway, "node-g").await);
        let lease = LeaseName::telegram(7);
        gateway.leases().claim(&lease, &g, inc_g).await.unwrap().expect("the gateway's lease");

        let stop = CancellationToken::new();
        let (requests, routed) = mpsc::channel(8);
        // No hints here: the looks every 250 ms carry everything.
        let (_, hints) = watch::channel(0);
        let asking = Asking { store: asker.approvals(), node: node.clone(), hints: hints.clone(), requests: routed };
        let asking = tokio::spawn(asking.run(stop.clone()));
        let outbox = Outbox::new(gateway.outbox(), None);
        let directory = Directory::new(&gateway, outbox.clone());
        let platform = Platform::Telegram;
        let shower = Shower { store: gateway.approvals(), directory, outbox, platform, lease, hints };
        let (adapter, shown) = mpsc::channel(8);
        let showing = shower.start(adapter, &stop);
        Pair { url, asker, node, group, requests, shown, stop, tasks: (asking, showing) }
    }

    /// Asks for `summary`; what the gateway's adapter gets, and the session's answer to come.
    async fn ask(&mut self, summary: &str) -> (ApprovalAsk, oneshot::Receiver<ApprovalAnswer>) {
        let (ask, answer) = request(&self.group, summary);
        self.requests.send(ask).await.unwrap();
        let prompt = tokio::time::timeout(PATIENCE, self.shown.recv()).await.expect("shown").unwrap();
        (prompt, answer)
    }

    async fn no_rows_left(&self) {
        wait_until(|| async { rows(&self.asker, &self.node).await == 0 }).await;
    }

    async fn stop(self) {
        let (asking, showing) = self.tasks;
        showing.stop().await;
        self.stop.cancel();
        asking.await.unwrap();
    }
}

#[tokio::test]
async fn the_files_members_wrote_reach_the_gateway_with_the_request() {
    let mut pair = Pair::start().await;
    let (mut ask, _answer) = request(&pair.group, "command:\nmake");
    let words = "written since your last approval, from mallory's messages: HEAD, config";
    ask.request.provenance = Some(words.to_owned());
    pair.requests.send(ask).await.unwrap();
    let prompt = tokio::time::timeout(PATIENCE, pair.shown.recv()).await.expect("shown").unwrap();
    assert_eq!(prompt.request.provenance.as_deref(), Some(words));
    let (plain, _answer) = pair.ask("command:\nls").await;
    assert_eq!(plain.request.provenance, None, "nothing when nothing was written");
    pair.stop().await;
}

#[tokio::test]
async fn a_request_asked_on_one_node_is_answered_on_the_gateway_once() {
    let mut pair = Pair::start().await;
    let (prompt, answer) = pair.ask("command:\nls").await;
    assert_eq!((prompt.to, prompt.admins), (ChatAddress::telegram(-100, None), vec!["42".to_owned()]));
    let shown = prompt.request;
    assert_eq!((shown.tool_name.as_str(), shown.summary.as_str()), ("Bash", "command:\nls"));
    assert!(shown.id > 1 << 62, "apart from the gateway's own ids: {}", shown.id);
    assert!(shown.timeout > Duration::from_secs(50) && shown.timeout <= Duration::from_secs(60));
    let alice = ApprovalAnswer { verdict: Approval::Allow, by: "telegram:42 (Alice)".into() };
    shown.respond.send(alice.clone()).unwrap();
    let answered = tokio::time::timeout(PATIENCE, answer).await.expect("answered").unwrap();
    assert_eq!(answered, alice);
    pair.no_rows_left().await;
    pair.stop().await;
}

#[tokio::test]
async fn a_session_that_gives_up_ends_the_prompt_and_one_the_adapter_cannot_show_is_denied() {
    let mut pair = Pair::start().await;
    // The session's timeout: its row goes, and the gateway's prompt ends.
    let (mut prompt, answer) = pair.ask("command:\nrm -rf /tmp/x").await;
    drop(answer);
    tokio::time::timeout(PATIENCE, prompt.request.respond.closed()).await.expect("the prompt ended");
    assert!(!prompt.withdrawn.is_cancelled(), "a timeout is told in the chat, not withdrawn");
    pair.no_rows_left().await;

    // The adapter could not post it (it dropped the request): denied at once.
    let (prompt, answer) = pair.ask("command:\nls").await;
    drop(prompt);
    let answered = tokio::time::timeout(PATIENCE, answer).await.expect("answered").unwrap();
    assert_eq!((answered.verdict, answered.by.as_str()), (Approval::Deny, "pincer (no channel could ask)"));
    pair.no_rows_left().await;
    pair.stop().await;
}

#[tokio::test]
async fn a_prompt_another_gateway_shows_now_is_withdrawn_and_so_is_every_prompt_when_the_round_ends() {
    let mut pair = Pair::start().await;
    let (first, _first_answer) = pair.ask("command:\nls").await;
    let (second, mut second_answer) = pair.ask("command:\npwd").await;
    assert!(!first.withdrawn.is_cancelled() && !second.withdrawn.is_cancelled());

    // The gateway froze past its ttl; another node took the lease and shows the first row.
    crate::store::tests::nodes::RawNodes::connect(&pair.url).await.expire("node-g").await;
    let next = Store::connect(&Location::Postgres(pair.url.clone())).await.unwrap();
    let (h, inc_h) = registered(&next, "node-h").await;
    let lease = LeaseName::telegram(7);
    next.leases().claim(&lease, &h, inc_h).await.unwrap().expect("the lease, taken over");
    let rows = next.approvals().unanswered(Platform::Telegram).await.unwrap();
    let oldest = rows.iter().map(|r| r.id).min().expect("two rows");
    next.approvals().show(oldest, &lease).await.unwrap().expect("shown by the next gateway");
    tokio::time::timeout(PATIENCE, first.withdrawn.cancelled()).await.expect("withdrawn");
    assert!(!second.withdrawn.is_cancelled(), "only the row shown elsewhere");
    drop(first);

    // The round ends (the lease lost): the second is withdrawn, and its
    // session still waits for the next gateway's answer.
    let Pair { tasks: (asking, showing), stop, asker: pair_asker, node, .. } = pair;
    showing.stop().await;
    assert!(second.withdrawn.is_cancelled(), "withdrawn with its round");
    drop(second);
    assert!(second_answer.try_recv().is_err(), "no verdict written for a withdrawn prompt");
    let rows = pair_asker.approvals().asked_by(&node).await.unwrap();
    assert!(rows.len() == 2 && rows.iter().all(|r| r.answer.is_none()), "{rows:?}");
    stop.cancel();
    asking.await.unwrap();
}

async fn wait_until<F, Fut>(check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let waited = async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, waited).await.expect("the condition held in time");
}
