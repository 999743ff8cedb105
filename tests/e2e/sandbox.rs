//! The agent's confinement, seen from inside: the fake Messages API makes the
//! real CLI run Bash commands in group `alpha`'s bubblewrap sandbox (picked by
//! `sandbox.mode = "auto"`), and the tests read what the commands printed.
//! Also: the credential proxy between the agent and the API, resume inside the
//! sandbox, `skip_permissions`, an allowlisted mount, and `pincer doctor`.

use std::collections::BTreeSet;
use std::process::Stdio;

use pincer::config::Secret;
use pincer::config::{GroupSandbox, SandboxMode};
use pincer::domain::GroupName;
use pincer::store::GroupSettings;
use serde_json::json;

use crate::support::cli::TEST_API_KEY;
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::{Running, Sandbox};

const TELEGRAM_TOKEN: &str = "123456:SANDBOX-TEST-TOKEN";
const SECRET_OF_BETA: &str = "BETA-SECRET-4711";

/// Each needle makes the model run one command; the next turn echoes its output.
fn commands() -> fake_api::Script {
    let bash = |cmd: &str| Reply::bash(cmd, "probe");
    fake_api::scripted(vec![
        ("PROBE_LS_ROOT", bash("ls -1 /")),
        ("PROBE_ID", bash("id -u; id -g; hostname")),
        ("PROBE_ENV", bash("env")),
        ("PROBE_READ_BETA", bash("cat ../beta/secret.txt; cat /workspace/beta/secret.txt; echo rc=$?")),
        ("PROBE_WRITE_HERE", bash("echo written-inside > made-in-sandbox.txt && echo wrote")),
        ("PROBE_WRITE_GLOBAL", bash("echo x > /workspace/global/hack.txt; echo rc=$?")),
        ("PROBE_READ_EXTRA", bash("cat /workspace/extra/shelf/book.txt; touch /workspace/extra/shelf/new; echo rc=$?")),
    ])
}

/// What a Bash probe printed: the reply is `AFTER_TOOL: TOOL_RESULT(err=…):<output>`.
pub(crate) async fn probe(pincer: &Running, group: &GroupName, needle: &str) -> String {
    pincer.send(group, &format!("please {needle}")).await;
    let reply = pincer.next_outbound().await.text;
    assert!(reply.starts_with("AFTER_TOOL: TOOL_RESULT("), "{needle}: the tool ran and its output came back: {reply}");
    reply
}

/// These tests need bubblewrap: fail (never skip) with what to install.
pub(crate) async fn require_bwrap() {
    if let Err(why) = pincer::sandbox::bwrap::probe().await {
        panic!("the sandbox tests need a working bubblewrap (apt-get install bubblewrap): {why}");
    }
}

/// A sandbox with groups `alpha` (may run Bash) and `beta` (holds a secret file).
async fn two_groups(api: &FakeApi) -> (Sandbox, GroupName) {
    require_bwrap().await;
    let mut sandbox = Sandbox::new(api);
    sandbox.config.telegram.token = Some(Secret::new(TELEGRAM_TOKEN));
    let alpha = sandbox.add_group("alpha", Some(&["Bash"])).await;
    sandbox.add_group("beta", None).await;
    std::fs::write(sandbox.group_dir("beta").join("secret.txt"), SECRET_OF_BETA).unwrap();
    (sandbox, alpha)
}

#[tokio::test]
async fn auto_confines_the_agent_to_its_own_layout() {
    let api = FakeApi::start(commands()).await;
    let (sandbox, alpha) = two_groups(&api).await;
    assert_eq!(sandbox.config.sandbox.mode, SandboxMode::Auto);
    let pincer = sandbox.start().await;

    let ls = probe(&pincer, &alpha, "PROBE_LS_ROOT").await;
    let listed: BTreeSet<&str> = ls.split_once("):").unwrap().1.lines().map(str::trim).collect();
    let layout: BTreeSet<&str> =
        ["bin", "dev", "etc", "home", "lib", "lib32", "lib64", "opt", "proc", "run", "sbin", "tmp", "usr", "workspace"]
            .into();
    assert!(listed.is_subset(&layout), "only the sandbox layout is visible: {listed:?}");
    assert!(listed.contains("workspace") && listed.contains("opt"), "{listed:?}");

    let id = probe(&pincer, &alpha, "PROBE_ID").await;
    assert!(id.contains("1000\n1000\nsandbox"), "a non-root uid in its own namespace: {id}");

    let read = probe(&pincer, &alpha, "PROBE_READ_BETA").await;
    assert!(!read.contains(SECRET_OF_BETA), "another group's file is out of reach: {read}");
    assert!(read.contains("No such file") && !read.contains("rc=0"), "{read}");

    let wrote = probe(&pincer, &alpha, "PROBE_WRITE_HERE").await;
    assert!(wrote.contains("wrote"), "{wrote}");
    let made = sandbox.group_dir("alpha").join("made-in-sandbox.txt");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "written-inside\n", "the cwd is the group's folder");

    let global = probe(&pincer, &alpha, "PROBE_WRITE_GLOBAL").await;
    assert!(global.contains("Read-only file system") && !global.contains("rc=0"), "{global}");
    assert!(!sandbox.config.groups_dir.join("global/hack.txt").exists());
    pincer.stop().await;
}

#[tokio::test]
async fn the_agent_sees_a_placeholder_and_the_api_gets_the_real_key() {
    let api = FakeApi::start(commands()).await;
    let (sandbox, alpha) = two_groups(&api).await;
    let pincer = sandbox.start().await;

    let env = probe(&pincer, &alpha, "PROBE_ENV").await;
    assert!(!env.contains(TEST_API_KEY), "the real key is not in the agent's env: {env}");
    assert!(!env.contains(TELEGRAM_TOKEN) && !env.contains("PINCER_"), "no pincer secret either: {env}");
    let var = |name: &str| {
        let prefix = format!("{name}=");
        env.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{name} in {env}"))
            .to_owned()
    };
    let placeholder = var("ANTHROPIC_API_KEY");
    assert!(placeholder.starts_with("pincer-placeholder-"), "{placeholder}");
    assert_eq!(var("ANTHROPIC_UNIX_SOCKET"), "/run/pincer/api.sock", "the API is reached through the proxy's socket");
    assert_eq!(var("ANTHROPIC_BASE_URL"), "http://localhost");
    assert_eq!(var("HOME"), "/home/agent");

    // Every request reached the fake API with the real key, none with the placeholder.
    let requests = api.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.credential(), Some(TEST_API_KEY), "the proxy swapped the key in");
    }

    // The proxy refuses a key it did not issue, and the API never sees the request.
    let socket = sandbox.config.data_dir.join("run/api.sock");
    // Told apart by its model: the CLI may still send a request of its own
    // (a side call finishing late on a loaded machine), so counts prove nothing.
    let probe_model = "pincer-proxy-probe";
    let body = json!({"model": probe_model, "max_tokens": 5, "stream": true, "messages": []}).to_string();
    let probes = || api.requests().into_iter().filter(|r| r.model() == probe_model).collect::<Vec<_>>();
    let refused = post_over_socket(&socket, "pincer-placeholder-forged", &body).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains("not a current placeholder"), "{refused}");
    assert!(probes().is_empty(), "a refused request is not forwarded");

    // The agent's own placeholder works, and the streamed reply comes back intact.
    let sent = post_over_socket(&socket, &placeholder, &body).await;
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent}");
    assert!(sent.to_ascii_lowercase().contains("content-type: text/event-stream"), "{sent}");
    assert!(
        sent.contains("event: message_start\n")
            && sent.contains("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{sent}"
    );
    let forwarded = probes();
    assert_eq!(forwarded.len(), 1, "the placeholder's request was forwarded once");
    assert_eq!(forwarded[0].credential(), Some(TEST_API_KEY));

    // When the process ends, its placeholder ends with it (and the socket with pincer).
    pincer.stop().await;
    let ended = tokio::net::UnixStream::connect(&socket).await;
    assert!(ended.is_err(), "a stopped pincer's proxy is gone");
}

/// One HTTP/1.1 POST to the proxy over its Unix socket, as the CLI sends it;
/// the whole answer (status line, headers, body as sent on the wire).
async fn post_over_socket(socket: &std::path::Path, key: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await.expect("the proxy listens on its socket");
    let request = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\ncontent-type: \
         application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_session_resumes_inside_the_sandbox() {
    require_bwrap().await;
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("keep", None).await;

    let pincer = sandbox.start().await;
    pincer.send(&group, "remember MANGO").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: remember MANGO");
    let first_id = pincer.status(&group).await.session_id.expect("a session id");
    pincer.stop().await;
    // The CLI's state lives in the group's private home, not in pincer's.
    let projects = sandbox.config.data_dir.join("homes/keep/.claude/projects");
    assert!(projects.is_dir(), "session files in data_dir/homes/<group>: {}", projects.display());

    let pincer = sandbox.start().await;
    pincer.send(&group, "what did I say?").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: what did I say?");
    assert_eq!(pincer.status(&group).await.session_id.as_deref(), Some(first_id.as_str()), "same session id");
    assert_eq!(pincer.session_events(&group).await, ["started", "shutdown", "resumed"]);
    let last = api.main_requests().pop().unwrap().all_text();
    assert!(last.contains("remember MANGO"), "the history came back: {last}");
    pincer.stop().await;
}

#[tokio::test]
async fn skip_permissions_runs_tools_without_asking_inside_the_sandbox() {
    require_bwrap().await;
    let api = FakeApi::start(commands()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.groups.insert("free".into(), GroupSandbox { skip_permissions: true, ..Default::default() });
    // Bash is not in the group's list: without skip_permissions it would be denied.
    let group = sandbox.add_group("free", Some(&["Read"])).await;
    let pincer = sandbox.start().await;

    let wrote = probe(&pincer, &group, "PROBE_WRITE_HERE").await;
    assert!(wrote.contains("wrote"), "{wrote}");
    assert!(sandbox.group_dir("free").join("made-in-sandbox.txt").exists());
    let decisions = pincer.store().journal().decisions(&group).await.unwrap();
    assert!(
        !decisions.is_empty() && decisions.iter().all(|d| d.allowed && d.decided_by == "skip_permissions"),
        "{decisions:?}"
    );
    pincer.stop().await;
}

#[tokio::test]
async fn the_main_group_writes_global_memory() {
    require_bwrap().await;
    let api = FakeApi::start(commands()).await;
    let sandbox = Sandbox::new(&api);
    // Registered with `--main`: no sandbox setting needed for the shared memory.
    let settings = GroupSettings { main: true, allowed_tools: Some(vec!["Bash".into()]), ..GroupSettings::default() };
    let group = sandbox.add_group_with("boss", settings).await;
    let pincer = sandbox.start().await;

    let out = probe(&pincer, &group, "PROBE_WRITE_GLOBAL").await;
    assert!(out.contains("rc=0"), "{out}");
    assert_eq!(std::fs::read_to_string(sandbox.config.groups_dir.join("global/hack.txt")).unwrap(), "x\n");
    pincer.stop().await;
}

#[tokio::test]
async fn skip_permissions_is_refused_without_a_sandbox() {
    let api = FakeApi::start(commands()).await;
    let mut sandbox = Sandbox::new(&api);
    let risky = GroupSandbox { mode: Some(SandboxMode::None), skip_permissions: true, ..Default::default() };
    sandbox.config.sandbox.groups.insert("risky".into(), risky);
    let err = pincer::app::Engine::start(sandbox.config.clone(), Default::default()).await.err().expect("refused");
    assert!(err.to_string().contains("skip_permissions"), "{err}");
}

#[tokio::test]
async fn an_allowlisted_mount_is_read_only_unless_allowed() {
    require_bwrap().await;
    let api = FakeApi::start(commands()).await;
    let mut sandbox = Sandbox::new(&api);
    let shelf = sandbox.root().join("shelf");
    std::fs::create_dir_all(&shelf).unwrap();
    std::fs::write(shelf.join("book.txt"), "CHAPTER-ONE").unwrap();
    let shelf = std::fs::canonicalize(&shelf).unwrap();
    let allowlist = sandbox.root().join("mounts.toml");
    std::fs::write(&allowlist, format!("[[mount]]\ngroup = \"reader\"\nhost = \"{}\"\n", shelf.display())).unwrap();
    sandbox.config.sandbox.mounts_file = Some(allowlist);
    let group = sandbox.add_group("reader", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    let out = probe(&pincer, &group, "PROBE_READ_EXTRA").await;
    assert!(out.contains("CHAPTER-ONE"), "{out}");
    assert!(out.contains("Read-only file system") && !out.contains("rc=0"), "{out}");
    assert!(!shelf.join("new").exists());
    pincer.stop().await;
}

/// `pincer doctor` in an empty folder, with `env` added to its environment.
pub(crate) async fn doctor(env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"));
    cmd.arg("doctor")
        .current_dir(dir.path())
        .env("PINCER_CLAUDE__COMMAND", crate::support::cli::claude_bin())
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = cmd.output().await.unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn doctor_reports_that_auto_picks_bwrap() {
    let (ok, text) = doctor(&[]).await;
    assert!(ok, "{text}");
    assert!(text.contains("bwrap: works"), "bubblewrap must work on this machine (apt-get install bubblewrap): {text}");
    assert!(text.contains("sandbox.mode = auto -> bwrap"), "{text}");
    assert!(text.contains("docker: "), "{text}");
    assert!(text.contains("network: none of its own"), "{text}");
    assert!(text.contains("the internet through the egress proxy (sandbox.network = api-only)"), "{text}");
    let (_, text) = doctor(&[("PINCER_SANDBOX__NETWORK", "open")]).await;
    assert!(text.contains("(sandbox.network = open)"), "{text}");

    let (_, text) = doctor(&[("PINCER_SANDBOX__MODE", "none")]).await;
    assert!(text.contains("network: the host's"), "{text}");
    assert!(text.contains("-> none: agents run WITHOUT a sandbox"), "none names the risk: {text}");
    assert!(text.contains("other groups' folders and pincer's secrets"), "{text}");
    assert!(text.contains("unconfined: code the agent runs is pincer's user's"), "what it reaches: {text}");
}

#[tokio::test]
async fn the_agent_has_no_network_and_still_reaches_the_model_through_the_proxy() {
    use std::sync::{Arc, OnceLock};

    require_bwrap().await;
    // A service on the host's loopback (a database, an admin panel) and the
    // fake API's own port: neither may be reachable from inside.
    let service = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let service_port = service.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = service.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = conn.write_all(b"HOST-SERVICE-BANNER\n").await;
        }
    });
    let probe_command: Arc<OnceLock<String>> = Arc::default();
    let script: fake_api::Script = {
        let probe_command = probe_command.clone();
        let scripted = fake_api::scripted(vec![]);
        Arc::new(move |req: &fake_api::ApiRequest| {
            if req.last_user_text().contains("PROBE_NET") && !req.has_tool_result() {
                Reply::bash(probe_command.get().expect("set before the probe"), "probe")
            } else {
                scripted(req)
            }
        })
    };
    let api = FakeApi::start(script).await;
    let api_port = api.base_url().rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let reach = |port: &str| {
        format!("(exec 3<>/dev/tcp/127.0.0.1/{port} && head -c 40 <&3 && echo OPEN-{port}) 2>&1 || echo CLOSED-{port}")
    };
    probe_command
        .set(format!(
            "{}; {}; cat /etc/hostname 2>/dev/null; ip -o link 2>/dev/null | wc -l; echo done",
            reach(&service_port.to_string()),
            reach(&api_port)
        ))
        .unwrap();
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.mode = SandboxMode::Auto;
    let alpha = sandbox.add_group("alpha", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;

    let out = probe(&pincer, &alpha, "PROBE_NET").await;
    assert!(out.contains(&format!("CLOSED-{service_port}")), "the host's service is out of reach: {out}");
    assert!(!out.contains("HOST-SERVICE-BANNER"), "{out}");
    assert!(out.contains(&format!("CLOSED-{api_port}")), "the API's port is out of reach: {out}");
    assert!(out.contains("done"), "{out}");
    // The turn that ran the probe and the one that read its output both went
    // through the proxy's socket, with the real key added on the way.
    let requests = api.main_requests();
    assert!(requests.len() >= 2, "{}", requests.len());
    assert!(requests.iter().all(|r| r.credential() == Some(TEST_API_KEY)), "the proxy put the real key on");
    pincer.stop().await;
}
