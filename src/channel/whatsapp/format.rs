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
//! items, lines, words, characters; the splitting is `channel::split`, shared
//! with Telegram) and each piece is rendered on its own, so every message is
//! complete by itself: a code block cut in two becomes two complete blocks,
//! and a list cut between items keeps its numbering. A piece fits when its
//! rendered text is within the limit, counted in characters.

use std::ops::Range;

use pulldown_cmark::{CowStr, Event, Parser, Tag, TagEnd};

use crate::channel::split::{
    self, line_end, options, piece_events, trim_blank_lines, Indentation, Links, Pieces, Source,
};

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
    split::split(&Reply::analyse(markdown), limit.max(MIN_LIMIT))
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

// ---------------------------------------------------------------------------
// Splitting the source
// ---------------------------------------------------------------------------

/// The reply being split: the shared analysis of its source, and the numbers
/// of its ordered list items, which a part cut from its list must keep.
struct Reply<'a> {
    source: Source<'a>,
    /// Where each ordered list item's marker starts, and its number.
    numbers: Vec<(usize, u64)>,
}

impl<'a> Reply<'a> {
    fn analyse(text: &'a str) -> Self {
        let mut lists: Vec<Option<u64>> = Vec::new();
        let mut numbers = Vec::new();
        let source = Source::analyse(text, Indentation::Kept, |event, range| match event {
            Event::Start(Tag::List(first)) => lists.push(*first),
            Event::Start(Tag::Item) => {
                if let Some(Some(number)) = lists.last_mut() {
                    numbers.push((range.start, *number));
                    *number += 1;
                }
            }
            Event::End(TagEnd::List(_)) => {
                lists.pop();
            }
            _ => {}
        });
        Self { source, numbers }
    }

    /// The Markdown of one piece: the source between two boundaries, with the
    /// fences that make a cut code block complete on both sides. (A cut table
    /// needs nothing: WhatsApp shows its rows as plain lines anyway, and the
    /// rest of it reads as lines of cells.)
    fn piece_source(&self, start: usize, end: usize) -> String {
        let text = self.source.text;
        // The language is left out: the rendering drops it anyway.
        let mut head = self.source.reopening(start, false);
        let mut body = self.source.body(start, end);
        if self.source.cuts_line(start) {
            if let Some(at) = block_escape(body) {
                head.push_str(&body[..at]);
                head.push('\\');
                body = &body[at..];
            }
        } else if let Some((digits, number)) = self.renumbering(start, end) {
            head.push_str(&text[start..digits.start]);
            head.push_str(&number.to_string());
            body = &text[digits.end..end];
        }
        self.source.complete(head, body, start, end)
    }

    /// Where the number of an ordered item on the piece's first line is, and
    /// the number the item has in the whole reply. Cut from its list, the item
    /// would be numbered by its own marker, and a list written `1.` `1.` `1.`
    /// (which Markdown numbers 1, 2, 3) would start again at 1 in each part.
    fn renumbering(&self, start: usize, end: usize) -> Option<(Range<usize>, u64)> {
        let text = self.source.text;
        let &(at, number) = self.numbers.get(self.numbers.partition_point(|&(at, _)| at < start))?;
        let marker = text.get(at..end)?;
        let digits = marker.len() - marker.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        (at < line_end(text, start) && digits > 0).then_some((at..at + digits, number))
    }
}

impl Pieces for Reply<'_> {
    type Part = String;

    fn source(&self) -> &Source<'_> {
        &self.source
    }

    /// Rendering seldom shrinks Markdown to less than half (only link
    /// definitions and entities do), so pieces are sought within twice the
    /// limit of source: at worst a part is shorter than it could be.
    fn reach(&self, start: usize, limit: usize) -> usize {
        split::reach(self.source.text, start, limit.saturating_mul(2), |_| 1)
    }

    /// A piece that shows nothing (link definitions, an empty code block)
    /// gives an empty part, which is dropped.
    fn piece(&self, start: usize, end: usize, limit: usize) -> Option<String> {
        let text = to_whatsapp(&self.piece_source(start, end), &self.source.links);
        (char_len(&text) <= limit).then_some(text)
    }

    /// The source's characters as they are (a cut code block's fences deep in
    /// quotes, or a letter under hundreds of accents, leave no room for one
    /// character with its markup).
    fn fallback(&self, start: usize, limit: usize) -> (usize, String) {
        let text = self.source.text;
        let end = split::reach(text, start, limit, |_| 1);
        (end, text[start..end].trim().to_string())
    }

    fn is_blank(part: &String) -> bool {
        part.trim().is_empty()
    }
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

// ---------------------------------------------------------------------------
// Rendering one piece
// ---------------------------------------------------------------------------

fn to_whatsapp(markdown: &str, links: &Links) -> String {
    let mut writer = Writer::new();
    for event in piece_events(markdown, links) {
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
