//! The words of a voice note, from an OpenAI-compatible transcription
//! engine (`POST {url}/audio/transcriptions`, multipart: the file, `model`,
//! optionally `language`; OpenAI, Groq and local Whisper servers speak it).
//! Passing failures (no answer, 429, 5xx) are tried again a few times with
//! backoff; then the caller goes on without a transcript, so a message is
//! never held back by an engine that is down. The key stays in pincer: it
//! is sent to the engine only, never to a sandbox.

use std::time::Duration;

use reqwest::multipart::{Form, Part};
use reqwest::StatusCode;

use crate::config::Secret;
use crate::retry::RetryPolicy;

/// Tries per note, the first included.
const ATTEMPTS: u32 = 3;
/// One request's limit: a long note on a slow local engine.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The most of a transcript the agent is given.
const TEXT_CHARS: usize = 20_000;

/// Where and how to transcribe.
#[derive(Clone, Debug)]
pub struct Engine {
    /// The API's base, e.g. `https://api.openai.com/v1` (no trailing `/audio/…`).
    pub url: String,
    pub model: String,
    pub api_key: Option<Secret>,
    /// An ISO-639-1 code, when the engine should not guess.
    pub language: Option<String>,
}

/// Why there is no transcript.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranscribeError {
    /// Still failing after the retries (network, 429, 5xx).
    #[error("the transcription engine did not answer after {ATTEMPTS} tries: {0}")]
    Unavailable(String),
    /// Refused for good (a bad key, an unknown model, a file it cannot read).
    #[error("the transcription engine refused the note: {0}")]
    Refused(String),
}

/// One HTTP client for every voice note (a Transcriber is made per note,
/// with the engine as the newest reload left it): its TLS setup and
/// connections are kept, not built again each time.
static CLIENT: std::sync::LazyLock<reqwest::Client> =
    std::sync::LazyLock::new(|| reqwest::Client::builder().timeout(TIMEOUT).build().unwrap_or_default());

/// A transcription client (cheap to clone).
#[derive(Clone, Debug)]
pub struct Transcriber {
    engine: Engine,
    client: reqwest::Client,
    retry: RetryPolicy,
}

impl Transcriber {
    pub fn new(engine: Engine) -> Transcriber {
        Transcriber::with_retry(engine, RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(8)))
    }

    /// [`new`](Self::new) with other pauses between tries (tests).
    pub fn with_retry(engine: Engine, retry: RetryPolicy) -> Transcriber {
        Transcriber { engine, client: CLIENT.clone(), retry }
    }

    /// The words of `audio` (named `file_name`, of type `mime`).
    pub async fn transcribe(&self, file_name: &str, mime: &str, audio: &[u8]) -> Result<String, TranscribeError> {
        let url = format!("{}/audio/transcriptions", self.engine.url.trim_end_matches('/'));
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            match self.once(&url, file_name, mime, audio).await {
                Ok(text) => return Ok(text),
                Err(Attempt::Final(why)) => return Err(TranscribeError::Refused(why)),
                Err(Attempt::Again(why, asked)) => {
                    tracing::warn!(attempt, %why, "transcription failed; trying again");
                    last = why;
                    if attempt < ATTEMPTS {
                        tokio::time::sleep(self.retry.pause(attempt, asked)).await;
                    }
                }
            }
        }
        Err(TranscribeError::Unavailable(last))
    }

    async fn once(&self, url: &str, file_name: &str, mime: &str, audio: &[u8]) -> Result<String, Attempt> {
        let file = Part::bytes(audio.to_vec())
            .file_name(file_name.to_owned())
            .mime_str(mime)
            .unwrap_or_else(|_| Part::bytes(audio.to_vec()).file_name(file_name.to_owned()));
        let mut form = Form::new().part("file", file).text("model", self.engine.model.clone());
        if let Some(language) = &self.engine.language {
            form = form.text("language", language.clone());
        }
        let mut request = self.client.post(url).multipart(form);
        if let Some(key) = &self.engine.api_key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|e| Attempt::Again(without_url(&e), None))?;
        let status = response.status();
        let asked = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .map(Duration::from_secs);
        let body = response.text().await.map_err(|e| Attempt::Again(without_url(&e), None))?;
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(Attempt::Again(format!("{status}: {}", short(&body)), asked));
        }
        if !status.is_success() {
            return Err(Attempt::Final(format!("{status}: {}", short(&body))));
        }
        let text = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_owned))
            .ok_or_else(|| Attempt::Final(format!("an answer without `text`: {}", short(&body))))?;
        Ok(text.trim().chars().take(TEXT_CHARS).collect())
    }
}

/// How one try ended when it gave no transcript.
enum Attempt {
    Again(String, Option<Duration>),
    Final(String),
}

/// An engine's error body, bounded (it may echo what it was sent).
fn short(body: &str) -> String {
    body.chars().take(200).collect()
}

/// What went wrong, in words that never carry the URL (it may hold a key).
fn without_url(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {}", humantime::format_duration(TIMEOUT))
    } else if e.is_connect() {
        "cannot connect to the engine".to_owned()
    } else if e.is_body() || e.is_decode() {
        "the answer broke off".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

#[cfg(test)]
mod tests;
