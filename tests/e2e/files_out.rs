//! Files the agent sends (`send_file`), end to end: the real CLI calls
//! pincer's tool, pincer copies the file from the group's folder and the
//! Telegram adapter uploads it to the fake Bot API, which keeps the bytes.

use std::time::Duration;

use serde_json::json;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{FakeBot, FakeError, Sent, TgChat, TgUser};
use crate::support::harness::{Daemon, Sandbox, PATIENCE};

const CHAT: i64 = -100_910;

fn chat() -> TgChat {
    TgChat::group(CHAT, "Lab")
}

fn bob() -> TgUser {
    TgUser::new(61, "Bob")
}

fn send_file(path: &str, caption: Option<&str>) -> Reply {
    let mut input = json!({ "path": path });
    if let Some(caption) = caption {
        input["caption"] = json!(caption);
    }
    Reply::tool_use("mcp__pincer__send_file", input)
}

/// A real `width` × `height` PNG.
fn png(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([(x * 7) as u8, (y * 3) as u8, 200]));
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    bytes
}

/// A small PDF-like file with bytes that are not UTF-8, so a lossy copy shows.
fn pdf() -> Vec<u8> {
    let mut bytes = b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n".to_vec();
    bytes.extend((0..=255u8).cycle().take(4000));
    bytes
}

/// The messages in the chat that carry a file.
fn files(bot: &FakeBot) -> Vec<Sent> {
    bot.sent(CHAT).into_iter().filter(|m| m.file.is_some()).collect()
}

/// The copies pincer keeps in its data dir until a file is delivered.
fn copies(sandbox: &Sandbox) -> usize {
    let dir = sandbox.config.data_dir.join("outgoing/lab");
    std::fs::read_dir(dir).map_or(0, Iterator::count)
}

#[tokio::test]
async fn an_image_goes_as_a_photo_and_a_pdf_as_a_document_with_the_same_bytes_and_escapes_are_refused() {
    let api = FakeApi::start(fake_api::scripted(vec![
        ("SENDCHART", send_file("out/chart.png", Some("the **chart** you asked for"))),
        ("SENDPDF", send_file("report.pdf", None)),
        ("STEAL", send_file("../other/secret.txt", None)),
        ("VIALINK", send_file("link.txt", None)),
    ]))
    .await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.serve_telegram_group(&bot, "lab", CHAT).await;
    sandbox.add_group("other", None).await;
    let secret = sandbox.group_dir("other").join("secret.txt");
    std::fs::write(&secret, "OTHER GROUP'S SECRET").unwrap();
    let folder = sandbox.group_dir("lab");
    std::fs::create_dir_all(folder.join("out")).unwrap();
    let chart = png(640, 480);
    std::fs::write(folder.join("out/chart.png"), &chart).unwrap();
    std::fs::write(folder.join("report.pdf"), pdf()).unwrap();
    std::os::unix::fs::symlink(&secret, folder.join("link.txt")).unwrap();
    let pincer = sandbox.spawn_daemon();

    bot.say(&chat(), &bob(), "SENDCHART please");
    let sent = bot.wait_sent(CHAT, 2).await;
    let photo = sent[0].file.as_ref().expect("the chart came first, as a file");
    assert_eq!((photo.kind, photo.file_name.as_str()), ("photo", "chart.png"));
    assert_eq!(photo.bytes, chart, "the same bytes");
    assert_eq!(sent[0].text, "the chart you asked for", "the caption, rendered");
    assert!(sent[1].text.contains("TOOL_RESULT(err=False):queued for the chat of group lab as a photo"), "{sent:?}");

    bot.say(&chat(), &bob(), "SENDPDF please");
    let sent = bot.wait_sent(CHAT, 4).await;
    let document = sent[2].file.as_ref().expect("the PDF, as a file");
    assert_eq!((document.kind, document.file_name.as_str()), ("document", "report.pdf"));
    assert_eq!(document.bytes, pdf(), "the same bytes, not UTF-8 ones included");
    bot.wait_for("the copies to go once delivered", |_| copies(&sandbox) == 0).await;

    // Telegram's own photo checks are stricter than pincer's guess: refused
    // as a photo, the chart goes again as a document.
    bot.fail_next("sendPhoto", FakeError::custom(400, "Bad Request: PHOTO_INVALID_DIMENSIONS"));
    bot.say(&chat(), &bob(), "SENDCHART again");
    let sent = bot.wait_sent(CHAT, 6).await;
    let again = sent[4].file.as_ref().expect("the chart, as a file");
    assert_eq!((again.kind, again.bytes.as_slice()), ("document", chart.as_slice()));
    assert_eq!(sent[4].text, "the chart you asked for", "with its caption");

    // A link is followed by the gate as the kernel would (`session::files`):
    // it leads outside, so it is refused there, before the tool looks.
    for (ask, why) in [("STEAL", "outside the group's folder"), ("VIALINK", "secret.txt is outside the group's folder")]
    {
        let before = bot.sent(CHAT).len();
        bot.say(&chat(), &bob(), &format!("{ask} please"));
        let answer = bot.wait_sent(CHAT, before + 1).await.pop().unwrap();
        assert!(answer.text.contains("TOOL_RESULT(err=True)") && answer.text.contains(why), "{ask}: {answer:?}");
    }
    assert_eq!(files(&bot).len(), 3, "nothing else was sent as a file");
    assert!(!bot.sent(CHAT).iter().any(|m| m.text.contains("OTHER GROUP")), "the secret never reached the chat");
    pincer.stop().await;

    // `pincer history` shows the files among the agent's messages.
    let store = sandbox.store().await;
    let history = store.history().history(&"lab".parse().unwrap(), 100).await.unwrap();
    let sent_files: Vec<(String, String, String)> = history
        .iter()
        .filter_map(|e| match e {
            pincer::store::HistoryEntry::Message { file: Some(f), delivery: Some(d), .. } => {
                Some((f.kind.clone(), f.from.clone(), d.state.clone()))
            }
            _ => None,
        })
        .collect();
    let delivered = |kind: &str, from: &str| (kind.to_owned(), from.to_owned(), "delivered".to_owned());
    let expected =
        [delivered("photo", "out/chart.png"), delivered("document", "report.pdf"), delivered("photo", "out/chart.png")];
    assert_eq!(sent_files, expected, "as judged when sent (the fallback is the adapter's)");
    store.close().await;
}

/// Waits until the group's turn stored its result.
async fn answered(sandbox: &Sandbox) {
    let store = sandbox.store().await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let history = store.history().history(&"lab".parse().unwrap(), 100).await.unwrap();
        if history.iter().any(|e| matches!(e, pincer::store::HistoryEntry::Result { .. })) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no result stored: {history:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.close().await;
}

#[tokio::test]
async fn a_file_sent_during_an_outage_arrives_after_it_and_after_a_restart() {
    let (_api, bot, sandbox, pincer) = lab_sending_a_pdf(Some("as promised")).await;

    bot.outage(&["sendDocument", "sendMessage"], 502, Duration::from_secs(600));
    bot.say(&chat(), &bob(), "SENDPDF please");
    bot.wait_for("a try during the outage", |b| b.calls_to("sendDocument").iter().any(|c| !c.ok)).await;
    // The agent may change its file now: the copy is what goes.
    std::fs::write(sandbox.group_dir("lab").join("report.pdf"), "CHANGED AFTERWARDS").unwrap();
    // Stopped once the turn is over, so the restart has nothing to ask the agent again.
    answered(&sandbox).await;
    pincer.stop().await;
    assert!(files(&bot).is_empty(), "nothing got through the outage");
    assert_eq!(copies(&sandbox), 1, "the copy waits with its message");

    bot.end_faults();
    let pincer = sandbox.spawn_daemon();
    let sent = tokio::time::timeout(PATIENCE, bot.wait_sent(CHAT, 2)).await.expect("delivered after the outage");
    let document = sent[0].file.as_ref().expect("the file first, in order");
    assert_eq!(document.bytes, pdf(), "the file as it was when the agent sent it");
    assert_eq!(sent[0].text, "as promised");
    assert!(sent[1].text.contains("TOOL_RESULT(err=False)"), "then the turn's answer: {sent:?}");
    bot.wait_for("the copy to go", |_| copies(&sandbox) == 0).await;
    assert_eq!(files(&bot).len(), 1, "once");
    pincer.stop().await;
}

/// `(ok, error)` of each `sendDocument` the bot tried.
fn uploads(bot: &FakeBot) -> Vec<(bool, Option<String>)> {
    bot.calls_to("sendDocument").into_iter().map(|c| (c.ok, c.error)).collect()
}

/// A daemon serving group `lab` in Telegram, whose agent sends `report.pdf`
/// (with `caption`) when asked for SENDPDF.
async fn lab_sending_a_pdf(caption: Option<&str>) -> (FakeApi, FakeBot, Sandbox, Daemon) {
    let api = FakeApi::start(fake_api::scripted(vec![("SENDPDF", send_file("report.pdf", caption))])).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    sandbox.serve_telegram_group(&bot, "lab", CHAT).await;
    std::fs::write(sandbox.group_dir("lab").join("report.pdf"), pdf()).unwrap();
    let pincer = sandbox.spawn_daemon();
    (api, bot, sandbox, pincer)
}

#[tokio::test]
async fn a_hung_upload_holds_back_neither_the_turns_answer_nor_later_replies_and_goes_once_released() {
    let (_api, bot, sandbox, pincer) = lab_sending_a_pdf(Some("as promised")).await;

    bot.hang_calls(&["sendDocument"], Duration::from_secs(600));
    bot.say(&chat(), &bob(), "SENDPDF please");
    bot.wait_for("the upload to hang", |b| !uploads(b).is_empty()).await;
    let sent = bot.wait_sent(CHAT, 1).await;
    assert!(sent[0].text.contains("TOOL_RESULT(err=False)"), "the turn's answer, past the file: {sent:?}");
    bot.say(&chat(), &bob(), "and a LATER question");
    let sent = bot.wait_sent(CHAT, 2).await;
    assert!(sent[1].text.contains("and a LATER question"), "{sent:?}");
    assert!(files(&bot).is_empty(), "the file is still on its way");

    bot.release_hangs();
    let sent = bot.wait_sent(CHAT, 3).await;
    let document = sent[2].file.as_ref().expect("the file, after the text written after it");
    assert_eq!((document.file_name.as_str(), document.bytes.as_slice()), ("report.pdf", pdf().as_slice()));
    assert_eq!(sent[2].text, "as promised", "with its caption");
    bot.wait_for("the copy to go", |_| copies(&sandbox) == 0).await;
    assert_eq!(files(&bot).len(), 1, "once");
    pincer.stop().await;
}

#[tokio::test]
async fn an_upload_slower_than_teloxides_17_seconds_goes_through_on_its_first_try() {
    let (_api, bot, _sandbox, pincer) = lab_sending_a_pdf(None).await;

    // A slow uplink: the Bot API answers after 20 s, past teloxide's 17 s limit.
    bot.slow_calls(&["sendDocument"], Duration::from_secs(20));
    bot.say(&chat(), &bob(), "SENDPDF please");
    bot.wait_for("the file to arrive", |b| !files(b).is_empty()).await;
    // The turn's answer came meanwhile; a reply asked for now comes after
    // anything still on its way to the chat.
    bot.say(&chat(), &bob(), "a MARKER after the file");
    bot.wait_for("the marker's answer", |b| b.sent(CHAT).iter().any(|m| m.text.contains("MARKER"))).await;
    assert_eq!(uploads(&bot), [(true, None)], "one upload, not cut short and sent again");
    assert_eq!(files(&bot).len(), 1);
    pincer.stop().await;
}
