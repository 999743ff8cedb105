//! Serving a fake on loopback: an ephemeral port, and a graceful stop when the
//! returned sender is dropped with the fake.

use std::net::SocketAddr;

use axum::Router;
use tokio::sync::oneshot;

/// Serves `app` on 127.0.0.1 (any free port) until the returned sender drops.
/// Graceful shutdown also closes idle keep-alive connections, so a client still
/// running after the fake is dropped sees it as gone instead of being served on
/// a connection it kept open.
pub async fn serve_loopback(app: Router, name: &'static str) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind {name}: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{name} address: {e}"));
    let (shutdown, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = result {
            eprintln!("{name}: server error: {e}");
        }
    });
    (addr, shutdown)
}
