//! `[http]`: pincer's HTTP endpoint for operators (`/metrics`, `/healthz`,
//! `/readyz`). Off unless `listen` is set; beyond loopback only with a token.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::secret::Secret;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Where to serve, e.g. "127.0.0.1:9464". Unset: not served.
    pub listen: Option<SocketAddr>,
    /// Required as `Authorization: Bearer <token>` on every path but
    /// `/healthz`; must be set when `listen` is not a loopback address.
    pub token: Option<Secret>,
}

impl HttpConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.token.as_ref().is_some_and(|t| t.expose().trim().len() < 16) {
            return Err(ConfigError::Rule {
                key: "http.token",
                problem: "is shorter than 16 characters: use a long random one (e.g. `openssl rand -hex 24`)",
            });
        }
        match self.listen {
            Some(at) if !at.ip().is_loopback() && self.token.is_none() => Err(ConfigError::Rule {
                key: "http.listen",
                problem: "is not a loopback address, so http.token must be set (metrics and the status page \
                          would be open to the network otherwise); or listen on 127.0.0.1",
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_loopback_a_token_is_required() {
        let open = HttpConfig { listen: Some("0.0.0.0:9464".parse().unwrap()), token: None };
        let text = open.check().unwrap_err().to_string();
        assert!(text.contains("http.token must be set"), "{text}");
        let local = HttpConfig { listen: Some("127.0.0.1:9464".parse().unwrap()), token: None };
        assert!(local.check().is_ok());
        let guarded = HttpConfig { token: Some(Secret::new("x".repeat(24))), ..open };
        assert!(guarded.check().is_ok());
        let short = HttpConfig { token: Some(Secret::new("abc")), ..local };
        assert!(short.check().is_err());
    }
}
