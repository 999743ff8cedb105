//! Updates through a webhook, each answered only once pincer handled it.
//!
//! Telegram drops an update once its POST is answered with a 2xx and sends
//! it again otherwise. teloxide's webhook answers at once, before anything is
//! stored; here the answer waits until the update's handler is done (for up
//! to [`HOLD_AT_MOST`]), so an update lost in a crash is one Telegram sends again.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use teloxide::prelude::*;
use teloxide::types::Update;
use teloxide::RequestError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::error::TelegramError;
use super::shared::Shared;
use super::updates::{Handled, Outcome, Workers, ALLOWED, HOLD_AT_MOST};
use crate::config::TelegramConfig;
use crate::retry::{Backoff, RetryPolicy};

#[derive(Clone)]
struct Hook {
    shared: Arc<Shared>,
    workers: Arc<Workers>,
    secret: Arc<str>,
}

/// Sets the webhook to `url`, serves it on `webhook_listen` until
/// `shutdown`, then deletes it (Telegram keeps the updates until the next start).
/// Listening and `setWebhook` are tried again after `retry`'s pause (or the
/// one Telegram asks for) until they work, reported through the channel's
/// health meanwhile, as polling does; only a `webhook_url` that is no URL stops it.
pub(super) async fn run(
    shared: &Arc<Shared>,
    workers: &Arc<Workers>,
    config: &TelegramConfig,
    url: &str,
    retry: RetryPolicy,
    shutdown: &CancellationToken,
) -> Result<(), TelegramError> {
    let not_url =
        |e: url::ParseError| TelegramError::NotUrl { setting: format!("webhook_url {url}"), why: e.to_string() };
    let parsed: reqwest::Url = url.parse().map_err(not_url)?;
    let secret: Arc<str> = match &config.webhook_secret {
        Some(secret) => secret.expose().into(),
        // 32 characters Telegram accepts, new at each start.
        None => uuid::Uuid::new_v4().simple().to_string().into(),
    };
    let mut backoff = Backoff::new(retry);
    let listener = loop {
        let (error, asked) = match set_up(shared, config, &parsed, &secret).await {
            Ok(listener) => break listener,
            Err(SetUpError::Listen(e)) => {
                (format!("cannot listen on [telegram] webhook_listen {}: {e}", config.webhook_listen), None)
            }
            Err(SetUpError::SetWebhook(e)) => {
                let asked = match &e {
                    RequestError::RetryAfter(after) => Some(after.duration()),
                    _ => None,
                };
                (format!("cannot set the Telegram webhook to {url}: {e}"), asked)
            }
        };
        shared.receive_failed(error).await;
        if !backoff.wait(asked, shutdown).await {
            workers.close();
            return Ok(());
        }
    };
    shared.receiving_works().await;
    tracing::info!(%url, listen = %config.webhook_listen, "receiving Telegram updates through the webhook");
    let hook = Hook { shared: shared.clone(), workers: workers.clone(), secret };
    let app = axum::Router::new().route(parsed.path(), post(on_post)).with_state(hook);
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).await;
    workers.close();
    if let Err(e) = shared.bot.delete_webhook().await {
        tracing::warn!("cannot delete the Telegram webhook at the stop: {e}");
    }
    served.map_err(TelegramError::Webhook)
}

/// Why the webhook could not be set up this time.
#[derive(Debug, thiserror::Error)]
enum SetUpError {
    #[error("cannot listen: {0}")]
    Listen(#[source] std::io::Error),
    #[error("setWebhook failed: {0}")]
    SetWebhook(#[source] RequestError),
}

/// Listens on `webhook_listen`, then tells Telegram to POST to `url`: the
/// listener comes first, so no POST finds nobody there.
async fn set_up(
    shared: &Shared,
    config: &TelegramConfig,
    url: &reqwest::Url,
    secret: &str,
) -> Result<tokio::net::TcpListener, SetUpError> {
    let listener = tokio::net::TcpListener::bind(config.webhook_listen).await.map_err(SetUpError::Listen)?;
    shared
        .bot
        .set_webhook(url.clone())
        .secret_token(secret.to_owned())
        .allowed_updates(ALLOWED)
        .await
        .map_err(SetUpError::SetWebhook)?;
    Ok(listener)
}

/// The header Telegram repeats the webhook's secret in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Whether a POST carries the webhook's secret. Compared in constant time, so
/// the answer's timing tells a caller nothing about how much of a guess was
/// right (only the length may show, and the secret's length is no secret).
fn secret_matches(presented: Option<&[u8]>, secret: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    presented.is_some_and(|p| bool::from(p.ct_eq(secret)))
}

async fn on_post(State(hook): State<Hook>, headers: HeaderMap, body: String) -> StatusCode {
    if !secret_matches(headers.get(SECRET_HEADER).map(|v| v.as_bytes()), hook.secret.as_bytes()) {
        return StatusCode::UNAUTHORIZED;
    }
    let update: Update = match serde_json::from_str(&body) {
        Ok(update) => update,
        Err(e) => {
            // Telegram would send it again and again: take it as handled.
            tracing::warn!(%e, "a Telegram webhook update could not be read; it is dropped");
            return StatusCode::OK;
        }
    };
    hook.shared.receiving_works().await;
    let (tell, mut handled) = mpsc::unbounded_channel();
    let id = update.id.0;
    hook.workers.dispatch(update, Handled::new(id, tell)).await;
    match tokio::time::timeout(HOLD_AT_MOST, handled.recv()).await {
        // Given back (a cluster node that cannot store it): Telegram sends
        // it again after an error, to whichever node listens then.
        Ok(Some((_, Outcome::Released))) => StatusCode::SERVICE_UNAVAILABLE,
        Ok(_) => StatusCode::OK,
        Err(_) => {
            tracing::warn!(
                update = id,
                "a Telegram update is still being handled after {}; Telegram is told it arrived, so a crash \
                 before it is handled loses it",
                humantime::format_duration(HOLD_AT_MOST)
            );
            StatusCode::OK
        }
    }
}

#[cfg(test)]
mod tests {
    use super::secret_matches;

    #[test]
    fn only_the_whole_secret_is_accepted() {
        let secret = b"0123456789abcdef0123456789abcdef";
        assert!(secret_matches(Some(secret), secret));
        assert!(!secret_matches(None, secret), "missing");
        assert!(!secret_matches(Some(b""), secret), "empty");
        assert!(!secret_matches(Some(&secret[..31]), secret), "a prefix");
        assert!(!secret_matches(Some(b"0123456789abcdef0123456789abcdeX"), secret), "one byte off");
        assert!(!secret_matches(Some(b"0123456789abcdef0123456789abcdef0"), secret), "longer");
    }
}
