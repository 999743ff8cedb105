//! The agent's Markdown → WhatsApp's own markup, split into messages.
//!
//! WhatsApp formats plain text with a few markers: `*bold*`, `_italic_`,
//! `~strike~`, `` `code` ``, ```` ``` ```` blocks, `> ` quotes and `- ` / `1. `
//! lists. It has no escaping: a marker is markup when it touches text at both
//! ends, and is shown as typed otherwise. So we translate what the Markdown
//! means instead of escaping what it says: styled spans get their markers
//! pulled tight around their text (an empty span gets none), and whatever
//! WhatsApp has no markup for (headings, links, tables, raw HTML) becomes plain
//! lines. Characters the agent wrote stay as written: we cannot stop WhatsApp
//! from reading `2*3*4` as markup, and would rather not alter the text.
//!
//! WhatsApp takes far longer texts than [`MESSAGE_LIMIT`]; the limit is ours,
//! so that a long reply arrives as parts of a screen or two each rather than as
//! one wall of text, close to Telegram's 4096 so that both channels cut alike.
//!
//! Long replies are split on the Markdown *source* (blocks first, then list
//! items, lines, words, characters) and each piece is rendered on its own, so
//! every message is complete by itself: a code block cut in two becomes two
//! complete blocks, and a list cut between items keeps its numbering. A piece
//! fits when its rendered text is within the limit, counted in characters.

use std::collections::HashMap;
use std::ops::Range;

use pulldown_cmark::{BrokenLink, CowStr, Event, Options, Parser, RefDefs, Tag, TagEnd};

#[cfg(test)]
mod tests;

/// WhatsApp's markup has no escaping; one message is kept under this many
/// characters (chars, not bytes) so long replies arrive as readable parts.
pub const MESSAGE_LIMIT: usize = 4000;

/// The smallest limit [`render_with_limit`] honours: one character of a code
/// block cut inside a quote must fit with its two fence lines (15 characters
/// in all), or splitting would fall back to raw source.
const MIN_LIMIT: usize = 20;

/// Renders `markdown` into WhatsApp messages that each fit [`MESSAGE_LIMIT`].
///
/// Empty or whitespace-only input gives no messages. Deterministic: the same
/// input always gives the same parts (delivery resumes after a restart by
/// counting parts).
pub fn render(markdown: &str) -> Vec<String> {
    render_with_limit(markdown, MESSAGE_LIMIT)
}

/// Same as [`render`] with a custom limit in characters. Limits below 20 are
/// raised to 20.
pub fn render_with_limit(markdown: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(MIN_LIMIT);
    let source = Source::analyse(markdown);
    let mut parts = Vec::new();
    let mut pos = 0;
    loop {
        pos = source.skip_blank_lines(pos);
        if markdown[pos..].trim().is_empty() {
            return parts;
        }
        let (end, part) = source.next_part(pos, limit);
        if !part.trim().is_empty() {
            parts.push(part);
        }
        pos = end;
    }
}

fn char_len(s: &str) -> usize {
    s.chars().count()
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
    /// put before the rest of a line cut in the middle.
    prefix: String,
    /// The fence line (with its container prefix) that closes and reopens a
    /// cut fenced block; an indented block needs none.
    fence: Option<String>,
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
        let prefix = container_prefix(&text[line_start(text, block.start)..fence_at]);
        let inner_start = (opening_end + 1).min(block.end);
        let inner_end = self.text.map_or(inner_start, |t| t.end).max(inner_start);
        // The language is left out: the rendering drops it anyway.
        let fence = format!("{prefix}{}", &opening[..fence_len]);
        CodeSpan { block, inner: inner_start..inner_end, prefix, fence: Some(fence) }
    }
}

/// The part of an opening fence's line that its content lines repeat: quote
/// markers stay, a list item's marker becomes the indentation under it.
fn container_prefix(before_fence: &str) -> String {
    before_fence.chars().map(|c| if c == '>' || c.is_whitespace() { c } else { ' ' }).collect()
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
    /// Outermost inline spans (styles, code, links) in source order.
    spans: Vec<Range<usize>>,
    /// Where each ordered list item's marker starts, and its number.
    numbers: Vec<(usize, u64)>,
}

impl<'a> Source<'a> {
    fn analyse(text: &'a str) -> Self {
        let mut source = Self {
            text,
            links: Links(HashMap::new()),
            blocks: Vec::new(),
            nested: Vec::new(),
            code: Vec::new(),
            spans: Vec::new(),
            numbers: Vec::new(),
        };
        let mut open_code: Option<OpenCode> = None;
        let mut lists: Vec<Option<u64>> = Vec::new();
        let mut depth = 0usize;
        let mut events = Parser::new_ext(text, options()).into_offset_iter();
        for (event, range) in events.by_ref() {
            if matches!(&event, Event::Start(tag) if is_block(tag)) || event == Event::Rule {
                let at = line_start(text, range.start);
                if depth == 0 { &mut source.blocks } else { &mut source.nested }.push(at);
            }
            if is_inline_span(&event) {
                match source.spans.last_mut() {
                    Some(last) if range.start < last.end => last.end = last.end.max(range.end),
                    _ => source.spans.push(range.clone()),
                }
            }
            match event {
                Event::Start(Tag::CodeBlock(kind)) => {
                    let fenced = matches!(kind, pulldown_cmark::CodeBlockKind::Fenced(_));
                    open_code = Some(OpenCode { block: range, fenced, text: None });
                    depth += 1;
                }
                Event::Start(Tag::List(first)) => {
                    lists.push(first);
                    depth += 1;
                }
                Event::Start(Tag::Item) => {
                    if let Some(Some(number)) = lists.last_mut() {
                        source.numbers.push((range.start, *number));
                        *number += 1;
                    }
                    depth += 1;
                }
                Event::Start(_) => depth += 1,
                Event::End(end) => {
                    depth = depth.saturating_sub(1);
                    match end {
                        TagEnd::CodeBlock => source.code.extend(open_code.take().map(|open| open.finish(text))),
                        TagEnd::List(_) => {
                            lists.pop();
                        }
                        _ => {}
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
        source.links = Links::collect(events.reference_definitions());
        for positions in [&mut source.blocks, &mut source.nested] {
            positions.sort_unstable();
            positions.dedup();
        }
        source
    }

    /// The next part from `start`, and where the one after it starts.
    fn next_part(&self, start: usize, limit: usize) -> (usize, String) {
        // Rendering seldom shrinks Markdown to less than half (only link
        // definitions and entities do), so pieces are sought within twice the
        // limit of source: at worst a part is shorter than it could be.
        let reach = reach(self.text, start, limit.saturating_mul(2));
        let mut bound = self.text.len();
        for level in LEVELS {
            let (ends, first) = self.candidates(level, start, reach.min(bound));
            if let Some(found) = self.furthest_fit(start, &ends, limit) {
                return found;
            }
            bound = bound.min(first);
        }
        self.fallback(start, limit)
    }

    /// The furthest of `ends` whose piece fits. Rendered length mostly grows
    /// with the piece, so a binary search finds it; where it does not (closing
    /// a `**` pair drops two markers), the result is still checked, just not
    /// the tightest.
    fn furthest_fit(&self, start: usize, ends: &[usize], limit: usize) -> Option<(usize, String)> {
        let (mut lo, mut hi) = (0, ends.len());
        let mut best = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.piece(start, ends[mid], limit) {
                Some(part) => {
                    best = Some((ends[mid], part));
                    lo = mid + 1;
                }
                None => hi = mid,
            }
        }
        best
    }

    /// Renders the source between two boundaries, if the result fits. A piece
    /// that shows nothing (link definitions, an empty code block) gives an
    /// empty part, which is dropped.
    fn piece(&self, start: usize, end: usize, limit: usize) -> Option<String> {
        let text = to_whatsapp(&self.piece_source(start, end), &self.links);
        (char_len(&text) <= limit).then_some(text)
    }

    /// The Markdown of one piece: the source between two boundaries, with the
    /// fences that make a cut code block complete on both sides.
    fn piece_source(&self, start: usize, end: usize) -> String {
        let mid_line = start != line_start(self.text, start);
        let mut source = self.reopening(start, mid_line);
        let mut body = &self.text[start..end];
        if mid_line && self.code_inside(start).is_none() {
            // Indentation left over from a cut line would change its meaning.
            body = body.trim_start_matches([' ', '\t']);
            if source.is_empty() {
                if let Some(at) = block_escape(body) {
                    source.push_str(&body[..at]);
                    source.push('\\');
                    body = &body[at..];
                }
            }
        } else if let Some((digits, number)) = self.renumbering(start, end) {
            source.push_str(&self.text[start..digits.start]);
            source.push_str(&number.to_string());
            body = &self.text[digits.end..end];
        }
        let closing = self.code_inside(end).and_then(|code| code.fence.as_deref());
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

    /// Where the number of an ordered item on the piece's first line is, and
    /// the number the item has in the whole reply. Cut from its list, the item
    /// would be numbered by its own marker, and a list written `1.` `1.` `1.`
    /// (which Markdown numbers 1, 2, 3) would start again at 1 in each part.
    fn renumbering(&self, start: usize, end: usize) -> Option<(Range<usize>, u64)> {
        let &(at, number) = self.numbers.get(self.numbers.partition_point(|&(at, _)| at < start))?;
        let marker = self.text.get(at..end)?;
        let digits = marker.len() - marker.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        (at < line_end(self.text, start) && digits > 0).then_some((at..at + digits, number))
    }

    /// What a piece starting at `start` needs in front: the fence of the code
    /// block it cuts. (A cut table needs nothing: WhatsApp shows its rows as
    /// plain lines anyway, and the rest of it reads as lines of cells.)
    fn reopening(&self, start: usize, mid_line: bool) -> String {
        let mut head = String::new();
        if let Some(code) = self.code_inside(start) {
            if let Some(fence) = &code.fence {
                head.push_str(fence);
                head.push('\n');
            }
            if mid_line {
                head.push_str(&code.prefix);
            }
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
    /// around it (a cut code block's fences deep in quotes, a letter under
    /// hundreds of accents): the source's characters as they are.
    fn fallback(&self, start: usize, limit: usize) -> (usize, String) {
        let end = self.text[start..].char_indices().nth(limit).map_or(self.text.len(), |(i, _)| start + i);
        (end, self.text[start..end].trim().to_string())
    }

    /// Boundaries at `level` or better in `(from, upto]` where a piece may
    /// end, and the first such boundary at all: the end of the first unit,
    /// within which the next level is tried.
    fn candidates(&self, level: Level, from: usize, upto: usize) -> (Vec<usize>, usize) {
        let mut ends = Vec::new();
        let mut pos = from;
        while let Some(next) = self.next_boundary(level, pos) {
            if self.may_end_at(next) {
                if next > upto {
                    let first = ends.first().copied().unwrap_or(next);
                    return (ends, first);
                }
                ends.push(next);
            }
            pos = next;
        }
        let first = ends.first().copied().unwrap_or(self.text.len());
        (ends, first)
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
    /// a fenced block's fence lines, where reopening would make no sense.
    fn may_end_at(&self, pos: usize) -> bool {
        match self.code_around(pos) {
            Some(code) if code.fence.is_some() => code.inner.start < pos && pos < code.inner.end,
            _ => true,
        }
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

/// Where a backslash keeps the first line of a piece cut from the middle of a
/// line from reading as a block. The piece starts with what followed a space
/// in its paragraph; at the start of a line `- x`, `# x`, `1. x`, `> x` or a
/// fence would become a list, heading, quote or code block (a fence would even
/// hide the rest of the line as its info string).
fn block_escape(body: &str) -> Option<usize> {
    let line = &body[..line_end(body, 0)];
    // Whether a line starts a block shows in its first few characters.
    let head = line.char_indices().nth(40).map_or(line, |(i, _)| &line[..i]);
    if head.trim().is_empty() || Parser::new_ext(head, options()).next() == Some(Event::Start(Tag::Paragraph)) {
        return None;
    }
    // `1.` is escaped as `1\.`; anything else by its first character.
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    line[digits..].starts_with(|c: char| c.is_ascii_punctuation()).then_some(digits)
}

/// The first of the sorted `positions` after `from`.
fn next_in(positions: &[usize], from: usize) -> Option<usize> {
    positions.get(positions.partition_point(|&p| p <= from)).copied()
}

/// The next start of a word (or of a line) after `from`. The end of a
/// line's indentation is none: a cut there would lose the indentation, which
/// matters in code.
fn next_word(text: &str, from: usize) -> Option<usize> {
    let mut chars = text[from..].char_indices();
    let mut prev = chars.next()?.1;
    let before = text[..from].trim_end_matches([' ', '\t']);
    let mut in_text = !prev.is_whitespace() || !(before.is_empty() || before.ends_with('\n'));
    for (i, c) in chars {
        if prev == '\n' || (in_text && prev.is_whitespace() && !c.is_whitespace()) {
            return Some(from + i);
        }
        in_text |= !c.is_whitespace();
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

/// The furthest byte offset whose text from `start` is within `limit` chars.
fn reach(text: &str, start: usize, limit: usize) -> usize {
    text[start..].char_indices().nth(limit).map_or(text.len(), |(i, _)| start + i)
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

// ---------------------------------------------------------------------------
// Rendering one piece
// ---------------------------------------------------------------------------

/// The whole reply's link reference definitions, so that `[text][ref]` still
/// resolves in a piece that does not hold the definition.
struct Links(HashMap<String, String>);

impl Links {
    fn collect(defs: &RefDefs) -> Self {
        Self(defs.iter().map(|(label, def)| (normalize_label(label), def.dest.to_string())).collect())
    }

    fn resolve<'a>(&self, link: &BrokenLink) -> Option<(CowStr<'a>, CowStr<'a>)> {
        let dest = self.0.get(&normalize_label(&link.reference))?;
        Some((dest.clone().into(), CowStr::Borrowed("")))
    }
}

/// Link labels match case-insensitively with runs of whitespace collapsed.
fn normalize_label(label: &str) -> String {
    label.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn to_whatsapp(markdown: &str, links: &Links) -> String {
    let callback = |link: BrokenLink<'_>| links.resolve(&link);
    let mut writer = Writer::new();
    for event in Parser::new_with_broken_link_callback(markdown, options(), Some(callback)) {
        writer.event(event);
    }
    writer.finish()
}

/// Inline styles, in the order their markers nest when spans share both ends:
/// bold outermost, so `***x***` gives `*_x_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Style {
    Bold,
    Italic,
    Strike,
}

impl Style {
    fn marker(self) -> char {
        match self {
            Style::Bold => '*',
            Style::Italic => '_',
            Style::Strike => '~',
        }
    }
}

/// What puts its mark at the start of each line inside it.
enum Container {
    Quote,
    /// A list, with the next number of an ordered one.
    List(Option<u64>),
}

/// What to do when a tag's End event comes; one per Start, so tags always
/// close in the order they opened.
enum Closer {
    Nothing,
    Style {
        style: Style,
        at: usize,
    },
    Container,
    Item,
    /// A code block (`true`) or an HTML block, whose text is collected.
    Verbatim(bool),
    Table,
    Row,
    Link(LinkCloser),
}

struct LinkCloser {
    /// Where the link's text starts in the output.
    text_at: usize,
    url: String,
    /// An image inside a link shows only its alt text.
    show_url: bool,
}

/// The styled run written last, so that a span around exactly it merges its
/// marker in (`*_x_*`) instead of wrapping it.
struct Run {
    range: Range<usize>,
    styles: Vec<Style>,
}

/// Turns one piece's events into WhatsApp text.
#[derive(Default)]
struct Writer {
    out: String,
    /// Newlines owed before the next block's content.
    sep: usize,
    /// What a blank line owed by `sep` holds, so a quote's blank lines keep
    /// its `>` (see [`Writer::owe`]).
    blank: String,
    /// Nothing written yet, so no separator is due.
    fresh: bool,
    /// A list item's bullet or number (with the line's prefix), written with
    /// the item's first content, and how many containers were open then.
    marker: Option<(String, usize)>,
    containers: Vec<Container>,
    closers: Vec<Closer>,
    active: [bool; 3],
    /// A code or HTML block's text, written whole at its end so that each of
    /// its lines gets the containers' prefix.
    verbatim: Option<String>,
    link_depth: usize,
    /// Inside a table: the cells written in its current row.
    table: Option<usize>,
    run: Option<Run>,
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
            Event::Text(text) | Event::Html(text) | Event::InlineHtml(text) => self.text(&text),
            Event::Code(code) => self.inline_code(&code),
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Rule => {
                self.block();
                self.flush();
                self.out.push_str("———");
            }
            Event::TaskListMarker(checked) => self.task_marker(checked),
            // Math and footnotes: their options are off.
            _ => {}
        }
    }

    fn finish(mut self) -> String {
        if self.marker.is_some() {
            self.flush();
        }
        trim_blank_lines(&self.out).to_string()
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
            Tag::BlockQuote(_) => self.container(Container::Quote),
            Tag::List(first) => self.container(Container::List(first)),
            Tag::Item => {
                self.item();
                Closer::Item
            }
            Tag::CodeBlock(_) | Tag::HtmlBlock => {
                self.block();
                self.verbatim = Some(String::new());
                Closer::Verbatim(matches!(tag, Tag::CodeBlock(_)))
            }
            Tag::Table(_) => {
                self.block();
                self.table = Some(0);
                Closer::Table
            }
            Tag::TableHead | Tag::TableRow => {
                self.row();
                Closer::Row
            }
            Tag::TableCell => {
                self.cell();
                Closer::Nothing
            }
            Tag::Emphasis => self.style(Style::Italic),
            Tag::Strong => self.style(Style::Bold),
            Tag::Strikethrough => self.style(Style::Strike),
            Tag::Link { dest_url, .. } => self.link(dest_url, true),
            Tag::Image { dest_url, .. } => self.link(dest_url, false),
            // Footnotes, definition lists, metadata, super- and subscripts:
            // their options are off.
            _ => Closer::Nothing,
        }
    }

    fn end(&mut self, closer: Closer) {
        match closer {
            Closer::Nothing => {}
            Closer::Style { style, at } => self.end_style(style, at),
            Closer::Container => {
                self.containers.pop();
            }
            Closer::Item => {
                // An empty item still shows its bullet, without the space.
                if self.marker.is_some() {
                    self.flush();
                    self.trim_trailing_spaces();
                }
            }
            Closer::Verbatim(code) => self.end_verbatim(code),
            Closer::Table => self.table = None,
            Closer::Row => self.trim_trailing_spaces(),
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
        let in_list = self.containers.iter().any(|c| matches!(c, Container::List(_)));
        self.owe(if in_list { 1 } else { 2 });
    }

    /// Owes `newlines` before the next content; blank lines among them hold
    /// the prefix of the containers open now, before any the next block opens.
    fn owe(&mut self, newlines: usize) {
        if self.sep == 0 {
            self.blank = self.prefix().trim_end().to_string();
        }
        self.sep = self.sep.max(newlines);
    }

    /// Writes what is owed before content: the separator and the new line's
    /// prefix, or the pending list marker.
    fn flush(&mut self) {
        let marker = self.marker.take();
        let new_line = self.fresh || self.sep > 0 || marker.is_some();
        if !self.fresh && new_line {
            for _ in 1..self.sep.max(1) {
                self.out.push('\n');
                self.out.push_str(&self.blank);
            }
            self.out.push('\n');
        }
        match marker {
            Some((marker, depth)) => {
                // A quote or list opened inside the item before any text
                // (`- > x`) starts on the bullet's line.
                let inner = prefix_of(self.containers.get(depth..).unwrap_or_default());
                self.out.push_str(&marker);
                self.out.push_str(&inner);
            }
            None if new_line => {
                let prefix = self.prefix();
                self.out.push_str(&prefix);
            }
            None => {}
        }
        self.sep = 0;
        self.fresh = false;
    }

    /// What each line inside the open containers starts with.
    fn prefix(&self) -> String {
        prefix_of(&self.containers)
    }

    /// Starts a line inside the open containers; a blank one gets no
    /// trailing space.
    fn new_line(&mut self, blank: bool) {
        let prefix = self.prefix();
        self.out.push('\n');
        self.out.push_str(if blank { prefix.trim_end() } else { &prefix });
    }

    /// Writes `text`, starting each of its lines after the first inside the
    /// open containers.
    fn push_lines(&mut self, text: &str) {
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.new_line(line.is_empty());
            }
            self.out.push_str(line);
        }
    }

    fn trim_trailing_spaces(&mut self) {
        let end = self.out.trim_end_matches(' ').len();
        self.out.truncate(end);
    }

    fn text(&mut self, text: &str) {
        if let Some(verbatim) = &mut self.verbatim {
            verbatim.push_str(text);
            return;
        }
        self.flush();
        self.push_lines(text);
    }

    fn line_break(&mut self) {
        self.flush();
        if self.table.is_some() {
            self.out.push(' ');
        } else {
            self.new_line(false);
        }
    }

    fn container(&mut self, container: Container) -> Closer {
        self.block();
        self.containers.push(container);
        Closer::Container
    }

    fn item(&mut self) {
        // An item that starts with a nested item (`- - x`) shows both bullets.
        if self.marker.is_some() {
            self.flush();
        }
        let depth = self.containers.len();
        let outer = prefix_of(self.containers.get(..depth.saturating_sub(1)).unwrap_or_default());
        let bullet = match self.containers.last_mut() {
            Some(Container::List(Some(number))) => {
                let bullet = format!("{number}. ");
                *number += 1;
                bullet
            }
            _ => "- ".to_string(),
        };
        self.marker = Some((outer + &bullet, depth));
    }

    fn task_marker(&mut self, checked: bool) {
        let check = if checked { "☑ " } else { "☐ " };
        match &mut self.marker {
            // The box replaces a bullet, and follows a number.
            Some((marker, _)) => match marker.strip_suffix("- ") {
                Some(indent) => *marker = format!("{indent}{check}"),
                None => marker.push_str(check),
            },
            None => self.text(check),
        }
    }

    /// Code and raw HTML are shown verbatim; code in a ``` block, on lines of
    /// their own so that a language tag could not be mistaken for code. An
    /// empty block shows nothing.
    fn end_verbatim(&mut self, code: bool) {
        let text = self.verbatim.take().unwrap_or_default();
        let text = if code { text.strip_suffix('\n').unwrap_or(&text) } else { text.trim_end() };
        if text.trim().is_empty() {
            return;
        }
        self.flush();
        if code {
            self.out.push_str("```");
            self.new_line(false);
        }
        self.push_lines(text);
        if code {
            self.new_line(false);
            self.out.push_str("```");
        }
    }

    /// Each row is a line of its own, header included.
    fn row(&mut self) {
        self.owe(1);
        self.table = Some(0);
    }

    fn cell(&mut self) {
        self.flush();
        if let Some(cells) = &mut self.table {
            if *cells > 0 {
                self.out.push_str(" | ");
            }
            *cells += 1;
        }
    }

    /// Code that holds a backtick is shown as plain text: WhatsApp's inline
    /// code cannot hold one, and ``` would read as a block's fence.
    fn inline_code(&mut self, code: &str) {
        if code.trim().is_empty() || code.contains('`') {
            self.text(code);
            return;
        }
        self.flush();
        let (lead, core, trail) = split_spaces(code);
        self.out.push_str(lead);
        self.out.push('`');
        self.out.push_str(core);
        self.out.push('`');
        self.out.push_str(trail);
    }

    /// A style already open (bold inside a heading) adds no second marker,
    /// which WhatsApp would read as closing the first.
    fn style(&mut self, style: Style) -> Closer {
        if self.active[style as usize] {
            return Closer::Nothing;
        }
        self.flush();
        self.active[style as usize] = true;
        Closer::Style { style, at: self.out.len() }
    }

    /// Puts the markers around what the span wrote, tight against its text:
    /// WhatsApp reads a marker next to a space as a plain character.
    fn end_style(&mut self, style: Style, at: usize) {
        self.active[style as usize] = false;
        let content = self.out.split_off(at.min(self.out.len()));
        let (lead, core, trail) = split_spaces(&content);
        self.out.push_str(lead);
        if core.is_empty() {
            self.out.push_str(trail);
            return;
        }
        let core_at = self.out.len();
        // Around exactly one styled run: one set of markers, in a fixed order.
        let merged = self.run.take().filter(|run| run.range == (core_at..core_at + core.len())).and_then(|run| {
            let inner = core.get(run.styles.len()..core.len() - run.styles.len())?;
            Some((run.styles, inner))
        });
        let (mut styles, inner) = merged.unwrap_or((Vec::new(), core));
        styles.push(style);
        styles.sort_unstable();
        self.out.extend(styles.iter().map(|s| s.marker()));
        self.out.push_str(inner);
        self.out.extend(styles.iter().rev().map(|s| s.marker()));
        self.run = Some(Run { range: core_at..self.out.len(), styles });
        self.out.push_str(trail);
    }

    fn link(&mut self, url: CowStr, is_link: bool) -> Closer {
        self.flush();
        let show_url = is_link || self.link_depth == 0;
        self.link_depth += 1;
        Closer::Link(LinkCloser { text_at: self.out.len(), url: url.to_string(), show_url })
    }

    /// A link shows its text then its URL, `text (url)`: WhatsApp makes the
    /// URL clickable by itself. The URL alone when it is the text already.
    fn end_link(&mut self, link: LinkCloser) {
        self.link_depth = self.link_depth.saturating_sub(1);
        if !link.show_url || link.url.is_empty() {
            return;
        }
        let text = self.out.get(link.text_at..).unwrap_or_default();
        let bare_url = link.url.strip_prefix("mailto:").unwrap_or(&link.url);
        if text.trim().is_empty() {
            self.out.truncate(link.text_at);
            self.text(&link.url);
        } else if text != link.url && text != bare_url {
            self.text(&format!(" ({})", link.url));
        }
    }
}

fn prefix_of(containers: &[Container]) -> String {
    containers
        .iter()
        .map(|container| match container {
            Container::Quote => "> ",
            Container::List(_) => "  ",
        })
        .collect()
}

/// `text` as its leading whitespace, the rest, and its trailing whitespace.
fn split_spaces(text: &str) -> (&str, &str, &str) {
    let core = text.trim();
    let lead = text.len() - text.trim_start().len();
    (&text[..lead], core, &text[lead + core.len()..])
}
