use super::*;
use crate::config::Config;

#[test]
fn network_keys_parse_and_a_bad_entry_names_its_key() {
    use figment::providers::{Format, Serialized, Toml};
    let load = |text: &str| {
        let figment = figment::Figment::from(Serialized::defaults(Config::default()));
        Config::from_figment(figment.merge(Toml::string(text)))
    };
    let c = load(
        "[sandbox]\nallow_domains = [\"pypi.org\"]\n\
         [sandbox.groups.team]\nnetwork = \"allowlist\"\nallow_domains = [\"*.GitHub.com\", \"example.com:8443\"]\n",
    )
    .unwrap();
    assert_eq!(c.sandbox.network, NetworkPolicy::ApiOnly, "the default");
    let team = c.sandbox.group("team");
    assert_eq!(team.network, Some(NetworkPolicy::Allowlist));
    let listed: Vec<String> = team.allow_domains.iter().map(ToString::to_string).collect();
    assert_eq!(listed, ["*.github.com", "example.com:8443"]);
    let err = load("[sandbox.groups.team]\nallow_domains = [\"exa mple.com\"]\n").unwrap_err().to_string();
    assert!(err.contains("allow_domains") && err.contains("team") && err.contains("exa mple.com"), "{err}");
    let err = load("[sandbox]\nallow_domains = [\"169.254.169.254\"]\n").unwrap_err().to_string();
    assert!(err.contains("allow_domains") && err.contains("link-local"), "{err}");
    let err = load("[sandbox]\nnetwork = \"everything\"\n").unwrap_err().to_string();
    assert!(err.contains("network") && err.contains("api-only"), "{err}");
}

#[test]
fn seccomp_is_on_unless_the_config_says_false() {
    use figment::providers::{Format, Serialized, Toml};
    let load = |text: &str| {
        let figment = figment::Figment::from(Serialized::defaults(Config::default()));
        Config::from_figment(figment.merge(Toml::string(text))).unwrap()
    };
    assert_eq!(load("").sandbox.seccomp, DefaultOn(true));
    assert_eq!(load("[sandbox]\nseccomp = false\n").sandbox.seccomp, DefaultOn(false));
}

#[test]
fn groups_override_the_default_mode() {
    let mut config = SandboxConfig::default();
    config.groups.insert("a".into(), GroupSandbox { mode: Some(SandboxMode::None), ..Default::default() });
    assert_eq!(config.requested("a"), SandboxMode::None);
    assert_eq!(config.requested("b"), SandboxMode::Auto);
}
