//! The egress proxy end to end: the real CLI in group sandboxes (bwrap, no
//! network) runs `curl` through `HTTP_PROXY`, which `pincer forward` inside
//! the sandbox carries to the group's egress proxy socket. The "internet" is
//! a web server on this machine's loopback, reached by made-up `.test` names
//! that the test's resolver answers and vouches for; nothing leaves the
//! machine. Decisions are read back from the store, as `pincer egress` does.

use std::sync::Arc;

use pincer::config::GroupSandbox;
use pincer::domain::net::{DomainPattern, NetworkPolicy};
use pincer::domain::GroupName;
use pincer::store::{EgressDecision, EgressVerdict, EgressVia, Store};

use crate::sandbox::{probe, require_bwrap};
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Sandbox, PATIENCE};
use crate::support::resolver::TestResolver;

/// A web server on loopback that names what it was asked for.
async fn web_server() -> u16 {
    async fn answer(uri: axum::http::Uri) -> String {
        format!("HELLO-FROM-THE-WEB {uri}")
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(answer)).await });
    port
}

/// `curl` through the agent's proxy settings; prints the status, then the body.
fn curl(url: &str, tunnel: bool) -> String {
    let tunnel = if tunnel { " --proxytunnel" } else { "" };
    format!("curl -sS -m 20{tunnel} -w ' status=%{{http_code}}\\n' {url} 2>&1")
}

/// The group's decisions, once there are at least `n`.
async fn decisions(store: &Store, group: &GroupName, n: usize) -> Vec<EgressDecision> {
    let wait = async {
        loop {
            let found = store.egress().egress_decisions(group, 100).await.unwrap();
            if found.len() >= n {
                return found;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait).await.expect("the decisions are stored")
}

fn find<'a>(found: &'a [EgressDecision], host: &str, via: EgressVia) -> &'a EgressDecision {
    found.iter().find(|d| d.host == host && d.via == via).unwrap_or_else(|| panic!("{host} {via:?} in {found:#?}"))
}

#[tokio::test]
async fn an_allowlisted_name_is_reached_through_the_sandbox_and_everything_else_is_refused_and_logged() {
    require_bwrap().await;
    let port = web_server().await;
    let (allowed, other, rebind) = (
        format!("http://allowed.test:{port}"),
        format!("http://other.test:{port}"),
        format!("http://rebind.test:{port}"),
    );
    let fetch_all = [
        curl(&format!("{allowed}/plain"), false),
        curl(&format!("{allowed}/tunnel"), true),
        curl(&format!("{other}/"), false),
        curl(&format!("{rebind}/"), false),
        // Straight past the proxy to the server's address: the sandbox has no network at all.
        format!("curl -sS -m 5 --noproxy '*' http://127.0.0.1:{port}/direct 2>&1 | head -c 200; echo ' direct-done'"),
    ]
    .join("; ");
    let api = FakeApi::start(fake_api::scripted(vec![
        ("FETCH_ALL", Reply::bash(&fetch_all, "fetch")),
        ("FETCH_ONE", Reply::bash(&curl(&format!("{allowed}/plain"), false), "fetch")),
    ]))
    .await;
    // Both names stand for the web server, as public addresses would; the
    // third is listed but resolves to loopback, which nothing may reach.
    let resolver = TestResolver::default()
        .answer("allowed.test", &["127.0.0.1"])
        .vouch("allowed.test", "127.0.0.1")
        .answer("other.test", &["127.0.0.1"])
        .vouch("other.test", "127.0.0.1")
        .answer("rebind.test", &["127.0.0.1"]);
    let mut sandbox = Sandbox::new(&api);
    let listed: Vec<DomainPattern> =
        [format!("allowed.test:{port}"), format!("rebind.test:{port}")].iter().map(|p| p.parse().unwrap()).collect();
    let team = GroupSandbox { network: Some(NetworkPolicy::Allowlist), allow_domains: listed, ..Default::default() };
    sandbox.config.sandbox.groups.insert("team".into(), team);
    let team = sandbox.add_group("team", Some(&["Bash"])).await;
    // The default policy.
    let family = sandbox.add_group("family", Some(&["Bash"])).await;
    let pincer = sandbox.start_resolving(Arc::new(resolver)).await;

    let out = probe(&pincer, &team, "FETCH_ALL").await;
    assert!(out.contains("HELLO-FROM-THE-WEB /plain status=200"), "a listed name, forwarded: {out}");
    assert!(out.contains("HELLO-FROM-THE-WEB /tunnel status=200"), "a listed name, tunnelled (CONNECT): {out}");
    assert!(
        out.contains("not in the group's allowlist") && out.contains("status=403"),
        "another name is refused: {out}"
    );
    assert!(out.contains("a loopback address"), "a listed name resolving to loopback is refused: {out}");
    assert!(!out.contains("HELLO-FROM-THE-WEB /direct"), "nothing goes around the proxy: {out}");
    assert!(out.contains("direct-done"), "{out}");

    let found = decisions(pincer.store(), &team, 4).await;
    let plain = find(&found, "allowed.test", EgressVia::Http);
    assert_eq!((plain.verdict, plain.port), (EgressVerdict::Allowed, port), "{plain:?}");
    assert!(plain.bytes_down > 0, "the bytes are counted: {plain:?}");
    assert_eq!(find(&found, "allowed.test", EgressVia::Connect).verdict, EgressVerdict::Allowed);
    let refused = find(&found, "other.test", EgressVia::Http);
    assert_eq!(refused.verdict, EgressVerdict::Refused);
    assert_eq!(refused.reason.as_deref(), Some("not in allow_domains"));
    let rebound = find(&found, "rebind.test", EgressVia::Http);
    assert_eq!(rebound.verdict, EgressVerdict::Refused);
    assert!(rebound.reason.as_deref().is_some_and(|r| r.contains("loopback")), "{rebound:?}");

    // api-only (the default): the same request is refused, the model still answers.
    let out = probe(&pincer, &family, "FETCH_ONE").await;
    assert!(out.contains("status=403") && out.contains("api-only"), "{out}");
    assert!(!out.contains("HELLO-FROM-THE-WEB"), "{out}");
    let found = decisions(pincer.store(), &family, 1).await;
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].verdict, found[0].host.as_str()), (EgressVerdict::Refused, "allowed.test"));
    assert_eq!(found[0].reason.as_deref(), Some("network = \"api-only\""));
    pincer.stop().await;
}
