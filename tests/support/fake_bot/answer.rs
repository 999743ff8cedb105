//! How the fake answers a method call: Telegram's error shape and its JSON
//! envelope. Touches only the model.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};
use serde_json::{json, Value};

use super::model::FakeError;

/// An error answer, in Telegram's terms.
#[derive(Debug)]
pub(super) struct TgError {
    pub(super) code: u16,
    pub(super) description: String,
    pub(super) retry_after: Option<u32>,
}

pub(super) type Outcome = Result<Value, TgError>;

pub(super) fn bad(what: &str) -> TgError {
    TgError { code: 400, description: format!("Bad Request: {what}"), retry_after: None }
}

pub(super) fn forbidden(what: &str) -> TgError {
    TgError { code: 403, description: format!("Forbidden: {what}"), retry_after: None }
}

impl From<FakeError> for TgError {
    fn from(e: FakeError) -> TgError {
        match e {
            FakeError::RetryAfter(secs) => TgError {
                code: 429,
                description: format!("Too Many Requests: retry after {secs}"),
                retry_after: Some(secs),
            },
            FakeError::Custom { code, description } => TgError { code, description, retry_after: None },
        }
    }
}

pub(super) fn respond(outcome: &Outcome) -> Response {
    match outcome {
        Ok(result) => Json(json!({ "ok": true, "result": result })).into_response(),
        Err(e) => {
            let mut body = json!({ "ok": false, "error_code": e.code, "description": e.description });
            if let Some(secs) = e.retry_after {
                body["parameters"] = json!({ "retry_after": secs });
            }
            let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::BAD_REQUEST);
            (status, Json(body)).into_response()
        }
    }
}
