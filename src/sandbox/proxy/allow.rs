//! Which requests the credential proxy forwards: the Messages API calls the
//! Claude Code CLI makes, spelled as it spells them, and nothing else.
//!
//! The real credential opens the whole API of its account (files other
//! applications uploaded, batches, models, organization and OAuth account
//! endpoints), while the CLI needs only `POST /v1/messages?beta=true` (seen
//! on 2.1.197 and 2.1.330, for the main agent, subagents and background
//! tasks alike) and the token count next to it. So a request is forwarded
//! only when its method and path are one of [`ALLOWED`] byte for byte, and
//! its query is absent or `beta=true`.
//!
//! Matching the raw path exactly is the normalisation: the proxy never
//! decodes or resolves a path, and the forwarded URL is the same bytes. A
//! path in another spelling (`/v1/messages/../files`, `//`, `%2F`, `%2e`)
//! is refused with its own reason, because the HTTP client upstream would
//! resolve dot segments (`url` follows WHATWG, `%2e%2e` included) and reach
//! an endpoint the list never named.

use std::fmt;

use axum::http::{Method, Uri};

/// Method and path of every request forwarded. `count_tokens` was not seen
/// in our runs, but both CLI versions have the call (`countTokens`, e.g. for
/// `/context`); it reads nothing stored and costs nothing.
pub const ALLOWED: &[(&str, &str)] = &[("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens")];

/// The only query the CLI sends (`?beta=true` on every Messages request).
/// Any other is refused: the proxy forwards the query verbatim, and the
/// Messages API takes none the CLI needs.
const QUERY: &str = "beta=true";

/// How much of a refused request's target goes into the log and the answer.
const SHOWN_AT_MOST: usize = 200;

/// Why a request is not forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The path is not in the one spelling the CLI uses; what was odd.
    Spelling(&'static str),
    /// Not an endpoint the CLI calls.
    Endpoint,
    /// An endpoint the CLI calls, with another method.
    Method,
    /// A query other than `beta=true`.
    Query,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Spelling(what) => write!(f, "the path has {what}, which the CLI never sends"),
            Refused::Endpoint => f.write_str("the CLI never calls this endpoint"),
            Refused::Method => f.write_str("the CLI calls this endpoint with another method"),
            Refused::Query => write!(f, "the only query the CLI sends is `{QUERY}`"),
        }
    }
}

/// Whether `method uri` is one of the calls the CLI makes.
pub fn check(method: &Method, uri: &Uri) -> Result<(), Refused> {
    let path = uri.path();
    if let Some(odd) = odd_spelling(path) {
        return Err(Refused::Spelling(odd));
    }
    let endpoint: Vec<&str> = ALLOWED.iter().filter(|(_, p)| *p == path).map(|(m, _)| *m).collect();
    if endpoint.is_empty() {
        return Err(Refused::Endpoint);
    }
    if !endpoint.contains(&method.as_str()) {
        return Err(Refused::Method);
    }
    match uri.query() {
        None => Ok(()),
        Some(q) if q == QUERY => Ok(()),
        Some(_) => Err(Refused::Query),
    }
}

/// What makes `path` another spelling of some path, if anything.
fn odd_spelling(path: &str) -> Option<&'static str> {
    if path.contains('%') {
        return Some("percent-encoding");
    }
    if path.contains('\\') {
        return Some("a backslash");
    }
    // The first segment is before the leading `/` (empty): skip it.
    let mut segments = path.split('/').skip(1);
    if segments.any(|s| s == "." || s == "..") {
        return Some("a dot segment");
    }
    if path.contains("//") {
        return Some("an empty segment (`//`)");
    }
    None
}

/// `METHOD target`, at most [`SHOWN_AT_MOST`] bytes of the target: for the
/// log and the refusal (the agent chose it; hyper has kept control bytes out).
pub fn shown(method: &Method, uri: &Uri) -> String {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut end = target.len().min(SHOWN_AT_MOST);
    while !target.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < target.len() { "…" } else { "" };
    format!("{method} {}{more}", &target[..end])
}

/// The allowed calls, for the refusal's text.
pub fn allowed_text() -> String {
    let calls: Vec<String> = ALLOWED.iter().map(|(m, p)| format!("{m} {p}")).collect();
    calls.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(method: &str, target: &str) -> Result<(), Refused> {
        check(&method.parse().unwrap(), &target.parse().unwrap())
    }

    #[test]
    fn the_calls_the_cli_makes_pass() {
        for target in ["/v1/messages?beta=true", "/v1/messages", "/v1/messages/count_tokens?beta=true"] {
            assert_eq!(verdict("POST", target), Ok(()), "{target}");
        }
    }

    #[test]
    fn every_other_endpoint_is_refused() {
        for target in [
            "/v1/files",
            "/v1/files/file_123/content",
            "/v1/models",
            "/v1/messages/batches",
            "/v1/messages/batches/msgbatch_1/results",
            "/v1/messages/cache_touch",
            "/v1/organizations/me/api_keys",
            "/api/oauth/profile",
            "/",
            "/v1/messages/",
            "/V1/messages",
            "*",
        ] {
            assert_eq!(verdict("POST", target), Err(Refused::Endpoint), "{target}");
        }
        assert_eq!(verdict("GET", "/v1/files"), Err(Refused::Endpoint));
    }

    #[test]
    fn the_right_path_needs_the_right_method() {
        for method in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            assert_eq!(verdict(method, "/v1/messages?beta=true"), Err(Refused::Method), "{method}");
        }
    }

    #[test]
    fn another_spelling_of_a_path_is_refused_before_it_is_matched() {
        let cases = [
            ("/v1/messages/../files", "a dot segment"),
            ("/v1/./messages", "a dot segment"),
            ("/v1/messages/..", "a dot segment"),
            ("/v1//messages", "an empty segment (`//`)"),
            ("//v1/messages", "an empty segment (`//`)"),
            ("/v1/messages%2F..%2Ffiles", "percent-encoding"),
            ("/v1/%6dessages", "percent-encoding"),
            ("/v1/messages/%2e%2e/files", "percent-encoding"),
            ("/v1\\messages", "a backslash"),
        ];
        for (target, odd) in cases {
            assert_eq!(verdict("POST", target), Err(Refused::Spelling(odd)), "{target}");
        }
    }

    #[test]
    fn only_the_beta_query_passes() {
        for target in [
            "/v1/messages?beta=false",
            "/v1/messages?beta=true&beta=true",
            "/v1/messages?beta=true&x=1",
            "/v1/messages?",
            "/v1/messages?limit=1000",
        ] {
            assert_eq!(verdict("POST", target), Err(Refused::Query), "{target}");
        }
    }

    #[test]
    fn what_is_shown_of_a_refused_target_is_bounded() {
        let long: Uri = format!("/v1/{}?q={}", "a".repeat(300), "b".repeat(10)).parse().unwrap();
        let shown = shown(&Method::GET, &long);
        assert!(shown.starts_with("GET /v1/aaaa") && shown.ends_with('…'), "{shown}");
        assert_eq!(shown.len(), "GET ".len() + SHOWN_AT_MOST + '…'.len_utf8());
        assert_eq!(super::shown(&Method::POST, &"/v1/files?x=1".parse().unwrap()), "POST /v1/files?x=1");
        assert_eq!(allowed_text(), "POST /v1/messages, POST /v1/messages/count_tokens");
    }
}
