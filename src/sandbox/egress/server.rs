//! The egress proxy's server: HTTP/1.1 on a group's socket, `CONNECT` turned
//! into a byte tunnel and absolute-form `http://` requests forwarded, each to
//! an address the policy and the resolver allowed. hyper parses and writes
//! the HTTP (bounded head, a deadline on it); pincer only decides and copies.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::policy::{Policy, Refusal, Rule};
use super::resolve::Resolve;
use crate::domain::net::Host;
use crate::domain::GroupName;
use crate::retry::{self, Backoff};
use crate::store::{now_us, EgressDecision, EgressLog, EgressVerdict, EgressVia};

/// How long a client has to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a request head may take (request line and headers; hyper answers 431 beyond).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a name may take to resolve, and one address to accept a connection.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Open client connections and tunnels per group; the next one waits to be accepted.
const MAX_CONNECTIONS: usize = 256;
/// Decisions waiting for the store.
const LOG_QUEUE: usize = 1024;
/// How long open exchanges get to finish once shutdown is asked.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The egress proxy: one per pincer, serving each group on its own listener,
/// all logging to the store through one writer task.
#[derive(Clone)]
pub struct EgressProxy {
    shared: Arc<Shared>,
}

struct Shared {
    resolver: Arc<dyn Resolve>,
    log: mpsc::Sender<EgressDecision>,
    stop_log: CancellationToken,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EgressProxy")
    }
}

impl EgressProxy {
    /// Starts the decisions writer (so: inside a tokio runtime). pincer passes
    /// [`SystemResolver`](super::SystemResolver).
    pub fn new(store: EgressLog, resolver: Arc<dyn Resolve>) -> EgressProxy {
        let (log, queue) = mpsc::channel(LOG_QUEUE);
        let stop_log = CancellationToken::new();
        let writer = tokio::spawn(write_log(store, queue, stop_log.clone()));
        EgressProxy { shared: Arc::new(Shared { resolver, log, stop_log, writer: Mutex::new(Some(writer)) }) }
    }

    /// Serves one group on `listener` (pincer binds e.g. `<run dir>/<group>/egress.sock`)
    /// until `shutdown`; returns once its connections and tunnels have ended
    /// and their decisions are queued for the store.
    pub async fn serve_group(&self, policy: Policy, listener: UnixListener, shutdown: CancellationToken) {
        self.serve(watch::channel(policy).1, listener, shutdown).await;
    }

    /// [`serve_group`](Self::serve_group) with a policy that may change while
    /// it serves (a reload): each new request is checked against the newest.
    pub async fn serve_group_live(
        &self,
        policy: watch::Receiver<Policy>,
        listener: UnixListener,
        shutdown: CancellationToken,
    ) {
        self.serve(policy, listener, shutdown).await;
    }

    /// [`serve_group`](Self::serve_group) on TCP (tests, benches).
    pub async fn serve_group_tcp(&self, policy: Policy, listener: TcpListener, shutdown: CancellationToken) {
        self.serve(watch::channel(policy).1, listener, shutdown).await;
    }

    /// Writes the decisions still queued and stops the writer. Call after
    /// every `serve_group` returned; a decision made later is logged, not stored.
    pub async fn close(&self) {
        self.shared.stop_log.cancel();
        let writer = self.shared.writer.lock().expect("writer lock").take();
        if let Some(writer) = writer {
            let _ = writer.await;
        }
    }

    async fn serve<L: Accept>(&self, policy: watch::Receiver<Policy>, listener: L, shutdown: CancellationToken) {
        let name = policy.borrow().group().clone();
        let group = Arc::new(GroupProxy {
            shared: self.shared.clone(),
            group: name,
            policy,
            shutdown: shutdown.clone(),
            tasks: TaskTracker::new(),
        });
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tracing::info!(group = %group.group, policy = %group.policy().network(), "egress proxy serving");
        let mut backoff = Backoff::new(retry::ACCEPT);
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok(stream) => {
                    backoff.succeeded();
                    group.tasks.spawn(group.clone().connection(stream, permit));
                }
                Err(e) => {
                    tracing::warn!(group = %group.group, %e, "egress proxy: accept failed");
                    drop(permit);
                    if !backoff.wait(None, &shutdown).await {
                        break;
                    }
                }
            }
        }
        group.tasks.close();
        group.tasks.wait().await;
    }
}

/// A listener the proxy serves on.
trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<Self::Io> {
        Ok(UnixListener::accept(self).await?.0)
    }
}

impl Accept for TcpListener {
    type Io = TcpStream;
    async fn accept(&self) -> io::Result<Self::Io> {
        let (stream, _) = TcpListener::accept(self).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

async fn write_log(store: EgressLog, mut queue: mpsc::Receiver<EgressDecision>, stop: CancellationToken) {
    loop {
        let next = tokio::select! {
            next = queue.recv() => next,
            // Closing lets recv drain what is queued, then end.
            _ = stop.cancelled() => { queue.close(); queue.recv().await }
        };
        let Some(decision) = next else { break };
        crate::metrics::counters::counters()
            .egress_decisions
            .get_or_create(&crate::metrics::counters::OutcomeLabel { outcome: decision.verdict.as_str() })
            .inc();
        if let Err(e) = store.record_egress(&decision).await {
            tracing::error!(group = %decision.group, host = %decision.host, %e, "egress decision not stored");
        }
    }
}

/// One group's side of the proxy.
struct GroupProxy {
    shared: Arc<Shared>,
    group: GroupName,
    /// The newest policy of the group (a reload changes it).
    policy: watch::Receiver<Policy>,
    shutdown: CancellationToken,
    /// Client connections and the tunnels and forwards they started.
    tasks: TaskTracker,
}

/// The connection's slot among [`MAX_CONNECTIONS`]; a tunnel takes it over.
type Slot = Arc<Mutex<Option<OwnedSemaphorePermit>>>;

impl GroupProxy {
    fn policy(&self) -> Policy {
        self.policy.borrow().clone()
    }

    async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        self: Arc<Self>,
        stream: S,
        permit: OwnedSemaphorePermit,
    ) {
        let slot: Slot = Arc::new(Mutex::new(Some(permit)));
        let this = self.clone();
        let service = service_fn(move |request| {
            let (this, slot) = (this.clone(), slot.clone());
            async move { Ok::<_, Infallible>(this.handle(request, slot).await) }
        });
        let mut builder = http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_header_size(MAX_HEAD_BYTES);
        let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
        tokio::pin!(conn);
        let served = tokio::select! {
            served = conn.as_mut() => served,
            _ = self.shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                tokio::time::timeout(SHUTDOWN_GRACE, conn).await.unwrap_or(Ok(()))
            }
        };
        if let Err(e) = served {
            tracing::debug!(group = %self.group, %e, "egress proxy: client connection ended");
        }
    }

    async fn handle(self: Arc<Self>, mut request: Request<Incoming>, slot: Slot) -> Response<Body> {
        let at_us = now_us();
        let (via, target) = match target(&request) {
            Ok(found) => found,
            Err(problem) => return plain(StatusCode::BAD_REQUEST, problem),
        };
        let attempt = Attempt { group: self.group.clone(), at_us, via, host: target.0.to_string(), port: target.1 };
        let (stream, addr) = match self.open(&target).await {
            Ok(opened) => opened,
            Err(Outcome::Refused(refusal)) => {
                tracing::info!(group = %attempt.group, host = %attempt.host, port = attempt.port, reason = %refusal.reason(), "egress refused");
                self.log(attempt.end(EgressVerdict::Refused, Some(refusal.reason()), None, &Counters::default())).await;
                return plain(StatusCode::FORBIDDEN, refusal.explain());
            }
            Err(Outcome::Failed(why)) => {
                tracing::info!(group = %attempt.group, host = %attempt.host, port = attempt.port, %why, "egress failed");
                self.log(attempt.end(EgressVerdict::Failed, Some(why.clone()), None, &Counters::default())).await;
                let text = format!("pincer's egress proxy cannot reach {}:{}: {why}", attempt.host, attempt.port);
                return plain(StatusCode::BAD_GATEWAY, text);
            }
        };
        let counters = Arc::new(Counters::default());
        let upstream = Counted { inner: stream, counters: counters.clone() };
        match via {
            EgressVia::Connect => {
                let upgrade = hyper::upgrade::on(&mut request);
                let permit = slot.lock().expect("slot lock").take();
                let this = self.clone();
                self.tasks.spawn(async move {
                    let _permit = permit;
                    let failure = this.tunnel(upgrade, upstream).await.err();
                    this.log(attempt.end(EgressVerdict::Allowed, failure, Some(addr), &counters)).await;
                });
                Response::new(Body::empty())
            }
            EgressVia::Http => self.forward(request, target, upstream, attempt, addr, counters).await,
        }
    }

    /// Checks the policy, resolves, vets, and connects to the first address that answers.
    async fn open(&self, (host, port): &(Host, u16)) -> Result<(TcpStream, SocketAddr), Outcome> {
        self.policy().check(host, *port).map_err(Outcome::Refused)?;
        let resolver = &self.shared.resolver;
        let (name, found) = match host {
            Host::Ip(ip) => (ip.to_string(), vec![*ip]),
            Host::Name(name) => {
                let found = tokio::time::timeout(RESOLVE_TIMEOUT, resolver.lookup(name, *port))
                    .await
                    .map_err(|_| Outcome::Failed(format!("{name} did not resolve within {RESOLVE_TIMEOUT:?}")))?
                    .map_err(|e| Outcome::Failed(format!("{name} does not resolve: {e}")))?;
                (name.clone(), found)
            }
        };
        if found.is_empty() {
            return Err(Outcome::Failed(format!("{name} has no address")));
        }
        // One forbidden address refuses the name: a name that is partly the
        // host's own is a rebinding attempt, not a mirror worth using.
        for ip in &found {
            resolver.vet(&name, *ip).map_err(|why| {
                Outcome::Refused(Refusal {
                    group: self.group.clone(),
                    host: host.clone(),
                    port: *port,
                    rule: Rule::Address { ip: *ip, why },
                })
            })?;
        }
        let mut last = String::new();
        for ip in found {
            let addr = SocketAddr::new(ip, *port);
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Small writes (TLS handshakes, SSE) go out at once.
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, addr));
                }
                Ok(Err(e)) => last = format!("connecting to {ip}: {e}"),
                Err(_) => last = format!("connecting to {ip}: no answer within {CONNECT_TIMEOUT:?}"),
            }
        }
        Err(Outcome::Failed(last))
    }

    /// Copies bytes both ways until either side closes (or shutdown).
    async fn tunnel(&self, upgrade: hyper::upgrade::OnUpgrade, mut upstream: Counted) -> Result<(), String> {
        let upgraded = upgrade.await.map_err(|e| format!("the client left before the tunnel opened: {e}"))?;
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                copied.map(drop).map_err(|e| format!("tunnel ended: {e}"))
            }
            _ = self.shutdown.cancelled() => Err("cut by pincer's shutdown".to_owned()),
        }
    }

    /// Sends one plain request to the opened connection and streams the
    /// answer back; the decision is stored when that connection closes.
    async fn forward(
        &self,
        request: Request<Incoming>,
        (host, port): (Host, u16),
        upstream: Counted,
        attempt: Attempt,
        addr: SocketAddr,
        counters: Arc<Counters>,
    ) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let origin_form = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        parts.uri = Uri::try_from(origin_form).unwrap_or_else(|_| Uri::from_static("/"));
        strip_hop_by_hop(&mut parts.headers);
        if !parts.headers.contains_key(header::HOST) {
            let authority = if port == 80 { host.to_string() } else { format!("{host}:{port}") };
            if let Ok(value) = HeaderValue::from_str(&authority) {
                parts.headers.insert(header::HOST, value);
            }
        }
        let (outcome, told) = oneshot::channel::<Option<String>>();
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => {
                self.log(attempt.end(EgressVerdict::Failed, Some(e.to_string()), Some(addr), &counters)).await;
                return plain(StatusCode::BAD_GATEWAY, format!("pincer's egress proxy: {addr}: {e}"));
            }
        };
        let shutdown = self.shutdown.clone();
        let shared = self.shared.clone();
        self.tasks.spawn(async move {
            let ended = tokio::select! {
                ended = conn => ended.err().map(|e| e.to_string()),
                _ = shutdown.cancelled() => Some("cut by pincer's shutdown".to_owned()),
            };
            let failure = told.await.ok().flatten().or(ended);
            log_to(&shared, attempt.end(EgressVerdict::Allowed, failure, Some(addr), &counters)).await;
        });
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let _ = outcome.send(None);
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Err(e) => {
                let _ = outcome.send(Some(format!("no answer: {e}")));
                plain(StatusCode::BAD_GATEWAY, format!("pincer's egress proxy: {addr} did not answer: {e}"))
            }
        }
    }

    async fn log(&self, decision: EgressDecision) {
        log_to(&self.shared, decision).await;
    }
}

/// Queues a decision; waits when the store is behind (never on a data path:
/// refusals before their answer, the rest once their connection closed).
async fn log_to(shared: &Shared, decision: EgressDecision) {
    if let Err(lost) = shared.log.send(decision).await {
        let d = lost.0;
        tracing::warn!(group = %d.group, host = %d.host, verdict = d.verdict.as_str(), "egress decision not stored: the proxy is closing");
    }
}

enum Outcome {
    Refused(Refusal),
    Failed(String),
}

/// A request as the log names it before its fate is known.
struct Attempt {
    group: GroupName,
    at_us: i64,
    via: EgressVia,
    host: String,
    port: u16,
}

impl Attempt {
    fn end(
        &self,
        verdict: EgressVerdict,
        reason: Option<String>,
        address: Option<SocketAddr>,
        counters: &Counters,
    ) -> EgressDecision {
        EgressDecision {
            group: self.group.clone(),
            at_us: self.at_us,
            closed_at_us: now_us(),
            via: self.via,
            host: self.host.clone(),
            port: self.port,
            verdict,
            reason,
            address: address.map(|a| a.ip().to_string()),
            bytes_up: counters.up.load(Ordering::Relaxed),
            bytes_down: counters.down.load(Ordering::Relaxed),
        }
    }
}

/// Where a request asks to go: `CONNECT host:port`, or `http://host[:port]/…`.
fn target(request: &Request<Incoming>) -> Result<(EgressVia, (Host, u16)), String> {
    let uri = request.uri();
    let (via, port) = if request.method() == Method::CONNECT {
        let port = uri.port_u16().ok_or("CONNECT needs host:port")?;
        (EgressVia::Connect, port)
    } else {
        match uri.scheme_str() {
            Some("http") => (EgressVia::Http, uri.port_u16().unwrap_or(80)),
            Some("https") => {
                return Err("send https:// requests through CONNECT (HTTPS_PROXY), not as plain requests".to_owned())
            }
            _ => {
                return Err(
                    "this is pincer's egress proxy: ask for http://host/path (absolute form) or CONNECT host:port"
                        .to_owned(),
                )
            }
        }
    };
    let authority = uri.authority().ok_or("the request names no host")?;
    let host = Host::parse(authority.host()).map_err(|e| e.to_string())?;
    Ok((via, (host, port)))
}

/// Headers meant for one hop only, and the proxy's own.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Names listed in Connection are hop-by-hop too.
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

/// The proxy's own answer: a status with a line of text saying why.
fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// Bytes written to and read from the destination.
#[derive(Debug, Default)]
struct Counters {
    up: AtomicU64,
    down: AtomicU64,
}

/// The connection to the destination, counting as it goes.
struct Counted {
    inner: TcpStream,
    counters: Arc<Counters>,
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        self.counters.down.fetch_add((buf.filled().len() - before) as u64, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.counters.up.fetch_add(n as u64, Ordering::Relaxed);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs))?;
        self.counters.up.fetch_add(n as u64, Ordering::Relaxed);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
