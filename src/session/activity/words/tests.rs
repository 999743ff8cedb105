//! The words of each tool, and the secrets they never show.

use super::*;

fn bash(command: &str) -> String {
    words(&ToolKind::Bash { command: command.into() })
}

#[test]
fn a_command_shows_its_first_words_only() {
    assert_eq!(bash("cargo test"), "Running `cargo test`");
    assert_eq!(bash("cargo test --lib session::activity -- --nocapture"), "Running `cargo test --lib`");
    assert_eq!(bash("sleep 2; echo done-bg"), "Running `sleep 2`");
    assert_eq!(bash("grep -r foo src | head -5"), "Running `grep -r`");
    assert_eq!(bash("cd /srv/lab && make all"), "Running `make all`", "past a cd");
    assert_eq!(bash("touch /srv/lab/perm && echo ok"), "Running `touch /srv/lab/perm`");
    assert_eq!(bash("   "), "Running a command");
    let long = format!("ls {}", "abcdefghij/".repeat(6));
    assert_eq!(bash(&long), "Running `ls`", "never more than 40 characters");
}

#[test]
fn a_command_never_shows_a_secret() {
    let cases = [
        (r#"curl -H "Authorization: Bearer sk-ant-api03-abcdef123456" https://x"#, "Running `curl -H`", "sk-ant"),
        ("API_KEY=abc ./run", "Running `./run`", "abc"),
        ("FOO=1 BAR_2=hunter2 deploy --now", "Running `deploy --now`", "hunter2"),
        ("export TOKEN=ghp_abcdefgh12345678; ./go", "Running `export`", "ghp_"),
        ("gh auth login --with-token ghp_abcdefgh12345678", "Running `gh auth login`", "ghp_"),
        ("mysql -psup3rs3cr3tpassw0rd1", "Running `mysql`", "s3cr3t"),
        ("curl https://user:pw@example.com/x?token=abc", "Running `curl`", "pw@"),
        ("echo $SECRET", "Running `echo`", "SECRET"),
        ("tool --key=abc", "Running `tool`", "abc"),
        ("run sk-proj-1234abcd", "Running `run`", "sk-proj"),
        ("mysql -p hunter2 db", "Running `mysql -p`", "hunter2"),
        ("psql -U admin -W pass", "Running `psql -U`", "admin"),
    ];
    for (command, expected, secret) in cases {
        let shown = bash(command);
        assert_eq!(shown, expected, "{command}");
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[test]
fn a_file_shows_its_name_or_last_two_components() {
    let read = |path: &str| words(&ToolKind::Read { path: path.into() });
    assert_eq!(read("notes.md"), "Reading notes.md");
    assert_eq!(read("/srv/groups/team/src/main.rs"), "Reading src/main.rs");
    assert_eq!(words(&ToolKind::Edit { path: "/w/src/main.rs".into() }), "Editing src/main.rs");
    assert_eq!(words(&ToolKind::Write { path: "/tmp/out/".into() }), "Writing tmp/out");
    assert_eq!(words(&ToolKind::NotebookEdit { path: "a.ipynb".into() }), "Editing a.ipynb");
    let deep = format!("/x/{}/file.txt", "d".repeat(50));
    assert_eq!(read(&deep), "Reading file.txt", "a long directory is left out");
    assert_eq!(read(""), "Reading a file");
}

#[test]
fn the_web_shows_a_cut_query_and_only_a_urls_host() {
    let search = |q: &str| words(&ToolKind::WebSearch { query: q.into() });
    assert_eq!(search("rust lease fencing"), "Searching the web: rust lease fencing");
    assert_eq!(
        search("how do leases and fencing tokens work in distributed systems"),
        "Searching the web: how do leases and fencing tokens work in…"
    );
    let fetch = |u: &str| words(&ToolKind::WebFetch { url: u.into() });
    assert_eq!(fetch("https://docs.rs/tokio/latest/tokio/"), "Fetching docs.rs");
    assert_eq!(fetch("https://admin:hunter2@www.example.com:8443/a?token=sk-abc#x"), "Fetching example.com");
    assert_eq!(fetch("not a url"), "Fetching a web page");
}

#[test]
fn agents_teammates_and_other_tools() {
    let agent = |description: &str, name: Option<&str>| {
        words(&ToolKind::Agent {
            description: description.into(),
            subagent_type: Some("general-purpose".into()),
            name: name.map(Into::into),
        })
    };
    assert_eq!(agent("teammate", Some("researcher")), "Asking a teammate: researcher");
    assert_eq!(agent("bg helper", None), "Starting a subagent: bg helper");
    assert_eq!(agent("", None), "Starting a subagent: general-purpose");
    let mcp = ToolKind::Mcp { server: "github".into(), tool: "create_issue".into() };
    assert_eq!(words(&mcp), "Using github: create_issue");
    assert_eq!(words(&ToolKind::TodoWrite), "Updating the to-do list");
    assert_eq!(words(&ToolKind::Other("SendMessage".into())), "Using SendMessage");
    assert_eq!(words(&ToolKind::Grep { pattern: "fn main".into() }), "Searching the files for `fn main`");
    assert_eq!(words(&ToolKind::Glob { pattern: "**/*.rs".into() }), "Finding files `**/*.rs`");
    assert_eq!(safe_text("Running subagent echo"), Some("Running subagent echo".into()));
    assert_eq!(safe_text("use key sk-ant-abcdefgh now"), Some("use key…".into()));
}
