//! Serving a fake on loopback: an ephemeral port, and a graceful stop when the
//! returned sender is dropped with the fake.
//!
//! [`serve_loopback_cuttable`] also lets a handler close its own connection
//! without answering ([`Cutter`]), the way a dying proxy or a broken network
//! does, which no HTTP response can imitate.
// Some binaries (cli_smoke) include this file without the fake Bot API that cuts connections.
#![allow(dead_code)]

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    extract::connect_info::Connected,
    serve::{IncomingStream, Listener, ListenerExt},
    Router,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::oneshot,
};

/// Serves `app` on 127.0.0.1 (any free port) until the returned sender drops.
/// Graceful shutdown also closes idle keep-alive connections, so a client still
/// running after the fake is dropped sees it as gone instead of being served on
/// a connection it kept open.
pub async fn serve_loopback(app: Router, name: &'static str) -> (SocketAddr, oneshot::Sender<()>) {
    serve_loopback_with(app, name, false).await
}

/// [`serve_loopback`], with `TCP_NODELAY` on each accepted connection when
/// `nodelay` (else Nagle, axum's default).
pub async fn serve_loopback_with(app: Router, name: &'static str, nodelay: bool) -> (SocketAddr, oneshot::Sender<()>) {
    let (listener, addr) = bind(name).await;
    let (shutdown, stopped) = oneshot::channel::<()>();
    let listener = listener.tap_io(move |tcp| {
        if let Err(e) = tcp.set_nodelay(nodelay) {
            eprintln!("{name}: TCP_NODELAY: {e}");
        }
    });
    tokio::spawn(async move {
        let result = axum::serve(listener, app).with_graceful_shutdown(until_dropped(stopped)).await;
        if let Err(e) = result {
            eprintln!("{name}: server error: {e}");
        }
    });
    (addr, shutdown)
}

/// [`serve_loopback`], and each request can extract `ConnectInfo<Cutter>` to
/// close its connection instead of answering.
pub async fn serve_loopback_cuttable(app: Router, name: &'static str) -> (SocketAddr, oneshot::Sender<()>) {
    let (listener, addr) = bind(name).await;
    let (shutdown, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let listener = CuttableListener { inner: listener, name };
        let result = axum::serve(listener, app.into_make_service_with_connect_info::<Cutter>())
            .with_graceful_shutdown(until_dropped(stopped))
            .await;
        if let Err(e) = result {
            eprintln!("{name}: server error: {e}");
        }
    });
    (addr, shutdown)
}

async fn bind(name: &str) -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind {name}: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{name} address: {e}"));
    (listener, addr)
}

/// Resolves once the fake dropped its end, whether or not it sent anything.
async fn until_dropped(stopped: oneshot::Receiver<()>) {
    let _ = stopped.await;
}

/// Closes the connection of the request it was extracted for, without a byte
/// of answer: after [`Cutter::cut`], the connection's reads and writes fail,
/// so hyper gives up on it before writing the handler's response, and drops
/// the socket. The client sees the connection closed mid-request.
#[derive(Clone, Debug, Default)]
pub struct Cutter(Arc<AtomicBool>);

impl Cutter {
    /// Takes effect when the handler returns (its response is discarded).
    pub fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_cut(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Connected<IncomingStream<'_, CuttableListener>> for Cutter {
    fn connect_info(stream: IncomingStream<'_, CuttableListener>) -> Cutter {
        stream.io().cutter.clone()
    }
}

/// A TCP listener whose connections carry a [`Cutter`], for
/// [`serve_loopback_cuttable`].
pub struct CuttableListener {
    inner: TcpListener,
    name: &'static str,
}

impl Listener for CuttableListener {
    type Io = CuttableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CuttableStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => return (CuttableStream { inner: stream, cutter: Cutter::default() }, addr),
                // Out of file descriptors, or a connection reset before it was
                // accepted: axum's own listener also just waits and goes on.
                Err(e) => {
                    eprintln!("{}: accept: {e}", self.name);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A TCP stream that fails every read and write once cut.
pub struct CuttableStream {
    inner: TcpStream,
    cutter: Cutter,
}

impl CuttableStream {
    fn check(&self) -> io::Result<()> {
        if self.cutter.is_cut() {
            Err(io::Error::new(io::ErrorKind::ConnectionAborted, "connection cut by the fake"))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for CuttableStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CuttableStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
