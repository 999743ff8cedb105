//! The credential proxy: the only place pincer's API credential is used.
//!
//! pincer serves HTTP on a Unix socket (`data_dir/run/api.sock`) and nowhere
//! else; every sandbox (bwrap or Docker) gets it bound in: the agent has no
//! network of its own, and the CLI speaks HTTP over that socket
//! (`ANTHROPIC_UNIX_SOCKET`). A sandboxed CLI gets a per-process placeholder
//! as `ANTHROPIC_API_KEY`. A request must carry a placeholder that is still
//! leased (in `x-api-key` or `Authorization: Bearer`), and be one of the
//! Messages API calls the CLI makes ([`allow`]: anything else gets a 403 and
//! never leaves); the proxy then swaps in the real credential, forwards the
//! request to the upstream API, and streams the response back as it arrives
//! (SSE included), status and headers as sent.
//!
//! The placeholder is in the sandbox's environment, so code there can call
//! the API through the socket without the CLI, and no `result` counts that.
//! The proxy therefore reads each response's `usage` beside the stream, each
//! chunk after it has gone on ([`usage`], bounded, nothing held back), prices
//! it ([`price`]) and adds it to the group's spend ([`spend`]), which its
//! budget counts; the store write comes after the reply's last byte, from
//! a task of its own ([`spend::keep`]). Upstream
//! replies are asked uncompressed (`accept-encoding: identity`) so their
//! usage can be read; the hop to the CLI is a local socket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Secret;

/// The largest request body forwarded (the CLI sends whole conversations).
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// The beta the API requires on requests authorized with an OAuth token.
const OAUTH_BETA: &str = "oauth-2025-04-20";

/// What the proxy puts on forwarded requests.
#[derive(Clone, Debug)]
pub enum Credential {
    /// Sent as `x-api-key`.
    ApiKey(Secret),
    /// Sent as `Authorization: Bearer`, with the OAuth beta.
    OAuth(Secret),
}

/// Leased placeholders: key → the group it was issued to. A std `Mutex`: it
/// is held for a map lookup only, never across an await.
type Keys = Arc<Mutex<HashMap<String, String>>>;

/// The running proxy. Stops when its stop token is cancelled (after the
/// sessions: a turn finishing during their grace still reaches the API).
#[derive(Clone, Debug)]
pub struct Proxy {
    socket: PathBuf,
    keys: Keys,
    spend: SpendLedger,
    /// The serving task: [`Proxy::stopped`] waits for it.
    served: TaskTracker,
}

/// A placeholder key valid while this lease lives (one CLI process).
#[derive(Debug)]
pub struct KeyLease {
    key: String,
    keys: Keys,
}

impl KeyLease {
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for KeyLease {
    fn drop(&mut self) {
        self.keys.lock().expect("key map lock").remove(&self.key);
    }
}

struct Shared {
    keys: Keys,
    upstream: String,
    credential: Credential,
    client: reqwest::Client,
    spend: SpendLedger,
}

/// The proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the credential proxy cannot listen on the socket {path}: {source}")]
    BindSocket { path: PathBuf, source: std::io::Error },
    #[error("the credential proxy's HTTP client cannot be built: {0}")]
    Client(reqwest::Error),
}

impl Proxy {
    /// Binds `socket` (replacing a dead pincer's; the caller holds the data
    /// directory) and serves it until `stop`.
    pub async fn start(
        upstream: &str,
        credential: Credential,
        socket: &Path,
        stop: CancellationToken,
    ) -> Result<Proxy, ProxyError> {
        let keys = Keys::default();
        let spend = SpendLedger::default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            // Each event goes out as it comes; said here, not left to a default.
            .tcp_nodelay(true)
            .build()
            .map_err(ProxyError::Client)?;
        let shared = Arc::new(Shared {
            keys: keys.clone(),
            upstream: upstream.trim_end_matches('/').to_owned(),
            credential,
            client,
            spend: spend.clone(),
        });
        let app = Router::new().fallback(forward).with_state(shared);
        let unix = bind_socket(socket).map_err(|source| ProxyError::BindSocket { path: socket.to_owned(), source })?;
        let served = TaskTracker::new();
        served.spawn(async move {
            if let Err(e) = axum::serve(unix, app).with_graceful_shutdown(stop.cancelled_owned()).await {
                tracing::error!(%e, "the credential proxy stopped");
            }
        });
        served.close();
        tracing::info!(socket = %socket.display(), "credential proxy listening");
        Ok(Proxy { socket: socket.to_owned(), keys, spend, served })
    }

    /// Returns once the proxy, told to stop, has closed its socket and
    /// finished the requests it was serving (whose spend is then in the
    /// ledger). It waits on its clients: whoever calls it bounds the wait.
    pub async fn stopped(&self) {
        self.served.wait().await;
    }

    /// What passed the proxy and is not yet stored: for [`spend::keep`].
    pub fn spend(&self) -> SpendLedger {
        self.spend.clone()
    }

    /// The Unix socket, for a sandbox to bind in.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A fresh placeholder for one process of `group`.
    pub fn lease(&self, group: &str) -> KeyLease {
        let key = format!("pincer-placeholder-{}", uuid::Uuid::new_v4().simple());
        self.keys.lock().expect("key map lock").insert(key.clone(), group.to_owned());
        KeyLease { key, keys: self.keys.clone() }
    }
}

/// A fresh socket at `path` (see [`super::socket`]).
fn bind_socket(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    let (Some(run), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("not a socket path"));
    };
    super::socket::bind(run, &name.to_string_lossy())
}

/// The placeholder a request carries, if any.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key);
    }
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let group = match admitted(&shared, &request) {
        Ok(group) => group,
        Err(refused) => return *refused,
    };
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(e) => return error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", &format!("request body: {e}")),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", shared.upstream);
    let mut headers = forwarded_headers(&parts.headers);
    with_credential(&mut headers, &shared.credential);
    let sent = shared.client.request(parts.method, &url).headers(headers).body(body).send().await;
    let upstream = match sent {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%group, %e, "credential proxy: the upstream API is unreachable");
            return error(StatusCode::BAD_GATEWAY, "api_error", &format!("pincer's proxy cannot reach the API: {e}"));
        }
    };
    let mut response = Response::builder().status(upstream.status().as_u16());
    for (name, value) in upstream.headers() {
        if !is_hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    let meter = metering(&group, &upstream);
    let reading = Reading { meter, group, spend: shared.spend.clone(), unread: None };
    response
        .body(metered(upstream.bytes_stream(), reading))
        .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, "api_error", &format!("bad upstream response: {e}")))
}

/// The group whose placeholder key the request presents, if it is a call
/// the CLI makes; else the refusal to answer with.
fn admitted(shared: &Shared, request: &Request) -> Result<String, Box<Response>> {
    let group = presented(request.headers()).and_then(|k| shared.keys.lock().expect("key map lock").get(k).cloned());
    let Some(group) = group else {
        tracing::warn!(path = %request.uri().path(), "credential proxy: refused a request without a current placeholder key");
        return Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "pincer's credential proxy refused this request: its key is not a current placeholder issued by pincer",
        )));
    };
    if let Err(why) = allow::check(request.method(), request.uri()) {
        let call = allow::shown(request.method(), request.uri());
        tracing::warn!(%group, request = %call, %why, "credential proxy: refused a request the CLI does not make; the API never saw it");
        let message = format!(
            "pincer's credential proxy refused {call}: {why}. It forwards only the Messages API calls the Claude \
             Code CLI makes ({})",
            allow::allowed_text()
        );
        return Err(Box::new(error(StatusCode::FORBIDDEN, "permission_error", &message)));
    }
    Ok(group)
}

/// The real credential in place of the placeholder (and OAuth's beta flag).
fn with_credential(headers: &mut HeaderMap, credential: &Credential) {
    match credential {
        Credential::ApiKey(key) => {
            headers.insert("x-api-key", sensitive(key.expose()));
        }
        Credential::OAuth(token) => {
            headers.insert(header::AUTHORIZATION, sensitive(&format!("Bearer {}", token.expose())));
            let beta = match headers.get("anthropic-beta").and_then(|v| v.to_str().ok()) {
                Some(b) if b.split(',').any(|x| x.trim() == OAUTH_BETA) => b.to_owned(),
                Some(b) => format!("{b},{OAUTH_BETA}"),
                None => OAUTH_BETA.to_owned(),
            };
            if let Ok(v) = HeaderValue::from_str(&beta) {
                headers.insert("anthropic-beta", v);
            }
        }
    }
}

/// The meter for `upstream`'s body, if it can carry usage.
fn metering(group: &str, upstream: &reqwest::Response) -> Option<Meter> {
    let header = |name| upstream.headers().get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let meter = Meter::for_response(upstream.status().as_u16(), header(header::CONTENT_TYPE))?;
    match header(header::CONTENT_ENCODING) {
        None => Some(meter),
        Some(coding) if coding.eq_ignore_ascii_case("identity") => Some(meter),
        Some(coding) => {
            tracing::warn!(%group, %coding, "credential proxy: the API compressed a reply it was asked not to; its usage is not counted");
            None
        }
    }
}

/// A response's body on its way to the client, its usage read after each
/// chunk has gone on: when the next is not there yet (time the relay would
/// spend waiting), else just before the next goes on, and at the latest when
/// the body ends or the client goes. So no chunk waits for its own parse, and
/// the last one, which carries the final usage, goes on first. The spend is
/// added when the body ends or the client goes (whatever it said it used by then).
struct Reading {
    meter: Option<Meter>,
    group: String,
    spend: SpendLedger,
    /// The chunk handed on whose usage is not read yet.
    unread: Option<Bytes>,
}

impl Reading {
    fn read_unread(&mut self) {
        if let (Some(chunk), Some(meter)) = (self.unread.take(), self.meter.as_mut()) {
            meter.feed(&chunk);
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.read_unread();
        if let Some(usage) = self.meter.take().and_then(Meter::finish) {
            self.spend.add(&self.group, &usage);
        }
    }
}

type Upstream = std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The upstream body relayed as it comes, read by its [`Reading`] beside it.
struct Relayed {
    upstream: Upstream,
    reading: Reading,
}

impl futures_util::Stream for Relayed {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = this.upstream.as_mut().poll_next(cx);
        this.reading.read_unread();
        if let Poll::Ready(Some(Ok(chunk))) = &polled {
            if this.reading.meter.is_some() {
                this.reading.unread = Some(chunk.clone());
            }
        }
        polled
    }
}

fn metered<S>(stream: S, reading: Reading) -> Body
where
    S: futures_util::Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
{
    Body::from_stream(Relayed { upstream: Box::pin(stream), reading })
}

/// The request's headers minus hop-by-hop ones, the host, and every credential.
fn forwarded_headers(incoming: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in incoming {
        let dropped =
            is_hop_by_hop(name) || name == header::HOST || name == header::AUTHORIZATION || name == "x-api-key";
        if !dropped {
            out.append(name.clone(), value.clone());
        }
    }
    // Uncompressed, so the reply's usage can be read on its way through.
    out.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    out
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    ];
    HOP.contains(&name.as_str())
}

fn sensitive(value: &str) -> HeaderValue {
    let mut v = HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
    v.set_sensitive(true);
    v
}

/// An Anthropic-style error body, so the CLI shows the message.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({ "type": "error", "error": { "type": kind, "message": message } });
    (status, [("x-should-retry", "false")], axum::Json(body)).into_response()
}

mod allow;
mod price;
pub mod spend;
mod usage;

use spend::SpendLedger;
use usage::Meter;

#[cfg(test)]
mod tests;
