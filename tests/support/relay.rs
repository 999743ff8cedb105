//! A TCP relay between one pincer node and the tests' PostgreSQL (issue 45),
//! to put real faults on the way: it listens on 127.0.0.1 and connects each
//! connection to the server's Unix socket, passing bytes both ways, or,
//! switched at runtime, delaying them, cutting every connection (both ends
//! closed), or black-holing them (held open, nothing passed: a partition).
//!
//! It reads the client's side of the wire protocol (message type and length)
//! to spring two traps on a transaction that names a lease (its bound
//! parameters hold the lease's name, as a group's fenced write and a claim
//! do): freeze the node inside it, right after its first statement (the
//! fence check's `FOR SHARE`) was answered, or let its `COMMIT` through
//! and lose the server's answer.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{watch, Notify};

/// What the relay does with the bytes of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Each chunk waits this long before it is passed on.
    Delay(Duration),
    /// Held open, nothing passed either way (new connections too).
    BlackHole,
}

/// A trap on the next transaction whose bound parameters hold a name.
#[derive(Debug, Clone)]
enum Trap {
    None,
    /// Once its first statement was answered, black-hole everything.
    FreezeInside(Vec<u8>),
    /// Pass its `COMMIT` to the server, then hold that connection: the answer never arrives.
    LoseCommitAnswer(Vec<u8>),
}

struct Shared {
    socket: PathBuf,
    mode: watch::Sender<Mode>,
    /// Bumped by [`Relay::cut`]: every connection open then is closed.
    cuts: watch::Sender<u64>,
    trap: Mutex<Trap>,
    sprung: Notify,
    sprung_once: AtomicBool,
}

/// One node's way to PostgreSQL.
#[derive(Clone)]
pub struct Relay {
    port: u16,
    shared: Arc<Shared>,
}

impl Relay {
    /// A relay to the PostgreSQL listening on the Unix socket `socket`.
    pub async fn start(socket: PathBuf) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            socket,
            mode: watch::channel(Mode::Pass).0,
            cuts: watch::channel(0).0,
            trap: Mutex::new(Trap::None),
            sprung: Notify::new(),
            sprung_once: AtomicBool::new(false),
        });
        let serving = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                tokio::spawn(relay_one(client, serving.clone()));
            }
        });
        Relay { port, shared }
    }

    /// A relay to the tests' PostgreSQL server.
    pub async fn to_test_server() -> Relay {
        Relay::start(super::postgres::server().socket_dir().join(".s.PGSQL.5432")).await
    }

    /// `url` (a database of the tests' server, by its Unix socket) reached through this relay.
    pub fn url(&self, url: &str) -> String {
        let database = url.split_once("localhost/").and_then(|(_, rest)| rest.split('?').next()).expect("a test URL");
        format!("postgres://pincer@127.0.0.1:{}/{database}?sslmode=disable", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// Closes every open connection (both ends); new ones are taken as the mode says.
    pub fn cut(&self) {
        self.shared.cuts.send_modify(|n| *n += 1);
    }

    /// The partition is over: connections held across it are closed (the
    /// server dropped its ends meanwhile) and new ones pass.
    pub fn heal(&self) {
        self.set(Mode::Pass);
        self.cut();
    }

    /// Freezes the node inside the next transaction that names `lease`, right
    /// after its first statement was answered: from then on nothing passes.
    pub fn freeze_inside(&self, lease: &str) {
        self.arm(Trap::FreezeInside(lease.as_bytes().to_vec()));
    }

    /// Loses the answer to the `COMMIT` of the next transaction that names `lease`.
    pub fn lose_commit_answer(&self, lease: &str) {
        self.arm(Trap::LoseCommitAnswer(lease.as_bytes().to_vec()));
    }

    /// Waits until the armed trap sprang.
    pub async fn sprung(&self) {
        let waiting = self.shared.sprung.notified();
        if !self.shared.sprung_once.load(Ordering::SeqCst) {
            waiting.await;
        }
    }

    fn arm(&self, trap: Trap) {
        self.shared.sprung_once.store(false, Ordering::SeqCst);
        *self.shared.trap.lock().unwrap() = trap;
    }
}

/// Relays one connection until either side closes or a cut.
async fn relay_one(client: TcpStream, shared: Arc<Shared>) {
    let mut cuts = shared.cuts.subscribe();
    cuts.borrow_and_update();
    let Ok(server) = UnixStream::connect(&shared.socket).await else { return };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let held = Arc::new(AtomicBool::new(false));
    let up = pump_up(client_read, server_write, shared.clone(), held.clone());
    let down = pump(server_read, client_write, shared.mode.subscribe(), held);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cuts.changed() => {}
    }
}

/// Waits while the mode (or this connection's hold) passes nothing; the delay to apply.
async fn may_pass(mode: &mut watch::Receiver<Mode>, held: &AtomicBool) -> Option<Duration> {
    loop {
        if held.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let now = *mode.borrow_and_update();
        match now {
            Mode::Pass => return None,
            Mode::Delay(d) => return Some(d),
            Mode::BlackHole => {
                if mode.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// The server's bytes to the client, as the mode says.
async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut mode: watch::Receiver<Mode>,
    held: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(delay) = may_pass(&mut mode, &held).await {
            tokio::time::sleep(delay).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // A black hole that began while this read waited swallows what it read.
        if may_pass(&mut mode, &held).await.is_none() && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// What the client's side of one connection has shown so far.
#[derive(Default)]
struct Wire {
    buf: Vec<u8>,
    /// Past the startup message (messages carry a type byte from then on).
    started: bool,
    in_tx: bool,
    /// This transaction named the armed trap's lease.
    named: bool,
    /// A statement of it ran to its `Sync` after it named the lease.
    answered: bool,
}

/// The client's bytes to the server, message by message, springing traps.
async fn pump_up(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    shared: Arc<Shared>,
    held: Arc<AtomicBool>,
) {
    let mut mode = shared.mode.subscribe();
    let mut wire = Wire::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some(delay) = may_pass(&mut mode, &held).await {
            tokio::time::sleep(delay).await;
        }
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        wire.buf.extend_from_slice(&chunk[..n]);
        while let Some(message) = wire.next_message() {
            let trap = shared.trap.lock().unwrap().clone();
            match wire.look(&message, &trap) {
                Step::Pass => {}
                Step::FreezeBefore => {
                    shared.mode.send_replace(Mode::BlackHole);
                    spring(&shared);
                    std::future::pending::<()>().await;
                }
                Step::PassThenHold => {
                    held.store(true, Ordering::SeqCst);
                    let _ = to.write_all(&message).await;
                    spring(&shared);
                    std::future::pending::<()>().await;
                }
            }
            // A black hole that began meanwhile holds the rest (a delay was paid per chunk).
            let _ = may_pass(&mut mode, &held).await;
            if to.write_all(&message).await.is_err() {
                return;
            }
        }
    }
}

/// Disarms the trap and tells whoever waits.
fn spring(shared: &Shared) {
    *shared.trap.lock().unwrap() = Trap::None;
    shared.sprung_once.store(true, Ordering::SeqCst);
    shared.sprung.notify_waiters();
}

enum Step {
    Pass,
    /// Black-hole everything; this message never reaches the server.
    FreezeBefore,
    /// Pass this message, then hold this connection both ways.
    PassThenHold,
}

impl Wire {
    /// The next whole message in the buffer, taken out of it.
    fn next_message(&mut self) -> Option<Vec<u8>> {
        let (start, typed) = if self.started { (1, true) } else { (0, false) };
        let header = self.buf.get(start..start + 4)?;
        let len = u32::from_be_bytes(header.try_into().unwrap()) as usize;
        let total = start + len;
        if self.buf.len() < total {
            return None;
        }
        let message: Vec<u8> = self.buf.drain(..total).collect();
        if !typed {
            // SSLRequest and GSSENCRequest come before the startup message itself.
            let code = message.get(4..8).map(|c| u32::from_be_bytes(c.try_into().unwrap()));
            self.started = !matches!(code, Some(80877103 | 80877104));
        }
        Some(message)
    }

    /// What to do with `message`, given the armed trap.
    fn look(&mut self, message: &[u8], trap: &Trap) -> Step {
        if !self.started || message.len() < 5 {
            return Step::Pass;
        }
        let body = &message[5..];
        if self.in_tx && self.named && self.answered && matches!(trap, Trap::FreezeInside(_)) {
            return Step::FreezeBefore;
        }
        let lease = match trap {
            Trap::None => None,
            Trap::FreezeInside(lease) | Trap::LoseCommitAnswer(lease) => Some(lease.as_slice()),
        };
        match message[0] {
            b'Q' if body.starts_with(b"BEGIN") => {
                (self.in_tx, self.named, self.answered) = (true, false, false);
            }
            b'Q' if body.starts_with(b"COMMIT") || body.starts_with(b"ROLLBACK") => {
                let lose = self.in_tx && self.named && matches!(trap, Trap::LoseCommitAnswer(_));
                self.in_tx = false;
                if lose && body.starts_with(b"COMMIT") {
                    return Step::PassThenHold;
                }
            }
            b'B' if self.in_tx && lease.is_some_and(|l| contains(body, l)) => self.named = true,
            b'S' if self.in_tx && self.named => self.answered = true,
            _ => {}
        }
        Step::Pass
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
