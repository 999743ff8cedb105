//! WhatsApp media end to end: the crate's real image, voice and document
//! messages go in through the fake client (whose "CDN" holds their bytes),
//! the preparer fetches them through pincer's `WaClient` trait, and the
//! real CLI shows them to the fake Messages API; the agent's `send_file`
//! goes out through the same trait as a photo or a document.

use serde_json::{json, Value};

use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use crate::support::fake_api::{self, FakeApi, RecordedRequest, Reply};
use crate::support::fake_wa::{self, FakeWa, Person};
use crate::support::harness::{Sandbox, PATIENCE};

const CLUB: &str = "120363099999999901@g.us";

fn cleo() -> Person {
    Person { name: "Cleo", number: "4915100000031", lid: None }
}

async fn club(api: &FakeApi) -> Sandbox {
    let sandbox = Sandbox::new(api);
    let chat = Some(ChatAddress::whatsapp_group(CLUB).unwrap());
    sandbox.add_group_with("club", GroupSettings { chat, requires_trigger: false, ..GroupSettings::default() }).await;
    sandbox
}

fn jpeg(width: u32, height: u32) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([(x % 256) as u8, 40, (y % 256) as u8]));
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Jpeg).unwrap();
    bytes
}

fn image_blocks(request: &RecordedRequest) -> Vec<Value> {
    let last_user = request.messages().iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or_default();
    last_user["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "image").cloned().collect()
}

/// The path a prompt line says a file was saved as.
fn saved_path(prompt: &str, after: &str) -> String {
    let line = prompt.lines().find(|l| l.contains(after)).unwrap_or_else(|| panic!("no line with {after}: {prompt}"));
    line.split("saved as ").nth(1).and_then(|rest| rest.split([',', ']']).next()).expect("a saved path").to_owned()
}

#[tokio::test]
async fn an_image_a_voice_note_and_a_document_from_whatsapp_reach_the_agent_and_are_kept() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = club(&api).await;
    let wa = FakeWa::new();
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    let photo = jpeg(800, 600);
    let at = wa.upload(photo.clone());
    wa.say_with(CLUB, &cleo(), fake_wa::image(&at, photo.len(), "what bird is this?"));
    let requests = api.wait_for_main_requests(1, PATIENCE).await;
    let shown = image_blocks(&requests[0]);
    assert_eq!(shown.len(), 1, "one image block");
    assert_eq!(shown[0]["source"]["media_type"], "image/jpeg");
    let prompt = requests[0].last_user_prompt();
    assert!(prompt.contains("what bird is this?"), "{prompt}");
    let kept = sandbox.group_dir("club").join(saved_path(&prompt, "[photo"));
    assert_eq!(std::fs::read(kept).unwrap(), photo, "kept as it came");
    wa.wait_sent(CLUB, 1).await;

    let ogg = b"OggS\x00\x02 a voice note's bytes".repeat(20);
    let at = wa.upload(ogg.clone());
    wa.say_with(CLUB, &cleo(), fake_wa::voice(&at, ogg.len(), 7));
    let requests = api.wait_for_main_requests(2, PATIENCE).await;
    let prompt = requests[1].last_user_prompt();
    assert!(
        prompt.contains("[voice 0:07, audio/ogg") && prompt.contains("no transcript (none configured)"),
        "{prompt}"
    );
    let kept = sandbox.group_dir("club").join(saved_path(&prompt, "[voice"));
    assert_eq!(std::fs::read(kept).unwrap(), ogg);
    wa.wait_sent(CLUB, 2).await;

    let pdf = b"%PDF-1.7 minutes of the meeting".to_vec();
    let at = wa.upload(pdf.clone());
    wa.say_with(CLUB, &cleo(), fake_wa::document(&at, pdf.len(), "minutes.pdf", "application/pdf", "the minutes"));
    // And a file WhatsApp no longer has: still answered, the failure said.
    wa.say_with(CLUB, &cleo(), fake_wa::document("/v/t62/gone", 10, "old.pdf", "application/pdf", "an old one"));
    let requests = api.wait_for_main_requests(3, PATIENCE).await;
    let prompts: String = requests[2..].iter().map(RecordedRequest::last_user_prompt).collect::<Vec<_>>().join("\n");
    assert!(prompts.contains("[document \"minutes.pdf\", application/pdf"), "{prompts}");
    let kept = sandbox.group_dir("club").join(saved_path(&prompts, "minutes.pdf"));
    assert_eq!(std::fs::read(kept).unwrap(), pdf);
    wa.wait_for("the old file's answer", |wa| wa.sent(CLUB).iter().any(|m| m.text.contains("an old one"))).await;
    let answer = wa.sent(CLUB).into_iter().find(|m| m.text.contains("an old one")).unwrap();
    assert!(
        answer.text.contains("[document \"old.pdf\"") && answer.text.contains("the download failed"),
        "{}",
        answer.text
    );
    assert!(wa.downloads().contains(&"/v/t62/gone".to_owned()), "it was tried");
    pincer.stop().await;
}

#[tokio::test]
async fn the_agent_sends_a_photo_and_a_document_to_whatsapp() {
    let send = |path: &str, caption: &str| {
        Reply::tool_use("mcp__pincer__send_file", json!({"path": path, "caption": caption}))
    };
    let api = FakeApi::start(fake_api::scripted(vec![
        ("SENDPHOTO", send("plot.jpg", "the *plot*")),
        ("SENDDOC", send("notes/summary.txt", "")),
    ]))
    .await;
    let sandbox = club(&api).await;
    let folder = sandbox.group_dir("club");
    let plot = jpeg(320, 240);
    std::fs::write(folder.join("plot.jpg"), &plot).unwrap();
    std::fs::create_dir_all(folder.join("notes")).unwrap();
    std::fs::write(folder.join("notes/summary.txt"), "three points").unwrap();
    let wa = FakeWa::new();
    let pincer = sandbox.spawn_daemon_with_whatsapp(&wa);

    wa.say(CLUB, &cleo(), "SENDPHOTO please");
    let sent = wa.wait_sent(CLUB, 2).await;
    let photo = sent[0].file.as_ref().expect("the photo first");
    assert_eq!((photo.kind, photo.name.as_str(), &photo.bytes), ("photo", "plot.jpg", &plot));
    assert_eq!(sent[0].text, "the _plot_", "the caption in WhatsApp's markup");
    assert!(sent[1].text.contains("TOOL_RESULT(err=False)"), "{sent:?}");

    wa.say(CLUB, &cleo(), "SENDDOC please");
    let sent = wa.wait_sent(CLUB, 4).await;
    let doc = sent[2].file.as_ref().expect("then the document");
    assert_eq!((doc.kind, doc.name.as_str(), doc.bytes.as_slice()), ("document", "summary.txt", &b"three points"[..]));
    assert_eq!(sent[2].text, "", "no caption");
    pincer.stop().await;
}
