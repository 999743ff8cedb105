use super::*;

/// Renders a reply that fits in one message.
fn html(markdown: &str) -> String {
    let chunks = render(markdown);
    assert_eq!(chunks.len(), 1, "{markdown:?} gave {chunks:#?}");
    chunks.into_iter().next().map(|chunk| chunk.html).unwrap_or_default()
}

// --- A checker for Telegram's HTML -----------------------------------------

const TAGS: [&str; 9] = ["b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"];
const ENTITIES: [&str; 4] = ["&lt;", "&gt;", "&amp;", "&quot;"];

/// Checks that `html` is what Telegram accepts: only its tags, each closed and
/// properly nested, nothing inside `code`/`pre` but `pre`'s one `code`, no
/// link or quote inside its own kind, no `code` in a link, and every `<`, `>`
/// and `&` of the text escaped.
fn check_html(html: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut pos = 0;
    while pos < html.len() {
        let rest = &html[pos..];
        if rest.starts_with('<') {
            let end = rest.find('>').ok_or_else(|| format!("unterminated tag at {pos}"))?;
            let tag = &rest[1..end];
            if let Some(name) = tag.strip_prefix('/') {
                close_tag(&mut open, name, &rest[end + 1..])?;
            } else {
                open_tag(&mut open, tag, &html[..pos])?;
            }
            pos += end + 1;
        } else if rest.starts_with('>') {
            return Err(format!("unescaped '>' at {pos}"));
        } else if rest.starts_with('&') {
            check_entity(rest).map_err(|e| format!("{e} at {pos}"))?;
            pos += 1;
        } else {
            pos += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    match open.last() {
        Some(tag) => Err(format!("<{tag}> is never closed")),
        None => Ok(()),
    }
}

fn open_tag<'a>(open: &mut Vec<&'a str>, tag: &'a str, before: &str) -> Result<(), String> {
    let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
    if !TAGS.contains(&name) {
        return Err(format!("<{name}> is not a Telegram tag"));
    }
    let inside = |t: &str| open.contains(&t);
    let pre_code = name == "code" && open.last() == Some(&"pre") && before.ends_with("<pre>");
    if (inside("code") || inside("pre")) && !pre_code {
        return Err(format!("<{name}> inside code or pre"));
    }
    if (name == "a" || name == "code" || name == "pre") && inside("a") {
        return Err(format!("<{name}> inside a link"));
    }
    if name == "blockquote" && inside("blockquote") {
        return Err("nested blockquote".into());
    }
    match (name, attrs) {
        ("a", attrs) => check_attr(attrs, "href", "")?,
        (_, "") => {}
        ("code", attrs) if pre_code => check_attr(attrs, "class", "language-")?,
        _ => return Err(format!("<{name}> with attributes {attrs:?}")),
    }
    open.push(name);
    Ok(())
}

fn close_tag(open: &mut Vec<&str>, name: &str, after: &str) -> Result<(), String> {
    match open.pop() {
        Some(top) if top == name => {}
        top => return Err(format!("</{name}> closes {top:?}")),
    }
    if name == "code" && open.last() == Some(&"pre") && !after.starts_with("</pre>") {
        return Err("text after pre's code".into());
    }
    Ok(())
}

fn check_attr(attrs: &str, name: &str, value_prefix: &str) -> Result<(), String> {
    let value = attrs
        .strip_prefix(name)
        .and_then(|a| a.strip_prefix("=\""))
        .and_then(|a| a.strip_suffix('"'))
        .ok_or_else(|| format!("bad attributes {attrs:?}"))?;
    if value.contains(['"', '<', '>']) || !value.starts_with(value_prefix) || value.len() == value_prefix.len() {
        return Err(format!("bad attribute value {value:?}"));
    }
    for (i, _) in value.match_indices('&') {
        check_entity(&value[i..])?;
    }
    Ok(())
}

fn check_entity(at: &str) -> Result<(), String> {
    if ENTITIES.iter().any(|entity| at.starts_with(entity)) {
        Ok(())
    } else {
        Err(format!("unescaped '&' before {:?}", at.chars().take(8).collect::<String>()))
    }
}

/// The text Telegram shows for `html`.
fn visible(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

/// Whether `needle`'s characters appear in `haystack` in order.
fn is_subsequence(needle: impl Iterator<Item = char>, haystack: &str) -> bool {
    let mut haystack = haystack.chars();
    needle.into_iter().all(|c| haystack.any(|h| h == c))
}

/// Everything the module promises about any input and limit.
fn assert_invariants(markdown: &str, limit: usize) {
    let chunks = render_with_limit(markdown, limit);
    let limit = limit.max(MIN_LIMIT);
    for chunk in &chunks {
        let context = || format!("limit {limit}, input {markdown:?}, chunk {chunk:#?}");
        assert!(utf16_len(&chunk.html) <= limit, "html too long: {}", context());
        assert!(utf16_len(&chunk.plain) <= limit, "plain too long: {}", context());
        assert!(!chunk.plain.trim().is_empty(), "blank plain: {}", context());
        assert!(!visible(&chunk.html).trim().is_empty(), "blank html: {}", context());
        if let Err(e) = check_html(&chunk.html) {
            panic!("{e}: {}", context());
        }
        assert_eq!(chunk.html.trim_end(), chunk.html, "trailing whitespace: {}", context());
        assert!(!chunk.html.starts_with('\n'), "leading blank line: {}", context());
    }
    assert_eq!(chunks.is_empty(), markdown.trim().is_empty(), "limit {limit}, input {markdown:?}");
    // Splitting may add fences but never drops the agent's text.
    let plains: String = chunks.iter().map(|chunk| chunk.plain.as_str()).collect();
    assert!(
        is_subsequence(markdown.chars().filter(|c| !c.is_whitespace()), &plains),
        "text lost at limit {limit}: {markdown:?} → {chunks:#?}"
    );
}

#[test]
fn the_checker_rejects_what_telegram_would() {
    for bad in [
        "<b>x",
        "x</b>",
        "<b><i>x</b></i>",
        "<h1>x</h1>",
        "a < b",
        "a > b",
        "a & b",
        "&nbsp;",
        "<a>x</a>",
        "<a href=\"x\"y\">x</a>",
        "<a href=\"http://x\"><a href=\"http://y\">x</a></a>",
        "<a href=\"http://x\"><code>x</code></a>",
        "<blockquote><blockquote>x</blockquote></blockquote>",
        "<code><b>x</b></code>",
        "<pre><b>x</b></pre>",
        "<pre>x<code>y</code></pre>",
        "<b class=\"x\">x</b>",
        "<code class=\"language-rust\">x</code>",
    ] {
        assert!(check_html(bad).is_err(), "{bad:?} passed");
    }
    for good in [
        "<b>a &amp; b</b> &lt;c&gt; &quot;",
        "<pre><code class=\"language-rust\">x</code></pre>",
        "<a href=\"http://x/?a=1&amp;b=&quot;\"><b>x</b></a>",
        "<blockquote><b>x</b><pre>y</pre></blockquote>",
        "<tg-spoiler><u>x</u></tg-spoiler>",
    ] {
        assert_eq!(check_html(good), Ok(()), "{good:?}");
    }
}

// --- Measuring and escaping -------------------------------------------------

#[test]
fn length_is_counted_in_utf16_code_units() {
    assert_eq!(utf16_len(""), 0);
    assert_eq!(utf16_len("abc"), 3);
    assert_eq!(utf16_len("漢字"), 2);
    assert_eq!(utf16_len("😀"), 2);
    assert_eq!(utf16_len("👨‍👩‍👧"), 8);
    assert_eq!(utf16_len("é"), 1);
}

#[test]
fn escaping_covers_the_three_markup_characters_and_quotes() {
    assert_eq!(escape_html("a < b > c & \"d\" 'e'"), "a &lt; b &gt; c &amp; &quot;d&quot; 'e'");
    assert_eq!(escape_html("&amp;"), "&amp;amp;");
    assert_eq!(escape_text("\"quoted\" & <tag>"), "\"quoted\" &amp; &lt;tag&gt;");
}

// --- Rendering ----------------------------------------------------------------

#[test]
fn empty_input_gives_no_chunks() {
    assert!(render("").is_empty());
    assert!(render("  \n\n \t\n").is_empty());
}

#[test]
fn inline_styles_become_telegram_tags() {
    assert_eq!(html("**bold** and __bold__"), "<b>bold</b> and <b>bold</b>");
    assert_eq!(html("*it* and _it_"), "<i>it</i> and <i>it</i>");
    assert_eq!(html("~~gone~~ ~gone~"), "<s>gone</s> <s>gone</s>");
    assert_eq!(html("`a < b && c`"), "<code>a &lt; b &amp;&amp; c</code>");
    assert_eq!(html("***both***"), "<i><b>both</b></i>");
    assert_eq!(html("**bold *and it* and `code`**"), "<b>bold <i>and it</i> and <code>code</code></b>");
}

#[test]
fn text_is_escaped_but_quotes_are_left_alone() {
    assert_eq!(html("if a < b && c > d { \"x\" }"), "if a &lt; b &amp;&amp; c &gt; d { \"x\" }");
    assert_eq!(html("&amp; &copy;"), "&amp; ©");
    assert_eq!(html(r"\*not italic\*"), "*not italic*");
}

#[test]
fn unmatched_markers_stay_text() {
    assert_eq!(html("a * b _ c ` d ~~ e"), "a * b _ c ` d ~~ e");
    assert_eq!(html("snake_case_name and 2*3*4"), "snake_case_name and 2<i>3</i>4");
}

#[test]
fn links_to_telegram_schemes_are_clickable() {
    assert_eq!(
        html("[docs](https://example.com/a?b=1&c=\"d\")"),
        "<a href=\"https://example.com/a?b=1&amp;c=%22d%22\">docs</a>"
    );
    assert_eq!(html("<https://example.com/x>"), "<a href=\"https://example.com/x\">https://example.com/x</a>");
    assert_eq!(html("<me@example.com>"), "<a href=\"mailto:me@example.com\">me@example.com</a>");
    assert_eq!(html("[me](tg://resolve?domain=me)"), "<a href=\"tg://resolve?domain=me\">me</a>");
    assert_eq!(html("[**bold** link](http://x.org/)"), "<a href=\"http://x.org/\"><b>bold</b> link</a>");
    assert_eq!(html("[](http://x.org/)"), "<a href=\"http://x.org/\">http://x.org/</a>");
}

#[test]
fn other_links_show_their_url_as_text() {
    assert_eq!(html("see [the file](src/main.rs)"), "see the file (src/main.rs)");
    assert_eq!(html("[x](javascript:alert(1))"), "x (javascript:alert(1))");
    assert_eq!(html("[x](ftp://host/a<b)"), "x (ftp://host/a&lt;b)");
    assert_eq!(html("[*x*](#top)"), "<i>x</i> (#top)");
    assert_eq!(html("[http://bad host](http://bad host)"), "[http://bad host](http://bad host)");
}

#[test]
fn code_inside_a_link_is_plain_text() {
    assert_eq!(html("[`render`](https://docs.rs/x)"), "<a href=\"https://docs.rs/x\">render</a>");
}

#[test]
fn images_become_links_to_the_image() {
    assert_eq!(html("![a cat](https://img.example/cat.png)"), "<a href=\"https://img.example/cat.png\">a cat</a>");
    assert_eq!(
        html("![](https://img.example/cat.png)"),
        "<a href=\"https://img.example/cat.png\">https://img.example/cat.png</a>"
    );
    assert_eq!(html("![diagram](diagram.svg)"), "diagram (diagram.svg)");
    assert_eq!(
        html("[![badge](https://img.example/b.svg)](https://ci.example/)"),
        "<a href=\"https://ci.example/\">badge</a>"
    );
}

#[test]
fn reference_links_resolve() {
    assert_eq!(
        html("[docs][d] and [D]\n\n[d]: https://example.com/"),
        "<a href=\"https://example.com/\">docs</a> and <a href=\"https://example.com/\">D</a>"
    );
}

#[test]
fn headings_are_bold_lines() {
    assert_eq!(html("# Title\nText\n## Sub *it*\n\nMore"), "<b>Title</b>\n\nText\n\n<b>Sub <i>it</i></b>\n\nMore");
    assert_eq!(html("# **Bold** title"), "<b>Bold title</b>");
    assert_eq!(html("Setext\n======"), "<b>Setext</b>");
}

#[test]
fn paragraphs_are_separated_by_one_blank_line() {
    assert_eq!(html("one\n\n\n\ntwo\nthree  \nfour\\\nfive"), "one\n\ntwo\nthree\nfour\nfive");
}

#[test]
fn lists_get_bullets_numbers_and_indentation() {
    assert_eq!(html("- a\n- b\n  - c\n    - d\n- e"), "• a\n• b\n  • c\n    • d\n• e");
    assert_eq!(html("3. three\n4. four\n   1. sub"), "3. three\n4. four\n  1. sub");
    assert_eq!(html("Intro:\n- a\n- b\n\nAfter"), "Intro:\n\n• a\n• b\n\nAfter");
    assert_eq!(html("- a\n\n  second paragraph\n- b"), "• a\n  second paragraph\n• b");
    assert_eq!(html("- **bold** item\n- `code` item"), "• <b>bold</b> item\n• <code>code</code> item");
    assert_eq!(html("-\n- b"), "•\n• b");
}

#[test]
fn task_items_get_checkboxes() {
    assert_eq!(html("- [ ] todo\n- [x] done\n1. [x] first"), "☐ todo\n☑ done\n\n1. ☑ first");
}

#[test]
fn quotes_become_blockquotes_without_nesting() {
    assert_eq!(html("> quoted *text*\n> more"), "<blockquote>quoted <i>text</i>\nmore</blockquote>");
    assert_eq!(html("> a\n>\n> b"), "<blockquote>a\n\nb</blockquote>");
    assert_eq!(html("> outer\n> > inner"), "<blockquote>outer\n\ninner</blockquote>");
    assert_eq!(html("before\n\n> - item\n\nafter"), "before\n\n<blockquote>• item</blockquote>\n\nafter");
    assert_eq!(html("> ```\n> code\n> ```"), "<blockquote><pre>code</pre></blockquote>");
}

#[test]
fn code_blocks_keep_their_text_and_language() {
    assert_eq!(
        html("```rust\nfn f() -> &'a str { \"<>\" }\n```"),
        "<pre><code class=\"language-rust\">fn f() -&gt; &amp;'a str { \"&lt;&gt;\" }</code></pre>"
    );
    assert_eq!(html("```\nplain\n\n  indented\n```"), "<pre>plain\n\n  indented</pre>");
    assert_eq!(html("    indented\n    code"), "<pre>indented\ncode</pre>");
    assert_eq!(html("~~~py title=\"x\"\nprint()\n~~~"), "<pre><code class=\"language-py\">print()</code></pre>");
    assert_eq!(html("```a\"b<c\nx\n```"), "<pre><code class=\"language-a&quot;b&lt;c\">x</code></pre>");
    assert_eq!(html("text\n```\n**not bold**\n```\ntext"), "text\n\n<pre>**not bold**</pre>\n\ntext");
    assert_eq!(html("- item\n  ```sh\n  ls\n  ```"), "• item\n  <pre><code class=\"language-sh\">ls</code></pre>");
}

#[test]
fn empty_code_blocks_are_not_sent_as_empty_tags() {
    assert_eq!(html("a\n\n```\n```\n\nb"), "a\n\nb");
    // Alone it renders to nothing, so the source is shown as written.
    assert_eq!(html("```\n```"), "```\n```");
}

#[test]
fn raw_html_is_shown_as_text() {
    assert_eq!(html("a <b>bold</b> <br/> c"), "a &lt;b&gt;bold&lt;/b&gt; &lt;br/&gt; c");
    assert_eq!(
        html("<div>\n<script>alert(1)</script>\n</div>"),
        "&lt;div&gt;\n&lt;script&gt;alert(1)&lt;/script&gt;\n&lt;/div&gt;"
    );
    assert_eq!(html("<!-- note -->\n\ntext"), "&lt;!-- note --&gt;\n\ntext");
}

#[test]
fn rules_and_tables_are_plain_lines() {
    assert_eq!(html("a\n\n---\n\nb"), "a\n\n———\n\nb");
    assert_eq!(
        html("| Name | *Value* |\n|---|---:|\n| `x` | [one](https://e.x/) |\n| long name | 2 < 3 |"),
        "<pre>Name      | Value\nx         | one (https://e.x/)\nlong name | 2 &lt; 3</pre>"
    );
}

#[test]
fn emoji_and_cjk_pass_through() {
    assert_eq!(html("**漢字** 😀 👨‍👩‍👧"), "<b>漢字</b> 😀 👨‍👩‍👧");
}

// --- Splitting ------------------------------------------------------------------

#[test]
fn a_short_reply_is_one_chunk_with_its_source() {
    let chunks = render("Hello *world*\n\n");
    assert_eq!(chunks, vec![Chunk { html: "Hello <i>world</i>".into(), plain: "Hello *world*".into() }]);
}

#[test]
fn paragraphs_are_packed_greedily() {
    let paragraph = "word ".repeat(15).trim_end().to_string(); // 74 units
    let markdown = [paragraph.as_str(); 5].join("\n\n");
    let chunks = render_with_limit(&markdown, 160);
    let plains: Vec<&str> = chunks.iter().map(|chunk| chunk.plain.as_str()).collect();
    let two = format!("{paragraph}\n\n{paragraph}");
    assert_eq!(plains, [two.as_str(), two.as_str(), paragraph.as_str()]);
    assert_eq!(chunks[0].html, two);
}

#[test]
fn a_long_paragraph_is_cut_at_lines_then_words() {
    let markdown = "aaaa bbbb cccc\ndddd eeee ffff gggg hhhh iiii jjjj kkkk";
    let plains: Vec<String> = render_with_limit(markdown, 20).into_iter().map(|chunk| chunk.plain).collect();
    assert_eq!(plains, ["aaaa bbbb cccc", "dddd eeee ffff gggg", "hhhh iiii jjjj kkkk"]);
}

#[test]
fn words_are_cut_outside_styled_spans_when_possible() {
    let plains: Vec<String> =
        render_with_limit("aaaa bbbb **cc dd ee** ffff", 20).into_iter().map(|chunk| chunk.plain).collect();
    assert_eq!(plains, ["aaaa bbbb", "**cc dd ee** ffff"]);
}

#[test]
fn a_long_word_is_cut_between_characters() {
    let word = "😀".repeat(30);
    let chunks = render_with_limit(&word, 16);
    assert!(chunks.iter().all(|chunk| chunk.plain == "😀".repeat(8)) || chunks.len() == 4, "{chunks:?}");
    assert_eq!(chunks.iter().map(|chunk| chunk.plain.as_str()).collect::<String>(), word);
}

#[test]
fn a_hard_cut_keeps_joined_emoji_and_accents_whole() {
    let family = "👨‍👩‍👧"; // 8 units
    let chunks = render_with_limit(&family.repeat(5), 20);
    assert!(chunks.iter().all(|chunk| chunk.plain == family.repeat(2) || chunk.plain == family), "{chunks:?}");
    let accented = "e\u{301}".repeat(20);
    let chunks = render_with_limit(&accented, 17);
    assert!(chunks.iter().all(|chunk| chunk.plain.starts_with('e') && chunk.plain.ends_with('\u{301}')), "{chunks:?}");
}

#[test]
fn escaping_growth_is_measured() {
    // 30 units of Markdown, 120 of HTML.
    let markdown = "<".repeat(30);
    let chunks = render_with_limit(&markdown, 40);
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|chunk| chunk.html == "&lt;".repeat(10)), "{chunks:?}");
}

#[test]
fn a_code_block_that_fits_is_never_cut() {
    let code = format!("```rust\n{}```", "let x = 1;\n".repeat(5));
    let markdown = format!("{}\n\n{code}\n\n{}", "intro ".repeat(10).trim_end(), "after ".repeat(10));
    let chunks = render_with_limit(&markdown, utf16_len(&html(&code)) + 30);
    assert_eq!(chunks.len(), 3, "{chunks:#?}");
    assert_eq!(chunks[1].plain, code);
    assert!(chunks[1].html.starts_with("<pre><code class=\"language-rust\">"));
}

#[test]
fn a_long_code_block_is_cut_into_complete_blocks() {
    let lines: Vec<String> = (0..40).map(|i| format!("line {i} <&>")).collect();
    let markdown = format!("Here:\n\n```rust\n{}\n```\n\nDone.", lines.join("\n"));
    let chunks = render_with_limit(&markdown, 300);
    assert!(chunks.len() > 2, "{chunks:#?}");
    let mut seen = Vec::new();
    for chunk in &chunks {
        if chunk.plain.contains("line ") {
            assert!(chunk.plain.contains("```rust\n"), "{chunk:#?}");
            assert!(chunk.plain.trim_end_matches("\n\nDone.").ends_with("\n```"), "{chunk:#?}");
            assert!(chunk.html.contains("<pre><code class=\"language-rust\">line "), "{chunk:#?}");
            assert!(chunk.html.contains("&lt;&amp;&gt;</code></pre>"), "{chunk:#?}");
            let code = visible(&chunk.html);
            seen.extend(code.lines().filter(|l| l.starts_with("line ")).map(str::to_string));
        }
    }
    assert_eq!(seen, lines);
}

#[test]
fn a_cut_code_block_in_a_quote_stays_in_the_quote() {
    let lines: Vec<String> = (0..20).map(|i| format!("> line {i}")).collect();
    let markdown = format!("> ```\n{}\n> ```", lines.join("\n"));
    let chunks = render_with_limit(&markdown, 120);
    assert!(chunks.len() > 1);
    for chunk in &chunks {
        assert!(chunk.html.starts_with("<blockquote><pre>line"), "{chunk:#?}");
        assert!(chunk.html.ends_with("</pre></blockquote>"), "{chunk:#?}");
    }
}

#[test]
fn a_cut_code_line_keeps_each_piece_in_a_block() {
    let markdown = format!("```\n{}\n```", "x".repeat(100));
    let chunks = render_with_limit(&markdown, 40);
    assert!(chunks.len() > 3);
    for chunk in &chunks {
        assert!(chunk.html.starts_with("<pre>x") && chunk.html.ends_with("x</pre>"), "{chunk:#?}");
    }
    let code: String = chunks.iter().map(|chunk| visible(&chunk.html)).collect();
    assert_eq!(code, "x".repeat(100));
}

#[test]
fn a_cut_code_block_in_a_nested_list_is_not_read_as_indented_code() {
    let markdown = "- top
  - sub
    ```
    aaaa
    bbbb
    cccc
    dddd
    ```";
    let chunks = render_with_limit(markdown, 40);
    let htmls: Vec<&str> = chunks.iter().map(|chunk| chunk.html.as_str()).collect();
    assert_eq!(
        htmls,
        [
            "• top
  • sub",
            "<pre>aaaa\nbbbb\ncccc</pre>",
            "<pre>dddd</pre>"
        ]
    );
    assert_eq!(chunks[1].plain, "```\naaaa\nbbbb\ncccc\n```");
}

#[test]
fn a_cut_table_repeats_its_header() {
    let rows: Vec<String> = (0..12).map(|i| format!("| {i} | {} |", i * i)).collect();
    let markdown = format!("| n | n² |\n|---|---|\n{}", rows.join("\n"));
    let chunks = render_with_limit(&markdown, 60);
    assert!(chunks.len() > 2, "{chunks:#?}");
    for chunk in &chunks {
        assert!(chunk.plain.starts_with("| n | n² |\n|---|---|\n| "), "{chunk:#?}");
        assert!(chunk.html.starts_with("<pre>n ") && chunk.html.ends_with("</pre>"), "{chunk:#?}");
    }
}

#[test]
fn a_long_list_is_cut_between_items() {
    let items: Vec<String> = (1..=30).map(|i| format!("{i}. item number {i}")).collect();
    let markdown = items.join("\n");
    let chunks = render_with_limit(&markdown, 100);
    for chunk in &chunks {
        assert!(chunk.plain.lines().all(|line| items.contains(&line.to_string())), "{chunk:#?}");
        assert_eq!(chunk.html, chunk.plain);
    }
    assert_eq!(chunks.iter().map(|chunk| chunk.plain.lines().count()).sum::<usize>(), 30);
}

#[test]
fn reference_links_resolve_across_chunks() {
    let markdown = format!("[docs][d]\n\n{}\n\n[d]: https://example.com/", "filler ".repeat(20).trim_end());
    let chunks = render_with_limit(&markdown, 100);
    assert!(chunks.len() > 1);
    assert_eq!(chunks[0].html, "<a href=\"https://example.com/\">docs</a>");
}

#[test]
fn the_default_limit_is_telegrams() {
    let markdown = "A sentence of some length, repeated to fill messages. ".repeat(400);
    let chunks = render(&markdown);
    assert!(chunks.len() >= 5);
    assert!(chunks.iter().all(|chunk| utf16_len(&chunk.html) <= MESSAGE_LIMIT));
    assert!(chunks[0].plain.len() > MESSAGE_LIMIT - 100, "chunks are packed");
}

#[test]
fn tiny_limits_are_raised() {
    let chunks = render_with_limit("hello world, this is a reply", 1);
    assert!(chunks.iter().all(|chunk| utf16_len(&chunk.html) <= MIN_LIMIT));
    assert_eq!(chunks.len(), 2);
}

// --- Invariants over many inputs -----------------------------------------------

const TRICKY: &[&str] = &[
    "*",
    "**",
    "***",
    "_*`~",
    "* * *",
    "`",
    "``",
    "```",
    "```\n",
    "```rust",
    "```\n```",
    "````\n```\n````",
    "~~~\ncode",
    "```\nunclosed\n\n\nblock",
    "> ```\n> a\n\nb",
    "- ```\n  a\n  ```\n- b",
    "<",
    "&",
    ">",
    "&&&<<<>>>\"\"\"",
    "&amp;&lt;&#60;&#x3c;",
    "<b>",
    "</b>",
    "<a href=\"x\">",
    "<!--",
    "<script>alert('x')</script>",
    "[",
    "[]",
    "[]()",
    "[a](",
    "[a]()",
    "[a](<>)",
    "[a](http://x \"title\")",
    "[a](http://x\"onclick=\")",
    "[a](mailto:x@y)",
    "![",
    "![](",
    "![a](b)",
    "[![a](http://i)](http://l)",
    "[a]: http://x",
    "[a]: http://x\n[b]: http://y",
    "[a]",
    ">",
    "> > > deep",
    ">\n>\n>",
    "- ",
    "-",
    "1.",
    "1. ",
    "- [ ]",
    "- [x] ",
    "- - - x",
    "#",
    "# ",
    "###### h",
    "####### not",
    "---",
    "***",
    "___",
    "|",
    "| a |",
    "| a |\n|---|",
    "| a | b |\n|---|---|\n| `c|d` | e |",
    "\\",
    "\\\\",
    "a  \nb",
    "a\\\nb",
    "\t\tcode",
    "    ",
    "\u{0}",
    "\r\n\r\n",
    "a\r\nb\r\n\r\nc",
    "😀",
    "👨‍👩‍👧‍👦",
    "漢字かなカナ한글",
    "e\u{301}",
    "\u{200b}",
    "\u{feff}",
    "x\u{2028}y",
];

#[test]
fn tricky_inputs_keep_the_invariants() {
    for markdown in TRICKY {
        for limit in [1, 16, 17, 20, 25, 40, 64, 100, MESSAGE_LIMIT] {
            assert_invariants(markdown, limit);
            let doubled = format!("{markdown}\n{markdown}\n\n{markdown} {markdown}");
            assert_invariants(&doubled, limit);
        }
    }
}

/// A small deterministic generator (xorshift), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const ATOMS: &[&str] = &[
    "word",
    "the",
    "a",
    "reply",
    "x",
    "漢字",
    "中文字符",
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "é",
    "Ω",
    "*",
    "**",
    "_",
    "__",
    "`",
    "``",
    "~~",
    "~",
    "<",
    ">",
    "&",
    "\"",
    "'",
    "\\",
    "[",
    "]",
    "(",
    ")",
    "!",
    "#",
    "|",
    "-",
    "+",
    "1.",
    ":",
    "&amp;",
    "<b>",
    "</i>",
    "<br>",
    "<!-- x -->",
    "http://example.com",
    "[link](https://example.com/?a=1&b=2)",
    "[rel](docs/a.md)",
    "![img](https://e.x/i.png)",
    "[ref][r]",
    "<https://auto.link>",
    "`code <&>`",
    "**bold _it_**",
    "~~strike~~",
    "snake_case",
    "2*3*4",
];

const LINE_STARTS: &[&str] =
    &["", "", "", "", "# ", "## ", "- ", "* ", "1. ", "2) ", "> ", "> > ", "- [ ] ", "- [x] ", "  - ", "    ", "> - "];

const BLOCKS: &[&str] = &[
    "```rust\nfn main() {\n    println!(\"<&>\");\n}\n```",
    "```\nplain code\n\nwith blank\n```",
    "~~~\ntilde\n~~~",
    "> ```\n> quoted code\n> ```",
    "- item\n\n  ```sh\n  ls -la\n  ```",
    "| a | b |\n|---|---|\n| 1 | *2* |",
    "---",
    "[r]: https://example.com/ref",
    "<div>\nraw <b>html</b>\n</div>",
    "```",
    "Setext\n===",
];

fn generated_line(rng: &mut Rng) -> String {
    let mut line = rng.pick(LINE_STARTS).to_string();
    let most = if rng.below(8) == 0 { 80 } else { 12 };
    let words = 1 + rng.below(most);
    for i in 0..words {
        if i > 0 && rng.below(6) != 0 {
            line.push(' ');
        }
        line.push_str(rng.pick(ATOMS));
    }
    line
}

fn generated_document(rng: &mut Rng) -> String {
    let mut doc = String::new();
    for _ in 0..1 + rng.below(12) {
        match rng.below(5) {
            0 => doc.push_str(rng.pick(BLOCKS)),
            1 => doc.push_str(&format!("```{}\n{}\n```", rng.pick(&["", "py", "a<b"]), generated_line(rng))),
            _ => doc.push_str(&generated_line(rng)),
        }
        doc.push_str(rng.pick(&["\n", "\n\n", "\n\n\n", " ", "\n"]));
    }
    doc
}

#[test]
fn generated_inputs_keep_the_invariants() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..400 {
        let doc = generated_document(&mut rng);
        for limit in [16, 24, 50, 120, 400] {
            assert_invariants(&doc, limit);
        }
    }
}

#[test]
fn large_inputs_keep_the_invariants_at_the_real_limit() {
    let mut rng = Rng(42);
    for _ in 0..10 {
        let doc: String = (0..40).map(|_| generated_document(&mut rng)).collect::<Vec<_>>().join("\n\n");
        assert_invariants(&doc, MESSAGE_LIMIT);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Arbitrary Markdown-ish text at any limit: every chunk within the
    /// limit in UTF-16 units, valid Telegram HTML, nothing blank, no text lost.
    #[test]
    fn arbitrary_markdown_keeps_the_invariants(
        doc in "[a-zA-Z0-9 *_`#>\\-\\[\\]()!|~<&.:\n\té😀\u{200d}]{0,500}",
        limit in 16usize..700,
    ) {
        assert_invariants(&doc, limit);
    }
}
