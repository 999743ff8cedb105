//! The bwrap sandbox's hardening, seen from inside with the real CLI: the
//! seccomp filter denies new namespaces while the agent's tools and answers
//! work, `--disable-userns` stops user namespaces on its own, the probe finds
//! what this bwrap has, and `pincer doctor` says what is in force.

use pincer::config::DefaultOn;

use crate::sandbox::{doctor, probe, require_bwrap};
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::Sandbox;

/// Each needle makes the model run one command; the next turn echoes its output.
fn commands() -> fake_api::Script {
    let bash = |cmd: &str| Reply::bash(cmd, "probe");
    fake_api::scripted(vec![
        ("PROBE_USERNS", bash("unshare -U true; echo rc=$?")),
        ("PROBE_MOUNTNS", bash("unshare -m true; echo rc=$?")),
        ("PROBE_NESTED_BWRAP", bash("bwrap --dev-bind / / true; echo rc=$?")),
        // The CLI (the shell's parent) and the shell: what they hold open.
        ("PROBE_FDS", bash("ls -l /proc/$PPID/fd/ /proc/self/fd/ 2>&1; echo parent=$(cat /proc/$PPID/comm)")),
        (
            "PROBE_ORDINARY",
            bash("echo ordinary > note.txt && cat note.txt && ls /workspace && grep -E '^Seccomp:' /proc/self/status"),
        ),
    ])
}

#[tokio::test]
async fn in_the_sandbox_seccomp_denies_new_namespaces_while_tools_and_answers_work() {
    require_bwrap().await;
    let api = FakeApi::start(commands()).await;
    let sandbox = Sandbox::new(&api);
    assert_eq!(sandbox.config.sandbox.seccomp, DefaultOn(true), "on by default");
    let group = sandbox.add_group("alpha", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    // EPERM is the filter's answer; without it `--disable-userns` would say
    // ENOSPC ("No space left on device"), and without both it would succeed.
    let userns = probe(&pincer, &group, "PROBE_USERNS").await;
    assert!(userns.contains("Operation not permitted") && !userns.contains("rc=0"), "{userns}");
    let mountns = probe(&pincer, &group, "PROBE_MOUNTNS").await;
    assert!(mountns.contains("Operation not permitted") && !mountns.contains("rc=0"), "{mountns}");
    let nested = probe(&pincer, &group, "PROBE_NESTED_BWRAP").await;
    assert!(!nested.contains("rc=0"), "no sandbox of its own inside: {nested}");

    // bwrap read the filter and closed it: no copy reaches the CLI or its tools.
    let fds = probe(&pincer, &group, "PROBE_FDS").await;
    assert!(fds.contains(" -> ") && !fds.contains("pincer-seccomp"), "{fds}");

    // Ordinary work goes on (a shell, files, the CLI's node threads), under the filter.
    let ordinary = probe(&pincer, &group, "PROBE_ORDINARY").await;
    assert!(ordinary.contains("ordinary\n") && ordinary.contains("group"), "{ordinary}");
    assert!(ordinary.contains("Seccomp:\t2"), "a filter is loaded: {ordinary}");
    assert_eq!(std::fs::read_to_string(sandbox.group_dir("alpha").join("note.txt")).unwrap(), "ordinary\n");
    pincer.send(&group, "just talk").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: just talk", "the model's answer comes back");
    pincer.stop().await;
}

#[tokio::test]
async fn with_seccomp_off_the_sandbox_still_cannot_create_user_namespaces() {
    require_bwrap().await;
    let api = FakeApi::start(commands()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.seccomp = DefaultOn(false);
    let group = sandbox.add_group("alpha", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    let userns = probe(&pincer, &group, "PROBE_USERNS").await;
    assert!(!userns.contains("rc=0"), "--disable-userns stops it: {userns}");
    assert!(userns.contains("No space left on device"), "the limit, not the filter: {userns}");
    let ordinary = probe(&pincer, &group, "PROBE_ORDINARY").await;
    assert!(ordinary.contains("Seccomp:\t0"), "no filter when it is off: {ordinary}");
    pincer.stop().await;
}

/// A writable mount that holds another mount's folder: the agent swaps that
/// folder for a symlink to a host folder no mount names. The next process
/// is refused (never bound through the symlink), and the chat is told why.
#[tokio::test]
async fn a_mount_the_agent_swaps_for_a_symlink_is_refused_at_the_next_start() {
    require_bwrap().await;
    let root_dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(root_dir.path()).unwrap();
    let (share, inner, secret) = (root.join("share"), root.join("share/inner"), root.join("secret"));
    for dir in [&inner, &secret] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(inner.join("book.txt"), "INNER-BOOK").unwrap();
    std::fs::write(secret.join("book.txt"), "HOST-SECRET").unwrap();
    let swap = format!(
        "cat /workspace/extra/inner/book.txt; mv /workspace/extra/share/inner /workspace/extra/share/inner.old \
         && ln -s {} /workspace/extra/share/inner && echo swapped",
        secret.display()
    );
    let bash = |cmd: &str| Reply::bash(cmd, "probe");
    let api = FakeApi::start(fake_api::scripted(vec![
        ("PROBE_SWAP", bash(&swap)),
        ("PROBE_READ_INNER", bash("cat /workspace/extra/inner/book.txt")),
    ]))
    .await;
    let mut sandbox = Sandbox::new(&api);
    let allowlist = sandbox.root().join("mounts.toml");
    let entry = |host: &std::path::Path, extra: &str| {
        format!("[[mount]]\ngroup = \"alpha\"\nhost = \"{}\"\n{extra}", host.display())
    };
    std::fs::write(&allowlist, entry(&share, "writable = true\n") + &entry(&inner, "")).unwrap();
    sandbox.config.sandbox.mounts_file = Some(allowlist);
    let group = sandbox.add_group("alpha", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    let swapped = probe(&pincer, &group, "PROBE_SWAP").await;
    assert!(swapped.contains("INNER-BOOK") && swapped.contains("swapped"), "{swapped}");
    assert!(std::fs::symlink_metadata(&inner).unwrap().file_type().is_symlink(), "the host path is a symlink now");

    pincer.engine.router.new_session(&group).await.unwrap();
    assert!(pincer.next_outbound().await.text.starts_with("Started a fresh session"));
    pincer.send(&group, "please PROBE_READ_INNER").await;
    let refused = pincer.next_outbound().await.text;
    assert!(refused.contains("changed since pincer started") && refused.contains("is a symlink now"), "{refused}");
    assert!(!refused.contains("HOST-SECRET"), "{refused}");
    pincer.stop().await;
}

#[tokio::test]
async fn the_sandbox_probe_finds_this_bwraps_hardening() {
    require_bwrap().await;
    // bubblewrap 0.8.0-2+deb12u1 here: --disable-userns, --add-seccomp-fd, and the backported --bind-fd.
    let features = pincer::sandbox::bwrap::Features::probe().await;
    assert_eq!(features.disable_userns, Ok(()));
    assert_eq!(features.bind_fd, Ok(()));
    let filter = features.seccomp.expect("bwrap loads the filter here");
    assert_eq!(filter.programs().len(), 2);
    // The one sandbox that probes them all at once finds the same.
    let (bwrap, together) = pincer::sandbox::bwrap::Features::probe_with_bwrap().await;
    assert_eq!(bwrap, Ok(()));
    assert_eq!((together.disable_userns, together.bind_fd), (Ok(()), Ok(())));
    assert_eq!(together.seccomp.expect("loaded together").programs().len(), 2);
}

#[tokio::test]
async fn doctor_shows_seccomp_and_userns_in_force() {
    let (ok, text) = doctor(&[]).await;
    assert!(ok, "{text}");
    assert!(text.contains("seccomp: in force in bwrap sandboxes"), "{text}");
    assert!(text.contains("clone3 with ENOSYS"), "{text}");
    assert!(text.contains("userns: disabled in bwrap sandboxes (--disable-userns)"), "{text}");
    // This kernel has Landlock: each command is kept out of the CLI.
    assert!(text.contains("landlock: ABI ") && text.contains("cannot trace the CLI"), "{text}");
    assert!(!text.contains("unconfined:"), "no group runs unconfined: {text}");
    let (ok, text) = doctor(&[("PINCER_SANDBOX__SECCOMP", "false")]).await;
    assert!(ok, "{text}");
    assert!(text.contains("seccomp: off by config (sandbox.seccomp = false)"), "{text}");
}
