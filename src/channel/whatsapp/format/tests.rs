use super::*;

/// Renders a reply that fits in one message.
fn one(markdown: &str) -> String {
    let parts = render(markdown);
    assert_eq!(parts.len(), 1, "{markdown:?} gave {parts:#?}");
    parts.into_iter().next().unwrap_or_default()
}

// --- Checks over any output -----------------------------------------------------

/// The words of `text`: runs of letters, digits and other non-ASCII symbols
/// (emoji, CJK), with all ASCII punctuation taken as markup. Numbers alone
/// are left out, since lists are renumbered.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_ascii_punctuation() || c.is_whitespace())
        .filter(|word| !word.is_empty() && !word.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// The words of `markdown` a rendering must keep: a fence's language and a
/// task's `[x]` are markup too.
fn expected_words(markdown: &str) -> Vec<String> {
    let kept: Vec<&str> = markdown
        .lines()
        .filter(|line| {
            let content = line.trim_start_matches(|c: char| c == '>' || c.is_whitespace());
            !content.starts_with("```") && !content.starts_with("~~~")
        })
        .collect();
    words(&kept.join("\n").replace("[x]", " ").replace("[X]", " "))
}

/// Whether `expected` appear in order in `parts`. The parts are joined
/// without a separator (a word cut between two parts reads whole again), so
/// each word is looked for as a substring after the previous one.
fn words_in_order(expected: &[String], parts: &[String]) -> Result<(), String> {
    let joined: String = words(&parts.concat()).concat();
    let mut at = 0;
    for word in expected {
        match joined[at..].find(word.as_str()) {
            Some(i) => at += i + word.len(),
            None => return Err(format!("{word:?} missing after {:?}", &joined[..at])),
        }
    }
    Ok(())
}

/// Whether each part opens and closes its ``` blocks: fences are the lines
/// that are just ``` after any quote or list prefix.
fn fences_balanced(part: &str) -> bool {
    let fences = part.lines().filter(|line| line.trim_start_matches(['>', ' ']) == "```").count();
    fences % 2 == 0
}

/// Everything the module promises about any input and limit.
fn assert_invariants(markdown: &str, limit: usize) -> Vec<String> {
    let parts = render_with_limit(markdown, limit);
    let limit = limit.max(MIN_LIMIT);
    for part in &parts {
        let context = || format!("limit {limit}, input {markdown:?}, part {part:?}, all {parts:#?}");
        assert!(char_len(part) <= limit, "too long: {}", context());
        assert!(!part.trim().is_empty(), "blank: {}", context());
        assert_eq!(part.trim_end(), part, "trailing whitespace: {}", context());
        assert!(!part.starts_with('\n'), "leading blank line: {}", context());
    }
    if markdown.trim().is_empty() {
        assert!(parts.is_empty(), "blank input gave {parts:?}");
    }
    parts
}

/// What the module promises about text whose characters all show (no
/// entities, no link definitions) and whose only ``` are its fences: its
/// words all show, in order, and each part's code blocks are complete.
fn assert_text_kept(markdown: &str, limit: usize) {
    let parts = assert_invariants(markdown, limit);
    if let Err(e) = words_in_order(&expected_words(markdown), &parts) {
        panic!("text lost at limit {limit}: {e}: {markdown:?} → {parts:#?}");
    }
    for part in &parts {
        assert!(fences_balanced(part), "fences at limit {limit}: {part:?} of {markdown:?} → {parts:#?}");
    }
}

#[test]
fn the_checks_catch_what_they_should() {
    assert_eq!(words("**a** b_c `d`\n- 12 e2e 😀"), ["a", "b", "c", "d", "e2e", "😀"]);
    assert_eq!(expected_words("```py\nx\n```\n- [x] done"), ["x", "done"]);
    let parts = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let expected = words("alpha beta gamma");
    assert_eq!(words_in_order(&expected, &parts(&["*alpha* be", "ta", "gamma"])), Ok(()));
    assert!(words_in_order(&expected, &parts(&["alpha gamma", "beta"])).is_err());
    assert!(fences_balanced("a\n```\nx\n```\n> ```\n> y\n> ```"));
    assert!(!fences_balanced("```\nx"));
}

// --- Rendering ----------------------------------------------------------------

#[test]
fn empty_input_gives_no_messages() {
    assert!(render("").is_empty());
    assert!(render("  \n\n \t\n").is_empty());
}

#[test]
fn inline_styles_become_whatsapp_markers() {
    assert_eq!(one("**bold** and __bold__"), "*bold* and *bold*");
    assert_eq!(one("*it* and _it_"), "_it_ and _it_");
    assert_eq!(one("~~gone~~ ~gone~"), "~gone~ ~gone~");
    assert_eq!(one("`a < b && c`"), "`a < b && c`");
    assert_eq!(one("**bold *and it* and `code`**"), "*bold _and it_ and `code`*");
}

#[test]
fn markers_sharing_both_ends_nest_bold_outermost() {
    assert_eq!(one("***both***"), "*_both_*");
    assert_eq!(one("~~***all***~~"), "*_~all~_*");
    assert_eq!(one("*__x__ y*"), "_*x* y_");
    assert_eq!(one("# *title*"), "*_title_*");
}

#[test]
fn markers_touch_text_and_empty_spans_vanish() {
    assert_eq!(one("a `  x  ` b"), "a  `x`  b");
    assert_eq!(one("**bold `code `**!"), "*bold `code`* !");
    assert_eq!(one("a **` `** b"), "a   b");
    assert_eq!(one("x `` a`b `` y `` ` ``"), "x a`b y `");
}

#[test]
fn markdown_escapes_and_entities_become_plain_characters() {
    assert_eq!(one(r"\*not italic\* 2\*3"), "*not italic* 2*3");
    assert_eq!(one("&amp; &copy; <"), "& © <");
    assert_eq!(one("a * b _ c ` d ~~ e"), "a * b _ c ` d ~~ e");
}

#[test]
fn headings_are_bold_lines() {
    assert_eq!(one("# Title\nText\n## Sub *it*\n\nMore"), "*Title*\n\nText\n\n*Sub _it_*\n\nMore");
    assert_eq!(one("# **Bold** title"), "*Bold title*");
    assert_eq!(one("Setext\n======"), "*Setext*");
}

#[test]
fn paragraphs_are_separated_by_one_blank_line() {
    assert_eq!(one("one\n\n\n\ntwo\nthree  \nfour\\\nfive"), "one\n\ntwo\nthree\nfour\nfive");
}

#[test]
fn lists_keep_bullets_numbers_and_indentation() {
    assert_eq!(one("- a\n* b\n  + c\n    - d\n- e"), "- a\n\n- b\n  - c\n    - d\n\n- e");
    assert_eq!(one("- a\n- b\n  - c\n    - d\n- e"), "- a\n- b\n  - c\n    - d\n- e");
    assert_eq!(one("3. three\n4. four\n   1. sub"), "3. three\n4. four\n  1. sub");
    assert_eq!(one("1) one\n1) two"), "1. one\n2. two");
    assert_eq!(one("Intro:\n- a\n- b\n\nAfter"), "Intro:\n\n- a\n- b\n\nAfter");
    assert_eq!(one("- a\n\n  second paragraph\n- b"), "- a\n  second paragraph\n- b");
    assert_eq!(one("- **bold** item\n- `code` item"), "- *bold* item\n- `code` item");
    assert_eq!(one("-\n- b"), "-\n- b");
}

#[test]
fn task_items_get_boxes() {
    assert_eq!(one("- [ ] todo\n- [x] done\n1. [x] first"), "☐ todo\n☑ done\n\n1. ☑ first");
    assert_eq!(one("- top\n  - [ ] sub"), "- top\n  ☐ sub");
}

#[test]
fn quotes_prefix_every_line() {
    assert_eq!(one("> quoted *text*\n> more"), "> quoted _text_\n> more");
    assert_eq!(one("> a\n>\n> b"), "> a\n>\n> b");
    assert_eq!(one("> outer\n> > inner"), "> outer\n>\n> > inner");
    assert_eq!(one("before\n\n> - item\n>   more\n\nafter"), "before\n\n> - item\n>   more\n\nafter");
    assert_eq!(one("- item\n  > quoted\n- > first"), "- item\n  > quoted\n- > first");
    assert_eq!(one("> ```\n> code\n>\n> more\n> ```"), "> ```\n> code\n>\n> more\n> ```");
}

#[test]
fn code_blocks_are_verbatim_without_language() {
    assert_eq!(one("```rust\nfn f() -> &'a str { \"*x*\" }\n```"), "```\nfn f() -> &'a str { \"*x*\" }\n```");
    assert_eq!(one("```\nplain\n\n  indented\n```"), "```\nplain\n\n  indented\n```");
    assert_eq!(one("    indented\n    code"), "```\nindented\ncode\n```");
    assert_eq!(one("~~~py\nprint()\n~~~"), "```\nprint()\n```");
    assert_eq!(one("text\n```\n**not bold**\n```\ntext"), "text\n\n```\n**not bold**\n```\n\ntext");
    assert_eq!(one("- item\n  ```sh\n  ls\n  ```"), "- item\n  ```\n  ls\n  ```");
}

#[test]
fn empty_code_blocks_show_nothing() {
    assert_eq!(one("a\n\n```\n```\n\nb"), "a\n\nb");
    assert!(render("```\n```").is_empty());
}

#[test]
fn rules_and_tables_are_plain_lines() {
    assert_eq!(one("a\n\n---\n\nb"), "a\n\n———\n\nb");
    assert_eq!(
        one("| Name | *Value* |\n|---|---:|\n| `x` | [one](https://e.x/) |\n| long name | |"),
        "Name | _Value_\n`x` | one (https://e.x/)\nlong name |"
    );
    assert_eq!(one("> | a | b |\n> |---|---|\n> | 1 | 2 |"), "> a | b\n> 1 | 2");
}

#[test]
fn links_show_text_then_url() {
    assert_eq!(one("see [the docs](https://example.com/a?b=1)"), "see the docs (https://example.com/a?b=1)");
    assert_eq!(one("<https://example.com/x>"), "https://example.com/x");
    assert_eq!(one("[https://e.x/](https://e.x/)"), "https://e.x/");
    assert_eq!(one("<me@example.com> [me@example.com](mailto:me@example.com)"), "me@example.com me@example.com");
    assert_eq!(one("[](http://x.org/)"), "http://x.org/");
    assert_eq!(one("[**bold** link](src/main.rs)"), "*bold* link (src/main.rs)");
    assert_eq!(one("[a]()"), "a");
}

#[test]
fn images_show_alt_then_url() {
    assert_eq!(one("![a cat](https://img.example/cat.png)"), "a cat (https://img.example/cat.png)");
    assert_eq!(one("![](cat.png)"), "cat.png");
    assert_eq!(one("[![badge](https://img.example/b.svg)](https://ci.example/)"), "badge (https://ci.example/)");
}

#[test]
fn reference_links_resolve() {
    assert_eq!(
        one("[docs][d] and [D]\n\n[d]: https://example.com/"),
        "docs (https://example.com/) and D (https://example.com/)"
    );
    // Markdown never shows a definition itself.
    assert!(render("[d]: https://example.com/").is_empty());
}

#[test]
fn raw_html_is_shown_as_text() {
    assert_eq!(one("a <b>bold</b> <br/> c"), "a <b>bold</b> <br/> c");
    assert_eq!(one("<div>\n<script>alert(1)</script>\n</div>"), "<div>\n<script>alert(1)</script>\n</div>");
    assert_eq!(one("> <div>\n> <p>x</p>\n> </div>\n\ntext"), "> <div>\n> <p>x</p>\n> </div>\n\ntext");
}

#[test]
fn emoji_and_cjk_pass_through() {
    assert_eq!(one("**漢字** 😀 👨‍👩‍👧"), "*漢字* 😀 👨‍👩‍👧");
}

// --- Splitting ------------------------------------------------------------------

#[test]
fn a_short_reply_is_one_part() {
    assert_eq!(render("Hello *world*\n\n"), ["Hello _world_"]);
}

#[test]
fn paragraphs_are_packed_greedily() {
    let paragraph = "word ".repeat(15).trim_end().to_string(); // 74 chars
    let markdown = [paragraph.as_str(); 5].join("\n\n");
    let two = format!("{paragraph}\n\n{paragraph}");
    assert_eq!(render_with_limit(&markdown, 160), [two.as_str(), two.as_str(), paragraph.as_str()]);
}

#[test]
fn the_rendered_length_is_what_must_fit() {
    // 23 characters of Markdown, 19 rendered: one part at a limit of 20.
    assert_eq!(render_with_limit("**bold** and **more** x", 20), ["*bold* and *more* x"]);
    // Renumbering makes a list longer than its source.
    let markdown = "1. a\n1. b\n1. c\n1. d\n1. e\n1. f\n1. g\n1. h\n1. i\n1. j";
    let parts = render_with_limit(markdown, 40);
    assert!(parts.iter().all(|part| char_len(part) <= 40), "{parts:#?}");
    assert_eq!(parts.concat().matches(". ").count(), 10);
    assert!(parts.last().is_some_and(|part| part.ends_with("10. j")), "{parts:#?}");
}

#[test]
fn a_long_paragraph_is_cut_at_lines_then_words() {
    let markdown = "aaaa bbbb cccc\ndddd eeee ffff gggg hhhh iiii jjjj kkkk";
    assert_eq!(render_with_limit(markdown, 20), ["aaaa bbbb cccc", "dddd eeee ffff gggg", "hhhh iiii jjjj kkkk"]);
}

#[test]
fn words_are_cut_outside_styled_spans_when_possible() {
    let markdown = "aaaa bbbb cccc **dd ee ff** gggg";
    assert_eq!(render_with_limit(markdown, 24), ["aaaa bbbb cccc", "*dd ee ff* gggg"]);
}

#[test]
fn a_piece_cut_mid_line_stays_text() {
    // Each cut lands before what would start a block at the start of a line.
    for (markdown, rest) in [
        ("aaaa bbbb cccc dddd - eeee", "- eeee"),
        ("aaaa bbbb cccc dddd # eeee", "# eeee"),
        ("aaaa bbbb cccc dddd 1. eeee", "1. eeee"),
        ("aaaa bbbb cccc dddd > eeee", "> eeee"),
        ("aaaa bbbb cccc dddd ```eeee", "```eeee"),
    ] {
        let parts = render_with_limit(markdown, 20);
        assert_eq!(parts, ["aaaa bbbb cccc dddd", rest], "{markdown:?}");
    }
}

#[test]
fn a_long_word_is_cut_between_characters() {
    let word = "😀".repeat(50);
    let parts = render_with_limit(&word, 20);
    assert_eq!(parts, ["😀".repeat(20), "😀".repeat(20), "😀".repeat(10)]);
}

#[test]
fn a_hard_cut_keeps_joined_emoji_and_accents_whole() {
    let family = "👨‍👩‍👧"; // 5 chars
    let parts = render_with_limit(&family.repeat(9), 22);
    assert!(parts.iter().all(|part| *part == family.repeat(4) || *part == family), "{parts:?}");
    let accented = "e\u{301}".repeat(20); // 40 chars
    let parts = render_with_limit(&accented, 21);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts.iter().all(|part| part.starts_with('e') && part.ends_with('\u{301}')), "{parts:?}");
    let toned = "👍🏽".repeat(15);
    assert!(render_with_limit(&toned, 21).iter().all(|part| !part.starts_with('\u{1f3fd}')));
}

#[test]
fn a_code_block_that_fits_is_never_cut() {
    let code = "```\nlet x = 1;\nlet y = 2;\n```";
    let markdown = format!("{}\n\n{code}\n\n{}", "intro ".repeat(10).trim_end(), "after ".repeat(10));
    let parts = render_with_limit(&markdown, char_len(code) + 30);
    assert_eq!(parts.len(), 3, "{parts:#?}");
    assert_eq!(parts[1], code);
}

#[test]
fn a_long_code_block_is_cut_into_complete_blocks() {
    let lines: Vec<String> = (0..40).map(|i| format!("line {i} *not bold*")).collect();
    let markdown = format!("Here:\n\n```rust\n{}\n```\n\nDone.", lines.join("\n"));
    let parts = render_with_limit(&markdown, 200);
    assert!(parts.len() > 3, "{parts:#?}");
    let mut seen = Vec::new();
    for part in parts.iter().filter(|part| part.contains("line ")) {
        let code = part.trim_start_matches("Here:\n\n").trim_end_matches("\n\nDone.");
        let inner = code.strip_prefix("```\n").and_then(|c| c.strip_suffix("\n```"));
        let inner = inner.unwrap_or_else(|| panic!("not one complete block: {part:?}"));
        seen.extend(inner.lines().map(str::to_string));
    }
    assert_eq!(seen, lines);
}

#[test]
fn a_cut_code_block_in_a_quote_stays_in_the_quote() {
    let lines: Vec<String> = (0..20).map(|i| format!("> line {i}")).collect();
    let markdown = format!("> ```\n{}\n> ```", lines.join("\n"));
    let parts = render_with_limit(&markdown, 60);
    assert!(parts.len() > 1);
    for part in &parts {
        assert!(part.starts_with("> ```\n> line") && part.ends_with("\n> ```"), "{part:?}");
    }
}

#[test]
fn a_cut_code_line_keeps_each_piece_in_a_block() {
    let markdown = format!("```\n{}\n```", "x".repeat(100));
    let parts = render_with_limit(&markdown, 40);
    assert!(parts.len() > 3);
    for part in &parts {
        assert!(part.starts_with("```\nx") && part.ends_with("x\n```"), "{part:?}");
    }
    let code: String = parts.iter().map(|part| part.trim_matches(['`', '\n'])).collect();
    assert_eq!(code, "x".repeat(100));
}

#[test]
fn a_cut_code_line_keeps_its_indentation() {
    let markdown = "```\nfn f() {\n    let value = compute(alpha, beta);\n}\n```";
    let parts = render_with_limit(markdown, 40);
    assert_eq!(parts, ["```\nfn f() {\n```", "```\n    let value = compute(alpha, \n```", "```\nbeta);\n}\n```"]);
}

#[test]
fn a_cut_code_block_in_a_nested_list_is_not_read_as_indented_code() {
    let markdown = "- top\n  - sub\n    ```\n    aaaa\n    bbbb\n    cccc\n    dddd\n    ```";
    assert_eq!(render_with_limit(markdown, 22), ["- top\n  - sub", "```\naaaa\nbbbb\ncccc\n```", "```\ndddd\n```"]);
}

#[test]
fn a_cut_table_keeps_its_rows_as_lines() {
    let rows: Vec<String> = (0..12).map(|i| format!("| {i} | {} |", i * i)).collect();
    let markdown = format!("| n | n² |\n|---|---|\n{}", rows.join("\n"));
    let parts = render_with_limit(&markdown, 40);
    assert!(parts.len() > 2, "{parts:#?}");
    assert!(parts[0].starts_with("n | n²\n0 | 0\n1 | 1"), "{parts:#?}");
    // The rest is no table by itself: its rows show as written.
    let lines: Vec<&str> = parts.iter().skip(1).flat_map(|part| part.lines()).collect();
    assert_eq!(lines, rows[rows.len() - lines.len()..]);
}

#[test]
fn a_long_list_is_cut_between_items() {
    let items: Vec<String> = (1..=30).map(|i| format!("{i}. item number {i}")).collect();
    let parts = render_with_limit(&items.join("\n"), 100);
    for part in &parts {
        assert!(part.lines().all(|line| items.contains(&line.to_string())), "{part:?}");
    }
    assert_eq!(parts.iter().map(|part| part.lines().count()).sum::<usize>(), 30);
}

#[test]
fn reference_links_resolve_across_parts() {
    let markdown = format!("[docs][d]\n\n{}\n\n[d]: https://example.com/", "filler ".repeat(20).trim_end());
    let parts = render_with_limit(&markdown, 100);
    assert!(parts.len() > 1);
    assert_eq!(parts[0], "docs (https://example.com/)");
}

/// A reply as the agent writes them, with a bit of everything.
const REPLY: &str = "## Summary

I fixed the **login bug** in `auth.rs` and added tests. Here's what changed:

1. The token check now uses *constant-time* comparison.
1. Expired sessions are ~~silently ignored~~ rejected with a clear error.
   - See [the PR](https://github.com/x/y/pull/3) for details.
   - [x] tests pass

> **Note:** restart the daemon, then run:
>
> ```sh
> pincer restart --all
> ```

```rust
fn check(a: &[u8], b: &[u8]) -> bool {
    constant_time_eq(a, b)
}
```

| File | Lines |
|------|------:|
| `auth.rs` | +42 |

Let me know if you want ***more*** changes.";

#[test]
fn a_reply_renders_as_whatsapp_expects() {
    let expected = "*Summary*

I fixed the *login bug* in `auth.rs` and added tests. Here's what changed:

1. The token check now uses _constant-time_ comparison.
2. Expired sessions are ~silently ignored~ rejected with a clear error.
  - See the PR (https://github.com/x/y/pull/3) for details.
  ☑ tests pass

> *Note:* restart the daemon, then run:
>
> ```
> pincer restart --all
> ```

```
fn check(a: &[u8], b: &[u8]) -> bool {
    constant_time_eq(a, b)
}
```

File | Lines
`auth.rs` | +42

Let me know if you want *_more_* changes.";
    assert_eq!(one(REPLY), expected);
}

#[test]
fn splitting_a_reply_loses_no_text() {
    for limit in [20, 30, 45, 60, 80, 120, 200, 400] {
        assert_text_kept(REPLY, limit);
    }
    let parts = render_with_limit(REPLY, 80);
    assert!(parts.contains(&"2. Expired sessions are ~silently ignored~ rejected with a clear error.".to_string()));
}

#[test]
fn the_default_limit_is_4000_characters() {
    let markdown = "Une phrase répétée, assez longue pour remplir des messages. ".repeat(400);
    let parts = render(&markdown);
    assert!(parts.len() >= 6, "{}", parts.len());
    assert!(parts.iter().all(|part| char_len(part) <= MESSAGE_LIMIT));
    assert!(parts[0].len() > MESSAGE_LIMIT, "counted in characters, not bytes");
    assert!(char_len(&parts[0]) > MESSAGE_LIMIT - 100, "parts are packed");
}

#[test]
fn tiny_limits_are_raised() {
    let parts = render_with_limit("hello world, this is a reply of some length", 1);
    assert!(parts.iter().all(|part| char_len(part) <= MIN_LIMIT), "{parts:?}");
    assert_eq!(parts.len(), 3);
}

#[test]
fn rendering_is_deterministic() {
    let markdown = "# T\n\n".to_string() + &"- item with **bold** and `code`\n".repeat(50);
    let first = render_with_limit(&markdown, 100);
    for _ in 0..3 {
        assert_eq!(render_with_limit(&markdown, 100), first);
    }
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
    "> > > ```\n> > > deep\n> > > ```",
    "<",
    "&",
    "&amp;&lt;&#60;&#x3c;",
    "<b>",
    "<!--",
    "[",
    "[]()",
    "[a](",
    "[a](<>)",
    "[a](http://x \"title\")",
    "![",
    "![](",
    "[![a](http://i)](http://l)",
    "[a]: http://x",
    "[a]: http://x\n[b]: http://y",
    ">",
    "> > > deep",
    ">\n>\n>",
    "- ",
    "-",
    "1.",
    "- [ ]",
    "- [x] ",
    "- - - x",
    "#",
    "# ",
    "###### h",
    "---",
    "|",
    "| a |\n|---|",
    "| a | b |\n|---|---|\n| `c|d` | e |",
    "\\",
    "a  \nb",
    "\t\tcode",
    "\u{0}",
    "a\r\nb\r\n\r\nc",
    "👨‍👩‍👧‍👦",
    "e\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}",
    "\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}\u{200d}x",
    "漢字かなカナ한글",
    "x\u{2028}y",
];

#[test]
fn tricky_inputs_keep_the_invariants() {
    for markdown in TRICKY {
        for limit in [1, 20, 21, 25, 40, 64, MESSAGE_LIMIT] {
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

/// What generated lines are made of. Entities (`&amp;` shows as `&`) and link
/// definitions (which Markdown never shows) are left out: they would fail the
/// word check without losing anything.
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
    "e\u{301}",
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
    "***both***",
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
    "| a | b |\n|---|---|\n| 1 | *2* |\n| three | four |",
    "---",
    "<div>\nraw <b>html</b>\n</div>",
    "Setext\n===",
];

/// A line of atoms. Backticks are kept to runs of two: ``` in the text or in
/// a code block's content is a fence to WhatsApp, which has no way to show it
/// otherwise, so no rendering could keep the fences balanced.
fn generated_line(rng: &mut Rng) -> String {
    let mut line = rng.pick(LINE_STARTS).to_string();
    let most = if rng.below(8) == 0 { 80 } else { 12 };
    for i in 0..1 + rng.below(most) {
        if i > 0 && rng.below(6) != 0 {
            line.push(' ');
        }
        line.push_str(rng.pick(ATOMS));
    }
    while line.contains("```") {
        line = line.replace("```", "``");
    }
    line
}

fn generated_document(rng: &mut Rng) -> String {
    let mut doc = String::new();
    for _ in 0..1 + rng.below(12) {
        let kind = rng.below(5);
        if kind < 2 && !doc.is_empty() && !doc.ends_with('\n') {
            // A fence is one only at the start of a line.
            doc.push('\n');
        }
        match kind {
            0 => {
                // Text after a closing fence would make it content; a row
                // after a table would join it, and GFM drops the cells a row
                // has beyond the header's.
                doc.push_str(rng.pick(BLOCKS));
                doc.push_str("\n\n");
                continue;
            }
            1 => {
                let code: Vec<String> = (0..1 + rng.below(6)).map(|_| generated_line(rng)).collect();
                doc.push_str(&format!("```{}\n{}\n```\n", rng.pick(&["", "py"]), code.join("\n")));
            }
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
        for limit in [20, 24, 50, 120, 400] {
            assert_text_kept(&doc, limit);
        }
    }
}

#[test]
fn large_inputs_keep_the_invariants_at_the_real_limit() {
    let mut rng = Rng(42);
    for _ in 0..10 {
        let doc: String = (0..40).map(|_| generated_document(&mut rng)).collect::<Vec<_>>().join("\n\n");
        assert_text_kept(&doc, MESSAGE_LIMIT);
    }
}
