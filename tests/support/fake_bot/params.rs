//! Reading a request as Telegram does: the method from the path (any case),
//! the parameters from the query, a JSON, form or multipart body, and the
//! loose typing of form values. Pure functions; touches only the answers.

use axum::http::{header, HeaderMap};
use serde_json::{json, Map, Value};

use super::answer::{bad, TgError};

/// Methods the fake knows by name, so a case-mangled path still records
/// Telegram's spelling.
pub(super) const KNOWN_METHODS: &[&str] = &[
    "getMe",
    "getUpdates",
    "sendMessage",
    "editMessageText",
    "editMessageReplyMarkup",
    "sendChatAction",
    "answerCallbackQuery",
    "setMyCommands",
    "deleteMyCommands",
    "getMyCommands",
    "setWebhook",
    "deleteWebhook",
    "getWebhookInfo",
    "deleteMessage",
    "getChat",
    "getChatMember",
    "leaveChat",
    "sendPhoto",
    "sendDocument",
    "sendAudio",
    "setMessageReaction",
    "pinChatMessage",
    "logOut",
    "close",
];

/// Telegram's lowerCamel name for a path's method segment.
pub(super) fn normalize_method(raw: &str) -> String {
    KNOWN_METHODS.iter().find(|m| m.eq_ignore_ascii_case(raw)).map_or_else(
        || {
            let mut chars = raw.chars();
            chars.next().map_or_else(String::new, |first| first.to_ascii_lowercase().to_string() + chars.as_str())
        },
        |m| (*m).to_owned(),
    )
}

/// `(token, method)` from `/…/bot<TOKEN>/<method>`; a prefix before `bot` is allowed.
pub(super) fn split_path(path: &str) -> Option<(&str, &str)> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [.., bot, method] => bot.strip_prefix("bot").map(|token| (token, *method)),
        _ => None,
    }
}

/// The parameters of a request: JSON body, form body and query string.
pub(super) fn parse_params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Result<Value, TgError> {
    let mut params = Map::new();
    let mut add_pairs = |bytes: &[u8]| {
        for (k, v) in url::form_urlencoded::parse(bytes) {
            params.insert(k.into_owned(), Value::String(v.into_owned()));
        }
    };
    if let Some(query) = query {
        add_pairs(query.as_bytes());
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if body.iter().all(u8::is_ascii_whitespace) {
        // No body: the query string is all.
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        add_pairs(body);
    } else if content_type.starts_with("multipart/form-data") {
        // teloxide sends every payload that could carry a file this way, setWebhook included.
        let fields = parse_multipart(content_type, body).ok_or_else(|| bad("can't parse multipart/form-data"))?;
        params.extend(fields);
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(object)) => params.extend(object),
            Ok(_) => return Err(bad("parameters must be a JSON object")),
            Err(e) => return Err(bad(&format!("can't parse JSON object: {e}"))),
        }
    }
    Ok(Value::Object(params))
}

/// The fields of a multipart/form-data body: strings, and for a file an
/// object with its `file_name` and its bytes as `hex` (exact, whatever they are).
pub(super) fn parse_multipart(content_type: &str, body: &[u8]) -> Option<Vec<(String, Value)>> {
    let boundary = content_type.split(';').find_map(|p| p.trim().strip_prefix("boundary="))?.trim_matches('"');
    let delimiter = format!("--{boundary}").into_bytes();
    let mut fields = Vec::new();
    for part in split_bytes(body, &delimiter).into_iter().skip(1) {
        if part.starts_with(b"--") {
            break;
        }
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let at = find_bytes(part, b"\r\n\r\n")?;
        let (head, value) = (String::from_utf8_lossy(&part[..at]), &part[at + 4..]);
        let value = value.strip_suffix(b"\r\n").unwrap_or(value);
        let disposition = head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))?;
        let name = disposition.split(';').find_map(|p| p.trim().strip_prefix("name="))?.trim_matches('"');
        let file_name = disposition.split(';').find_map(|p| p.trim().strip_prefix("filename="));
        let value = match file_name {
            Some(file_name) => json!({ "file_name": file_name.trim_matches('"'), "hex": hex(value) }),
            None => Value::String(String::from_utf8_lossy(value).into_owned()),
        };
        fields.push((name.to_owned(), value));
    }
    Some(fields)
}

/// A number, or a string holding one (form and query parameters are strings).
pub(super) fn int_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) fn string_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An object or array parameter; form and query parameters carry them as JSON text.
pub(super) fn json_value(v: &Value) -> Option<Value> {
    match v {
        Value::String(s) => serde_json::from_str(s).ok(),
        other => Some(other.clone()),
    }
}

pub(super) fn truthy(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true))) || matches!(v, Some(Value::String(s)) if s == "true")
}

pub(super) fn string_list(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|items| items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect())
}

pub(super) fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `body` cut at every `delimiter` (the pieces between them).
pub(super) fn split_bytes<'a>(mut body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    while let Some(at) = find_bytes(body, delimiter) {
        pieces.push(&body[..at]);
        body = &body[at + delimiter.len()..];
    }
    pieces.push(body);
    pieces
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).filter_map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()).collect()
}
