//! The agent's Markdown → Telegram HTML, split to Telegram's message limit.
//!
//! We render to Telegram's HTML rather than MarkdownV2: HTML needs only three
//! escapes (`&`, `<`, `>`), applied to every piece of text we emit, so a
//! rendering bug can at worst lose some formatting; it cannot make Telegram
//! read the agent's own characters as markup. MarkdownV2 reserves eighteen
//! characters, each escaped differently depending on where it stands.
//!
//! Long replies are split on the Markdown *source* (paragraphs first, then
//! lines, words, characters) and each piece is rendered on its own, so every
//! message is complete and well-formed by itself. A piece fits when both its
//! source and its HTML, tags and escapes included, are within the limit.
//! Telegram counts only the text left after parsing the tags, so measuring the
//! raw HTML is stricter than needed, but it needs no model of Telegram's parser
//! and leaves no way to overshoot.

use std::collections::HashMap;
use std::ops::Range;

use pulldown_cmark::{BrokenLink, CodeBlockKind, CowStr, Event, LinkType, Options, Parser, RefDefs, Tag, TagEnd};

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
    let limit = limit.max(MIN_LIMIT);
    let source = Source::analyse(markdown);
    let mut chunks = Vec::new();
    let mut pos = 0;
    loop {
        pos = source.skip_blank_lines(pos);
        if markdown[pos..].trim().is_empty() {
            return chunks;
        }
        let (end, chunk) = source.next_chunk(pos, limit);
        if !chunk.plain.trim().is_empty() {
            chunks.push(chunk);
        }
        pos = end;
    }
}

/// Length as Telegram counts it.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Escapes `&`, `<`, `>` and `"` for Telegram HTML. Escaping the quote too
/// makes the result safe both as text and as an attribute value.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s, true);
    out
}

/// Escapes text between tags, where a quote needs no escape and would only
/// cost length.
fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s, false);
    out
}

fn push_escaped(out: &mut String, s: &str, quotes: bool) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quotes => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

fn options() -> Options {
    Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS
}

fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map_or(0, |i| i + 1)
}

fn line_end(text: &str, pos: usize) -> usize {
    text[pos..].find('\n').map_or(text.len(), |i| pos + i)
}

// ---------------------------------------------------------------------------
// Splitting the source
// ---------------------------------------------------------------------------

/// Where a piece may end, best first. A piece ends at the furthest boundary of
/// the best level that fits; the worse levels are tried only inside the first
/// unit of the better one, so a paragraph is cut only when it alone is too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// Between top-level blocks.
    Block,
    /// Between nested blocks: list items, paragraphs inside a quote.
    Nested,
    Line,
    /// Between words, but not inside `**bold**`, `` `code` `` or a link, whose
    /// halves would each show their markers as text.
    Phrase,
    Word,
    Char,
}

const LEVELS: [Level; 6] = [Level::Block, Level::Nested, Level::Line, Level::Phrase, Level::Word, Level::Char];

/// A code block, as far as splitting needs to know it.
struct CodeSpan {
    /// The whole block, fences included.
    block: Range<usize>,
    /// Its content lines: from the line after the opening fence to the start of
    /// the closing fence's line.
    inner: Range<usize>,
    /// What a content line carries before the code (`> ` inside a quote), to
    /// put before the rest of a line split in the middle.
    prefix: String,
    /// Lines that close and reopen a fenced block, so that each piece of a
    /// split block is a complete block with the same language.
    fence: Option<Fence>,
}

struct Fence {
    open: String,
    close: String,
}

/// A code block being read from the parser's events.
struct OpenCode {
    block: Range<usize>,
    fenced: bool,
    text: Option<Range<usize>>,
}

impl OpenCode {
    fn finish(self, text: &str) -> CodeSpan {
        let block = self.block;
        if !self.fenced {
            let first = self.text.as_ref().map_or(block.start, |t| t.start);
            let end = self.text.as_ref().map_or(block.end, |t| t.end);
            let start = line_start(text, first);
            return CodeSpan { block, inner: start..end, prefix: text[start..first].to_string(), fence: None };
        }
        let opening_end = line_end(text, block.start);
        let opening = &text[block.start..opening_end];
        let fence_at = block.start + (opening.len() - opening.trim_start().len());
        let opening = &text[fence_at..opening_end];
        let fence_char = opening.chars().next().unwrap_or('`');
        let fence_len = opening.len() - opening.trim_start_matches(fence_char).len();
        let (fence, info) = opening.split_at(fence_len);
        let prefix = container_prefix(&text[line_start(text, block.start)..fence_at]);
        let inner_start = (opening_end + 1).min(block.end);
        let inner_end = self.text.map_or(inner_start, |t| t.end).max(inner_start);
        let fence = Fence { open: format!("{prefix}{fence}{}", info.trim()), close: format!("{prefix}{fence}") };
        CodeSpan { block, inner: inner_start..inner_end, prefix, fence: Some(fence) }
    }
}

/// The part of an opening fence's line that its content lines repeat: quote
/// markers stay, a list item's marker becomes the indentation under it.
fn container_prefix(before_fence: &str) -> String {
    before_fence.chars().map(|c| if c == '>' || c.is_whitespace() { c } else { ' ' }).collect()
}

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

/// The Markdown source with what splitting needs to know about it.
struct Source<'a> {
    text: &'a str,
    links: Links,
    /// Line starts of top-level blocks.
    blocks: Vec<usize>,
    /// Line starts of nested blocks.
    nested: Vec<usize>,
    /// Code blocks in source order (they never nest).
    code: Vec<CodeSpan>,
    /// Tables in source order (they never nest).
    tables: Vec<TableSpan>,
    /// Outermost inline spans (styles, code, links) in source order.
    spans: Vec<Range<usize>>,
}

impl<'a> Source<'a> {
    fn analyse(text: &'a str) -> Self {
        let mut blocks = Vec::new();
        let mut nested = Vec::new();
        let mut code = Vec::new();
        let mut tables = Vec::new();
        let mut spans: Vec<Range<usize>> = Vec::new();
        let mut open_code: Option<OpenCode> = None;
        let mut depth = 0usize;
        let mut events = Parser::new_ext(text, options()).into_offset_iter();
        for (event, range) in events.by_ref() {
            let block_at = match &event {
                Event::Start(tag) if is_block(tag) => Some(line_start(text, range.start)),
                Event::Rule => Some(line_start(text, range.start)),
                _ => None,
            };
            if let Some(at) = block_at {
                if depth == 0 { &mut blocks } else { &mut nested }.push(at);
            }
            if is_inline_span(&event) {
                match spans.last_mut() {
                    Some(last) if range.start < last.end => last.end = last.end.max(range.end),
                    _ => spans.push(range.clone()),
                }
            }
            match event {
                Event::Start(tag) => {
                    if let Tag::CodeBlock(kind) = &tag {
                        let fenced = matches!(kind, CodeBlockKind::Fenced(_));
                        open_code = Some(OpenCode { block: range, fenced, text: None });
                    } else if let Tag::Table(_) = &tag {
                        tables.push(TableSpan::new(text, range));
                    }
                    depth += 1;
                }
                Event::End(end) => {
                    depth = depth.saturating_sub(1);
                    if end == TagEnd::CodeBlock {
                        code.extend(open_code.take().map(|open| open.finish(text)));
                    }
                }
                Event::Text(_) => {
                    if let Some(open) = &mut open_code {
                        let start = open.text.as_ref().map_or(range.start, |t| t.start);
                        open.text = Some(start..range.end);
                    }
                }
                _ => {}
            }
        }
        let links = Links::collect(events.reference_definitions());
        blocks.sort_unstable();
        blocks.dedup();
        nested.sort_unstable();
        nested.dedup();
        Self { text, links, blocks, nested, code, tables, spans }
    }

    /// The next chunk from `start`, and where the one after it starts.
    fn next_chunk(&self, start: usize, limit: usize) -> (usize, Chunk) {
        // A piece's source must fit too, which bounds how far it can reach.
        let reach = reach(self.text, start, limit);
        let mut bound = self.text.len();
        for level in LEVELS {
            let ends = self.candidates(level, start, reach.min(bound));
            if let Some(found) = self.furthest_fit(start, &ends, limit) {
                return found;
            }
            if let Some(first) = self.first_candidate(level, start) {
                bound = bound.min(first);
            }
        }
        self.fallback(start, limit)
    }

    /// The furthest of `ends` whose piece fits. Rendered length mostly grows
    /// with the piece, so a binary search finds it; where it does not (closing
    /// a `*` turns it into a tag), the result is still checked, just not the
    /// tightest.
    fn furthest_fit(&self, start: usize, ends: &[usize], limit: usize) -> Option<(usize, Chunk)> {
        let (mut lo, mut hi) = (0, ends.len());
        let mut best = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.piece(start, ends[mid], limit) {
                Some(chunk) => {
                    best = Some((ends[mid], chunk));
                    lo = mid + 1;
                }
                None => hi = mid,
            }
        }
        best
    }

    /// Renders the source between two boundaries, if the result fits.
    fn piece(&self, start: usize, end: usize, limit: usize) -> Option<Chunk> {
        let plain = self.piece_source(start, end);
        if utf16_len(&plain) > limit {
            return None;
        }
        let mut html = to_html(&plain, &self.links);
        if !has_visible_text(&html) {
            // Markdown that renders to nothing (a lone link definition, an
            // empty quote) is still the agent's text: show it as written.
            html = escape_text(&plain);
        }
        (utf16_len(&html) <= limit).then_some(Chunk { html, plain })
    }

    /// The Markdown of one piece: the source between two boundaries, with the
    /// lines that make a cut code block or table complete on both sides.
    fn piece_source(&self, start: usize, end: usize) -> String {
        let mid_line = start != line_start(self.text, start);
        let mut source = self.reopening(start, mid_line);
        let mut body = &self.text[start..end];
        if mid_line && self.code_inside(start).is_none() {
            // Indentation left over from a cut line would change its meaning.
            body = body.trim_start_matches([' ', '\t']);
        }
        let closing = self.code_inside(end).and_then(|code| code.fence.as_ref()).map(|fence| fence.close.as_str());
        // Only the block that `start` cuts may need dedenting; what follows is
        // at the top level already.
        let own_end = next_in(&self.blocks, start).unwrap_or(self.text.len());
        let (own, rest) = body.split_at(own_end.clamp(end - body.len(), end) - (end - body.len()));
        source.push_str(own);
        if rest.is_empty() {
            push_line(&mut source, closing);
        }
        let mut source = self.dedent(source, start);
        if !rest.is_empty() {
            source.push_str(rest);
            push_line(&mut source, closing);
        }
        trim_blank_lines(&source).to_string()
    }

    /// What a piece starting at `start` needs in front: the fence of the code
    /// block it cuts, or the header of the table.
    fn reopening(&self, start: usize, mid_line: bool) -> String {
        let mut head = String::new();
        if let Some(code) = self.code_inside(start) {
            if let Some(fence) = &code.fence {
                head.push_str(&fence.open);
                head.push('\n');
            }
            if mid_line {
                head.push_str(&code.prefix);
            }
        } else if let Some(table) = self.table_inside(start) {
            head.push_str(&table.header);
            head.push('\n');
        }
        head
    }

    /// A piece cut from inside a nested list starts indented as deep as the
    /// list; from four spaces on, Markdown would read it as an indented code
    /// block, so its lines lose that much indentation.
    fn dedent(&self, source: String, start: usize) -> String {
        let first = trim_blank_lines(&source);
        let depth = first.len() - first.trim_start_matches(' ').len();
        if depth < 4 || self.in_indented_code(start) {
            return source;
        }
        let mut out = String::with_capacity(source.len());
        for line in source.split_inclusive('\n') {
            let spaces = line.len() - line.trim_start_matches(' ').len();
            out.push_str(&line[spaces.min(depth)..]);
        }
        out
    }

    /// The last resort when not even one character fits with the markup
    /// around it (a cut code block's fences under a tiny limit): plain text.
    fn fallback(&self, start: usize, limit: usize) -> (usize, Chunk) {
        let (mut plain_len, mut html_len) = (0, 0);
        let mut end = start;
        for c in self.text[start..].chars() {
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
        let plain = self.text[start..end].trim().to_string();
        (end, Chunk { html: escape_text(&plain), plain })
    }

    /// Boundaries at `level` or better in `(from, upto]` where a piece may end.
    fn candidates(&self, level: Level, from: usize, upto: usize) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut pos = from;
        while let Some(next) = self.next_boundary(level, pos) {
            if next > upto {
                break;
            }
            if self.may_end_at(next) {
                ends.push(next);
            }
            pos = next;
        }
        ends
    }

    /// The end of the first unit at `level` after `from`.
    fn first_candidate(&self, level: Level, from: usize) -> Option<usize> {
        let mut pos = from;
        while let Some(next) = self.next_boundary(level, pos) {
            if self.may_end_at(next) {
                return Some(next);
            }
            pos = next;
        }
        None
    }

    /// The next boundary at `level` or better after `from`; the end of the
    /// text is a boundary at every level.
    fn next_boundary(&self, level: Level, from: usize) -> Option<usize> {
        let text = self.text;
        if from >= text.len() {
            return None;
        }
        let next = match level {
            Level::Block => next_in(&self.blocks, from),
            Level::Nested => match (next_in(&self.blocks, from), next_in(&self.nested, from)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            Level::Line => text[from..].find('\n').map(|i| from + i + 1),
            Level::Phrase => self.next_phrase(from),
            Level::Word => next_word(text, from),
            Level::Char => next_char(text, from),
        };
        Some(next.filter(|&p| p < text.len()).unwrap_or(text.len()))
    }

    /// The next word boundary after `from` outside any inline span.
    fn next_phrase(&self, from: usize) -> Option<usize> {
        let mut pos = from;
        loop {
            pos = next_word(self.text, pos)?;
            let after = self.spans.partition_point(|span| span.start < pos);
            match after.checked_sub(1).and_then(|i| self.spans.get(i)) {
                Some(span) if pos < span.end => pos = span.end.max(pos),
                _ => return Some(pos),
            }
        }
    }

    /// Whether a piece may end (and the next start) at `pos`: anywhere but on
    /// a fenced block's fence lines or within a table's header, where reopening
    /// would make no sense.
    fn may_end_at(&self, pos: usize) -> bool {
        let in_fences = match self.code_around(pos) {
            Some(code) if code.fence.is_some() => !(code.inner.start < pos && pos < code.inner.end),
            _ => false,
        };
        let in_header = self.table_around(pos).is_some_and(|table| pos <= table.body);
        !in_fences && !in_header
    }

    /// The table `pos` is strictly inside.
    fn table_around(&self, pos: usize) -> Option<&TableSpan> {
        let after = self.tables.partition_point(|table| table.block.start < pos);
        let table = self.tables.get(after.checked_sub(1)?)?;
        (pos < table.block.end).then_some(table)
    }

    /// The table whose rows `pos` cuts.
    fn table_inside(&self, pos: usize) -> Option<&TableSpan> {
        self.table_around(pos).filter(|table| table.body < pos)
    }

    /// Whether `pos` is within an indented code block, where indentation is
    /// the block's syntax.
    fn in_indented_code(&self, pos: usize) -> bool {
        let after = self.code.partition_point(|code| line_start(self.text, code.block.start) <= pos);
        after
            .checked_sub(1)
            .and_then(|i| self.code.get(i))
            .is_some_and(|code| code.fence.is_none() && pos < code.block.end)
    }

    /// The code block `pos` is strictly inside, fences included.
    fn code_around(&self, pos: usize) -> Option<&CodeSpan> {
        let after = self.code.partition_point(|code| code.block.start < pos);
        let code = self.code.get(after.checked_sub(1)?)?;
        (pos < code.block.end).then_some(code)
    }

    /// The code block whose content `pos` cuts.
    fn code_inside(&self, pos: usize) -> Option<&CodeSpan> {
        self.code_around(pos).filter(|code| code.inner.start < pos && pos < code.inner.end)
    }

    /// Blank lines between pieces belong to neither.
    fn skip_blank_lines(&self, mut pos: usize) -> usize {
        if self.code_inside(pos).is_some_and(|code| code.fence.is_some()) {
            return pos;
        }
        loop {
            let end = line_end(self.text, pos);
            if end == self.text.len() || !self.text[pos..end].trim().is_empty() {
                return pos;
            }
            pos = end + 1;
        }
    }
}

fn is_block(tag: &Tag) -> bool {
    !matches!(
        tag,
        Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript
            | Tag::Link { .. }
            | Tag::Image { .. }
            | Tag::TableHead
            | Tag::TableRow
            | Tag::TableCell
    )
}

/// Whether an event is styled text, code or a link, which a cut would break.
fn is_inline_span(event: &Event) -> bool {
    matches!(
        event,
        Event::Code(_)
            | Event::Start(Tag::Emphasis | Tag::Strong | Tag::Strikethrough | Tag::Link { .. } | Tag::Image { .. })
    )
}

/// The first of the sorted `positions` after `from`.
fn next_in(positions: &[usize], from: usize) -> Option<usize> {
    positions.get(positions.partition_point(|&p| p <= from)).copied()
}

/// The next start of a word (or of a line) after `from`.
fn next_word(text: &str, from: usize) -> Option<usize> {
    let mut chars = text[from..].char_indices();
    let mut prev = chars.next()?.1;
    for (i, c) in chars {
        if prev == '\n' || (prev.is_whitespace() && !c.is_whitespace()) {
            return Some(from + i);
        }
        prev = c;
    }
    None
}

/// The next character boundary after `from` that does not split what shows
/// as one character: an emoji from its modifiers or joined emoji, a letter
/// from its accents.
fn next_char(text: &str, from: usize) -> Option<usize> {
    let mut chars = text[from..].char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        match chars.peek() {
            Some(&(_, next)) if c == '\u{200d}' || continues_character(next) => {}
            Some(&(i, _)) => return Some(from + i),
            None => return None,
        }
    }
    None
}

/// Whether `c` belongs to the character before it: a joiner, a variation
/// selector, a skin tone, or a combining mark.
fn continues_character(c: char) -> bool {
    matches!(c, '\u{200d}' | '\u{fe00}'..='\u{fe0f}' | '\u{1f3fb}'..='\u{1f3ff}' | '\u{0300}'..='\u{036f}' | '\u{20d0}'..='\u{20ff}' | '\u{e0020}'..='\u{e007f}')
}

/// The furthest byte offset whose text from `start` is within `limit`.
fn reach(text: &str, start: usize, limit: usize) -> usize {
    let mut used = 0;
    for (i, c) in text[start..].char_indices() {
        used += c.len_utf16();
        if used > limit {
            return start + i;
        }
    }
    text.len()
}

/// Ends `source` with `line` on a line of its own.
fn push_line(source: &mut String, line: Option<&str>) {
    if let Some(line) = line {
        if !source.ends_with('\n') {
            source.push('\n');
        }
        source.push_str(line);
    }
}

/// Drops leading blank lines (keeping the first line's indentation, which
/// means something in Markdown) and trailing whitespace.
fn trim_blank_lines(s: &str) -> &str {
    let s = s.trim_end();
    match s.find(|c: char| !c.is_whitespace()) {
        Some(first) => &s[line_start(s, first)..],
        None => "",
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

/// The whole reply's link reference definitions, so that `[text][ref]` still
/// resolves in a piece that does not hold the definition.
struct Links(HashMap<String, (String, String)>);

impl Links {
    fn collect(defs: &RefDefs) -> Self {
        let links = defs
            .iter()
            .map(|(label, def)| {
                let title = def.title.as_deref().unwrap_or_default().to_string();
                (normalize_label(label), (def.dest.to_string(), title))
            })
            .collect();
        Self(links)
    }

    fn resolve<'a>(&self, link: &BrokenLink) -> Option<(CowStr<'a>, CowStr<'a>)> {
        let (dest, title) = self.0.get(&normalize_label(&link.reference))?;
        Some((dest.clone().into(), title.clone().into()))
    }
}

/// Link labels match case-insensitively with runs of whitespace collapsed.
fn normalize_label(label: &str) -> String {
    label.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn to_html(markdown: &str, links: &Links) -> String {
    let callback = |link: BrokenLink<'_>| links.resolve(&link);
    let mut writer = Writer::new();
    for event in Parser::new_with_broken_link_callback(markdown, options(), Some(callback)) {
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
            Tag::Table(_) => {
                self.block();
                self.table = Some(Table::default());
                Closer::Table
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(table) = &mut self.table {
                    table.rows.push(Vec::new());
                }
                Closer::Nothing
            }
            Tag::TableCell => {
                if let Some(row) = self.table.as_mut().and_then(|table| table.rows.last_mut()) {
                    row.push(String::new());
                }
                Closer::Nothing
            }
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
            Closer::Quote(saved) => {
                self.quote_depth -= 1;
                if let Some(saved) = saved {
                    if self.out.ends_with("<blockquote>") {
                        self.restore(saved);
                    } else {
                        self.out.push_str("</blockquote>");
                    }
                }
            }
            Closer::Code { close, content_at, saved } => {
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
                    push_escaped(&mut self.out, &table.lines(), false);
                    self.out.push_str("</pre>");
                }
            }
            Closer::Link(link) => self.end_link(link),
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
        push_escaped(&mut self.out, text, false);
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
        push_escaped(&mut self.out, code, false);
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
            push_escaped(&mut self.out, language, true);
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
            push_escaped(&mut self.out, href.as_str(), true);
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
