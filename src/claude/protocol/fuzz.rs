//! A short fuzz run of the stdout parser (issue 44): every line the recorded
//! transcripts hold, cut short, with a character changed, or with any one
//! field given a value of another kind (a huge string among them), and
//! arbitrary text, is parsed without a panic. The CLI's output is steered
//! by the agent, so `parse_line` must take anything. `PROPTEST_CASES` runs
//! more cases than the default 256.

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;

use super::parse_line;

/// Every stdout line of the recorded transcripts.
fn corpus() -> &'static [String] {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut lines = Vec::new();
        for set in std::fs::read_dir(&root).expect("tests/data exists") {
            let set = set.unwrap().path();
            for file in std::fs::read_dir(&set).unwrap() {
                let file = file.unwrap().path();
                if file.to_string_lossy().ends_with(".stdout.jsonl") {
                    let text = std::fs::read_to_string(&file).unwrap();
                    lines.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
                }
            }
        }
        assert!(lines.len() > 100, "the transcripts hold the corpus: {}", lines.len());
        lines
    })
}

/// Every JSON pointer inside `value`, the root included.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                pointers(inner, format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                pointers(inner, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        (1usize..200_000).prop_map(|n| Value::from("x".repeat(n))),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
        Just(serde_json::json!({"type": "result", "subtype": "success"})),
    ]
}

proptest! {
    #[test]
    fn a_recorded_line_cut_short_or_with_a_character_changed_parses_without_panic(
        pick in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        change in any::<char>(),
    ) {
        let line = pick.get(corpus());
        let chars: Vec<char> = line.chars().collect();
        let at = cut.index(chars.len() + 1);
        let short: String = chars[..at].iter().collect();
        let _ = parse_line(&short);
        let mut changed = chars.clone();
        if let Some(c) = changed.get_mut(at.min(chars.len().saturating_sub(1))) {
            *c = change;
        }
        let _ = parse_line(&changed.into_iter().collect::<String>());
    }

    #[test]
    fn a_recorded_frame_with_any_field_of_another_kind_parses_without_panic(
        pick in any::<prop::sample::Index>(),
        field in any::<prop::sample::Index>(),
        value in odd_value(),
    ) {
        let Ok(mut frame) = serde_json::from_str::<Value>(pick.get(corpus()).as_str()) else {
            return Ok(());
        };
        let mut all = Vec::new();
        pointers(&frame, String::new(), &mut all);
        let pointer = field.get(&all).clone();
        match frame.pointer_mut(&pointer) {
            Some(slot) => *slot = value,
            None => frame = value,
        }
        let _ = parse_line(&frame.to_string());
    }

    #[test]
    fn arbitrary_text_parses_without_panic(line in ".{0,400}") {
        let _ = parse_line(&line);
    }
}
