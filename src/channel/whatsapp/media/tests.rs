//! From the crate's real message types to pincer's attachments and lines.

use whatsapp_rust::buffa::MessageField;

use super::*;

fn image(path: &str) -> wa::message::ImageMessage {
    wa::message::ImageMessage {
        direct_path: Some(path.into()),
        media_key: Some(vec![7; 32]),
        file_sha256: Some(vec![1; 32]),
        file_enc_sha256: Some(vec![2; 32]),
        file_length: Some(123_456),
        mimetype: Some("image/jpeg".into()),
        width: Some(1600),
        height: Some(1200),
        caption: Some("our receipt".into()),
        ..Default::default()
    }
}

#[test]
fn an_image_becomes_a_photo_that_says_how_to_fetch_it() {
    let msg = wa::Message { image_message: MessageField::some(image("/v/t62.7118-24/abc")), ..Default::default() };
    let found = attachments(&msg);
    assert_eq!(found.len(), 1);
    let photo = &found[0];
    assert_eq!(
        (photo.kind, photo.size, photo.width, photo.height),
        (MediaKind::Photo, Some(123_456), Some(1600), Some(1200))
    );
    let fetch: MediaRef = serde_json::from_str(&photo.fetch).unwrap();
    assert_eq!(
        (fetch.kind, fetch.direct_path.as_str(), fetch.length),
        (WaMediaKind::Image, "/v/t62.7118-24/abc", 123_456)
    );
    assert_eq!(MediaRef::bytes(&fetch.media_key), vec![7; 32]);
    assert_eq!(MediaRef::bytes(&fetch.file_enc_sha256), vec![2; 32]);
}

#[test]
fn a_path_that_is_not_whatsapps_is_never_fetched() {
    for path in ["https://evil.example/x", "/v/../../etc", ""] {
        let msg = wa::Message { image_message: MessageField::some(image(path)), ..Default::default() };
        assert!(attachments(&msg).is_empty(), "{path:?}");
    }
    let keyless = wa::message::ImageMessage { media_key: None, ..image("/v/x") };
    let msg = wa::Message { image_message: MessageField::some(keyless), ..Default::default() };
    assert!(attachments(&msg).is_empty());
}

#[test]
fn voice_notes_audio_documents_and_videos_are_told_apart() {
    let audio = |ptt| wa::message::AudioMessage {
        direct_path: Some("/v/a".into()),
        media_key: Some(vec![1; 32]),
        mimetype: Some("audio/ogg; codecs=opus".into()),
        seconds: Some(42),
        ptt: Some(ptt),
        ..Default::default()
    };
    let voice = attachments(&wa::Message { audio_message: MessageField::some(audio(true)), ..Default::default() });
    assert_eq!(voice[0].kind, MediaKind::Voice);
    assert_eq!(voice[0].mime.as_deref(), Some("audio/ogg"));
    assert_eq!(voice[0].duration, Some(std::time::Duration::from_secs(42)));
    let song = attachments(&wa::Message { audio_message: MessageField::some(audio(false)), ..Default::default() });
    assert_eq!(song[0].kind, MediaKind::Audio);

    let doc = |mime: &str| wa::message::DocumentMessage {
        direct_path: Some("/v/d".into()),
        media_key: Some(vec![1; 32]),
        mimetype: Some(mime.into()),
        file_name: Some("../../Q3 report.pdf".into()),
        ..Default::default()
    };
    let pdf = attachments(&wa::Message {
        document_message: MessageField::some(doc("application/pdf")),
        ..Default::default()
    });
    assert_eq!((pdf[0].kind, pdf[0].file_name.as_deref()), (MediaKind::Document, Some("../../Q3 report.pdf")));
    let picture =
        attachments(&wa::Message { document_message: MessageField::some(doc("image/png")), ..Default::default() });
    assert_eq!(picture[0].kind, MediaKind::Image, "an image sent as a file is shown too");
    let video = wa::message::VideoMessage {
        direct_path: Some("/v/m".into()),
        media_key: Some(vec![1; 32]),
        seconds: Some(5),
        ..Default::default()
    };
    let clip = attachments(&wa::Message { video_message: MessageField::some(video), ..Default::default() });
    assert_eq!(clip[0].kind, MediaKind::Video);
    let fetch: MediaRef = serde_json::from_str(&clip[0].fetch).unwrap();
    assert_eq!(fetch.kind, WaMediaKind::Video);
}

#[test]
fn stickers_places_and_contacts_read_as_one_line() {
    let sticker = wa::message::StickerMessage { emojis: Some("😂".into()), ..Default::default() };
    let msg = wa::Message { sticker_message: MessageField::some(sticker), ..Default::default() };
    assert_eq!(text_of(&msg).as_deref(), Some("[sticker 😂]"));
    let place = wa::message::LocationMessage {
        degrees_latitude: Some(48.8584),
        degrees_longitude: Some(2.2945),
        name: Some("Tour Eiffel".into()),
        ..Default::default()
    };
    let msg = wa::Message { location_message: MessageField::some(place), ..Default::default() };
    assert_eq!(text_of(&msg).as_deref(), Some("[location: Tour Eiffel at 48.858400, 2.294500]"));
    let contact = wa::message::ContactMessage {
        display_name: Some("Bo Li".into()),
        vcard: Some("BEGIN:VCARD\nVERSION:3.0\nFN:Bo Li\nTEL;type=CELL;waid=4930123:+49 30 123\nEND:VCARD".into()),
        ..Default::default()
    };
    let msg = wa::Message { contact_message: MessageField::some(contact), ..Default::default() };
    assert_eq!(text_of(&msg).as_deref(), Some("[contact: Bo Li, +49 30 123]"));
    assert_eq!(text_of(&wa::Message::default()), None);
}

/// A client whose downloads answer `bytes` after `takes`, or never.
struct Cdn {
    bytes: Vec<u8>,
    takes: Option<std::time::Duration>,
}

impl WaClient for Cdn {
    async fn send_text(&self, _chat: &str, _text: &str) -> Result<String, WaError> {
        Err(WaError::Rejected("downloads only".into()))
    }
    async fn composing(&self, _chat: &str, _on: bool) -> Result<(), WaError> {
        Ok(())
    }
    async fn mark_read(&self, _chat: &str, _sender: &str, _id: &str) -> Result<(), WaError> {
        Ok(())
    }
    async fn edit_text(&self, _chat: &str, _id: &str, _text: &str) -> Result<(), WaError> {
        Err(WaError::Rejected("downloads only".into()))
    }
    async fn revoke(&self, _chat: &str, _id: &str) -> Result<(), WaError> {
        Err(WaError::Rejected("downloads only".into()))
    }
    async fn react(&self, _chat: &str, _sender: &str, _id: &str, _emoji: &str) -> Result<(), WaError> {
        Err(WaError::Rejected("downloads only".into()))
    }
    async fn send_file(
        &self,
        _chat: &str,
        _file: &crate::domain::media::OutboundFile,
        _caption: Option<&str>,
    ) -> Result<String, WaError> {
        Err(WaError::Rejected("downloads only".into()))
    }
    async fn download(&self, _media: &MediaRef, mut into: Capped) -> Result<Capped, WaError> {
        match self.takes {
            Some(takes) => tokio::time::sleep(takes).await,
            None => std::future::pending().await,
        }
        let limit = into.limit();
        into.push(&self.bytes).map_err(|_| WaError::TooLarge { limit })?;
        Ok(into)
    }
    async fn group_subject(&self, _chat: &str) -> Result<String, WaError> {
        Ok(String::new())
    }
    fn own_ids(&self) -> super::super::client::OwnIds {
        Default::default()
    }
}

/// An attachment of `length` announced bytes, as `attachments` makes it.
fn document(length: u64) -> Attachment {
    let doc = wa::message::DocumentMessage {
        direct_path: Some("/v/t62.7119-24/doc".into()),
        media_key: Some(vec![7; 32]),
        file_length: Some(length),
        ..Default::default()
    };
    let msg = wa::Message { document_message: MessageField::some(doc), ..Default::default() };
    attachments(&msg).pop().expect("a document")
}

#[tokio::test(start_paused = true)]
async fn a_download_that_never_ends_fails_as_passing_after_its_sizes_time() {
    let files = WaFiles { client: Arc::new(Cdn { bytes: vec![1; 10], takes: None }) };
    let began = tokio::time::Instant::now();
    let big = document(10 << 20);
    let within_an_hour =
        tokio::time::timeout(std::time::Duration::from_secs(3600), files.fetch(&big, Capped::new(100 << 20)));
    let failed = within_an_hour.await.expect("it ends").unwrap_err();
    // 10 MiB: a minute, and 40 s at 256 KiB/s.
    assert_eq!(tokio::time::Instant::now() - began, std::time::Duration::from_secs(100));
    assert_eq!(failed, FetchError::Transient("the download did not finish within 1m 40s".into()));
}

#[tokio::test(start_paused = true)]
async fn a_slow_download_within_its_sizes_time_arrives_and_one_past_the_limit_is_too_large() {
    let slow =
        WaFiles { client: Arc::new(Cdn { bytes: vec![1; 10], takes: Some(std::time::Duration::from_secs(90)) }) };
    assert_eq!(slow.fetch(&document(10 << 20), Capped::new(100 << 20)).await.unwrap().into_bytes(), vec![1; 10]);
    let lying = WaFiles { client: Arc::new(Cdn { bytes: vec![1; 11], takes: Some(std::time::Duration::ZERO) }) };
    assert_eq!(lying.fetch(&document(5), Capped::new(10)).await.unwrap_err(), FetchError::TooLarge { limit: 10 });
    assert_eq!(lying.fetch(&document(11), Capped::new(10)).await.unwrap_err(), FetchError::TooLarge { limit: 10 });
}
