//! `pincer forward`: runs inside a sandbox that has no network, listening on
//! the sandbox's own loopback and carrying each connection to a Unix socket
//! that pincer serves on the host and bound in (the egress proxy). Tools that
//! only speak TCP (`curl`, `git`, `npm` through `HTTPS_PROXY`) reach it this
//! way; nothing else leaves the sandbox. It needs no config and no store: it
//! is the pincer binary, read-only in the sandbox, doing one small thing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream, UnixStream};

/// Forwards every connection to `listen` to `to`, until the process is killed
/// (with the sandbox: it lives in the sandbox's pid namespace).
pub async fn run(listen: SocketAddr, to: PathBuf) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    serve(listener, to).await
}

/// [`run`] on a bound listener.
pub async fn serve(listener: TcpListener, to: PathBuf) -> std::io::Result<()> {
    loop {
        let (conn, _) = listener.accept().await?;
        let to = to.clone();
        tokio::spawn(async move {
            if let Err(e) = carry(conn, &to).await {
                tracing::debug!(%e, to = %to.display(), "a forwarded connection ended with an error");
            }
        });
    }
}

async fn carry(mut conn: TcpStream, to: &Path) -> std::io::Result<()> {
    // Small writes (a CONNECT line, TLS records) must not wait for Nagle.
    conn.set_nodelay(true)?;
    let mut upstream = UnixStream::connect(to).await?;
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_go_both_ways_and_each_connection_gets_its_own_socket_connection() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let unix = tokio::net::UnixListener::bind(&socket).unwrap();
        // An upper-casing echo on the Unix side.
        tokio::spawn(async move {
            while let Ok((mut s, _)) = unix.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, socket));
        for word in ["connect example.test:443", "second"] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(word.as_bytes()).await.unwrap();
            let mut back = vec![0u8; word.len()];
            client.read_exact(&mut back).await.unwrap();
            assert_eq!(back, word.to_ascii_uppercase().as_bytes());
        }
    }

    #[tokio::test]
    async fn a_missing_socket_closes_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, "/nonexistent/egress.sock".into()));
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let read = client.read_to_end(&mut buf).await;
        assert!(read.is_err() || buf.is_empty(), "closed without an answer");
    }
}
