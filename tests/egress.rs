//! The egress proxy as a sandboxed client meets it: a Unix socket in a temp
//! folder, raw `CONNECT` and plain `GET http://…` written to it by hand.
//!
//! The "internet" is a server on this machine's loopback that a test-only
//! resolver answers for names under `.test` and vouches for; that resolver
//! lives here, nowhere in pincer. The tests that check what is never reached
//! use pincer's own vetting (the `SystemResolver`, or this resolver without
//! vouching), and only loopback or literal addresses: no DNS query and no
//! packet leaves the machine (a refusal comes before any connection; the
//! loopback cases run first, so a proxy that did not vet would fail there).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[path = "support/resolver.rs"]
mod resolver;

use pincer::domain::net::{DomainPattern, Forbidden, NetworkPolicy};
use pincer::domain::GroupName;
use pincer::sandbox::egress::{EgressProxy, Policy, Resolve, SystemResolver};
use pincer::store::{EgressDecision, EgressVerdict, EgressVia, GroupSettings, Store};
use resolver::TestResolver;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Generous: waits, never a measure of speed.
const PATIENCE: Duration = Duration::from_secs(30);

/// A store with the group `team`, and the proxy serving it on a socket.
struct Rig {
    dir: TempDir,
    store: Store,
    proxy: EgressProxy,
    socket: PathBuf,
    shutdown: CancellationToken,
    served: JoinHandle<()>,
}

fn team() -> GroupName {
    "team".parse().unwrap()
}

fn policy(network: NetworkPolicy, allow: &[String]) -> Policy {
    Policy::new(team(), network, allow.iter().map(|s| s.parse::<DomainPattern>().unwrap()).collect())
}

async fn rig(policy: Policy, resolver: Arc<dyn Resolve>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let store = Store::open(&dir.path().join("data/pincer.db")).await.unwrap();
    store.groups().add_group(&team(), &GroupSettings::default()).await.unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let proxy = EgressProxy::new(store.egress(), resolver);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn({
        let (proxy, shutdown) = (proxy.clone(), shutdown.clone());
        async move { proxy.serve_group(policy, listener, shutdown).await }
    });
    Rig { dir, store, proxy, socket, shutdown, served }
}

impl Rig {
    /// The group's decisions, once there are `n`.
    async fn decisions(&self, n: usize) -> Vec<EgressDecision> {
        let wait = async {
            loop {
                let found = self.store.egress().egress_decisions(&team(), 1000).await.unwrap();
                if found.len() >= n {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(PATIENCE, wait).await.expect("the decisions are stored")
    }
}

/// What the echo server says first, so the two directions carry different counts.
const GREETING: &[u8] = b"hi!\n";

/// A server on loopback that greets, then echoes what it gets until the client closes.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(GREETING).await;
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    port
}

/// A plain HTTP server on loopback that says what it was asked.
async fn http_server() -> u16 {
    use axum::http::HeaderMap;
    async fn answer(uri: axum::http::Uri, headers: HeaderMap) -> String {
        let host = headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("-");
        let proxy_auth = headers.contains_key("proxy-authorization");
        format!("hello {host} {uri} proxy-authorization seen: {proxy_auth}")
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(answer)).await });
    port
}

/// Reads a response head byte by byte, so nothing after it (tunnel bytes) is taken.
async fn read_head(stream: &mut UnixStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = tokio::time::timeout(PATIENCE, stream.read_u8()).await.expect("a response head").unwrap();
        head.push(byte);
        assert!(head.len() < 64 * 1024, "head too long");
    }
    String::from_utf8(head).unwrap()
}

fn status(head: &str) -> u16 {
    head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {head:?}"))
}

async fn read_body(stream: &mut UnixStream, head: &str) -> String {
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut body)).await.expect("the body").unwrap();
    String::from_utf8(body).unwrap()
}

/// `CONNECT` to the echo server through an open tunnel: reads its greeting.
async fn greeted(tunnel: &mut UnixStream) {
    let mut greeting = [0; GREETING.len()];
    tokio::time::timeout(PATIENCE, tunnel.read_exact(&mut greeting)).await.expect("the greeting").unwrap();
    assert_eq!(greeting, GREETING);
}

/// `CONNECT target` on a fresh connection to the proxy: the status, the
/// body (for a refusal), and the stream (a tunnel on 200).
async fn connect(socket: &Path, target: &str) -> (u16, String, UnixStream) {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    stream.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    let body = if status(&head) == 200 { String::new() } else { read_body(&mut stream, &head).await };
    (status(&head), body, stream)
}

/// A plain `GET url` through the proxy: the status and body.
async fn get(socket: &Path, url: &str, extra_headers: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n{extra_headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    let body = read_body(&mut stream, &head).await;
    (status(&head), body)
}

#[tokio::test]
async fn an_allowed_name_gets_a_tunnel_with_bytes_both_ways_and_the_decision_carries_them() {
    let port = echo_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{port}")]), Arc::new(resolver)).await;

    let (code, _, mut tunnel) = connect(&rig.socket, &format!("Example.TEST.:{port}")).await;
    assert_eq!(code, 200);
    greeted(&mut tunnel).await;
    tunnel.write_all(b"ping").await.unwrap();
    let mut back = [0; 4];
    tunnel.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
    tunnel.write_all(b"pong!").await.unwrap();
    let mut back = [0; 5];
    tunnel.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong!");
    tunnel.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, tunnel.read_to_end(&mut rest)).await.expect("the tunnel closes").unwrap();
    assert!(rest.is_empty());

    let d = rig.decisions(1).await.remove(0);
    assert_eq!(
        (d.via, d.verdict, d.host.as_str(), d.port),
        (EgressVia::Connect, EgressVerdict::Allowed, "example.test", port)
    );
    assert_eq!(d.address.as_deref(), Some("127.0.0.1"));
    assert_eq!((d.bytes_up, d.bytes_down), (9, 4 + 9), "{d:?}");
    assert_eq!(d.reason, None);
    assert!(d.closed_at_us >= d.at_us);
}

#[tokio::test]
async fn another_name_is_refused_before_it_is_resolved_with_a_403_that_says_what_to_change() {
    let port = echo_server().await;
    let resolver = Arc::new(
        TestResolver::default()
            .answer("example.test", &["127.0.0.1"])
            .answer("other.test", &["127.0.0.1"])
            .vouch("example.test", "127.0.0.1")
            .vouch("other.test", "127.0.0.1"),
    );
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{port}")]), resolver.clone()).await;

    let (code, body, _) = connect(&rig.socket, &format!("other.test:{port}")).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(&format!("add \"other.test:{port}\" to allow_domains in [sandbox.groups.team]")), "{body}");
    // The listed name on a port it does not list is refused too.
    let (code, body, _) = connect(&rig.socket, "example.test:443").await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("add \"example.test:443\""), "{body}");
    let (code, body) = get(&rig.socket, &format!("http://other.test:{port}/"), "").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0, "refused by policy before any lookup");

    let found = rig.decisions(3).await;
    let seen: Vec<_> = found.iter().map(|d| (d.via, d.verdict, d.host.as_str(), d.reason.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (EgressVia::Connect, EgressVerdict::Refused, "other.test", Some("not in allow_domains")),
            (EgressVia::Connect, EgressVerdict::Refused, "example.test", Some("port 443 not allowed")),
            (EgressVia::Http, EgressVerdict::Refused, "other.test", Some("not in allow_domains")),
        ]
    );
    assert!(found.iter().all(|d| d.bytes_up == 0 && d.bytes_down == 0 && d.address.is_none()));
}

#[tokio::test]
async fn a_plain_http_request_is_forwarded_to_an_allowed_name_without_the_proxy_headers() {
    let port = http_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{port}")]), Arc::new(resolver)).await;

    let url = format!("http://example.test:{port}/hi?x=1");
    let (code, body) = get(&rig.socket, &url, "Proxy-Authorization: Basic c2VjcmV0\r\n").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, format!("hello example.test:{port} /hi?x=1 proxy-authorization seen: false"));

    let d = rig.decisions(1).await.remove(0);
    assert_eq!((d.via, d.verdict, d.port), (EgressVia::Http, EgressVerdict::Allowed, port));
    assert!(d.bytes_up > 0 && d.bytes_down > body.len() as u64, "{d:?}");
}

#[tokio::test]
async fn api_only_refuses_everything_even_a_listed_name() {
    let port = echo_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::ApiOnly, &[format!("example.test:{port}")]), Arc::new(resolver)).await;

    let (code, body, _) = connect(&rig.socket, &format!("example.test:{port}")).await;
    assert_eq!(code, 403);
    assert!(body.contains("\"api-only\"") && body.contains("network = \"allowlist\""), "{body}");
    let (code, _) = get(&rig.socket, &format!("http://example.test:{port}/"), "").await;
    assert_eq!(code, 403);
    let found = rig.decisions(2).await;
    assert!(found
        .iter()
        .all(|d| d.verdict == EgressVerdict::Refused && d.reason.as_deref() == Some("network = \"api-only\"")));
}

#[tokio::test]
async fn names_that_resolve_to_local_addresses_are_refused_whatever_the_policy() {
    // Open, and every name listed on port 443: only the address rule is left to refuse.
    let resolver = TestResolver::default()
        .answer("rebind.test", &["127.0.0.1"])
        .answer("mapped.test", &["::ffff:127.0.0.1"])
        .answer("mixed.test", &["127.0.0.1", "127.0.0.2"])
        .vouch("mixed.test", "127.0.0.1")
        .answer("lan.test", &["10.0.0.1"])
        .answer("metadata.test", &["169.254.169.254"])
        .answer("cgnat.test", &["100.64.0.1"]);
    let rig = rig(policy(NetworkPolicy::Open, &[]), Arc::new(resolver)).await;

    for (name, says) in [
        ("rebind.test", "127.0.0.1, a loopback address"),
        ("mapped.test", "::ffff:127.0.0.1, a loopback address"),
        // One address not vouched for refuses the name, even if another is fine.
        ("mixed.test", "127.0.0.2, a loopback address"),
        ("lan.test", "10.0.0.1, a private address"),
        ("metadata.test", "169.254.169.254, a link-local address"),
        ("cgnat.test", "100.64.0.1, a carrier-grade NAT address"),
    ] {
        let (code, body, _) = connect(&rig.socket, &format!("{name}:443")).await;
        assert_eq!(code, 403, "{name}: {body}");
        assert!(body.contains(says) && body.contains("whatever the policy"), "{name}: {body}");
    }
    let found = rig.decisions(6).await;
    assert!(found.iter().all(|d| d.verdict == EgressVerdict::Refused && d.address.is_none()), "{found:?}");
    assert_eq!(found[3].reason.as_deref(), Some("10.0.0.1 is a private address (the local network)"));
}

#[tokio::test]
async fn literal_local_addresses_and_localhost_are_refused_by_the_system_resolver() {
    let rig = rig(policy(NetworkPolicy::Open, &[]), Arc::new(SystemResolver)).await;
    // Loopback first: a proxy that did not vet would fail here, on this machine.
    for target in [
        "127.0.0.1:443",
        "[::1]:443",
        "[::ffff:127.0.0.1]:443",
        "[::ffff:7f00:1]:80",
        "0.0.0.0:80",
        "localhost:443",
        "LOCALHOST.:80",
        "10.0.0.1:443",
        "172.16.5.4:443",
        "192.168.1.1:80",
        "169.254.169.254:80",
        "[fe80::1]:443",
        "[fd00::1]:443",
        "100.64.0.1:443",
        "224.0.0.1:80",
    ] {
        let (code, body, _) = connect(&rig.socket, target).await;
        assert_eq!(code, 403, "{target}: {body}");
        assert!(body.contains("whatever the policy"), "{target}: {body}");
    }
    let (code, body) = get(&rig.socket, "http://169.254.169.254/latest/meta-data/", "").await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("link-local"), "{body}");
    let found = rig.decisions(16).await;
    assert!(found.iter().all(|d| d.verdict == EgressVerdict::Refused), "{found:?}");
}

#[tokio::test]
async fn unreachable_destinations_answer_502_and_are_stored_as_failed() {
    // A loopback port nobody listens on, and a name nobody answers.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let resolver = TestResolver::default().answer("down.test", &["127.0.0.1"]).vouch("down.test", "127.0.0.1");
    let allow = [format!("down.test:{port}"), "nowhere.test".to_owned()];
    let rig = rig(policy(NetworkPolicy::Allowlist, &allow), Arc::new(resolver)).await;

    let (code, body, _) = connect(&rig.socket, &format!("down.test:{port}")).await;
    assert_eq!(code, 502, "{body}");
    let (code, body, _) = connect(&rig.socket, "nowhere.test:443").await;
    assert_eq!(code, 502, "{body}");
    assert!(body.contains("does not resolve"), "{body}");
    let found = rig.decisions(2).await;
    assert!(found.iter().all(|d| d.verdict == EgressVerdict::Failed), "{found:?}");
}

#[tokio::test]
async fn requests_that_are_not_proxy_requests_get_a_400_and_a_huge_head_is_cut() {
    // api-only: should a request get past these checks, it is refused before any lookup.
    let rig = rig(policy(NetworkPolicy::ApiOnly, &[]), Arc::new(SystemResolver)).await;
    for request in [
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
        "GET https://example.test/ HTTP/1.1\r\nHost: example.test\r\n\r\n".to_owned(),
        "CONNECT example.test HTTP/1.1\r\nHost: example.test\r\n\r\n".to_owned(),
    ] {
        let mut stream = UnixStream::connect(&rig.socket).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        assert_eq!(status(&head), 400, "{request:?}: {head}");
    }
    let mut stream = UnixStream::connect(&rig.socket).await.unwrap();
    let huge = format!("GET http://example.test/ HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(100 * 1024));
    // The proxy may stop reading before all of it is written.
    let _ = stream.write_all(huge.as_bytes()).await;
    let head = read_head(&mut stream).await;
    assert_eq!(status(&head), 431, "{head}");
    // Nothing here was a connection attempt.
    assert!(rig.store.egress().egress_decisions(&team(), 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn shutdown_ends_open_tunnels_and_their_decisions_are_stored_before_close_returns() {
    let port = echo_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{port}")]), Arc::new(resolver)).await;
    let (code, _, mut tunnel) = connect(&rig.socket, &format!("example.test:{port}")).await;
    assert_eq!(code, 200);
    greeted(&mut tunnel).await;
    tunnel.write_all(b"abc").await.unwrap();
    let mut back = [0; 3];
    tunnel.read_exact(&mut back).await.unwrap();

    rig.shutdown.cancel();
    tokio::time::timeout(PATIENCE, rig.served).await.expect("serve_group returns after shutdown").unwrap();
    rig.proxy.close().await;
    let found = rig.store.egress().egress_decisions(&team(), 10).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].bytes_up, found[0].bytes_down), (3, 4 + 3));
    assert_eq!(found[0].reason.as_deref(), Some("cut by pincer's shutdown"));
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, tunnel.read_to_end(&mut rest)).await.expect("the tunnel is closed");
}

#[tokio::test]
async fn pincer_egress_prints_a_groups_decisions_newest_last() {
    let port = echo_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{port}")]), Arc::new(resolver)).await;
    let (code, _, mut tunnel) = connect(&rig.socket, &format!("example.test:{port}")).await;
    assert_eq!(code, 200);
    greeted(&mut tunnel).await;
    tunnel.write_all(b"hello").await.unwrap();
    let mut back = [0; 5];
    tunnel.read_exact(&mut back).await.unwrap();
    drop(tunnel);
    rig.decisions(1).await;
    let (code, _, _) = connect(&rig.socket, "other.test:443").await;
    assert_eq!(code, 403);
    rig.decisions(2).await;

    let config = rig.dir.path().join("pincer.toml");
    let text = format!(
        "data_dir = {:?}\ngroups_dir = {:?}\n",
        rig.dir.path().join("data").display().to_string(),
        rig.dir.path().join("groups").display().to_string()
    );
    std::fs::write(&config, text).unwrap();
    let run = |args: &[&str]| {
        #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
            // The tests' own variable is no key of pincer's config.
            .env_remove("PINCER_TEST_CLAUDE")
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["egress", "team"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains(&format!("allowed  connect example.test:{port} → 127.0.0.1  ↑5 B ↓9 B")), "{text}");
    assert!(lines[1].contains("refused  connect other.test:443: not in allow_domains"), "{text}");
    let json = run(&["egress", "team", "--json", "--limit", "1"]);
    let only: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!((only["host"].as_str(), only["verdict"].as_str()), (Some("other.test"), Some("refused")));
}

#[test]
fn the_test_resolver_vouches_only_for_its_pairs() {
    let r = TestResolver::default().vouch("example.test", "127.0.0.1");
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    assert_eq!(r.vet("example.test", lo), Ok(()));
    assert_eq!(r.vet("127.0.0.1", lo), Err(Forbidden::Loopback));
    assert_eq!(r.vet("other.test", lo), Err(Forbidden::Loopback));
}

/// `node container/forward.mjs`, the docker image's forwarder, run on the
/// host: it presents the proxy's socket on a loopback port as `pincer
/// forward` does in bwrap (no Docker engine is needed to test its part).
#[tokio::test]
async fn the_container_forwarder_carries_a_tcp_client_to_the_proxy_socket() {
    let web = http_server().await;
    let resolver = TestResolver::default().answer("example.test", &["127.0.0.1"]).vouch("example.test", "127.0.0.1");
    let rig = rig(policy(NetworkPolicy::Allowlist, &[format!("example.test:{web}")]), Arc::new(resolver)).await;
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("container/forward.mjs");
    #[allow(clippy::disallowed_methods)] // the image's forwarder, run as Docker would
    let mut node = tokio::process::Command::new("node")
        .arg(&script)
        .arg(format!("127.0.0.1:{port}"))
        .arg(&rig.socket)
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (the CLI's tests install it)");
    let connected = async {
        loop {
            match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                Ok(stream) => return stream,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    let mut stream = tokio::time::timeout(PATIENCE, connected).await.expect("the forwarder listens");
    let url = format!("http://example.test:{web}/through-node");
    let request = format!("GET {url} HTTP/1.1\r\nHost: example.test:{web}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, stream.read_to_string(&mut answer)).await.expect("an answer").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("hello example.test:{web} /through-node")), "{answer}");
    let d = rig.decisions(1).await.remove(0);
    assert_eq!((d.via, d.verdict), (EgressVia::Http, EgressVerdict::Allowed));
    node.kill().await.unwrap();
}
