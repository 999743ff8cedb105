//! The agent's Markdown → Telegram HTML, split to Telegram's message limit.
//!
//! We render to Telegram's HTML rather than MarkdownV2: HTML needs only three
//! escapes (`&`, `<`, `>`), applied to every piece of text we emit, so a
//! rendering bug can at worst lose some formatting; it cannot make Telegram
//! read the agent's own characters as markup. MarkdownV2 reserves eighteen
//! characters, each escaped differently depending on where it stands.
//!
//! Long replies are split on the Markdown *source* (paragraphs first, then
//! lines, words, characters; the splitting is `channel::split`, shared with
//! WhatsApp) and each piece is rendered on its own, so every message is
//! complete and well-formed by itself. A piece fits when both its source and
//! its HTML, tags and escapes included, are within the limit. Telegram counts
//! only the text left after parsing the tags, so measuring the raw HTML is
//! stricter than needed, but it needs no model of Telegram's parser and leaves
//! no way to overshoot.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Tag};

use crate::channel::split::{
    self, container_prefix, enclosing, line_end, line_start, piece_events, Indentation, Links, Pieces, Source,
};
use crate::domain::escape_into;

#[cfg(test)]
mod tests;

/// Telegram's limit on one message's text, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// The smallest limit [`render_with_limit`] honours: one escaped character
/// (`&amp;`) must always fit, or splitting could not make progress.
const MIN_LIMIT: usize = 16;

/// One message to send: the HTML rendering, and the plain text to send instead
/// when Telegram rejects the HTML's entities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub html: String,
    pub plain: String,
}

/// Renders `markdown` into messages that each fit [`MESSAGE_LIMIT`].
///
/// Empty or whitespace-only input gives no chunks: whether to say anything
/// instead is the caller's decision.
pub fn render(markdown: &str) -> Vec<Chunk> {
    render_with_limit(markdown, MESSAGE_LIMIT)
}

/// Same as [`render`] with a custom limit (in UTF-16 code units) for both the
/// HTML and the plain text of each chunk. Limits below 16 are raised to 16.
pub fn render_with_limit(markdown: &str, limit: usize) -> Vec<Chunk> {
    split::split(&Reply::analyse(markdown), limit.max(MIN_LIMIT))
}

/// Length as Telegram counts it.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Escapes `&`, `<`, `>` and `"` for Telegram HTML. Escaping the quote too
/// makes the result safe both as text and as an attribute value.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s, true);
    out
}

/// Escapes text between tags, where a quote needs no escape and would only
/// cost length.
fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s, false);
    out
}

// ---------------------------------------------------------------------------
// Splitting the source
// ---------------------------------------------------------------------------

/// A table, as far as splitting needs to know it.
struct TableSpan {
    block: Range<usize>,
    /// Where the rows after the header and its delimiter line start.
    body: usize,
    /// The header and delimiter lines, to repeat before the rest of a cut
    /// table so that it is still a table.
    header: String,
}

impl TableSpan {
    fn new(text: &str, block: Range<usize>) -> Self {
        let delimiter_end = line_end(text, (line_end(text, block.start) + 1).min(text.len()));
        let body = (delimiter_end + 1).min(block.end);
        let prefix = container_prefix(&text[line_start(text, block.start)..block.start]);
        let header = format!("{prefix}{}", &text[block.start..delimiter_end.min(block.end)]);
        Self { block, body, header }
    }
}

/// The reply being split: the shared analysis of its source, and its tables,
/// which Telegram shows as tables only when whole.
struct Reply<'a> {
    source: Source<'a>,
    /// Tables in source order (they never nest).
    tables: Vec<TableSpan>,
}

impl<'a> Reply<'a> {
    fn analyse(text: &'a str) -> Self {
        let mut tables = Vec::new();
        // Telegram's cuts may fall where a line's indentation ends, as they
        // always have: cutting otherwise would change the parts of a reply,
        // which delivery counts to resume.
        let source = Source::analyse(text, Indentation::Cuttable, |event, range| {
            if let Event::Start(Tag::Table(_)) = event {
                tables.push(TableSpan::new(text, range.clone()));
            }
        });
        Self { source, tables }
    }

    /// The Markdown of one piece: the source between two boundaries, with the
    /// lines that make a cut code block or table complete on both sides.
    fn piece_source(&self, start: usize, end: usize) -> String {
        // With the language, which Telegram shows on each part of a cut block.
        let mut head = self.source.reopening(start, true);
        if let Some(table) = self.table_inside(start) {
            head.push_str(&table.header);
            head.push('\n');
        }
        self.source.complete(head, self.source.body(start, end), start, end)
    }

    /// The table `pos` is strictly inside.
    fn table_around(&self, pos: usize) -> Option<&TableSpan> {
        enclosing(&self.tables, pos, |table| &table.block)
    }

    /// The table whose rows `pos` cuts.
    fn table_inside(&self, pos: usize) -> Option<&TableSpan> {
        self.table_around(pos).filter(|table| table.body < pos)
    }
}

impl Pieces for Reply<'_> {
    type Part = Chunk;

    fn source(&self) -> &Source<'_> {
        &self.source
    }

    /// A piece's source must fit too, which bounds how far it can reach.
    fn reach(&self, start: usize, limit: usize) -> usize {
        split::reach(self.source.text, start, limit, char::len_utf16)
    }

    /// Not within a table's header either, where reopening would make no
    /// sense.
    fn may_end_at(&self, pos: usize) -> bool {
        let in_header = self.table_around(pos).is_some_and(|table| pos <= table.body);
        self.source.may_end_at(pos) && !in_header
    }

    /// A piece fits when both its source (sent when Telegram rejects the
    /// HTML) and its HTML do.
    fn piece(&self, start: usize, end: usize, limit: usize) -> Option<Chunk> {
        let plain = self.piece_source(start, end);
        if utf16_len(&plain) > limit {
            return None;
        }
        let mut html = to_html(&plain, &self.source.links);
        if !has_visible_text(&html) {
            // Markdown that renders to nothing (a lone link definition, an
            // empty quote) is still the agent's text: show it as written.
            html = escape_text(&plain);
        }
        (utf16_len(&html) <= limit).then_some(Chunk { html, plain })
    }

    /// Plain text, as much as fits once escaped (a cut code block's fences
    /// under a tiny limit leave no room for one character with its markup).
    fn fallback(&self, start: usize, limit: usize) -> (usize, Chunk) {
        let text = self.source.text;
        let (mut plain_len, mut html_len) = (0, 0);
        let mut end = start;
        for c in text[start..].chars() {
            let escaped = match c {
                '&' => 5,
                '<' | '>' => 4,
                _ => c.len_utf16(),
            };
            if end > start && (plain_len + c.len_utf16() > limit || html_len + escaped > limit) {
                break;
            }
            plain_len += c.len_utf16();
            html_len += escaped;
            end += c.len_utf8();
        }
        let plain = text[start..end].trim().to_string();
        (end, Chunk { html: escape_text(&plain), plain })
    }

    fn is_blank(chunk: &Chunk) -> bool {
        chunk.plain.trim().is_empty()
    }
}

/// Whether HTML shows anything once its tags are gone.
fn has_visible_text(html: &str) -> bool {
    let mut in_tag = false;
    html.chars().any(|c| match c {
        '<' => {
            in_tag = true;
            false
        }
        '>' => {
            in_tag = false;
            false
        }
        _ => !in_tag && !c.is_whitespace(),
    })
}

// ---------------------------------------------------------------------------
// Rendering one piece
// ---------------------------------------------------------------------------

fn to_html(markdown: &str, links: &Links) -> String {
    let mut writer = Writer::new();
    for event in piece_events(markdown, links) {
        writer.event(event);
    }
    writer.finish()
}

/// Inline styles, each allowed once on the stack: Telegram has no use for
/// `<b>` inside `<b>`, and a heading's `<b>` would otherwise wrap another.
#[derive(Clone, Copy)]
enum Style {
    Bold,
    Italic,
    Strike,
}

impl Style {
    fn tag(self) -> &'static str {
        match self {
            Style::Bold => "b",
            Style::Italic => "i",
            Style::Strike => "s",
        }
    }
}

/// What to do when a tag's End event comes; one per Start, so tags always
/// close in the order they opened.
enum Closer {
    Nothing,
    Style(Style),
    /// What to restore if the quote stays empty; `None` for a quote inside
    /// another, which has no tag of its own.
    Quote(Option<Saved>),
    Code {
        close: &'static str,
        content_at: usize,
        saved: Saved,
    },
    HtmlBlock,
    List,
    Item,
    Table,
    Link(LinkCloser),
}

struct LinkCloser {
    /// Where the link's text starts in the output (or the table cell).
    text_at: usize,
    /// Shown when the link has no text, or after the text when it is not a
    /// clickable link.
    url: String,
    anchor: bool,
    show_url: bool,
}

/// Writer state to restore when a block turns out empty, so that no empty
/// `<pre></pre>` (which Telegram may refuse) is sent.
struct Saved {
    len: usize,
    sep: usize,
    fresh: bool,
    marker: Option<String>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn cell(&mut self) -> Option<&mut String> {
        self.rows.last_mut()?.last_mut()
    }

    /// Rows as lines, cells padded to their column's width so that the
    /// columns line up in a monospace `<pre>`.
    fn lines(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|row| row.get(c)).map(|cell| cell.chars().count()).max().unwrap_or(0))
            .collect();
        let lines: Vec<String> = self
            .rows
            .iter()
            .map(|row| {
                let cells: Vec<String> =
                    row.iter().zip(&widths).map(|(cell, &width)| format!("{cell:<width$}")).collect();
                cells.join(" | ").trim_end().to_string()
            })
            .collect();
        lines.join("\n")
    }
}

/// Turns one piece's events into Telegram HTML.
#[derive(Default)]
struct Writer {
    out: String,
    /// Newlines owed before the next block's content.
    sep: usize,
    /// Nothing written yet in the current container, so no separator is due.
    fresh: bool,
    /// A list item's bullet or number, written with the item's first content
    /// (a task item's checkbox replaces the bullet).
    marker: Option<String>,
    /// Open lists; an ordered list holds its next number.
    lists: Vec<Option<u64>>,
    closers: Vec<Closer>,
    styles: [bool; 3],
    quote_depth: usize,
    in_code_block: bool,
    link_depth: usize,
    table: Option<Table>,
}

impl Writer {
    fn new() -> Self {
        Self { fresh: true, ..Self::default() }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Start(tag) => {
                let closer = self.start(tag);
                self.closers.push(closer);
            }
            Event::End(_) => {
                if let Some(closer) = self.closers.pop() {
                    self.end(closer);
                }
            }
            Event::Text(text)
            | Event::Html(text)
            | Event::InlineHtml(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text) => self.text(&text),
            Event::Code(code) => self.inline_code(&code),
            Event::FootnoteReference(label) => self.text(&format!("[^{label}]")),
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Rule => {
                self.block();
                self.flush();
                self.out.push_str("———");
            }
            Event::TaskListMarker(checked) => self.task_marker(checked),
        }
    }

    fn finish(mut self) -> String {
        self.flush_marker();
        let end = self.out.trim_end().len();
        self.out.truncate(end);
        self.out.trim_start_matches('\n').to_string()
    }

    fn start(&mut self, tag: Tag) -> Closer {
        match tag {
            Tag::Paragraph => {
                self.block();
                Closer::Nothing
            }
            Tag::Heading { .. } => {
                self.block();
                self.style(Style::Bold)
            }
            Tag::BlockQuote(_) => self.quote(),
            Tag::CodeBlock(kind) => self.code_block(kind),
            Tag::HtmlBlock => {
                self.block();
                Closer::HtmlBlock
            }
            Tag::List(first) => {
                self.block();
                self.lists.push(first);
                Closer::List
            }
            Tag::Item => {
                self.item();
                Closer::Item
            }
            Tag::Table(_) | Tag::TableHead | Tag::TableRow | Tag::TableCell => self.table_part(&tag),
            Tag::Emphasis => self.style(Style::Italic),
            Tag::Strong => self.style(Style::Bold),
            Tag::Strikethrough => self.style(Style::Strike),
            Tag::Link { link_type, dest_url, .. } => {
                let url = match link_type {
                    LinkType::Email => format!("mailto:{dest_url}"),
                    _ => dest_url.to_string(),
                };
                self.link(url, dest_url.to_string(), true)
            }
            Tag::Image { dest_url, .. } => self.link(dest_url.to_string(), dest_url.to_string(), false),
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_) => {
                self.block();
                Closer::Nothing
            }
            Tag::Superscript | Tag::Subscript => Closer::Nothing,
        }
    }

    fn end(&mut self, closer: Closer) {
        match closer {
            Closer::Nothing => {}
            Closer::Style(style) => {
                self.styles[style as usize] = false;
                self.out.push_str("</");
                self.out.push_str(style.tag());
                self.out.push('>');
            }
            Closer::Quote(saved) => self.end_quote(saved),
            Closer::Code { close, content_at, saved } => self.end_code(close, content_at, saved),
            Closer::HtmlBlock => {
                let end = self.out.trim_end().len();
                self.out.truncate(end);
            }
            Closer::List => {
                self.lists.pop();
            }
            Closer::Item => {
                // An empty item still shows its bullet, without the space.
                if self.marker.is_some() {
                    self.flush();
                    let end = self.out.trim_end_matches(' ').len();
                    self.out.truncate(end);
                }
            }
            Closer::Table => {
                if let Some(table) = self.table.take() {
                    self.flush();
                    self.out.push_str("<pre>");
                    escape_into(&mut self.out, &table.lines(), false);
                    self.out.push_str("</pre>");
                }
            }
            Closer::Link(link) => self.end_link(link),
        }
    }

    /// A table, or a row or cell of it: gathered, and written whole at its end.
    fn table_part(&mut self, tag: &Tag) -> Closer {
        match tag {
            Tag::Table(_) => {
                self.block();
                self.table = Some(Table::default());
                return Closer::Table;
            }
            Tag::TableCell => {
                if let Some(row) = self.table.as_mut().and_then(|table| table.rows.last_mut()) {
                    row.push(String::new());
                }
            }
            _ => {
                if let Some(table) = &mut self.table {
                    table.rows.push(Vec::new());
                }
            }
        }
        Closer::Nothing
    }

    fn end_quote(&mut self, saved: Option<Saved>) {
        self.quote_depth -= 1;
        if let Some(saved) = saved {
            if self.out.ends_with("<blockquote>") {
                self.restore(saved);
            } else {
                self.out.push_str("</blockquote>");
            }
        }
    }

    fn end_code(&mut self, close: &'static str, content_at: usize, saved: Saved) {
        self.in_code_block = false;
        if self.out.ends_with('\n') && self.out.len() > content_at {
            self.out.pop();
        }
        if self.out.len() == content_at {
            self.restore(saved);
        } else {
            self.out.push_str(close);
        }
    }

    /// A new block starts: it owes a blank line to what came before, or one
    /// newline inside a list, where blank lines would pull items apart.
    fn block(&mut self) {
        if self.marker.is_some() {
            // The block begins on its item's bullet line.
            return;
        }
        let wanted = if self.lists.is_empty() { 2 } else { 1 };
        self.sep = self.sep.max(wanted);
    }

    /// Writes what is owed before content: the separator and indentation, or
    /// the pending list marker on a line of its own.
    fn flush(&mut self) {
        if let Some(marker) = self.marker.take() {
            if !self.fresh {
                self.newlines(self.sep.max(1));
            }
            self.out.push_str(&marker);
        } else if !self.fresh && self.sep > 0 {
            self.newlines(self.sep);
            self.out.push_str(&self.indent());
        }
        self.sep = 0;
        self.fresh = false;
    }

    fn flush_marker(&mut self) {
        if self.marker.is_some() {
            self.flush();
        }
    }

    fn newlines(&mut self, count: usize) {
        self.out.extend(std::iter::repeat_n('\n', count));
    }

    /// Indentation of a continuation line in the current list item.
    fn indent(&self) -> String {
        "  ".repeat(self.lists.len())
    }

    fn save(&self) -> Saved {
        Saved { len: self.out.len(), sep: self.sep, fresh: self.fresh, marker: self.marker.clone() }
    }

    fn restore(&mut self, saved: Saved) {
        self.out.truncate(saved.len);
        self.sep = saved.sep;
        self.fresh = saved.fresh;
        self.marker = saved.marker;
    }

    fn text(&mut self, text: &str) {
        if let Some(cell) = self.table.as_mut().and_then(Table::cell) {
            cell.push_str(text);
            return;
        }
        if !self.in_code_block {
            self.flush();
        }
        escape_into(&mut self.out, text, false);
    }

    /// Telegram allows no entity inside a link's `<code>` or a table's `<pre>`:
    /// there the code is plain text.
    fn inline_code(&mut self, code: &str) {
        if self.table.is_some() || self.link_depth > 0 || code.is_empty() {
            self.text(code);
            return;
        }
        self.flush();
        self.out.push_str("<code>");
        escape_into(&mut self.out, code, false);
        self.out.push_str("</code>");
    }

    fn line_break(&mut self) {
        if let Some(cell) = self.table.as_mut().and_then(Table::cell) {
            cell.push(' ');
        } else if self.in_code_block {
            self.out.push('\n');
        } else {
            self.flush();
            self.out.push('\n');
            self.out.push_str(&self.indent());
        }
    }

    fn style(&mut self, style: Style) -> Closer {
        if self.table.is_some() || self.styles[style as usize] {
            return Closer::Nothing;
        }
        self.flush();
        self.styles[style as usize] = true;
        self.out.push('<');
        self.out.push_str(style.tag());
        self.out.push('>');
        Closer::Style(style)
    }

    /// Telegram cannot nest quotes; an inner quote joins the outer one.
    fn quote(&mut self) -> Closer {
        self.block();
        self.quote_depth += 1;
        if self.quote_depth > 1 {
            return Closer::Quote(None);
        }
        let saved = self.save();
        self.flush();
        self.out.push_str("<blockquote>");
        self.fresh = true;
        Closer::Quote(Some(saved))
    }

    fn code_block(&mut self, kind: CodeBlockKind) -> Closer {
        self.block();
        let saved = self.save();
        self.flush();
        let language = match &kind {
            CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or_default(),
            CodeBlockKind::Indented => "",
        };
        let close = if language.is_empty() {
            self.out.push_str("<pre>");
            "</pre>"
        } else {
            self.out.push_str("<pre><code class=\"language-");
            escape_into(&mut self.out, language, true);
            self.out.push_str("\">");
            "</code></pre>"
        };
        self.in_code_block = true;
        Closer::Code { close, content_at: self.out.len(), saved }
    }

    fn item(&mut self) {
        // An item that starts with a nested item ("- - x") shows both bullets.
        self.flush_marker();
        let depth = self.lists.len().max(1);
        let bullet = match self.lists.last_mut() {
            Some(Some(number)) => {
                let bullet = format!("{number}. ");
                *number += 1;
                bullet
            }
            _ => "• ".to_string(),
        };
        self.marker = Some(format!("{}{bullet}", "  ".repeat(depth - 1)));
    }

    fn task_marker(&mut self, checked: bool) {
        let check = if checked { "☑ " } else { "☐ " };
        match &mut self.marker {
            Some(marker) if marker.ends_with("• ") => {
                marker.truncate(marker.len() - "• ".len());
                marker.push_str(check);
            }
            Some(marker) => marker.push_str(check),
            None => self.text(check),
        }
    }

    /// `text_url` is what to show for a link without text: an e-mail address
    /// without its `mailto:`. Images become links to the image, with the alt
    /// text as the link's text.
    fn link(&mut self, url: String, text_url: String, is_link: bool) -> Closer {
        let nested = self.link_depth > 0;
        let href = if nested || self.table.is_some() { None } else { telegram_url(&url) };
        if self.table.is_none() {
            self.flush();
        }
        let clickable = href.is_some();
        if let Some(href) = href {
            self.out.push_str("<a href=\"");
            escape_into(&mut self.out, href.as_str(), true);
            self.out.push_str("\">");
            self.link_depth += 1;
        }
        let text_at = self.table.as_mut().and_then(Table::cell).map_or(self.out.len(), |cell| cell.len());
        // An image inside a link shows only its alt text: links cannot nest.
        let show_url = !nested || is_link;
        Closer::Link(LinkCloser { text_at, url: text_url, anchor: clickable, show_url })
    }

    fn end_link(&mut self, link: LinkCloser) {
        let written = match self.table.as_mut().and_then(Table::cell) {
            Some(cell) => cell.len() > link.text_at,
            None => self.out.len() > link.text_at,
        };
        if link.anchor {
            if !written {
                self.text(&link.url);
            }
            self.out.push_str("</a>");
            self.link_depth -= 1;
        } else if link.show_url && !link.url.is_empty() {
            if !written {
                self.text(&link.url);
            } else if !self.link_text_is_url(&link) {
                self.text(&format!(" ({})", link.url));
            }
        }
    }

    /// Whether a link's text already is its URL (an autolink), which needs no
    /// repeating.
    fn link_text_is_url(&mut self, link: &LinkCloser) -> bool {
        match self.table.as_mut().and_then(Table::cell) {
            Some(cell) => cell.get(link.text_at..) == Some(link.url.as_str()),
            None => self.out.get(link.text_at..) == Some(escape_text(&link.url).as_str()),
        }
    }
}

/// The URL as Telegram should get it, if it is one Telegram opens: Telegram
/// refuses a whole message over a link it cannot parse.
fn telegram_url(url: &str) -> Option<url::Url> {
    let parsed = url::Url::parse(url).ok()?;
    let ok = match parsed.scheme() {
        "http" | "https" => parsed.host().is_some(),
        "tg" | "mailto" => true,
        _ => false,
    };
    ok.then_some(parsed)
}
