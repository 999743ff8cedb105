//! The bridge on a real PostgreSQL: a request asked on one node reaches the
//! gateway's adapter, whose answer reaches the asking session once; a
//! session that gives up ends the gateway's prompt.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::asking::Asking;
use super::*;
use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest, ChatAddress, GroupName};
use crate::store::tests::postgres;
use crate::store::{GroupSettings, Location, Store};

const PATIENCE: Duration = Duration::from_secs(30);

#[test]
fn a_gateways_platform_is_read_from_its_lease() {
    assert_eq!(platform_of(&LeaseName::telegram(7)), Some(Platform::Telegram));
    assert_eq!(platform_of(&LeaseName::whatsapp("4915112345678")), Some(Platform::WhatsApp));
    assert_eq!(platform_of(&LeaseName::group(&"team".parse().unwrap())), None);
}

async fn registered(store: &Store, name: &str) -> (NodeId, i64) {
    let id = NodeId::new(name).unwrap();
    let incarnation = store.leases().register(&id, 4, 10_000_000, 0).await.unwrap().expect("registered");
    (id, incarnation)
}

fn request(group: &GroupName, summary: &str) -> (ApprovalAsk, oneshot::Receiver<ApprovalAnswer>) {
    let (respond, answer) = oneshot::channel();
    let request = ApprovalRequest {
        id: 1,
        group: group.clone(),
        tool_name: "Bash".into(),
        summary: summary.into(),
        timeout: Duration::from_secs(60),
        respond,
    };
    (ApprovalAsk { to: ChatAddress::telegram(-100, None), admins: vec![], request }, answer)
}

async fn rows(store: &Store, node: &NodeId) -> usize {
    store.approvals().asked_by(node).await.unwrap().len()
}

#[tokio::test]
async fn a_request_asked_on_one_node_is_answered_on_the_gateway_once() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (asker, gateway) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
    let group: GroupName = "team".parse().unwrap();
    let settings =
        GroupSettings { chat: Some(ChatAddress::telegram(-100, None)), admins: vec!["42".into()], ..Default::default() };
    asker.groups().add_group(&group, &settings).await.unwrap();
    let ((a, _), (g, inc_g)) = (registered(&asker, "node-a").await, registered(&gateway, "node-g").await);
    let lease = LeaseName::telegram(7);
    gateway.leases().claim(&lease, &g, inc_g).await.unwrap().expect("the gateway's lease");

    let stop = CancellationToken::new();
    let (requests, routed) = mpsc::channel(8);
    let (_hint, hints) = watch::channel(0);
    let asking = Asking { store: asker.approvals(), node: a.clone(), hints: hints.clone(), requests: routed };
    let asking = tokio::spawn(asking.run(stop.clone()));
    let outbox = Outbox::new(gateway.outbox(), None);
    let shower = Shower {
        store: gateway.approvals(),
        directory: Directory::new(&gateway, outbox.clone()),
        outbox,
        platform: Platform::Telegram,
        lease,
        hints,
    };
    let (adapter, mut shown) = mpsc::channel(8);
    let showing = shower.start(adapter, &stop);

    let (ask, answer) = request(&group, "command:\nls");
    requests.send(ask).await.unwrap();
    let prompt = tokio::time::timeout(PATIENCE, shown.recv()).await.expect("shown").unwrap();
    assert_eq!((prompt.to.clone(), prompt.admins.clone()), (ChatAddress::telegram(-100, None), vec!["42".to_owned()]));
    let shown_request = prompt.request;
    assert_eq!((shown_request.tool_name.as_str(), shown_request.summary.as_str()), ("Bash", "command:\nls"));
    assert!(shown_request.id > 1 << 62, "apart from the gateway's own ids: {}", shown_request.id);
    assert!(shown_request.timeout > Duration::from_secs(50) && shown_request.timeout <= Duration::from_secs(60));
    let alice = ApprovalAnswer { verdict: Approval::Allow, by: "telegram:42 (Alice)".into() };
    shown_request.respond.send(alice.clone()).unwrap();
    let answered = tokio::time::timeout(PATIENCE, answer).await.expect("answered").unwrap();
    assert_eq!(answered, alice);
    wait_until(|| async { rows(&asker, &a).await == 0 }).await;

    // A session that gives up (its timeout): its row goes, and the gateway's prompt ends.
    let (ask, answer) = request(&group, "command:\nrm -rf /tmp/x");
    requests.send(ask).await.unwrap();
    let mut prompt = tokio::time::timeout(PATIENCE, shown.recv()).await.expect("shown").unwrap();
    drop(answer);
    tokio::time::timeout(PATIENCE, prompt.request.respond.closed()).await.expect("the prompt ended");
    wait_until(|| async { rows(&asker, &a).await == 0 }).await;

    showing.stop().await;
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
