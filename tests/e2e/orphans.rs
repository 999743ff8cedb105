//! Nothing outlives pincer: the `pincer` binary runs a real CLI that started
//! a background shell, gets `kill -9`, and every process it had started (the
//! guard, the CLI, bwrap, the shells) is gone soon after, in `none` mode as in
//! the default sandbox. And Docker's part, with a fake `docker` client: each
//! process gets a container name of its own, and startup removes only the
//! containers of this data directory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pincer::domain::schedule::{ContextMode, Trigger};
use pincer::scheduler::manage;
use pincer::store::NewSchedule;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{spawn_pincer_run, Sandbox, PATIENCE};

/// A process as `/proc/PID/stat` shows it; the start time tells a reused pid apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Proc {
    pid: i32,
    start: u64,
    comm: String,
}

/// pid → (parent, the process), for every process readable now.
fn processes() -> BTreeMap<i32, (i32, Proc)> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = stat[open + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let (Some(ppid), Some(start)) = (fields.get(1), fields.get(19)) else { continue };
        let (Ok(ppid), Ok(start)) = (ppid.parse(), start.parse()) else { continue };
        all.insert(pid, (ppid, Proc { pid, start, comm }));
    }
    all
}

/// Every process below `root`.
fn descendants(root: i32) -> BTreeSet<Proc> {
    let all = processes();
    let mut found = BTreeSet::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, (ppid, proc)) in &all {
            if *ppid == parent && found.insert(proc.clone()) {
                parents.push(*pid);
            }
        }
    }
    found
}

/// Whether `p` still runs (a zombie waiting for its reaper counts as gone).
fn alive(p: &Proc) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)) else { return false };
    let Some((_, rest)) = stat.rsplit_once(") ") else { return false };
    let start = rest.split(' ').nth(19).and_then(|s| s.parse::<u64>().ok());
    start == Some(p.start) && !rest.starts_with('Z')
}

/// Runs `pincer run` with a due scheduled prompt that makes the agent start
/// `sleep 300` in the background, kills pincer with SIGKILL once the shell
/// runs, and checks that nothing pincer started is left.
async fn kill_9_leaves_nothing(mode: pincer::config::SandboxMode) {
    let background = Reply::bash_background("sleep 300 & echo started > bg.started; wait", "outlive pincer");
    let api = FakeApi::start(fake_api::scripted(vec![("ORPHAN", background)])).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.mode = mode;
    let group = sandbox.add_group("orphans", Some(&["Bash"])).await;
    let store = sandbox.store().await;
    let new = NewSchedule {
        group: group.clone(),
        prompt: "ORPHAN start a shell".into(),
        trigger: Trigger::interval("1h").unwrap(),
        context: ContextMode::Group,
    };
    let task = manage::add(&store.schedules(), new, &Default::default()).await.unwrap();
    manage::run_now(&store.schedules(), task.id).await.unwrap();
    store.close().await;
    let config = sandbox.write_config();

    let mut pincer = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;
    let pid = pincer.id().unwrap() as i32;
    let started = sandbox.group_dir("orphans").join("bg.started");
    let running = wait_until(|| {
        let below = descendants(pid);
        (started.exists() && below.iter().any(|p| p.comm == "sleep")).then_some(below)
    })
    .await;
    // The guard and the CLI (with bwrap's two around it in a sandbox), the shell, sleep.
    assert!(running.len() >= 4, "{running:?}");

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    pincer.wait().await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    let mut left: Vec<&Proc> = running.iter().filter(|p| alive(p)).collect();
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left.retain(|p| alive(p));
    }
    assert!(left.is_empty(), "still running after pincer was killed: {left:?} (of {running:?})");
}

/// Polls `check` until it gives a value, for at most [`PATIENCE`].
async fn wait_until<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let poll = async {
        loop {
            if let Some(value) = check() {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, poll).await.expect("the agent's background shell started")
}

#[tokio::test]
async fn kill_9_of_pincer_leaves_no_unconfined_cli_or_shell() {
    kill_9_leaves_nothing(pincer::config::SandboxMode::None).await;
}

#[tokio::test]
async fn kill_9_of_pincer_leaves_nothing_of_a_sandbox() {
    kill_9_leaves_nothing(pincer::config::SandboxMode::Auto).await;
}

/// A stand-in for the `docker` client: logs each call's arguments, answers
/// `info`, lists two leftover containers for `ps`, and `run` speaks for a CLI,
/// answering each message with the container's name.
const FAKE_DOCKER: &str = r#"#!/usr/bin/env bash
dir="$(dirname "$0")"
echo "$*" >> "$dir/docker.log"
case "$1" in
  info) echo 27.0.0 ;;
  ps) printf 'c0ffee000001\nc0ffee000002\n' ;;
  rm) ;;
  run)
    prev=""
    for arg in "$@"; do [ "$prev" = "--name" ] && name="$arg"; prev="$arg"; done
    while read -r line; do
      case "$line" in
        *'"subtype":"initialize"'*)
          id=$(printf '%s' "$line" | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p')
          echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{}}}"
          continue ;;
      esac
      uuid=$(printf '%s' "$line" | sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p')
      [ -z "$uuid" ] && continue
      echo '{"type":"system","subtype":"init","session_id":"sess-docker"}'
      echo "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"x\"},\"parent_tool_use_id\":null,\"uuid\":\"$uuid\"}"
      echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"in $name\",\"session_id\":\"sess-docker\"}"
    done ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"#;

/// The value after `flag` in a logged command line.
fn after<'a>(line: &'a str, flag: &str) -> Vec<&'a str> {
    let words: Vec<&str> = line.split(' ').collect();
    words.windows(2).filter(|w| w[0] == flag).map(|w| w[1]).collect()
}

#[tokio::test]
async fn docker_containers_are_named_per_process_and_only_this_data_dirs_orphans_are_removed() {
    use std::os::unix::fs::PermissionsExt;

    let bin = tempfile::tempdir().unwrap();
    let docker = bin.path().join("docker");
    std::fs::write(&docker, FAKE_DOCKER).unwrap();
    std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.mode = pincer::config::SandboxMode::Docker;
    sandbox.config.sandbox.docker_image = Some("pincer-agent:test".into());
    let group = sandbox.add_group("team", None).await;
    let store = sandbox.store().await;
    let mut tasks = Vec::new();
    for (prompt, context) in [("in the session", ContextMode::Group), ("on its own", ContextMode::Isolated)] {
        let new = NewSchedule {
            group: group.clone(),
            prompt: prompt.into(),
            trigger: Trigger::interval("1h").unwrap(),
            context,
        };
        let task = manage::add(&store.schedules(), new, &Default::default()).await.unwrap();
        manage::run_now(&store.schedules(), task.id).await.unwrap();
        tasks.push(task.id);
    }
    let config = sandbox.write_config();
    let path = std::env::join_paths(
        std::iter::once(bin.path().to_owned()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();

    let mut pincer =
        spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[("PATH", path.as_os_str())])
            .await;
    let finished = async {
        for id in &tasks {
            while !store.schedules().runs(*id).await.unwrap().iter().any(|r| r.outcome == "ok") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(PATIENCE, finished).await.expect("both scheduled runs answered");
    kill(Pid::from_raw(pincer.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    pincer.wait().await.unwrap();
    store.close().await;

    let log = std::fs::read_to_string(bin.path().join("docker.log")).unwrap();
    let calls: Vec<&str> = log.lines().collect();
    let data = pincer::sandbox::docker::data_label(&sandbox.config.data_dir);
    let list = format!("ps --all --quiet --filter label=pincer.agent --filter label=pincer.data={data}");
    let listed = calls.iter().position(|c| *c == list).unwrap_or_else(|| panic!("orphans listed by label: {calls:?}"));
    assert_eq!(calls.get(listed + 1), Some(&"rm --force c0ffee000001 c0ffee000002"), "{calls:?}");
    let removals: Vec<_> = calls.iter().filter(|c| c.starts_with("rm ")).collect();
    assert_eq!(removals.len(), 1, "nothing but the orphans is removed (no container by group name): {calls:?}");

    let runs: Vec<&str> = calls.iter().copied().filter(|c| c.starts_with("run ")).collect();
    assert_eq!(runs.len(), 2, "the session and the isolated run: {calls:?}");
    let names: BTreeSet<&str> = runs.iter().flat_map(|r| after(r, "--name")).collect();
    assert_eq!(names.len(), 2, "a container name per process: {runs:?}");
    for run in &runs {
        assert!(after(run, "--name")[0].starts_with("pincer-team-"), "{run}");
        let labels = after(run, "--label");
        assert_eq!(labels, ["pincer.agent=team".to_owned(), format!("pincer.data={data}")], "{run}");
    }
}
