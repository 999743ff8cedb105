//! The egress forwarder (`pincer forward`, inside the bwrap sandbox) holds
//! nothing of the CLI's: its stdin, stdout and stderr are `/dev/null`, not
//! the socket pairs pincer talks to the CLI through. Read from the host
//! (inside, the agent cannot read another process's fds).

use crate::sandbox::require_bwrap;
use crate::support::fake_api::{self, FakeApi};
use crate::support::harness::Sandbox;

/// Each running forwarder's (pid, targets of fds 0, 1 and 2).
fn forwarders() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.len() < 2 || !args[0].ends_with(b"/opt/pincer/pincer") || args[1] != b"forward" {
            continue;
        }
        let fds = (0..3)
            .map(|n| {
                std::fs::read_link(entry.path().join(format!("fd/{n}")))
                    .map_or("gone".into(), |t| t.display().to_string())
            })
            .collect();
        found.push((pid, fds));
    }
    found
}

#[tokio::test]
async fn the_forwarder_inherits_none_of_the_clis_stdio() {
    require_bwrap().await;
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let team = sandbox.add_group("team", None).await;
    let pincer = sandbox.start().await;
    pincer.send(&team, "hello").await;
    pincer.next_outbound().await;
    // The CLI answered, so its sandbox and forwarder run (other tests' may too: all are checked).
    let found = forwarders();
    assert!(!found.is_empty(), "no forwarder found");
    for (pid, fds) in &found {
        assert!(fds.iter().all(|t| t == "/dev/null"), "forwarder {pid} holds {fds:?}");
    }
    pincer.stop().await;
}
