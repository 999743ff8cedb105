//! What a response's tokens cost, from Anthropic's list prices per model
//! family (USD per million tokens). pincer had no price table before: the
//! CLI reports each turn's cost itself, but calls made around the CLI report
//! nothing, so the proxy prices their `usage` here.
//!
//! The table is deliberately small and errs high: a model it does not know
//! is priced as the dearest (Opus 4.1: $15 in, $75 out), since a budget
//! that stops a little early is safer than one that does not stop. Cache
//! reads cost a tenth of input, cache writes 1.25× (2× for the one-hour
//! cache), web searches $10 per thousand; long-context surcharges are not
//! modelled (the CLI's own cost, which the budget also counts, has them).

use super::usage::Usage;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

/// A model this table does not know: the dearest one's price.
pub const UNKNOWN: Price = Price { input: 15.0, output: 75.0 };

/// USD per web search.
const PER_WEB_SEARCH: f64 = 0.01;

/// The list price of `model` (an API model id such as `claude-sonnet-4-5`).
pub fn of(model: Option<&str>) -> Price {
    let Some(model) = model.map(str::to_ascii_lowercase) else {
        return UNKNOWN;
    };
    let price = |input, output| Price { input, output };
    if model.contains("haiku") {
        if model.contains("3-5-haiku") {
            price(0.8, 4.0)
        } else if model.contains("3-haiku") {
            price(0.25, 1.25)
        } else {
            price(1.0, 5.0)
        }
    } else if model.contains("sonnet") {
        price(3.0, 15.0)
    } else if model.contains("opus") {
        // Opus 4.5 and later cost a third of the earlier ones.
        match opus_version(&model) {
            Some(version) if version >= (4, 5) => price(5.0, 25.0),
            _ => UNKNOWN,
        }
    } else {
        UNKNOWN
    }
}

/// `claude-opus-4-1-20250805` → (4, 1); `claude-opus-4-20250514` → (4, 0);
/// `claude-3-opus-…` and anything else → none.
fn opus_version(model: &str) -> Option<(u32, u32)> {
    let rest = &model[model.find("opus-")? + "opus-".len()..];
    let mut parts = rest.split(['-', '@', '.']);
    let short = |p: &str| (1..=2).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit());
    let major = parts.next().filter(|p| short(p))?.parse().ok()?;
    let minor = parts.next().filter(|p| short(p)).and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// What `usage` costs in USD.
pub fn cost_usd(usage: &Usage) -> f64 {
    let p = of(usage.model.as_deref());
    let hour = usage.cache_creation_1h.min(usage.cache_creation);
    let five_minutes = usage.cache_creation - hour;
    let per_million = usage.input as f64 * p.input
        + usage.output as f64 * p.output
        + usage.cache_read as f64 * p.input * 0.1
        + five_minutes as f64 * p.input * 1.25
        + hour as f64 * p.input * 2.0;
    per_million / 1_000_000.0 + usage.web_searches as f64 * PER_WEB_SEARCH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_generations_have_their_list_prices() {
        let cases = [
            ("claude-sonnet-4-5-20250929", (3.0, 15.0)),
            ("claude-3-7-sonnet-latest", (3.0, 15.0)),
            ("claude-haiku-4-5", (1.0, 5.0)),
            ("claude-3-5-haiku-20241022", (0.8, 4.0)),
            ("claude-3-haiku-20240307", (0.25, 1.25)),
            ("claude-opus-4-1-20250805", (15.0, 75.0)),
            ("claude-opus-4-20250514", (15.0, 75.0)),
            ("claude-3-opus-20240229", (15.0, 75.0)),
            ("claude-opus-4-5-20251101", (5.0, 25.0)),
            ("claude-opus-4-8", (5.0, 25.0)),
            ("claude-opus-5-5", (5.0, 25.0)),
            ("some-new-model", (15.0, 75.0)),
        ];
        for (model, (input, output)) in cases {
            assert_eq!(of(Some(model)), Price { input, output }, "{model}");
        }
        assert_eq!(of(None), UNKNOWN);
    }

    #[test]
    fn every_kind_of_token_is_priced() {
        let usage = Usage {
            model: Some("claude-sonnet-4-5".into()),
            input: 1_000_000,
            output: 100_000,
            cache_read: 1_000_000,
            cache_creation: 300_000,
            cache_creation_1h: 100_000,
            web_searches: 3,
        };
        // 3 + 1.5 + 0.3 + 200k × 3.75/M + 100k × 6/M + 0.03
        let cost = cost_usd(&usage);
        assert!((cost - (3.0 + 1.5 + 0.3 + 0.75 + 0.6 + 0.03)).abs() < 1e-9, "{cost}");
        assert_eq!(cost_usd(&Usage::default()), 0.0);
    }
}
