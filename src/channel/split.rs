//! Splitting an agent's Markdown reply into messages, shared by the Telegram
//! and WhatsApp formatters.
//!
//! Both split a long reply on its Markdown *source* and render each piece on
//! its own, so that every message is complete by itself. What that takes is
//! the same whatever markup a platform renders to: knowing where the source's
//! blocks, nested blocks, code blocks and inline spans are; finding where a
//! piece may end (between blocks, then lines, words outside styled spans,
//! words, and characters that show as one); making a cut code block whole
//! again on both sides of the cut; packing each message as full as it fits.
//! This module holds that one copy, so that both platforms cut alike and a fix
//! to the cutting reaches both.
//!
//! A platform plugs in through [`Pieces`]: how it renders and measures a piece
//! (HTML in UTF-16 units, WhatsApp markup in characters), what it does when
//! nothing fits, and its own rules, built from [`Source`]'s parts: Telegram
//! repeats a cut table's header, WhatsApp renumbers a cut ordered list.

use std::collections::HashMap;
use std::ops::Range;

use pulldown_cmark::{BrokenLink, CodeBlockKind, CowStr, Event, Options, Parser, RefDefs, Tag, TagEnd};

/// The Markdown both formatters read: splitting and rendering must parse alike,
/// or a boundary found in the source could fall inside what a piece renders.
pub(super) fn options() -> Options {
    Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS
}

pub(super) fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map_or(0, |i| i + 1)
}

pub(super) fn line_end(text: &str, pos: usize) -> usize {
    text[pos..].find('\n').map_or(text.len(), |i| pos + i)
}

// ---------------------------------------------------------------------------
// Driving the split
// ---------------------------------------------------------------------------

/// What a platform brings to splitting: how a piece renders and whether it
/// fits. Everything else about where to cut is [`Source`]'s.
pub(super) trait Pieces {
    /// One message as the platform sends it.
    type Part;

    fn source(&self) -> &Source<'_>;

    /// Where a piece from `start` can end at the furthest and still fit
    /// `limit`: it bounds the search, so it may overshoot but not fall short.
    fn reach(&self, start: usize, limit: usize) -> usize;

    /// Whether a piece may end (and the next start) at `pos`. A platform with
    /// rules of its own adds them to [`Source::may_end_at`].
    fn may_end_at(&self, pos: usize) -> bool {
        self.source().may_end_at(pos)
    }

    /// The source between two boundaries rendered, if the result fits.
    fn piece(&self, start: usize, end: usize, limit: usize) -> Option<Self::Part>;

    /// The last resort when nothing from `start` fits with the markup around
    /// it: a part, and where the next starts (after `start`, so that
    /// splitting always makes progress).
    fn fallback(&self, start: usize, limit: usize) -> (usize, Self::Part);

    /// Whether a part shows nothing, so that it is not sent.
    fn is_blank(part: &Self::Part) -> bool;
}

/// Splits the whole source into parts that each fit `limit`. Empty or
/// whitespace-only source gives none.
pub(super) fn split<P: Pieces>(pieces: &P, limit: usize) -> Vec<P::Part> {
    let source = pieces.source();
    let mut parts = Vec::new();
    let mut pos = 0;
    loop {
        pos = source.skip_blank_lines(pos);
        if source.text[pos..].trim().is_empty() {
            return parts;
        }
        let (end, part) = next_part(pieces, pos, limit);
        if !P::is_blank(&part) {
            parts.push(part);
        }
        pos = end;
    }
}

/// The next part from `start`, and where the one after it starts.
fn next_part<P: Pieces>(pieces: &P, start: usize, limit: usize) -> (usize, P::Part) {
    let reach = pieces.reach(start, limit);
    let mut bound = pieces.source().text.len();
    for level in LEVELS {
        let (ends, first) = candidates(pieces, level, start, reach.min(bound));
        if let Some(found) = furthest_fit(pieces, start, &ends, limit) {
            return found;
        }
        bound = bound.min(first);
    }
    pieces.fallback(start, limit)
}

/// The furthest of `ends` whose piece fits. Rendered length mostly grows with
/// the piece, so a binary search finds it; where it does not (closing a pair
/// of markers turns them into markup), the result is still checked, just not
/// the tightest.
fn furthest_fit<P: Pieces>(pieces: &P, start: usize, ends: &[usize], limit: usize) -> Option<(usize, P::Part)> {
    let (mut lo, mut hi) = (0, ends.len());
    let mut best = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match pieces.piece(start, ends[mid], limit) {
            Some(part) => {
                best = Some((ends[mid], part));
                lo = mid + 1;
            }
            None => hi = mid,
        }
    }
    best
}

/// Boundaries at `level` or better in `(from, upto]` where a piece may end,
/// and the first such boundary at all: the end of the first unit, within
/// which the next level is tried (the end of the text when there is none).
fn candidates<P: Pieces>(pieces: &P, level: Level, from: usize, upto: usize) -> (Vec<usize>, usize) {
    let source = pieces.source();
    let mut ends = Vec::new();
    let mut pos = from;
    while let Some(next) = source.next_boundary(level, pos) {
        if pieces.may_end_at(next) {
            if next > upto {
                let first = ends.first().copied().unwrap_or(next);
                return (ends, first);
            }
            ends.push(next);
        }
        pos = next;
    }
    let first = ends.first().copied().unwrap_or(source.text.len());
    (ends, first)
}

/// The furthest byte offset whose text from `start` is within `limit`, each
/// character counting `units` (the platform's length measure).
pub(super) fn reach(text: &str, start: usize, limit: usize, units: impl Fn(char) -> usize) -> usize {
    let mut used = 0;
    for (i, c) in text[start..].char_indices() {
        used += units(c);
        if used > limit {
            return start + i;
        }
    }
    text.len()
}

// ---------------------------------------------------------------------------
// Where a piece may end
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

/// Whether a word boundary may fall where a line's indentation ends, which
/// cuts the indentation from the line's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Indentation {
    /// It may, leaving the indentation at the end of the piece before.
    Cuttable,
    /// It may not: the indentation stays with its text (it matters in code).
    Kept,
}

/// The first of the sorted `positions` after `from`.
fn next_in(positions: &[usize], from: usize) -> Option<usize> {
    positions.get(positions.partition_point(|&p| p <= from)).copied()
}

/// The next start of a word (or of a line) after `from`.
fn next_word(text: &str, from: usize, indentation: Indentation) -> Option<usize> {
    let mut chars = text[from..].char_indices();
    let mut prev = chars.next()?.1;
    // In a line's indentation no word has started yet, so none can start
    // after it unless the indentation may be cut.
    let mut in_text = indentation == Indentation::Cuttable || !prev.is_whitespace() || !in_indentation(text, from);
    for (i, c) in chars {
        if prev == '\n' || (in_text && prev.is_whitespace() && !c.is_whitespace()) {
            return Some(from + i);
        }
        in_text |= !c.is_whitespace();
        prev = c;
    }
    None
}

/// Whether only spaces and tabs stand between the start of its line and `pos`.
fn in_indentation(text: &str, pos: usize) -> bool {
    let before = text[..pos].trim_end_matches([' ', '\t']);
    before.is_empty() || before.ends_with('\n')
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

/// Whether an event starts a block, where a piece may end.
fn starts_block(event: &Event) -> bool {
    match event {
        Event::Start(tag) => is_block(tag),
        Event::Rule => true,
        _ => false,
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

/// The item of `items` (in source order, not nesting) whose `block` holds
/// `pos` strictly inside.
pub(super) fn enclosing<T>(items: &[T], pos: usize, block: impl Fn(&T) -> &Range<usize>) -> Option<&T> {
    let after = items.partition_point(|item| block(item).start < pos);
    let item = items.get(after.checked_sub(1)?)?;
    (pos < block(item).end).then_some(item)
}

// ---------------------------------------------------------------------------
// The source
// ---------------------------------------------------------------------------

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
    /// Lines that close and reopen a fenced block, so that each piece of a
    /// cut block is a complete block; an indented block needs none.
    fence: Option<Fence>,
}

/// A fenced block's fence lines, with the container prefix of its opening line.
struct Fence {
    /// The opening line, language included.
    open: String,
    /// The bare fence, which closes the block (and reopens it where the
    /// language does not matter).
    close: String,
}

/// A code block being read from the parser's events.
struct OpenCode {
    block: Range<usize>,
    fenced: bool,
    text: Option<Range<usize>>,
}

impl OpenCode {
    fn new(block: Range<usize>, kind: &CodeBlockKind) -> Self {
        Self { block, fenced: matches!(kind, CodeBlockKind::Fenced(_)), text: None }
    }

    /// Takes in one of the block's Text events.
    fn extend(&mut self, range: Range<usize>) {
        let start = self.text.as_ref().map_or(range.start, |t| t.start);
        self.text = Some(start..range.end);
    }

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
pub(super) fn container_prefix(before_fence: &str) -> String {
    before_fence.chars().map(|c| if c == '>' || c.is_whitespace() { c } else { ' ' }).collect()
}

/// The Markdown source with what splitting needs to know about it.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    /// The whole reply's link definitions, for every piece.
    pub(super) links: Links,
    indentation: Indentation,
    /// Line starts of top-level blocks.
    blocks: Vec<usize>,
    /// Line starts of nested blocks.
    nested: Vec<usize>,
    /// Code blocks in source order (they never nest).
    code: Vec<CodeSpan>,
    /// Outermost inline spans (styles, code, links) in source order.
    spans: Vec<Range<usize>>,
}

impl<'a> Source<'a> {
    /// Reads `text` once; `observe` sees every event too, for what a platform
    /// needs to know besides (tables, list numbers).
    pub(super) fn analyse(
        text: &'a str,
        indentation: Indentation,
        mut observe: impl FnMut(&Event, &Range<usize>),
    ) -> Self {
        let mut source = Self {
            text,
            links: Links::default(),
            indentation,
            blocks: Vec::new(),
            nested: Vec::new(),
            code: Vec::new(),
            spans: Vec::new(),
        };
        let mut open_code: Option<OpenCode> = None;
        let mut depth = 0usize;
        let mut events = Parser::new_ext(text, options()).into_offset_iter();
        for (event, range) in events.by_ref() {
            observe(&event, &range);
            if starts_block(&event) {
                source.add_block(line_start(text, range.start), depth);
            }
            if is_inline_span(&event) {
                source.add_span(&range);
            }
            match event {
                Event::Start(tag) => {
                    if let Tag::CodeBlock(kind) = &tag {
                        open_code = Some(OpenCode::new(range, kind));
                    }
                    depth += 1;
                }
                Event::End(end) => {
                    depth = depth.saturating_sub(1);
                    if end == TagEnd::CodeBlock {
                        source.code.extend(open_code.take().map(|open| open.finish(text)));
                    }
                }
                Event::Text(_) => {
                    if let Some(open) = &mut open_code {
                        open.extend(range);
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

    fn add_block(&mut self, line: usize, depth: usize) {
        if depth == 0 { &mut self.blocks } else { &mut self.nested }.push(line);
    }

    /// Spans inside a span only widen it: a cut must avoid the outermost.
    fn add_span(&mut self, range: &Range<usize>) {
        match self.spans.last_mut() {
            Some(last) if range.start < last.end => last.end = last.end.max(range.end),
            _ => self.spans.push(range.clone()),
        }
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
            Level::Word => next_word(text, from, self.indentation),
            Level::Char => next_char(text, from),
        };
        Some(next.filter(|&p| p < text.len()).unwrap_or(text.len()))
    }

    /// The next word boundary after `from` outside any inline span.
    fn next_phrase(&self, from: usize) -> Option<usize> {
        let mut pos = from;
        loop {
            pos = next_word(self.text, pos, self.indentation)?;
            match enclosing(&self.spans, pos, |span| span) {
                Some(span) => pos = span.end.max(pos),
                None => return Some(pos),
            }
        }
    }

    /// Whether a piece may end (and the next start) at `pos`: anywhere but on
    /// a fenced block's fence lines, where reopening would make no sense.
    pub(super) fn may_end_at(&self, pos: usize) -> bool {
        match self.code_around(pos) {
            Some(code) if code.fence.is_some() => code.inner.start < pos && pos < code.inner.end,
            _ => true,
        }
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

    /// The code block `pos` is strictly inside, fences included.
    fn code_around(&self, pos: usize) -> Option<&CodeSpan> {
        enclosing(&self.code, pos, |code| &code.block)
    }

    /// The code block whose content `pos` cuts.
    fn code_inside(&self, pos: usize) -> Option<&CodeSpan> {
        self.code_around(pos).filter(|code| code.inner.start < pos && pos < code.inner.end)
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

    // --- The Markdown of one piece ------------------------------------------
    //
    // A platform builds it as `reopening` + what it adds + `body` (whose start
    // it may change), then `complete`.

    /// Whether a piece starting at `start` cuts a line of text (not of code)
    /// in the middle.
    pub(super) fn cuts_line(&self, start: usize) -> bool {
        start != line_start(self.text, start) && self.code_inside(start).is_none()
    }

    /// What a piece starting at `start` needs in front when it cuts a code
    /// block: the opening fence (with the language if `language`), and the
    /// content lines' prefix before the rest of a cut line.
    pub(super) fn reopening(&self, start: usize, language: bool) -> String {
        let mut head = String::new();
        if let Some(code) = self.code_inside(start) {
            if let Some(fence) = &code.fence {
                head.push_str(if language { &fence.open } else { &fence.close });
                head.push('\n');
            }
            if start != line_start(self.text, start) {
                head.push_str(&code.prefix);
            }
        }
        head
    }

    /// The source from `start` to `end`.
    pub(super) fn body(&self, start: usize, end: usize) -> &'a str {
        let body = &self.text[start..end];
        if self.cuts_line(start) {
            // Indentation left over from a cut line would change its meaning.
            return body.trim_start_matches([' ', '\t']);
        }
        body
    }

    /// The Markdown of the piece `start..end`: `head`, then `body` (the source
    /// up to `end`, from `start` or a little after it), then the fence that
    /// closes a code block `end` cuts.
    pub(super) fn complete(&self, head: String, body: &str, start: usize, end: usize) -> String {
        let closing = self.code_inside(end).and_then(|code| code.fence.as_ref()).map(|fence| fence.close.as_str());
        // Only the block that `start` cuts may need dedenting; what follows is
        // at the top level already.
        let body_start = end - body.len();
        let own_end = next_in(&self.blocks, start).unwrap_or(self.text.len());
        let (own, rest) = body.split_at(own_end.clamp(body_start, end) - body_start);
        let mut source = head;
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
pub(super) fn trim_blank_lines(s: &str) -> &str {
    let s = s.trim_end();
    match s.find(|c: char| !c.is_whitespace()) {
        Some(first) => &s[line_start(s, first)..],
        None => "",
    }
}

// ---------------------------------------------------------------------------
// Parsing one piece
// ---------------------------------------------------------------------------

/// The whole reply's link reference definitions, so that `[text][ref]` still
/// resolves in a piece that does not hold the definition.
#[derive(Default)]
pub(super) struct Links(HashMap<String, (String, String)>);

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

/// One piece's events for a platform's writer, its references resolved
/// against the whole reply's definitions.
pub(super) fn piece_events<'a>(markdown: &'a str, links: &'a Links) -> impl Iterator<Item = Event<'a>> + 'a {
    let callback = move |link: BrokenLink<'a>| links.resolve(&link);
    Parser::new_with_broken_link_callback(markdown, options(), Some(callback))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared splitting alone: a part is a piece's Markdown, measured in
    /// characters.
    struct Plain<'a>(Source<'a>);

    impl Pieces for Plain<'_> {
        type Part = String;

        fn source(&self) -> &Source<'_> {
            &self.0
        }

        fn reach(&self, start: usize, limit: usize) -> usize {
            reach(self.0.text, start, limit, |_| 1)
        }

        fn piece(&self, start: usize, end: usize, limit: usize) -> Option<String> {
            let markdown = self.0.complete(self.0.reopening(start, true), self.0.body(start, end), start, end);
            (markdown.chars().count() <= limit).then_some(markdown)
        }

        fn fallback(&self, start: usize, limit: usize) -> (usize, String) {
            let end = reach(self.0.text, start, limit, |_| 1);
            (end, self.0.text[start..end].to_string())
        }

        fn is_blank(part: &String) -> bool {
            part.trim().is_empty()
        }
    }

    fn parts(markdown: &str, limit: usize) -> Vec<String> {
        split(&Plain(Source::analyse(markdown, Indentation::Kept, |_, _| {})), limit)
    }

    #[test]
    fn blocks_are_packed_greedily_and_blank_input_gives_nothing() {
        // The source up to the next block counts, blank lines included.
        assert_eq!(parts("aa\n\nbb\n\ncc", 8), ["aa\n\nbb", "cc"]);
        assert_eq!(parts("aa\n\nbb\n\ncc", 7), ["aa", "bb\n\ncc"]);
        assert!(parts(" \n\n\t", 6).is_empty());
    }

    #[test]
    fn a_cut_code_block_is_closed_and_reopened_with_its_language() {
        let markdown = "```py\nline1\nline2\n```";
        assert_eq!(parts(markdown, 16), ["```py\nline1\n```", "```py\nline2\n```"]);
    }

    #[test]
    fn words_inside_styled_spans_are_cut_last() {
        // By words alone the first part would be `one **two`.
        assert_eq!(parts("one **two three** four", 17), ["one", "**two three**", "four"]);
        assert_eq!(parts("**two three four**", 12), ["**two three", "four**"]);
    }

    #[test]
    fn indentation_is_a_word_boundary_only_where_it_may_be_cut() {
        let code = "    let x";
        assert_eq!(next_word(code, 0, Indentation::Cuttable), Some(4));
        assert_eq!(next_word(code, 0, Indentation::Kept), Some(8));
        assert_eq!(next_word("a b", 0, Indentation::Kept), Some(2));
    }

    #[test]
    fn a_hard_cut_keeps_what_shows_as_one_character() {
        let family = "👨\u{200d}👩\u{200d}👧";
        assert_eq!(next_char(&format!("{family}x"), 0), Some(family.len()));
        assert_eq!(next_char("e\u{301}\u{301}x", 0), Some("e\u{301}\u{301}".len()));
        assert_eq!(next_char("x", 0), None);
    }

    #[test]
    fn reach_counts_the_platforms_units() {
        assert_eq!(reach("a😀b", 0, 2, char::len_utf16), 1);
        assert_eq!(reach("a😀b", 0, 2, |_| 1), "a😀".len());
        assert_eq!(reach("ab", 0, 5, |_| 1), 2);
    }

    #[test]
    fn enclosing_finds_the_range_strictly_around() {
        let ranges = [0..4, 6..9];
        assert_eq!(enclosing(&ranges, 7, |r| r), Some(&(6..9)));
        assert_eq!(enclosing(&ranges, 6, |r| r), None);
        assert_eq!(enclosing(&ranges, 5, |r| r), None);
    }

    #[test]
    fn trimming_blank_lines_keeps_the_first_lines_indentation() {
        assert_eq!(trim_blank_lines("\n  \n    code\n\n"), "    code");
        assert_eq!(trim_blank_lines(" \n "), "");
    }
}
