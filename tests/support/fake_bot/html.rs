//! Telegram's text parsing: HTML parse mode (after tdlib's `parse_html`),
//! trimming, length in UTF-16 units, and the entities a client attaches to
//! what a user types. Pure functions; touches only the answers.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::answer::{bad, TgError};
use super::params::json_value;

pub(super) const HTML_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
];

pub(super) fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// One entity of a text, in UTF-16 units; `json` holds `type` and its extras.
#[derive(Clone, Debug)]
pub(super) struct Entity {
    pub(super) offset: usize,
    pub(super) length: usize,
    pub(super) json: Value,
}

/// A message text as Telegram stores it: visible text and entities.
pub(super) struct Formatted {
    pub(super) text: String,
    pub(super) entities: Vec<Entity>,
}

impl Formatted {
    pub(super) fn len_utf16(&self) -> usize {
        utf16_len(&self.text)
    }

    pub(super) fn entities_json(&self) -> Value {
        let entities = self
            .entities
            .iter()
            .map(|e| {
                let mut json = e.json.clone();
                json["offset"] = json!(e.offset);
                json["length"] = json!(e.length);
                json
            })
            .collect();
        Value::Array(entities)
    }
}

/// Parses a text the way Telegram does for `parse_mode`, trims it, and
/// refuses an empty result.
pub(super) fn format_text(raw: &str, parse_mode: Option<&str>, entities: Option<&Value>) -> Result<Formatted, TgError> {
    let (text, entities) = match parse_mode {
        None => (raw.to_owned(), given_entities(entities)),
        Some(mode) if mode.eq_ignore_ascii_case("html") => {
            parse_html(raw).map_err(|why| bad(&format!("can't parse entities: {why}")))?
        }
        // Not modelled: counted as sent.
        Some(mode) if mode.eq_ignore_ascii_case("markdownv2") || mode.eq_ignore_ascii_case("markdown") => {
            (raw.to_owned(), Vec::new())
        }
        Some(_) => return Err(bad("unsupported parse_mode")),
    };
    let formatted = trim(text, entities);
    if formatted.text.is_empty() {
        return Err(bad("message text is empty"));
    }
    Ok(formatted)
}

/// The `entities` parameter, taken on trust.
pub(super) fn given_entities(entities: Option<&Value>) -> Vec<Entity> {
    let entities = entities.and_then(json_value).and_then(|v| v.as_array().cloned()).unwrap_or_default();
    entities
        .into_iter()
        .filter_map(|mut e| {
            let offset = e.get("offset").and_then(Value::as_u64)? as usize;
            let length = e.get("length").and_then(Value::as_u64)? as usize;
            if let Some(object) = e.as_object_mut() {
                object.remove("offset");
                object.remove("length");
            }
            Some(Entity { offset, length, json: e })
        })
        .collect()
}

/// Telegram strips leading and trailing whitespace, moving entities along.
pub(super) fn trim(text: String, entities: Vec<Entity>) -> Formatted {
    let start = text.len() - text.trim_start().len();
    let lead = utf16_len(&text[..start]);
    let trimmed = text.trim().to_owned();
    let len = utf16_len(&trimmed);
    let entities = entities
        .into_iter()
        .filter_map(|e| {
            let from = e.offset.max(lead) - lead;
            let to = (e.offset + e.length).min(lead + len).saturating_sub(lead);
            (to > from).then_some(Entity { offset: from, length: to - from, json: e.json })
        })
        .collect();
    Formatted { text: trimmed, entities }
}

/// A tag still open while parsing HTML.
pub(super) struct OpenTag {
    pub(super) name: String,
    /// Where its text starts, in UTF-16 units.
    pub(super) start: usize,
    pub(super) attrs: HashMap<String, String>,
    /// A `<pre>` takes its language from a `<code class="language-…">` inside.
    pub(super) language: Option<String>,
    /// How many tags opened before it.
    pub(super) order: usize,
}

/// Telegram's HTML parse mode (after tdlib's `parse_html`): the visible text
/// and its entities, or the reason Telegram gives after "can't parse entities: ".
pub(super) fn parse_html(src: &str) -> Result<(String, Vec<Entity>), String> {
    let bytes = src.as_bytes();
    let mut text = String::new();
    let mut len16 = 0usize;
    let mut open: Vec<OpenTag> = Vec::new();
    // With the order their tags opened in, so nested tags over the same text list outer first.
    let mut entities: Vec<(usize, Entity)> = Vec::new();
    let mut opened = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'&' => {
                let (c, next) = decode_entity(src, i).ok_or_else(|| {
                    format!("Unsupported HTML entity at byte offset {i}: escape a bare \"&\" as \"&amp;\"")
                })?;
                text.push(c);
                len16 += c.len_utf16();
                i = next;
            }
            b'<' if bytes.get(i + 1) == Some(&b'/') => {
                let begin = i;
                i += 2;
                let name_start = i;
                while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                let name = src[name_start..i].to_ascii_lowercase();
                while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] != b'>' {
                    return Err(format!("Unclosed end tag at byte offset {begin}"));
                }
                i += 1;
                let Some(tag) = open.pop() else {
                    return Err(format!("Unexpected end tag at byte offset {begin}"));
                };
                if tag.name != name {
                    return Err(format!(
                        "Unmatched end tag at byte offset {begin}, expected \"</{}>\", found \"</{name}>\"",
                        tag.name
                    ));
                }
                let order = tag.order;
                if let Some(entity) = close_tag(tag, len16, open.last_mut()) {
                    entities.push((order, entity));
                }
            }
            b'<' => {
                let (mut tag, next) = open_tag(src, i, len16)?;
                tag.order = opened;
                opened += 1;
                open.push(tag);
                i = next;
            }
            _ => {
                let Some(c) = src[i..].chars().next() else { break };
                text.push(c);
                len16 += c.len_utf16();
                i += c.len_utf8();
            }
        }
    }
    if let Some(tag) = open.last() {
        return Err(format!("Can't find end tag corresponding to start tag \"{}\"", tag.name));
    }
    entities.sort_by(|(a_order, a), (b_order, b)| {
        a.offset.cmp(&b.offset).then(b.length.cmp(&a.length)).then(a_order.cmp(b_order))
    });
    Ok((text, entities.into_iter().map(|(_, e)| e).collect()))
}

/// Parses the start tag at `begin` (a `<`); returns it and the index after its `>`.
pub(super) fn open_tag(src: &str, begin: usize, len16: usize) -> Result<(OpenTag, usize), String> {
    let bytes = src.as_bytes();
    let unclosed = || format!("Unclosed start tag at byte offset {begin}");
    let mut i = begin + 1;
    while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if i >= bytes.len() {
        return Err(unclosed());
    }
    let name = src[begin + 1..i].to_ascii_lowercase();
    if !HTML_TAGS.contains(&name.as_str()) {
        return Err(format!("Unsupported start tag \"{name}\" at byte offset {begin}"));
    }
    let mut attrs = HashMap::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        match bytes.get(i) {
            None => return Err(unclosed()),
            Some(b'>') => {
                i += 1;
                break;
            }
            Some(_) => {}
        }
        let attr_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'-' || bytes[i] == b'_') {
            i += 1;
        }
        if i == attr_start {
            return Err(format!("Empty attribute name in the tag \"{name}\" at byte offset {begin}"));
        }
        let attr = src[attr_start..i].to_ascii_lowercase();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            attrs.insert(attr, String::new());
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let raw = match bytes.get(i) {
            None => return Err(unclosed()),
            Some(&quote) if quote == b'"' || quote == b'\'' => {
                let value_start = i + 1;
                let Some(len) = bytes[value_start..].iter().position(|&b| b == quote) else {
                    return Err(format!("Unclosed end of attribute value at byte offset {value_start}"));
                };
                i = value_start + len + 1;
                &src[value_start..value_start + len]
            }
            Some(_) => {
                let value_start = i;
                while i < bytes.len() && bytes[i] != b'>' && !bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                &src[value_start..i]
            }
        };
        attrs.insert(attr, decode_attribute(raw, begin)?);
    }
    match name.as_str() {
        "span" if attrs.get("class").map(String::as_str) != Some("tg-spoiler") => {
            return Err(format!("Tag \"span\" must have class \"tg-spoiler\" at byte offset {begin}"));
        }
        "tg-emoji"
            if !attrs.get("emoji-id").is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) =>
        {
            return Err(format!("Invalid custom emoji identifier specified at byte offset {begin}"));
        }
        _ => {}
    }
    Ok((OpenTag { name, start: len16, attrs, language: None, order: 0 }, i))
}

/// The entity a closed tag makes, if any (Telegram drops empty ones).
pub(super) fn close_tag(tag: OpenTag, end: usize, parent: Option<&mut OpenTag>) -> Option<Entity> {
    if tag.name == "code" {
        if let Some(pre) = parent.filter(|p| p.name == "pre") {
            // `<pre><code class="language-x">` is one pre entity with a language.
            pre.language = tag.attrs.get("class").and_then(|c| c.strip_prefix("language-")).map(str::to_owned);
            return None;
        }
    }
    let length = end - tag.start;
    if length == 0 {
        return None;
    }
    let json = match tag.name.as_str() {
        "b" | "strong" => json!({ "type": "bold" }),
        "i" | "em" => json!({ "type": "italic" }),
        "u" | "ins" => json!({ "type": "underline" }),
        "s" | "strike" | "del" => json!({ "type": "strikethrough" }),
        "span" | "tg-spoiler" => json!({ "type": "spoiler" }),
        "code" => json!({ "type": "code" }),
        "pre" => match &tag.language {
            Some(language) => json!({ "type": "pre", "language": language }),
            None => json!({ "type": "pre" }),
        },
        "blockquote" if tag.attrs.contains_key("expandable") => json!({ "type": "expandable_blockquote" }),
        "blockquote" => json!({ "type": "blockquote" }),
        "tg-emoji" => json!({ "type": "custom_emoji", "custom_emoji_id": tag.attrs.get("emoji-id") }),
        // A link Telegram cannot parse is left as plain text.
        "a" => {
            let url = url::Url::parse(tag.attrs.get("href")?).ok()?;
            json!({ "type": "text_link", "url": url.as_str() })
        }
        _ => return None,
    };
    Some(Entity { offset: tag.start, length, json })
}

/// Decodes the entity at `at` (an `&`): `&lt; &gt; &amp; &quot;` and numeric
/// ones, the only ones Telegram supports. Returns the char and the index after `;`.
pub(super) fn decode_entity(src: &str, at: usize) -> Option<(char, usize)> {
    let rest = src.get(at + 1..)?;
    let end = rest.bytes().take(12).position(|b| b == b';')?;
    let name = &rest[..end];
    let c = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let number = name.strip_prefix('#')?;
            let code = match number.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code).filter(|&c| c != '\0')?
        }
    };
    Some((c, at + 1 + end + 1))
}

/// An attribute value with its entities decoded.
pub(super) fn decode_attribute(raw: &str, tag_at: usize) -> Result<String, String> {
    let mut value = String::new();
    let mut i = 0;
    while i < raw.len() {
        if raw.as_bytes()[i] == b'&' {
            let (c, next) = decode_entity(raw, i)
                .ok_or_else(|| format!("Unsupported HTML entity in an attribute of the tag at byte offset {tag_at}"))?;
            value.push(c);
            i = next;
        } else {
            let Some(c) = raw[i..].chars().next() else { break };
            value.push(c);
            i += c.len_utf8();
        }
    }
    Ok(value)
}

pub(super) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The byte index after the run of `[A-Za-z0-9_]` starting at `from`.
pub(super) fn ascii_word_end(text: &str, from: usize) -> usize {
    from + text
        .as_bytes()
        .get(from..)
        .map_or(0, |rest| rest.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count())
}

/// The entities a Telegram client attaches to what a user types: bot commands
/// and @mentions (tdlib's `match_bot_commands`/`match_mentions`), in UTF-16 units.
pub(super) fn detect_entities(text: &str) -> Vec<Value> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut spans: Vec<(usize, usize, &str)> = Vec::new();
    for (k, &(at, c)) in chars.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| chars[p].1);
        if c == '/' {
            if prev.is_some_and(|p| is_word_char(p) || matches!(p, '/' | '<' | '>')) {
                continue;
            }
            let name_end = ascii_word_end(text, at + 1);
            if !(1..=64).contains(&(name_end - at - 1)) {
                continue;
            }
            let mut end = name_end;
            if text[end..].starts_with('@') {
                let bot_end = ascii_word_end(text, end + 1);
                if !(3..=32).contains(&(bot_end - end - 1)) {
                    continue;
                }
                end = bot_end;
            }
            if text[end..].chars().next().is_some_and(|n| is_word_char(n) || matches!(n, '/' | '<' | '>')) {
                continue;
            }
            spans.push((at, end, "bot_command"));
        } else if c == '@' {
            if prev.is_some_and(is_word_char) {
                continue;
            }
            let end = ascii_word_end(text, at + 1);
            if !(2..=32).contains(&(end - at - 1)) || text[end..].chars().next().is_some_and(is_word_char) {
                continue;
            }
            // The bot's name in "/cmd@bot" belongs to the command.
            if spans.iter().any(|&(s, e, _)| s <= at && at < e) {
                continue;
            }
            spans.push((at, end, "mention"));
        }
    }
    spans
        .into_iter()
        .map(|(start, end, kind)| {
            json!({ "type": kind, "offset": utf16_len(&text[..start]), "length": utf16_len(&text[start..end]) })
        })
        .collect()
}
