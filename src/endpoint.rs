//! The operator's HTTP endpoint (`[http] listen`): `/metrics` for
//! Prometheus, `/healthz` (the process serves) and `/readyz` (the store
//! takes writes, every served platform is connected and, on a cluster node,
//! the node is registered), for a supervisor
//! or a load balancer; `/` the status page (what `pincer status` says, as
//! a page that refreshes itself). Never a message text: counts, states,
//! costs and ages only (a failed turn's first words are the one exception,
//! as in `pincer status`: the CLI's error, not a chat's).

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::config::HttpConfig;
use crate::domain::{unix_us, Platform};
use crate::metrics::counters::{classic_text, counters};
use crate::status::{self, LiveSource};
use crate::store::{Budgets, Channels, Groups, Health, Store};

/// On a cluster node, why it may not serve now (`None`: it is registered),
/// asked at each `/readyz` (the wiring reads the membership task's state;
/// the endpoint does not name it).
pub type NodeReadiness = Arc<dyn Fn() -> Option<&'static str> + Send + Sync>;

/// This process as one node of a cluster.
#[derive(Clone)]
pub struct ThisNode {
    /// Its node id, marked among the nodes on the status page.
    pub id: String,
    pub readiness: NodeReadiness,
}

/// What the endpoint reads.
#[derive(Clone)]
struct Shared {
    health: Health,
    groups: Groups,
    budgets: Budgets,
    channels: Channels,
    /// What runs now, for the status page.
    live_view: LiveSource,
    /// `timezone`: where today and this month begin on the status page.
    zone: Arc<str>,
    /// `[budget]` as reloaded, the groups' default.
    live: crate::config::Live,
    /// The platforms this pincer serves: each must be connected to be ready.
    served: Arc<Vec<Platform>>,
    /// `None` on one machine.
    node: Option<ThisNode>,
    token: Option<Arc<str>>,
}

/// Why the endpoint did not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve http.listen {at}: {source} (is another process on that port? change [http] listen)")]
pub struct EndpointError {
    at: std::net::SocketAddr,
    source: std::io::Error,
}

/// The endpoint, bound and not serving yet.
pub struct Endpoint {
    listener: tokio::net::TcpListener,
    app: axum::Router,
}

/// Binds `[http] listen` now (a taken port stops pincer at start, with
/// why); `None` when it is not set. `node`: on a cluster node, which one.
pub async fn bind(
    config: &HttpConfig,
    zone: &str,
    live: crate::config::Live,
    store: &Store,
    live_view: LiveSource,
    served: Vec<Platform>,
    node: Option<ThisNode>,
) -> Result<Option<Endpoint>, EndpointError> {
    let Some(at) = config.listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(at).await.map_err(|source| EndpointError { at, source })?;
    // The address as bound: with port 0 the system picked one, and this line
    // (logged before pincer says it is running) is where to find it.
    let at = listener.local_addr().map_err(|source| EndpointError { at, source })?;
    tracing::info!(%at, "serving /metrics, /healthz and /readyz");
    let shared = Shared {
        health: store.health(),
        groups: store.groups(),
        budgets: store.budgets(),
        channels: store.channels(),
        live_view,
        zone: Arc::from(zone),
        live,
        served: Arc::new(served),
        node,
        token: config.token.as_ref().map(|t| Arc::from(t.expose())),
    };
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(page))
        .with_state(shared);
    Ok(Some(Endpoint { listener, app }))
}

impl Endpoint {
    /// Serves until `stop`, then lets the requests under way finish.
    pub async fn serve(self, stop: CancellationToken) {
        let served = axum::serve(self.listener, self.app).with_graceful_shutdown(async move { stop.cancelled().await });
        if let Err(e) = served.await {
            tracing::error!(%e, "the HTTP endpoint stopped");
        }
    }
}

/// The bearer token, compared in constant time; `None` when it may pass.
fn refused(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let token = shared.token.as_deref()?;
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if bool::from(given.as_bytes().ct_eq(token.as_bytes())) => None,
        _ => Some(
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "a bearer token is required\n")
                .into_response(),
        ),
    }
}

async fn metrics(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&shared, &headers) {
        return refused;
    }
    let now = unix_us(SystemTime::now());
    match shared.health.outbox_backlog().await {
        Ok(rows) => {
            // Platforms with nothing waiting read 0, not their last value.
            for platform in [Platform::Console, Platform::Telegram, Platform::WhatsApp] {
                let row = rows.iter().find(|(p, _, _)| p == platform.as_str());
                let (waiting, oldest) = row.map_or((0, now), |(_, n, oldest)| (*n, *oldest));
                counters().outbox(platform.as_str(), waiting, (now - oldest).max(0) / 1_000_000);
            }
        }
        Err(e) => tracing::warn!(%e, "cannot read the outbox for /metrics"),
    }
    budget_use(&shared).await;
    if let Some(node) = &shared.node {
        match shared.health.leases_held_by(&node.id).await {
            Ok(held) => counters().leases_held(usize::try_from(held).unwrap_or(0)),
            Err(e) => tracing::warn!(%e, "cannot read this node's leases for /metrics"),
        }
    }
    // OpenMetrics to whoever asks for it (Prometheus does), else the classic text format.
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    if openmetrics {
        let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        ([(header::CONTENT_TYPE, content_type)], counters().encode()).into_response()
    } else {
        let content_type = "text/plain; version=0.0.4; charset=utf-8";
        ([(header::CONTENT_TYPE, content_type)], classic_text(&counters().encode())).into_response()
    }
}

/// Sets the budget gauges from the store: one read per group with a budget.
async fn budget_use(shared: &Shared) {
    let groups = match shared.groups.groups().await {
        Ok(groups) => groups,
        Err(e) => return tracing::warn!(%e, "cannot read the groups for /metrics"),
    };
    let zone = shared.zone.parse().unwrap_or(chrono_tz::UTC);
    let periods = crate::domain::budget::Periods::at(SystemTime::now(), zone);
    let default = shared.live.budget();
    let mut used = Vec::new();
    for group in groups {
        let budget = group.settings.budget.over(default);
        if !budget.is_set() {
            continue;
        }
        match shared.budgets.budget_spent(&group.name, &periods).await {
            Ok(spent) => used.extend(
                crate::domain::budget::used(&budget, &spent)
                    .into_iter()
                    .map(|(part, ratio)| (group.name.to_string(), part, ratio)),
            ),
            Err(e) => tracing::warn!(group = %group.name, %e, "cannot read what a group spent for /metrics"),
        }
    }
    counters().budgets(&used);
}

async fn readyz(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&shared, &headers) {
        return refused;
    }
    let mut problems = Vec::new();
    if let Some(why) = shared.node.as_ref().and_then(|node| (node.readiness)()) {
        problems.push(why.to_owned());
    }
    if !shared.health.writable().await {
        problems.push("the store takes no writes".to_owned());
    }
    for platform in shared.served.iter() {
        match shared.channels.channel_health(*platform).await {
            Ok(Some(health)) if health.state == "connected" => {}
            Ok(Some(health)) => problems.push(format!("{platform} is {}", health.state)),
            Ok(None) => problems.push(format!("{platform} has not connected yet")),
            Err(e) => problems.push(format!("{platform}: {e}")),
        }
    }
    if problems.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", problems.join("; "))).into_response()
    }
}

/// Seconds between the status page's own reloads.
const PAGE_REFRESH: u32 = 15;

async fn page(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&shared, &headers) {
        return refused;
    }
    let now = SystemTime::now();
    let store = match status::overview(&shared.health, &shared.groups, &shared.zone, shared.live.budget(), now).await {
        Ok(store) => store,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("cannot read the store: {e:#}\n")).into_response(),
    };
    let node = shared.node.as_ref().map(|node| node.id.clone());
    let screen = status::Status { daemon: Some((shared.live_view)()), store, node };
    let text = status::render(&screen, status::unix(now));
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html(&text)).into_response()
}

/// The page: the status text, escaped, readable on a phone, reloading itself
/// (a meta refresh; no script).
fn html(text: &str) -> String {
    let mut body = String::with_capacity(text.len() + 600);
    crate::domain::escape_into(&mut body, text, false);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"refresh\" content=\"{PAGE_REFRESH}\">\n<title>pincer status</title>\n\
         <style>body{{font-family:system-ui,sans-serif;margin:1rem;background:#fafafa;color:#222}}\
         pre{{white-space:pre-wrap;font-size:0.95rem;line-height:1.4}}</style></head>\n\
         <body><h1>pincer</h1>\n<pre>{body}</pre>\n<p><small>Reloads every {PAGE_REFRESH} s.</small></p></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::status::LiveView;

    /// `/readyz` of an endpoint on loopback over a fresh store serving no
    /// platform, for a cluster node whose registration `registered` says.
    async fn readyz_of_a_node(registered: Arc<AtomicBool>) -> (tempfile::TempDir, String) {
        let (dir, store) = crate::store::tests::temp_store().await;
        let config = HttpConfig { listen: Some(([127, 0, 0, 1], 0).into()), token: None };
        let live = crate::config::Live::fixed(&crate::config::Config::default());
        let live_view: LiveSource = Arc::new(LiveView::default);
        let readiness: NodeReadiness =
            Arc::new(move || (!registered.load(Ordering::SeqCst)).then_some("not registered in the cluster yet"));
        let node = ThisNode { id: "node-a".into(), readiness };
        let endpoint = bind(&config, "UTC", live, &store, live_view, vec![], Some(node)).await.unwrap().unwrap();
        let url = format!("http://{}/readyz", endpoint.listener.local_addr().unwrap());
        tokio::spawn(endpoint.serve(CancellationToken::new()));
        (dir, url)
    }

    async fn get(url: &str) -> (u16, String) {
        let response = reqwest::get(url).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[tokio::test]
    async fn a_cluster_node_is_ready_only_once_registered() {
        let registered = Arc::new(AtomicBool::new(false));
        let (_dir, url) = readyz_of_a_node(registered.clone()).await;
        assert_eq!(get(&url).await, (503, "not ready: not registered in the cluster yet\n".to_owned()));
        registered.store(true, Ordering::SeqCst);
        assert_eq!(get(&url).await, (200, "ready\n".to_owned()));
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let page = html("team: <b>error</b> & more");
        assert!(page.contains("team: &lt;b&gt;error&lt;/b&gt; &amp; more"), "{page}");
        assert!(page.contains("http-equiv=\"refresh\"") && !page.contains("<script"), "{page}");
    }
}
