//! The rules a loaded config must keep beyond its types: each section
//! checks its own keys, and the rules across sections are here.

use std::time::Duration;

use super::error::{check_url, ConfigError};
use super::root::Config;
use super::sandbox::SandboxMode;

/// The longest duration any setting takes.
const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

impl Config {
    /// Every rule, the first broken one named.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        self.claude.check()?;
        if self.assistant_name.trim().is_empty() {
            return Err(ConfigError::Rule { key: "assistant_name", problem: "must not be empty" });
        }
        if !crate::domain::schedule::valid_zone(&self.timezone) {
            return Err(ConfigError::Rule {
                key: "timezone",
                problem: "is not a known time zone: use an IANA name such as \"Europe/Berlin\" or \"UTC\"",
            });
        }
        self.scheduler.check()?;
        self.whatsapp.check()?;
        self.delivery.check()?;
        self.check_lengths()?;
        self.progress.check()?;
        self.http.check()?;
        self.store.check()?;
        self.cluster.check(self.store.url.is_some())?;
        self.budget.check()?;
        self.retention.check()?;
        self.media.check()?;
        self.transcription.check()?;
        self.log.check()?;
        self.telegram.check()?;
        self.check_docker_in_cluster()?;
        self.check_sandbox()
    }

    /// No docker on a cluster node: its guard can kill only the `docker run`
    /// client, so a frozen or killed node's container would run on while
    /// another node starts the group (two agents for one group). `auto` may
    /// pick docker when `docker_image` is set, so that is refused too.
    fn check_docker_in_cluster(&self) -> Result<(), ConfigError> {
        if !self.cluster.enabled {
            return Ok(());
        }
        let docker = self.sandbox.mode == SandboxMode::Docker
            || self.sandbox.groups.values().any(|g| g.mode == Some(SandboxMode::Docker));
        if docker || self.sandbox.docker_image.is_some() {
            return Err(ConfigError::Rule {
                key: "sandbox.mode",
                problem: "cannot be \"docker\" on a cluster node ([cluster] enabled): a frozen or killed node's \
                          container would keep running while another node runs its group. Use mode \"bwrap\" \
                          (or \"auto\") and unset sandbox.docker_image, or set cluster.enabled = false",
            });
        }
        Ok(())
    }

    /// No duration is longer than [`LONGEST`]: pincer adds them to clock
    /// readings, and one of thousands of years would overflow the clock.
    fn check_lengths(&self) -> Result<(), ConfigError> {
        let (c, sc, w, d) = (&self.claude, &self.scheduler, &self.whatsapp, &self.delivery);
        let lengths = [
            ("claude.idle_timeout", c.idle_timeout),
            ("claude.shutdown_grace", c.shutdown_grace),
            ("claude.approval_timeout", c.approval_timeout),
            ("claude.turn_timeout", c.turn_timeout),
            ("scheduler.poll_interval", sc.poll_interval),
            ("scheduler.retry_delay", sc.retry_delay),
            ("scheduler.run_timeout", sc.run_timeout),
            ("scheduler.min_interval", sc.min_interval),
            ("whatsapp.silence_warning", w.silence_warning),
            ("whatsapp.connect_timeout", w.connect_timeout),
            ("whatsapp.pair_timeout", w.pair_timeout),
            ("delivery.retry_first", d.retry_first),
            ("delivery.retry_cap", d.retry_cap),
            ("console.wait_limit", self.console.wait_limit),
        ];
        match lengths.into_iter().find(|(_, length)| *length > LONGEST) {
            Some((key, _)) => Err(ConfigError::Rule { key, problem: "must be at most a year (e.g. \"30d\")" }),
            None => Ok(()),
        }
    }

    fn check_sandbox(&self) -> Result<(), ConfigError> {
        let skips_unconfined = self
            .sandbox
            .groups
            .keys()
            .any(|g| self.sandbox.requested(g) == SandboxMode::None && self.sandbox.group(g).skip_permissions);
        if skips_unconfined {
            return Err(ConfigError::Rule {
                key: "sandbox.groups.<name>.skip_permissions",
                problem: "is only allowed for a group that runs in a sandbox, not with mode \"none\"",
            });
        }
        check_url(
            self.anthropic.base_url.as_deref(),
            "anthropic.base_url",
            "is not a URL (e.g. \"https://api.anthropic.com\")",
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use figment::providers::{Format, Serialized, Toml};
    use figment::Figment;

    use super::*;
    use crate::config::Secret;

    fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_figment(Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(text)))
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn humantime_values_parse() {
        let c = from_toml("[claude]\nidle_timeout = \"90s\"\nmax_live_sessions = 2\n").unwrap();
        assert_eq!(c.claude.idle_timeout, Duration::from_secs(90));
        assert_eq!(c.claude.max_live_sessions, 2);
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = from_toml("[claude]\nidle_timeout = \"soon\"\n").unwrap_err().to_string();
        assert!(err.contains("idle_timeout"), "{err}");
        let err = from_toml("[claude]\nmax_live_sessions = 0\n").unwrap_err().to_string();
        assert!(err.contains("claude.max_live_sessions"), "{err}");
        let err = from_toml("[claude]\nidle_timout = \"1m\"\n").unwrap_err().to_string();
        assert!(err.contains("idle_timout"), "{err}");
    }

    #[test]
    fn a_duration_past_a_year_is_refused_before_it_can_overflow_a_clock() {
        for (section, key) in [("claude", "idle_timeout"), ("claude", "shutdown_grace"), ("scheduler", "run_timeout")] {
            let err = from_toml(&format!("[{section}]\n{key} = \"100000years\"\n")).unwrap_err().to_string();
            assert!(err.contains(&format!("{section}.{key}")) && err.contains("at most a year"), "{err}");
        }
        let c = from_toml("[claude]\nidle_timeout = \"365days\"\n").unwrap();
        assert_eq!(c.claude.idle_timeout, Duration::from_secs(365 * 24 * 3600));
    }

    #[test]
    fn the_time_zone_and_scheduler_keys_are_checked() {
        let c = from_toml("timezone = \"Europe/Berlin\"\n[scheduler]\npoll_interval = \"2s\"\n").unwrap();
        assert_eq!((c.timezone.as_str(), c.scheduler.poll_interval), ("Europe/Berlin", Duration::from_secs(2)));
        let c = from_toml("[scheduler]\nrun_timeout = \"5m\"\n[claude]\nturn_timeout = \"90s\"\n").unwrap();
        assert_eq!(
            (c.scheduler.run_timeout, c.claude.turn_timeout),
            (Duration::from_secs(300), Duration::from_secs(90))
        );
        let err = from_toml("[claude]\nturn_timeout = \"0s\"\n").unwrap_err().to_string();
        assert!(err.contains("claude.turn_timeout"), "{err}");
        let err = from_toml("[scheduler]\nrun_timeout = \"0s\"\n").unwrap_err().to_string();
        assert!(err.contains("scheduler.run_timeout"), "{err}");
        let err = from_toml("timezone = \"Berlin\"\n").unwrap_err().to_string();
        assert!(err.contains("timezone"), "{err}");
    }

    #[test]
    fn a_webhook_secret_telegram_would_refuse_stops_pincer_naming_the_key() {
        let ok = from_toml("[telegram]\nwebhook_secret = \"s3cret-token_1\"\n");
        assert!(ok.is_ok(), "{ok:?}");
        for bad in ["", "with space", "slash/"] {
            let e = from_toml(&format!("[telegram]\nwebhook_secret = \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("telegram.webhook_secret"), "{e}");
        }
    }

    #[test]
    fn telegram_keys_are_checked_and_the_token_never_printed() {
        let c = from_toml("[telegram]\ntoken = \"123:abc\"\npoll_timeout = \"5s\"\n").unwrap();
        assert_eq!(c.telegram.token.as_ref().map(Secret::expose), Some("123:abc"));
        assert!(!format!("{c:?}").contains("123:abc"), "Debug must redact the token");
        let err = from_toml("[telegram]\napi_url = \"not a url\"\n").unwrap_err().to_string();
        assert!(err.contains("telegram.api_url"), "{err}");
        let err = from_toml("[telegram]\ntoken = \" \"\n").unwrap_err().to_string();
        assert!(err.contains("telegram.token"), "{err}");
    }

    #[test]
    fn sandbox_keys_parse_and_skipping_prompts_needs_a_sandbox() {
        let c = from_toml(
            "[sandbox]\nmode = \"bwrap\"\n[sandbox.groups.family]\nskip_permissions = true\n\
             [anthropic]\napi_key = \"sk-real\"\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.requested("family"), SandboxMode::Bwrap);
        assert!(c.sandbox.group("family").skip_permissions);
        assert!(!format!("{c:?}").contains("sk-real"), "Debug must redact the key");
        let err = from_toml("[sandbox.groups.family]\nmode = \"none\"\nskip_permissions = true\n").unwrap_err();
        assert!(err.to_string().contains("skip_permissions"), "{err}");
        let err = from_toml("[sandbox]\nmode = \"chroot\"\n").unwrap_err().to_string();
        assert!(err.contains("mode"), "{err}");
    }

    #[test]
    fn docker_is_refused_on_a_cluster_node_saying_why_and_what_to_do() {
        let cluster = "[store]\nurl = \"postgres://db/pincer\"\n[cluster]\nenabled = true\n";
        assert!(from_toml(cluster).is_ok());
        for sandbox in [
            "[sandbox]\nmode = \"docker\"\ndocker_image = \"agent\"\n",
            "[sandbox]\ndocker_image = \"agent\"\n",
            "[sandbox.groups.family]\nmode = \"docker\"\n",
        ] {
            let err = from_toml(&format!("{cluster}{sandbox}")).unwrap_err().to_string();
            assert!(err.contains("sandbox.mode") && err.contains("cluster node") && err.contains("bwrap"), "{err}");
            assert!(from_toml(sandbox).is_ok(), "one machine may use docker: {sandbox}");
        }
        assert!(from_toml(&format!("{cluster}[sandbox]\nmode = \"bwrap\"\n")).is_ok());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own large error
    fn env_overrides_nest_with_double_underscore() {
        figment::Jail::expect_with(|jail| {
            // Only these: a `PINCER_*` the test run itself sets (`PINCER_TEST_CLAUDE`) is no config key.
            jail.clear_env();
            jail.set_env("PINCER_CLAUDE__IDLE_TIMEOUT", "10m");
            jail.set_env("PINCER_ASSISTANT_NAME", "Bob");
            let c = Config::load(None).unwrap();
            assert_eq!(c.claude.idle_timeout, Duration::from_secs(600));
            assert_eq!(c.assistant_name, "Bob");
            Ok(())
        });
    }
}
