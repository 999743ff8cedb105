//! Against a fake engine on loopback that records what it was sent and
//! answers as scripted.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode as Status};

use super::*;

/// What the fake was sent: (authorization header, raw body) per request.
type Seen = Arc<Mutex<Vec<(Option<String>, Vec<u8>)>>>;

/// Serves `/v1/audio/transcriptions`, answering request n with `answers[n]`
/// (the last one again after that).
async fn engine(answers: Vec<(u16, &'static str)>) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let recorded = seen.clone();
    let app = axum::Router::new().route(
        "/v1/audio/transcriptions",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (seen, answers) = (recorded.clone(), answers.clone());
            async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push((auth, body.to_vec()));
                    seen.len() - 1
                };
                let (status, text) = answers[n.min(answers.len() - 1)];
                (Status::from_u16(status).unwrap(), text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{at}/v1"), seen)
}

fn transcriber(url: String) -> Transcriber {
    let engine = Engine {
        url,
        model: "whisper-1".into(),
        api_key: Some(Secret::new("sk-test-KEY")),
        language: Some("de".into()),
    };
    Transcriber::with_retry(engine, RetryPolicy::new(Duration::from_millis(1), Duration::from_millis(5)))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_note_goes_as_multipart_with_the_model_language_and_key_and_its_words_come_back() {
    let (url, seen) = engine(vec![(200, r#"{"text": "  Bring milk, please.  "}"#)]).await;
    let words = transcriber(url).transcribe("voice.ogg", "audio/ogg", b"OGG-BYTES").await.unwrap();
    assert_eq!(words, "Bring milk, please.");
    let seen = seen.lock().unwrap();
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-KEY"));
    assert!(contains(body, r#"filename="voice.ogg""#) && contains(body, "OGG-BYTES"), "the file");
    assert!(contains(body, "Content-Type: audio/ogg"), "its type");
    assert!(contains(body, "name=\"model\"\r\n\r\nwhisper-1"), "the model");
    assert!(contains(body, "name=\"language\"\r\n\r\nde"), "the language");
}

#[tokio::test]
async fn passing_failures_are_tried_again_and_then_given_up_on() {
    let (url, seen) = engine(vec![(503, "busy"), (429, "slow down"), (200, r#"{"text":"ok"}"#)]).await;
    assert_eq!(transcriber(url).transcribe("a.ogg", "audio/ogg", b"x").await.unwrap(), "ok");
    assert_eq!(seen.lock().unwrap().len(), 3);

    let (url, seen) = engine(vec![(500, "down")]).await;
    let e = transcriber(url).transcribe("a.ogg", "audio/ogg", b"x").await.unwrap_err();
    assert!(matches!(&e, TranscribeError::Unavailable(why) if why.contains("500")), "{e:?}");
    assert_eq!(seen.lock().unwrap().len(), ATTEMPTS as usize, "bounded tries");
}

#[tokio::test]
async fn a_refusal_is_final_and_an_engine_that_is_not_there_is_unavailable() {
    let (url, seen) = engine(vec![(401, r#"{"error":"bad key"}"#)]).await;
    let e = transcriber(url).transcribe("a.ogg", "audio/ogg", b"x").await.unwrap_err();
    assert!(matches!(&e, TranscribeError::Refused(why) if why.contains("401")), "{e:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "not tried again");

    let (url, _) = engine(vec![(200, r#"{"no":"text"}"#)]).await;
    let e = transcriber(url).transcribe("a.ogg", "audio/ogg", b"x").await.unwrap_err();
    assert!(matches!(e, TranscribeError::Refused(_)), "{e:?}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let e = transcriber(format!("http://{closed}/v1")).transcribe("a.ogg", "audio/ogg", b"x").await.unwrap_err();
    assert_eq!(e, TranscribeError::Unavailable("cannot connect to the engine".into()));
    assert!(!e.to_string().contains("127.0.0.1"), "no URL in the words: {e}");
}
