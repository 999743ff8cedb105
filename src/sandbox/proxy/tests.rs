//! The proxy against a local upstream that streams an SSE body in two parts,
//! the second only after the client has read the first: a buffering proxy
//! would never deliver the first part, so this proves streaming without timing.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Credential, Proxy};
use crate::config::Secret;

const PART_ONE: &str = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
const PART_TWO: &str = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

struct Upstream {
    url: String,
    /// Headers of every request that reached the upstream.
    seen: Arc<Mutex<Vec<HeaderMap>>>,
    /// Releases the second part of the body.
    release: Option<oneshot::Sender<()>>,
}

async fn upstream() -> Upstream {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (release, released) = oneshot::channel::<()>();
    let released = Arc::new(Mutex::new(Some(released)));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let record = record.clone();
        let released = released.clone();
        async move {
            record.lock().unwrap().push(headers);
            let (tx, rx) = mpsc::channel::<Result<String, std::io::Error>>(2);
            let gate = released.lock().unwrap().take();
            tokio::spawn(async move {
                let _ = tx.send(Ok(PART_ONE.to_owned())).await;
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                let _ = tx.send(Ok(PART_TWO.to_owned())).await;
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|item| (item, rx)) });
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("request-id", "req_1")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { url, seen, release: Some(release) }
}

/// A proxy to `url` with the real key, on a socket in a temp dir (kept as
/// long as the dir is).
async fn api_proxy(url: &str) -> (tempfile::TempDir, Proxy) {
    api_proxy_until(url, &CancellationToken::new()).await
}

/// [`api_proxy`], serving until `stop`.
async fn api_proxy_until(url: &str, stop: &CancellationToken) -> (tempfile::TempDir, Proxy) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let proxy = Proxy::start(url, Credential::ApiKey(Secret::new("sk-real")), &socket, stop.clone()).await.unwrap();
    (dir, proxy)
}

/// A client that speaks HTTP over the proxy's socket, as the sandboxed CLI does.
fn over(proxy: &Proxy) -> reqwest::Client {
    reqwest::Client::builder().unix_socket(proxy.socket()).build().unwrap()
}

#[tokio::test]
async fn streams_the_reply_and_swaps_the_placeholder_for_the_real_key() {
    let mut up = upstream().await;
    let shutdown = CancellationToken::new();
    let (_dir, proxy) = api_proxy_until(&up.url, &shutdown).await;
    let lease = proxy.lease("alpha");
    let mut response = over(&proxy)
        .post("http://localhost/v1/messages?beta=true")
        .header("x-api-key", lease.key())
        .header("anthropic-version", "2023-06-01")
        .body("{\"stream\":true}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["request-id"], "req_1");
    let first = response.chunk().await.unwrap().unwrap();
    assert_eq!(first, PART_ONE, "the first part arrives while the upstream still holds the second");
    up.release.take().unwrap().send(()).unwrap();
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(rest).unwrap(), PART_TWO);

    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["x-api-key"], "sk-real");
    assert_eq!(seen[0]["anthropic-version"], "2023-06-01", "other headers pass unchanged");
    assert!(!seen[0].contains_key("authorization"));
    shutdown.cancel();
}

/// Told to stop, the proxy finishes the reply it is streaming; once
/// `stopped` returns, its socket takes no connection (a stopped pincer's
/// proxy is gone, and what it served is in the ledger).
#[tokio::test]
async fn a_stopped_proxy_finishes_its_reply_then_refuses_connections() {
    let mut up = upstream().await;
    let stop = CancellationToken::new();
    let (_dir, proxy) = api_proxy_until(&up.url, &stop).await;
    let lease = proxy.lease("alpha");
    let mut response =
        over(&proxy).post("http://localhost/v1/messages").header("x-api-key", lease.key()).send().await.unwrap();
    assert_eq!(response.chunk().await.unwrap().unwrap(), PART_ONE);

    stop.cancel();
    let stopped = tokio::spawn({
        let proxy = proxy.clone();
        async move { proxy.stopped().await }
    });
    // One turn of this (current-thread) runtime: enough for `stopped` to end,
    // had it not to wait for the reply the upstream still holds.
    tokio::task::yield_now().await;
    assert!(!stopped.is_finished(), "stopping waits for the reply in flight");
    up.release.take().unwrap().send(()).unwrap();
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(String::from_utf8(rest).unwrap(), PART_TWO, "the reply in flight is whole");
    drop(response);
    stopped.await.unwrap();
    let refused = tokio::net::UnixStream::connect(proxy.socket()).await;
    assert!(refused.is_err(), "nothing listens once stopped");
}

#[tokio::test]
async fn refuses_unknown_and_returned_placeholders() {
    let up = upstream().await;
    let (_dir, proxy) = api_proxy(&up.url).await;
    let client = over(&proxy);
    let url = "http://localhost/v1/messages";
    let wrong = client.post(url).header("x-api-key", "sk-real").send().await.unwrap();
    assert_eq!(wrong.status(), 401, "not even the real key is accepted from the agent's side");
    let none = client.post(url).send().await.unwrap();
    assert_eq!(none.status(), 401);
    let lease = proxy.lease("alpha");
    let key = lease.key().to_owned();
    drop(lease);
    let returned = client.post(url).bearer_auth(&key).send().await.unwrap();
    assert_eq!(returned.status(), 401, "a process's key dies with it");
    assert!(up.seen.lock().unwrap().is_empty(), "nothing refused reaches the upstream");
}

#[tokio::test]
async fn an_oauth_token_goes_upstream_as_a_bearer_with_the_oauth_beta() {
    let up = upstream().await;
    let credential = Credential::OAuth(Secret::new("oauth-real"));
    let dir = tempfile::tempdir().unwrap();
    let proxy =
        Proxy::start(&up.url, credential, &dir.path().join("api.sock"), CancellationToken::new()).await.unwrap();
    let lease = proxy.lease("alpha");
    let sent = over(&proxy)
        .post("http://localhost/v1/messages")
        .bearer_auth(lease.key())
        .header("anthropic-beta", "fine-grained-tool-streaming-2025-05-14")
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen[0]["authorization"], "Bearer oauth-real");
    assert!(!seen[0].contains_key("x-api-key"));
    assert_eq!(seen[0]["anthropic-beta"], "fine-grained-tool-streaming-2025-05-14,oauth-2025-04-20");
}

#[tokio::test]
async fn serves_the_same_on_its_unix_socket_in_a_folder_only_its_user_may_enter() {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut up = upstream().await;
    drop(up.release.take()); // the whole body at once
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/api.sock");
    let proxy = Proxy::start(&up.url, Credential::ApiKey(Secret::new("sk-real")), &socket, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(proxy.socket(), socket);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("run")), 0o700);
    let lease = proxy.lease("alpha");
    let ask = |key: String| {
        let socket = socket.clone();
        async move {
            let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
            let request = format!(
                "POST /v1/messages HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\ncontent-type: \
                 application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer
        }
    };
    let answer = ask(lease.key().to_owned()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(ask("sk-real".to_owned()).await.starts_with("HTTP/1.1 401"), "a placeholder is still required");
    assert_eq!(up.seen.lock().unwrap()[0]["x-api-key"], "sk-real");
}

/// One raw HTTP/1.1 request over the socket, the target exactly as given
/// (an HTTP client would resolve `..` before sending); the whole answer.
async fn raw(socket: &std::path::Path, method: &str, target: &str, key: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let request = format!(
        "{method} {target} HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\ncontent-type: application/json\r\n\
         content-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

#[tokio::test]
async fn forwards_only_the_calls_the_cli_makes_and_refuses_the_rest_before_the_upstream() {
    let mut up = upstream().await;
    drop(up.release.take()); // the whole body at once
    let (_dir, proxy) = api_proxy(&up.url).await;
    let socket = proxy.socket();
    let lease = proxy.lease("alpha");
    let refused = [
        ("GET", "/v1/files"),
        ("POST", "/v1/files"),
        ("DELETE", "/v1/files/file_011"),
        ("GET", "/v1/models"),
        ("POST", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches/msgbatch_1/results"),
        ("GET", "/v1/organizations/me/api_keys"),
        ("GET", "/api/oauth/profile"),
        ("GET", "/v1/messages?beta=true"),
        ("HEAD", "/"),
        ("POST", "/v1/messages/../files"),
        ("POST", "/v1/messages/%2e%2e/files"),
        ("POST", "//v1/messages"),
        ("POST", "/v1/messages?beta=true&limit=1"),
    ];
    for (method, target) in refused {
        let answer = raw(socket, method, target, lease.key()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{method} {target}: {answer}");
        if method != "HEAD" {
            let body = answer.split_once("\r\n\r\n").unwrap().1;
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "permission_error");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("refused {method} {target}:")), "{message}");
            assert!(message.contains("POST /v1/messages"), "says what is forwarded: {message}");
        }
    }
    assert!(up.seen.lock().unwrap().is_empty(), "no refused request reached the upstream");

    for target in ["/v1/messages?beta=true", "/v1/messages", "/v1/messages/count_tokens?beta=true"] {
        let answer = raw(socket, "POST", target, lease.key()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{target}: {answer}");
    }
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "each allowed call was forwarded once");
    assert!(seen.iter().all(|h| h["x-api-key"] == "sk-real"));
}

#[tokio::test]
async fn a_request_without_a_placeholder_is_refused_whatever_its_path() {
    let up = upstream().await;
    let (_dir, proxy) = api_proxy(&up.url).await;
    let answer = raw(proxy.socket(), "GET", "/v1/files", "pincer-placeholder-forged").await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(up.seen.lock().unwrap().is_empty());
}

/// A reply the API streams: its usage said at the start and at the end.
const METERED: [&str; 4] = [
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",",
    "\"usage\":{\"input_tokens\":1000000,\"output_tokens\":1}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":100000}}\n\n",
];

/// An upstream answering every call with [`METERED`], chunk by chunk, or
/// holding the rest back after the first two chunks when `hold` is set.
async fn metered_upstream(hold: bool) -> (String, Arc<Mutex<Vec<HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        record.lock().unwrap().push(headers);
        async move {
            let (tx, rx) = mpsc::channel::<Result<&'static str, std::io::Error>>(4);
            tokio::spawn(async move {
                for (n, chunk) in METERED.into_iter().enumerate() {
                    if hold && n == 2 {
                        // The client goes away before the rest: hold it until then.
                        tx.closed().await;
                        return;
                    }
                    let _ = tx.send(Ok(chunk)).await;
                }
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|item| (item, rx)) });
            Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// Waits until the ledger holds something (the body's end is seen by the
/// server's side of the connection, a moment after the client's).
async fn until_counted(proxy: &Proxy) -> Vec<((String, i64), crate::domain::budget::ProxyUse)> {
    for _ in 0..500 {
        let pending: Vec<_> = proxy.spend().pending().into_iter().collect();
        if !pending.is_empty() {
            return pending;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("nothing was counted");
}

#[tokio::test]
async fn a_streamed_replys_usage_is_counted_for_its_group_as_it_passes_unchanged() {
    let (url, seen) = metered_upstream(false).await;
    let (_dir, proxy) = api_proxy(&url).await;
    let lease = proxy.lease("alpha");
    // As code in the sandbox would call it, without the CLI.
    let body = over(&proxy)
        .post("http://localhost/v1/messages?beta=true")
        .header("x-api-key", lease.key())
        .header("accept-encoding", "gzip, br")
        .body("{\"stream\":true}")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, METERED.concat(), "the body passes unchanged");
    assert_eq!(seen.lock().unwrap()[0]["accept-encoding"], "identity", "asked uncompressed, to be read");
    let counted = until_counted(&proxy).await;
    assert_eq!(counted.len(), 1);
    let ((group, _), used) = &counted[0];
    assert_eq!(group, "alpha");
    assert_eq!((used.calls, used.tokens.input, used.tokens.output), (1, 1_000_000, 100_000));
    assert!((used.cost_usd - 4.5).abs() < 1e-9, "Sonnet: $3 per million in, $15 out: {}", used.cost_usd);

    // Written to the store by the proxy's writer, where the budget reads it.
    let group: crate::domain::GroupName = "alpha".parse().unwrap();
    let (_dir, store) = crate::store::tests::store_with(&group).await;
    let stop = CancellationToken::new();
    stop.cancel();
    super::spend::keep(proxy.spend(), store.budgets(), stop).await;
    let periods = crate::domain::budget::Periods::at(std::time::SystemTime::now(), chrono_tz::UTC);
    let spent = store.budgets().budget_spent(&group, &periods).await.unwrap();
    assert!((spent.today_usd - 4.5).abs() < 1e-9, "{spent:?}");
    assert!(proxy.spend().pending().is_empty(), "stored once");
}

#[tokio::test]
async fn a_reply_the_client_walks_away_from_is_counted_as_far_as_it_went() {
    let (url, _) = metered_upstream(true).await;
    let (_dir, proxy) = api_proxy(&url).await;
    let lease = proxy.lease("alpha");
    let mut response = over(&proxy)
        .post("http://localhost/v1/messages")
        .header("x-api-key", lease.key())
        .body("{\"stream\":true}")
        .send()
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < METERED[0].len() + METERED[1].len() {
        got.extend_from_slice(&response.chunk().await.unwrap().unwrap());
    }
    drop(response);
    let counted = until_counted(&proxy).await;
    let (_, used) = &counted[0];
    assert_eq!((used.tokens.input, used.tokens.output), (1_000_000, 1), "the input was billed; what it said so far");
}
