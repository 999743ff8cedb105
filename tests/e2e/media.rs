//! Photos, voice notes and files from Telegram, end to end: the whole
//! daemon with teloxide against the fake Bot API (which holds the files and
//! serves `getFile` and downloads), the real CLI against the fake Messages
//! API, which records the image blocks the model is shown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::crafted::claimed_png;
use crate::support::fake_api::{self, FakeApi, RecordedRequest};
use crate::support::fake_bot::{FakeBot, Incoming, TgChat, TgUser};
use crate::support::harness::{Sandbox, PATIENCE};

const CHAT: i64 = -100_900;

fn chat() -> TgChat {
    TgChat::group(CHAT, "Family")
}

fn ann() -> TgUser {
    TgUser::new(51, "Ann")
}

/// A `width` × `height` JPEG of a colour gradient.
fn jpeg(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([(x % 256) as u8, (y % 256) as u8, 90]));
    let mut bytes = Vec::new();
    image::DynamicImage::ImageRgb8(image)
        .write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Jpeg)
        .unwrap();
    bytes
}

/// The image blocks of the request's last user message.
fn images(request: &RecordedRequest) -> Vec<Value> {
    let last_user = request.messages().iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or_default();
    last_user["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "image").cloned().collect()
}

/// Decodes an image block's data and says its size.
fn dimensions(block: &Value) -> (u32, u32, usize) {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.decode(block["source"]["data"].as_str().unwrap()).unwrap();
    let image = image::load_from_memory(&data).unwrap();
    (image.width(), image.height(), data.len())
}

#[tokio::test]
async fn a_photo_and_an_album_reach_the_model_as_image_blocks_and_are_kept_in_the_inbox() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.serve_telegram_group(&bot, "family", CHAT).await;
    let pincer = sandbox.spawn_daemon();

    let big = jpeg(3000, 2000);
    let photo = bot.upload(big.clone());
    bot.say_with(Incoming::photo(&chat(), &ann(), "what is on this receipt?", &photo, 3000, 2000));
    let requests = api.wait_for_main_requests(1, PATIENCE).await;
    let shown = images(&requests[0]);
    assert_eq!(shown.len(), 1, "one image block");
    assert_eq!(shown[0]["source"]["type"], "base64");
    assert_eq!(shown[0]["source"]["media_type"], "image/jpeg");
    let (w, h, bytes) = dimensions(&shown[0]);
    assert_eq!((w, h), (1568, 1045), "scaled to the long edge the API recommends");
    assert!(bytes <= 3_750_000);
    let prompt = requests[0].last_user_prompt();
    assert!(prompt.contains("what is on this receipt?"), "{prompt}");
    let saved = prompt.split("saved as ").nth(1).and_then(|rest| rest.split(',').next()).expect("a saved path");
    assert!(saved.starts_with("inbox/") && saved.ends_with("-photo.jpg"), "{saved}");
    let kept = std::fs::read(sandbox.group_dir("family").join(saved)).expect("kept in the group's folder");
    assert_eq!(kept, big, "the file as sent");
    bot.wait_sent(CHAT, 1).await;

    // Two photos sent together: one turn, both shown, in order.
    let (a, b) = (bot.upload(jpeg(300, 200)), bot.upload(jpeg(200, 300)));
    bot.say_with(Incoming::photo(&chat(), &ann(), "our trip", &a, 300, 200).in_album("trip"));
    bot.say_with(Incoming::photo(&chat(), &ann(), "", &b, 200, 300).in_album("trip"));
    let requests = api.wait_for_main_requests(2, PATIENCE).await;
    let shown = images(&requests[1]);
    assert_eq!(shown.len(), 2, "the album is one message");
    assert_eq!((dimensions(&shown[0]).0, dimensions(&shown[1]).0), (300, 200));
    bot.wait_sent(CHAT, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.main_requests().len(), 2, "no second turn for the album's second part");
    pincer.stop().await;

    // `pincer history` shows what each message carried.
    let store = pincer::app::open_store(&sandbox.config).await.unwrap();
    let history = store.history().history(&"family".parse().unwrap(), 100).await.unwrap();
    let carried: Vec<(String, usize)> = history
        .iter()
        .filter_map(|e| match e {
            pincer::store::HistoryEntry::Inbound { text, media, state, .. } if state != "merged" => {
                Some((text.clone(), media.len()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(carried, [("what is on this receipt?".to_owned(), 1), ("our trip".to_owned(), 2)]);
    store.close().await;
}

/// A transcription engine on loopback: answers 500 while `failing`, else the words.
async fn engine(failing: Arc<Mutex<bool>>) -> (String, Arc<Mutex<usize>>) {
    let calls = Arc::new(Mutex::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/v1/audio/transcriptions",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (failing, counted) = (failing.clone(), counted.clone());
            async move {
                *counted.lock().unwrap() += 1;
                assert!(body.len() > 100, "the audio was sent");
                if *failing.lock().unwrap() {
                    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down".to_owned())
                } else {
                    (axum::http::StatusCode::OK, r#"{"text":"buy milk and call grandma"}"#.to_owned())
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{at}/v1"), calls)
}

#[tokio::test]
async fn a_voice_note_is_transcribed_and_a_failing_engine_holds_nothing_back() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let failing = Arc::new(Mutex::new(false));
    let (url, calls) = engine(failing.clone()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.transcription.url = Some(url);
    sandbox.serve_telegram_group(&bot, "family", CHAT).await;
    let pincer = sandbox.spawn_daemon();
    // The daemon runs in this process: its counters are these.
    let counted = |outcome: &'static str| {
        let label = pincer::metrics::counters::OutcomeLabel { outcome };
        pincer::metrics::counters::counters().transcriptions.get_or_create(&label).get()
    };
    let (ok_before, failed_before) = (counted("ok"), counted("failed"));

    let note = bot.upload(vec![7u8; 4000]);
    bot.say_with(Incoming::voice(&chat(), &ann(), &note, 42));
    let requests = api.wait_for_main_requests(1, PATIENCE).await;
    let prompt = requests[0].last_user_prompt();
    assert!(prompt.contains("[voice 0:42, audio/ogg"), "{prompt}");
    assert!(prompt.contains("transcript: buy milk and call grandma"), "{prompt}");
    let saved = prompt.split("saved as ").nth(1).and_then(|rest| rest.split([',', ']']).next()).unwrap();
    assert!(sandbox.group_dir("family").join(saved).is_file(), "the note is kept: {saved}");
    bot.wait_sent(CHAT, 1).await;

    *failing.lock().unwrap() = true;
    let again = bot.upload(vec![8u8; 4000]);
    bot.say_with(Incoming::voice(&chat(), &ann(), &again, 5));
    let requests = api.wait_for_main_requests(2, PATIENCE).await;
    let prompt = requests[1].last_user_prompt();
    assert!(prompt.contains("no transcript: the transcription engine did not answer after 3 tries"), "{prompt}");
    assert_eq!(*calls.lock().unwrap(), 4, "one call, then three tries");
    assert!(counted("ok") > ok_before && counted("failed") > failed_before, "both counted for /metrics");
    bot.wait_sent(CHAT, 2).await;
    pincer.stop().await;
}

#[tokio::test]
async fn a_file_too_large_to_download_is_named_and_its_sender_told_and_a_crafted_image_is_kept_unshown() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.serve_telegram_group(&bot, "family", CHAT).await;
    let pincer = sandbox.spawn_daemon();

    let big = bot.upload_claimed(25 * 1024 * 1024);
    bot.say_with(Incoming::document(&chat(), &ann(), "the scan", &big, "scan.pdf", "application/pdf"));
    let requests = api.wait_for_main_requests(1, PATIENCE).await;
    let prompt = requests[0].last_user_prompt();
    assert!(prompt.contains("the scan"), "{prompt}");
    assert!(prompt.contains("not downloaded, larger than the 20.0 MB a bot may fetch"), "{prompt}");
    let sent = bot.wait_sent(CHAT, 2).await;
    assert!(
        sent.iter().any(|m| m.text.contains("\"scan.pdf\" (25.0 MB) is larger than the 20.0 MB a bot may download")),
        "{sent:?}"
    );
    assert!(!bot.downloads().iter().any(|p| p.ends_with(&big.id)), "never downloaded");

    // A tiny PNG that claims 100,000 × 100,000 pixels.
    let crafted = bot.upload(claimed_png(100_000, 100_000));
    bot.say_with(Incoming::document(&chat(), &ann(), "look", &crafted, "huge.png", "image/png"));
    let requests = api.wait_for_main_requests(2, PATIENCE).await;
    assert!(images(&requests[1]).is_empty(), "not shown");
    let prompt = requests[1].last_user_prompt();
    assert!(prompt.contains("saved as inbox/") && prompt.contains("-huge.png"), "kept as a file: {prompt}");
    assert!(prompt.contains("not shown to you: the image is more than pincer decodes"), "{prompt}");
    bot.wait_sent(CHAT, 3).await;
    pincer.stop().await;
}

#[tokio::test]
async fn a_photo_kept_as_context_is_fetched_so_a_later_question_finds_it_and_an_album_engages_by_any_part() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let chat_address = Some(pincer::domain::ChatAddress::telegram(CHAT, None));
    let settings = pincer::store::GroupSettings { chat: chat_address, requires_trigger: true, ..Default::default() };
    sandbox.add_group_with("family", settings).await;
    let pincer = sandbox.spawn_daemon();

    // Not addressed to the agent: kept as context, its file fetched all the same.
    let photo = bot.upload(jpeg(640, 480));
    bot.say_with(Incoming::photo(&chat(), &ann(), "", &photo, 640, 480));
    bot.say(&chat(), &ann(), "@Andy what is in the photo above?");
    let requests = api.wait_for_main_requests(1, PATIENCE).await;
    let text = requests[0].all_text();
    assert!(text.contains("open the file to see it"), "the context names the saved file: {text}");
    assert!(images(&requests[0]).is_empty(), "a context photo costs no image tokens until opened");
    let saved = text.split("saved as ").nth(1).and_then(|rest| rest.split(',').next()).expect("a saved path");
    assert_eq!(std::fs::read(sandbox.group_dir("family").join(saved)).unwrap(), jpeg(640, 480));
    bot.wait_sent(CHAT, 1).await;

    // An album whose second photo carries the question: one turn, both shown.
    let (a, b) = (bot.upload(jpeg(300, 200)), bot.upload(jpeg(200, 300)));
    bot.say_with(Incoming::photo(&chat(), &ann(), "", &a, 300, 200).in_album("pair"));
    bot.say_with(Incoming::photo(&chat(), &ann(), "@Andy which is sharper?", &b, 200, 300).in_album("pair"));
    let requests = api.wait_for_main_requests(2, PATIENCE).await;
    assert_eq!(images(&requests[1]).len(), 2, "the album is one message, both photos shown");
    bot.wait_sent(CHAT, 2).await;
    pincer.stop().await;
}
