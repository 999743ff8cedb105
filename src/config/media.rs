//! `[media]` (the inbox's cap, the memory images may take while decoded) and `[transcription]` (the engine that gives
//! voice notes their words).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::ConfigError;
use super::secret::Secret;

/// `[media]`: what pincer keeps of the files chats send.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MediaConfig {
    /// The most a group's `inbox/` holds ("1 GiB", "500 MB", or bytes); the
    /// oldest files go first when a new one would pass it.
    pub max_inbox: ByteSize,
    /// The most memory all images being prepared for the model may take at
    /// once, across all groups (their decoded pixels and the copies made to
    /// turn and scale them); one that would take more than all of it is kept
    /// as a file but not shown.
    pub decode_budget: ByteSize,
}

/// The smallest `media.decode_budget`: a phone's 12-megapixel photo, decoded
/// and scaled, takes about 110 MiB.
const MIN_DECODE_BUDGET: u64 = 128 * 1024 * 1024;

impl Default for MediaConfig {
    fn default() -> Self {
        // 512 MiB: four phone photos at once, and room for the largest image
        // the decoder's limits let through (about 450 MiB).
        MediaConfig { max_inbox: ByteSize(1024 * 1024 * 1024), decode_budget: ByteSize(512 * 1024 * 1024) }
    }
}

impl MediaConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.max_inbox.0 < 1024 * 1024 {
            return Err(ConfigError::Rule {
                key: "media.max_inbox",
                problem: "must be at least 1 MiB (e.g. \"1 GiB\")",
            });
        }
        if self.decode_budget.0 < MIN_DECODE_BUDGET {
            return Err(ConfigError::Rule {
                key: "media.decode_budget",
                problem: "must be at least 128 MiB, what a phone's photo takes to prepare (e.g. \"512 MiB\")",
            });
        }
        Ok(())
    }
}

/// `[transcription]`: an OpenAI-compatible `POST {url}/audio/transcriptions`
/// (OpenAI, Groq, a local Whisper server). Unset `url`: no transcripts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TranscriptionConfig {
    /// The API's base, e.g. `https://api.openai.com/v1`.
    pub url: Option<String>,
    pub model: String,
    /// Sent to the engine only (`PINCER_TRANSCRIPTION__API_KEY` keeps it out of the file).
    pub api_key: Option<Secret>,
    /// An ISO-639-1 code ("de"), when the engine should not guess.
    pub language: Option<String>,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        TranscriptionConfig { url: None, model: "whisper-1".to_owned(), api_key: None, language: None }
    }
}

impl TranscriptionConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.url {
            let ok = url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !ok {
                return Err(ConfigError::Rule {
                    key: "transcription.url",
                    problem: "must be an http(s) URL without the /audio/transcriptions part (e.g. \
                              \"https://api.openai.com/v1\")",
                });
            }
        }
        if self.model.trim().is_empty() {
            return Err(ConfigError::Rule {
                key: "transcription.model",
                problem: "must not be empty (e.g. \"whisper-1\")",
            });
        }
        if let Some(language) = &self.language {
            if !(2..=3).contains(&language.len()) || !language.chars().all(|c| c.is_ascii_lowercase()) {
                return Err(ConfigError::Rule {
                    key: "transcription.language",
                    problem:
                        "must be an ISO-639-1 code such as \"en\" or \"de\"; leave it unset to let the engine guess",
                });
            }
        }
        Ok(())
    }
}

/// A number of bytes, written "1 GiB", "500 MB", "64 KiB" or as a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    fn parse(text: &str) -> Option<ByteSize> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().ok()?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" | "kib" | "k" => 1 << 10,
            "mb" | "mib" | "m" => 1 << 20,
            "gb" | "gib" | "g" => 1 << 30,
            "tb" | "tib" | "t" => 1 << 40,
            _ => return None,
        };
        let bytes = number * scale as f64;
        (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(ByteSize(bytes as u64))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Bytes(n) => Ok(ByteSize(n)),
            Written::Text(t) => ByteSize::parse(&t).ok_or_else(|| {
                serde::de::Error::custom(format!("{t:?} is not a size: write it like \"1 GiB\", \"500 MB\" or 1048576"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(ByteSize::parse("1 GiB"), Some(ByteSize(1 << 30)));
        assert_eq!(ByteSize::parse("500MB"), Some(ByteSize(500 << 20)));
        assert_eq!(ByteSize::parse("1.5 kb"), Some(ByteSize(1536)));
        assert_eq!(ByteSize::parse("2048"), Some(ByteSize(2048)));
        assert_eq!(ByteSize::parse("lots"), None);
        assert_eq!(ByteSize::parse("5 parsecs"), None);
    }

    #[test]
    fn the_decode_budget_reads_as_a_size_and_is_at_least_a_phone_photos_worth() {
        let read: MediaConfig = toml::from_str("max_inbox = \"1 GiB\"\ndecode_budget = \"1 GiB\"").unwrap();
        assert_eq!(read.decode_budget, ByteSize(1 << 30));
        assert!(read.check().is_ok());
        let small = MediaConfig { decode_budget: ByteSize(64 << 20), ..MediaConfig::default() };
        assert!(matches!(small.check(), Err(ConfigError::Rule { key: "media.decode_budget", .. })));
        assert!(MediaConfig::default().check().is_ok());
    }
}
