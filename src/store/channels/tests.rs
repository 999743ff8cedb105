//! Health rows on a real PostgreSQL shared by two cluster nodes: each node's
//! WhatsApp device has its own row, read back by that node and listed for
//! the operator; Telegram's bot keeps one shared row.

use crate::cluster::NodeId;
use crate::domain::Platform;
use crate::store::tests::postgres;
use crate::store::{Location, Store};

async fn node(location: &Location, name: &str) -> Store {
    let store = Store::connect(location).await.unwrap();
    store
        .cluster()
        .unwrap()
        .register(&NodeId::new(name).unwrap(), 4, 10_000_000, 0)
        .await
        .unwrap()
        .expect("registered");
    store
}

#[tokio::test]
async fn each_nodes_whatsapp_device_has_its_own_health_row_and_telegrams_is_shared() {
    let location = Location::Postgres(postgres::server().fresh_database());
    let (a, b) = (node(&location, "node-a").await, node(&location, "node-b").await);
    a.channels().set_channel_health(Platform::WhatsApp, "connected", None, Some("4915112345678")).await.unwrap();
    b.channels()
        .set_channel_health(Platform::WhatsApp, "logged_out", Some("unlinked on the phone"), None)
        .await
        .unwrap();
    a.channels().note_inbound(Platform::WhatsApp).await.unwrap();

    let mine = a.channels().channel_health(Platform::WhatsApp).await.unwrap().unwrap();
    assert_eq!(mine.state, "connected", "a node reads its own device's row");
    assert!(mine.last_inbound_us.is_some());
    let theirs = b.channels().channel_health(Platform::WhatsApp).await.unwrap().unwrap();
    assert_eq!((theirs.state.as_str(), theirs.last_inbound_us), ("logged_out", None));
    let operator = Store::connect(&location).await.unwrap();
    let all = operator.channels().channel_healths(Platform::WhatsApp).await.unwrap();
    let listed: Vec<(&str, &str)> = all.iter().map(|(n, h)| (n.as_str(), h.state.as_str())).collect();
    assert_eq!(listed, [("node-a", "connected"), ("node-b", "logged_out")]);

    a.channels().set_channel_health(Platform::Telegram, "connected", None, None).await.unwrap();
    b.channels().set_channel_health(Platform::Telegram, "disconnected", None, None).await.unwrap();
    let shared = operator.channels().channel_healths(Platform::Telegram).await.unwrap();
    assert_eq!(shared.len(), 1, "one bot, one row: {shared:?}");
    assert_eq!((shared[0].0.as_str(), shared[0].1.state.as_str()), ("", "disconnected"));
    assert_eq!(a.channels().channel_health(Platform::Telegram).await.unwrap().unwrap().state, "disconnected");
}
