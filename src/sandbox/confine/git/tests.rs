//! The pins without git: which names, which values, and how the caller's
//! environment keeps its own entries. `confine/tests.rs` runs the real git.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
}

fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.to_str())
}

#[test]
fn every_key_under_a_chosen_name_that_runs_a_program_is_pinned_to_one_that_runs_nothing_planted() {
    let cases: &[(&str, Option<&str>, Option<&str>)] = &[
        ("filter.lfs.clean", Some("git-lfs clean -- %f"), Some("")),
        ("filter.x.smudge", Some("evil"), Some("")),
        ("filter.x.process", Some("evil"), Some("")),
        ("filter.x.required", Some("true"), Some("false")),
        ("diff.pdf.textconv", Some("evil"), Some("cat")),
        ("diff.pdf.command", Some("evil"), Some(NO_EXTERNAL_DIFF)),
        ("merge.ours.driver", Some("evil"), Some("git merge-file %A %O %B")),
        ("alias.st", Some("!evil"), Some("")),
        ("alias.st", Some("  !evil"), Some("")),
        ("alias.st", Some("status --short"), None),
        ("submodule.lib.update", Some("!evil"), Some("none")),
        ("submodule.lib.update", Some("rebase"), None),
        ("credential.https://example.com.helper", Some("evil"), Some("")),
        ("gpg.ssh.program", Some("evil"), Some("")),
        ("difftool.x.cmd", Some("evil"), Some("")),
        ("mergetool.x.path", Some("evil"), Some("")),
        ("man.x.cmd", Some("evil"), Some("")),
        ("browser.x.path", Some("evil"), Some("")),
        ("guitool.x.cmd", Some("evil"), Some("")),
        ("tar.tgz.command", Some("evil"), Some("")),
        ("trailer.sign.cmd", Some("evil"), Some("")),
        ("trailer.sign.command", Some("evil"), Some("")),
        ("remote.origin.uploadpack", Some("evil"), Some("git-upload-pack")),
        ("remote.origin.receivepack", Some("evil"), Some("git-receive-pack")),
        ("remote.origin.vcs", Some("evil"), Some("")),
        ("sendemail.tocmd", Some("evil"), Some("")),
        ("sendemail.work.sendmailcmd", Some("evil"), Some("")),
        ("pager.log", Some("evil"), Some("false")),
        // A subsection may hold dots: the key is after the last one.
        ("filter.a.b.clean", Some("evil"), Some("")),
        // Not programs.
        ("remote.origin.url", Some("/x"), None),
        ("user.name", Some("a"), None),
        ("core.bare", None, None),
        ("diff.renames", Some("true"), None),
        ("filter", None, None),
    ];
    for (name, value, pin) in cases {
        assert_eq!(pin_for(name, *value), *pin, "{name} = {value:?}");
    }
}

#[test]
fn the_fixed_pins_come_first_and_a_listed_name_is_pinned_once() {
    let listed = parse_listing(b"core.fsmonitor\ntouch x\0filter.f.clean\nevil\0core.bare\0filter.f.clean\nagain\0");
    assert_eq!(listed[2], ("core.bare".to_owned(), None));
    let pins = pins(&listed);
    assert_eq!(pins[0], ("safe.bareRepository".to_owned(), "explicit".to_owned()));
    assert_eq!(pins.len(), FIXED.len() + 1, "{pins:?}");
    assert_eq!(pins.last().unwrap(), &("filter.f.clean".to_owned(), String::new()));
    assert_eq!(pins.iter().filter(|(k, _)| k == "core.fsmonitor").count(), 1);
}

#[test]
fn the_listing_run_gets_the_options_that_choose_the_configuration() {
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    assert_eq!(
        config_options(&args(&[
            "-C",
            "sub",
            "--no-pager",
            "-c",
            "a.b=c",
            "--git-dir=x",
            "--bare",
            "status",
            "-C",
            "y"
        ])),
        args(&["-C", "sub", "-c", "a.b=c", "--git-dir=x", "--bare"])
    );
    assert_eq!(config_options(&args(&["--namespace", "n", "--git-dir", "g", "log"])), args(&["--git-dir", "g"]));
    assert_eq!(config_options(&args(&["--version"])), args(&[]));
    assert_eq!(config_options(&args(&["--attr-source", "t", "--work-tree=w", "diff"])), args(&["--work-tree=w"]));
    assert!(config_options(&args(&["status", "-c", "x"])).is_empty());
}

#[test]
fn the_pins_follow_the_callers_own_entries_and_win_over_its_parameters() {
    let pins = vec![("core.pager".to_owned(), "cat".to_owned()), ("alias.x".to_owned(), "it's".to_owned())];
    let caller = env(&[
        ("PATH", "/usr/bin"),
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "user.name"),
        ("GIT_CONFIG_VALUE_0", "me"),
        // Past the caller's count: git never reads it; a pin takes its place.
        ("GIT_CONFIG_KEY_1", "core.pager"),
        ("GIT_CONFIG_VALUE_1", "evil"),
        ("GIT_CONFIG_PARAMETERS", "'core.pager'='evil'"),
    ]);
    let out = environment(caller, &pins).unwrap();
    assert_eq!(get(&out, "PATH"), Some("/usr/bin"));
    assert_eq!(get(&out, "GIT_CONFIG_COUNT"), Some("3"));
    assert_eq!((get(&out, "GIT_CONFIG_KEY_0"), get(&out, "GIT_CONFIG_VALUE_0")), (Some("user.name"), Some("me")));
    assert_eq!((get(&out, "GIT_CONFIG_KEY_1"), get(&out, "GIT_CONFIG_VALUE_1")), (Some("core.pager"), Some("cat")));
    assert_eq!(get(&out, "GIT_CONFIG_KEY_2"), Some("alias.x"));
    assert_eq!(out.iter().filter(|(k, _)| k == "GIT_CONFIG_KEY_1").count(), 1);
    assert_eq!(get(&out, "GIT_CONFIG_PARAMETERS"), Some(r"'core.pager'='evil' 'core.pager'='cat' 'alias.x'='it'\''s'"));
    assert_eq!(get(&out, PROXY_COMMAND), Some(""), "core.gitProxy is read from nowhere");

    let out = environment(env(&[(PROXY_COMMAND, "mine")]), &pins).unwrap();
    assert_eq!(get(&out, PROXY_COMMAND), Some("mine"), "the caller's own is kept");
    assert_eq!(get(&out, "GIT_CONFIG_PARAMETERS"), None, "none made up");
    assert_eq!(get(&out, "GIT_CONFIG_COUNT"), Some("2"));
    assert_eq!(environment(env(&[("GIT_CONFIG_COUNT", "2x")]), &pins), Err(EnvError::Count("2x".to_owned())));
}

#[test]
fn the_summary_names_the_bare_repository_rule_and_every_fixed_key() {
    let summary = summary();
    assert!(summary.contains("safe.bareRepository=explicit"), "{summary}");
    for (key, _) in FIXED.iter().skip(1) {
        assert!(summary.contains(key), "{key}: {summary}");
    }
}
