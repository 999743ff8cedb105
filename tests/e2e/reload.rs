//! `pincer reload` and SIGHUP through the `pincer` binary: a budget put in
//! pincer.toml while pincer runs holds the next message (the chat told),
//! taken out again by a SIGHUP it lets the message through; keys that need a
//! restart are named; a broken file changes nothing and says so.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{pincer_command, spawn_pincer_run, Sandbox};

fn team() -> TgChat {
    TgChat { id: -100_400, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

/// `pincer --config F reload` of the binary under test: (succeeded, stdout + stderr).
async fn reload(sandbox: &Sandbox, config: &std::path::Path) -> (bool, String) {
    let out = pincer_command(sandbox.root(), config, &["reload"]).await;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

fn texts(bot: &FakeBot) -> Vec<String> {
    bot.sent(team().id).into_iter().map(|s| s.text).collect()
}

#[tokio::test]
async fn a_budget_reloaded_into_a_running_pincer_holds_messages_and_a_sighup_lets_them_go() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    sandbox.serve_telegram_group(&bot, "team", team().id).await;
    let config = sandbox.write_config();
    let (ran, said) = reload(&sandbox, &config).await;
    assert!(ran && said.contains("pincer is not running"), "{said}");

    let child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;
    bot.say(&team(), &alice(), "first question");
    bot.wait_for("the first answer", |bot| texts(bot).iter().any(|t| t.contains("first question"))).await;
    let (ran, said) = reload(&sandbox, &config).await;
    assert!(ran && said.contains("nothing changed"), "{said}");

    // One turn a day, and a key that cannot change while pincer runs.
    sandbox.config.budget.daily_turns = Some(1);
    sandbox.config.claude.max_live_sessions += 1;
    sandbox.write_config();
    let (ran, said) = reload(&sandbox, &config).await;
    assert!(ran, "{said}");
    assert!(said.contains("applied: budget.daily_turns"), "{said}");
    assert!(said.contains("need a restart") && said.contains("claude.max_live_sessions"), "{said}");

    bot.say(&team(), &alice(), "second question");
    bot.wait_for("the budget notice", |bot| texts(bot).iter().any(|t| t.contains("budget of 1 turns a day"))).await;
    assert!(!texts(&bot).iter().any(|t| t.contains("second question")), "held: {:?}", texts(&bot));

    // A file that does not parse changes nothing.
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}\n[budget\n")).unwrap();
    let (ran, said) = reload(&sandbox, &config).await;
    assert!(!ran && said.contains("nothing was changed"), "{said}");

    // The budget taken out again, by SIGHUP as `systemctl reload` sends it.
    sandbox.config.budget.daily_turns = None;
    sandbox.write_config();
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGHUP).unwrap();
    bot.wait_for("the held answer", |bot| texts(bot).iter().any(|t| t.contains("second question"))).await;
    // Still the same process: SIGHUP did not stop it.
    let (ran, said) = reload(&sandbox, &config).await;
    assert!(ran && !said.contains("not running"), "{said}");
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}
