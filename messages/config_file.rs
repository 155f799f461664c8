//! The TOML layer (`mcpvisor.toml`): the file as written ([`RawConfigFile`]
//! and its tables), and its parse into the validated types of
//! [`super::config`], every problem named with its field and position.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::config::*;
use super::trust::TrustMode;

/// The `mcpvisor.toml` file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfigFile {
    /// `[servers.<server_name>]` tables.
    #[serde(default)]
    pub servers: BTreeMap<String, RawServerConfig>,
    /// `[events]`.
    pub events: Option<RawEvents>,
    /// `[secrets]`.
    pub secrets: Option<RawSecrets>,
    /// `[hooks]`.
    pub hooks: Option<RawHooks>,
}

/// `[hooks]` as written (HOOK-4, HOOK-12). Relative paths resolve against the
/// process working directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHooks {
    /// A Claude Code hooks or settings file.
    pub claude: Option<PathBuf>,
    /// A Codex `hooks.json`.
    pub codex: Option<PathBuf>,
    /// `CLAUDE_PROJECT_DIR` (default: the working directory).
    pub project_dir: Option<PathBuf>,
    /// Hex SHA-256 hashes of approved hook commands, for `--strict-hooks`.
    #[serde(default)]
    pub approved: Vec<String>,
}

/// `[secrets]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecrets {
    /// A TOML secret file (mode 0600) instead of environment variables.
    pub file: Option<PathBuf>,
    /// The OS keyring service name (needs the `keyring` feature).
    pub keyring: Option<String>,
}

/// `[events]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvents {
    /// Path of the JSONL event log.
    pub log: Option<PathBuf>,
}

/// One `[servers.<name>]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerConfig {
    /// stdio: executable.
    pub command: Option<String>,
    /// stdio: arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: explicit environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: parent variables passed explicitly.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// stdio: variable name → secret name.
    #[serde(default)]
    pub env_secrets: BTreeMap<String, String>,
    /// HTTP: header name → secret name.
    #[serde(default)]
    pub header_secrets: BTreeMap<String, String>,
    /// stdio: working directory.
    pub cwd: Option<PathBuf>,
    /// HTTP: endpoint.
    pub url: Option<String>,
    /// HTTP: headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP: liveness ping interval.
    pub ping_interval_ms: Option<u64>,
    /// HTTP: liveness ping timeout.
    pub ping_timeout_ms: Option<u64>,
    /// HTTP: consecutive failed pings that end the connection (CONN-14).
    pub ping_failure_threshold: Option<u32>,
    /// See [`ServerConfig::tool_call_timeout`].
    pub tool_call_timeout_ms: Option<u64>,
    /// See [`ServerConfig::startup_timeout`].
    pub startup_timeout_ms: Option<u64>,
    /// See [`ServerConfig::request_timeout`].
    pub request_timeout_ms: Option<u64>,
    /// See [`ServerConfig::fail_on_startup_error`].
    pub fail_on_startup_error: Option<bool>,
    /// See [`ServerConfig::max_instruction_bytes`].
    pub max_instruction_bytes: Option<usize>,
    /// See [`ServerConfig::oversized_instructions`].
    pub oversized_instructions: Option<OversizedInstructions>,
    /// See [`ServerConfig::enabled`].
    pub enabled: Option<bool>,
    /// See [`ServerConfig::trust`].
    pub trust: Option<TrustMode>,
    /// See [`ServerConfig::tool_trust`].
    #[serde(default)]
    pub tool_trust: BTreeMap<String, TrustMode>,
    /// 0 = never.
    pub idle_stop_after_s: Option<u64>,
    /// See [`ServerConfig::on_disconnect`].
    pub on_disconnect: Option<OnDisconnect>,
    /// `[servers.<name>.reconnect]`.
    pub reconnect: Option<RawReconnect>,
}

/// `[servers.<name>.reconnect]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconnect {
    /// See [`ReconnectPolicy::enabled`].
    pub enabled: Option<bool>,
    /// See [`ReconnectPolicy::initial_delay`].
    pub initial_delay_ms: Option<u64>,
    /// See [`ReconnectPolicy::max_delay`].
    pub max_delay_ms: Option<u64>,
    /// See [`ReconnectPolicy::max_attempts`].
    pub max_attempts: Option<u32>,
    /// See [`ReconnectPolicy::jitter`].
    pub jitter: Option<bool>,
}

impl ServerConfig {
    /// Validate one `[servers.<name>]` table into a config, reporting every problem.
    pub fn from_raw(name: &str, raw: RawServerConfig) -> Result<ServerConfig, ConfigError> {
        let prefix = format!("servers.{name}");
        let mut problems = Vec::new();
        let transport = match (raw.command, raw.url) {
            (Some(command), None) => {
                if !raw.headers.is_empty() || !raw.header_secrets.is_empty() {
                    problems.push(format!(
                        "{prefix}.headers and header_secrets apply only to url servers"
                    ));
                }
                TransportConfig::Stdio(StdioConfig {
                    command,
                    args: raw.args,
                    env: raw.env,
                    env_passthrough: raw.env_passthrough,
                    env_secrets: raw.env_secrets,
                    cwd: raw.cwd,
                })
            }
            (None, Some(url)) => {
                if !raw.args.is_empty()
                    || !raw.env.is_empty()
                    || !raw.env_secrets.is_empty()
                    || raw.cwd.is_some()
                {
                    problems.push(format!(
                        "{prefix}: args, env, env_secrets and cwd apply only to command (stdio) servers"
                    ));
                }
                TransportConfig::StreamableHttp(HttpConfig {
                    url,
                    headers: raw.headers,
                    header_secrets: raw.header_secrets,
                    ping_interval: Duration::from_millis(
                        raw.ping_interval_ms.unwrap_or(DEFAULT_PING_INTERVAL_MS),
                    ),
                    ping_timeout: Duration::from_millis(
                        raw.ping_timeout_ms.unwrap_or(DEFAULT_PING_TIMEOUT_MS),
                    ),
                    ping_failure_threshold: raw
                        .ping_failure_threshold
                        .unwrap_or(DEFAULT_PING_FAILURE_THRESHOLD),
                })
            }
            (Some(_), Some(_)) => {
                problems.push(format!(
                    "{prefix}: set either command (stdio) or url (streamable HTTP), not both"
                ));
                return Err(ConfigError { problems });
            }
            (None, None) => {
                problems.push(format!(
                    "{prefix}: missing command (stdio) or url (streamable HTTP)"
                ));
                return Err(ConfigError { problems });
            }
        };
        let mut cfg = ServerConfig::with_transport(name, transport);
        let ms = Duration::from_millis;
        if let Some(v) = raw.tool_call_timeout_ms {
            cfg.tool_call_timeout = ms(v);
        }
        if let Some(v) = raw.startup_timeout_ms {
            cfg.startup_timeout = ms(v);
        }
        if let Some(v) = raw.request_timeout_ms {
            cfg.request_timeout = ms(v);
        }
        if let Some(v) = raw.fail_on_startup_error {
            cfg.fail_on_startup_error = v;
        }
        if let Some(v) = raw.max_instruction_bytes {
            cfg.max_instruction_bytes = v;
        }
        if let Some(v) = raw.oversized_instructions {
            cfg.oversized_instructions = v;
        }
        if let Some(v) = raw.enabled {
            cfg.enabled = v;
        }
        if let Some(v) = raw.trust {
            cfg.trust = v;
        }
        cfg.tool_trust = raw.tool_trust;
        if let Some(v) = raw.on_disconnect {
            cfg.on_disconnect = v;
        }
        if let Some(v) = raw.idle_stop_after_s {
            cfg.idle_stop_after = (v > 0).then(|| Duration::from_secs(v));
        }
        if let Some(r) = raw.reconnect {
            let d = &mut cfg.reconnect;
            if let Some(v) = r.enabled {
                d.enabled = v;
            }
            if let Some(v) = r.initial_delay_ms {
                d.initial_delay = ms(v);
            }
            if let Some(v) = r.max_delay_ms {
                d.max_delay = ms(v);
            }
            if let Some(v) = r.max_attempts {
                d.max_attempts = v;
            }
            if let Some(v) = r.jitter {
                d.jitter = v;
            }
        }
        if let Err(e) = cfg.validate() {
            problems.extend(e.problems);
        }
        ConfigError::from_problems(problems).map(|()| cfg)
    }
}

/// A whole config file, validated.
#[derive(Debug, Clone, Default)]
pub struct FileConfig {
    /// `[servers.*]`.
    pub servers: Vec<ServerConfig>,
    /// `[events] log`: the durable JSONL event log (OBS-2).
    pub event_log: Option<PathBuf>,
    /// `[secrets] file`: the secret file; environment variables when absent (TRUST-2).
    pub secrets_file: Option<PathBuf>,
    /// `[secrets] keyring`: the OS keyring service to read secrets from (TRUST-2).
    pub secrets_keyring: Option<String>,
    /// `[hooks]`.
    pub hooks: RawHooks,
}

/// Parse a whole config file; `origin` (the path) prefixes every problem.
pub fn parse_config(origin: &str, text: &str) -> Result<FileConfig, ConfigError> {
    let raw: RawConfigFile = toml::from_str(text).map_err(|e| ConfigError {
        problems: vec![format!("{origin}: {}", e.to_string().trim_end())],
    })?;
    let event_log = raw.events.as_ref().and_then(|e| e.log.clone());
    let secrets_file = raw.secrets.as_ref().and_then(|s| s.file.clone());
    let secrets_keyring = raw.secrets.as_ref().and_then(|s| s.keyring.clone());
    if secrets_file.is_some() && secrets_keyring.is_some() {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [secrets] names both a file and a keyring; choose one"
            )],
        });
    }
    let hooks = raw.hooks.clone().unwrap_or_default();
    if let Some(bad) = hooks
        .approved
        .iter()
        .find(|h| h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [hooks] approved: {bad:?} is not a hex SHA-256 (64 hex digits; see `mcpvisor hooks list`)"
            )],
        });
    }
    let servers = servers_of(origin, raw)?;
    Ok(FileConfig {
        servers,
        event_log,
        secrets_file,
        secrets_keyring,
        hooks,
    })
}

/// Parse a whole config file and return its servers.
pub fn parse_config_file(origin: &str, text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    parse_config(origin, text).map(|c| c.servers)
}

fn servers_of(origin: &str, raw: RawConfigFile) -> Result<Vec<ServerConfig>, ConfigError> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, server) in raw.servers {
        match ServerConfig::from_raw(&name, server) {
            Ok(c) => out.push(c),
            Err(e) => problems.extend(e.problems.into_iter().map(|p| format!("{origin}: {p}"))),
        }
    }
    ConfigError::from_problems(problems).map(|()| out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_with_both_transports_parses_with_defaults() {
        let cfg = parse_config_file(
            "t.toml",
            r#"
[servers.everything]
command = "node"
args = ["server.js", "stdio"]
tool_call_timeout_ms = 1000
idle_stop_after_s = 0
[servers.everything.reconnect]
max_attempts = 3
[servers.remote]
url = "https://example.com/mcp"
headers = { "x-tenant" = "acme" }
"#,
        )
        .unwrap();
        assert_eq!(cfg.len(), 2);
        assert_eq!(cfg[0].server_name, "everything");
        assert_eq!(cfg[0].tool_call_timeout, Duration::from_millis(1000));
        assert_eq!(cfg[0].idle_stop_after, None);
        assert_eq!(cfg[0].reconnect.max_attempts, 3);
        assert_eq!(cfg[0].reconnect.initial_delay, Duration::from_millis(500));
        assert_eq!(cfg[1].transport.kind(), "streamable-http");
        assert_eq!(cfg[1].request_timeout, Duration::from_millis(15000));
    }

    #[test]
    fn invalid_reconnect_policy_is_rejected_naming_every_field() {
        // RECO-1: delays <= 0, initial > max, attempts < 1 rejected at load.
        let err = parse_config_file(
            "t.toml",
            r#"
[servers.bad]
command = "x"
[servers.bad.reconnect]
initial_delay_ms = 0
max_attempts = 0
[servers.worse]
command = "x"
[servers.worse.reconnect]
initial_delay_ms = 5000
max_delay_ms = 100
"#,
        )
        .unwrap_err();
        let all = err.problems.join("\n");
        assert!(
            all.contains("servers.bad.reconnect.initial_delay_ms must be greater than 0"),
            "{all}"
        );
        assert!(
            all.contains("servers.bad.reconnect.max_attempts must be at least 1"),
            "{all}"
        );
        assert!(
            all.contains(
                "servers.worse.reconnect.initial_delay_ms (5000) must not exceed max_delay_ms (100)"
            ),
            "{all}"
        );
    }

    #[test]
    fn a_remote_plain_http_url_is_rejected_naming_the_field() {
        // TRUST-3
        let err =
            parse_config("t.toml", "[servers.r]\nurl = \"http://example.com/mcp\"\n").unwrap_err();
        let all = err.problems.join("\n");
        assert!(all.contains("servers.r.url"), "{all}");
        assert!(all.contains("use https://"), "{all}");
    }

    #[test]
    fn tool_trust_overrides_the_server_trust_per_raw_tool_name() {
        let cfg = parse_config(
            "t.toml",
            "[servers.a]\ncommand = \"x\"\ntrust = \"always\"\ntool_trust = { delete = \"never\", write = \"ask\" }\n",
        )
        .unwrap();
        let s = &cfg.servers[0];
        assert_eq!(s.trust, TrustMode::Always);
        assert_eq!(s.tool_trust.get("delete"), Some(&TrustMode::Never));
        assert_eq!(s.tool_trust.get("write"), Some(&TrustMode::Ask));
        assert!(
            parse_config(
                "t.toml",
                "[servers.a]\ncommand = \"x\"\ntool_trust = { delete = \"maybe\" }\n"
            )
            .is_err()
        );
    }

    #[test]
    fn secrets_come_from_a_file_or_a_keyring_never_both() {
        let cfg = parse_config("t.toml", "[secrets]\nkeyring = \"mcpvisor\"\n").unwrap();
        assert_eq!(cfg.secrets_keyring.as_deref(), Some("mcpvisor"));
        let e = parse_config(
            "t.toml",
            "[secrets]\nkeyring = \"mcpvisor\"\nfile = \"s.toml\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("both a file and a keyring"), "{e}");
    }

    #[test]
    fn the_hooks_table_names_files_and_approved_hashes() {
        let cfg = parse_config(
            "t.toml",
            &format!(
                "[hooks]\nclaude = \"h/cc.json\"\ncodex = \"cx.json\"\napproved = [\"{}\"]\n",
                "a".repeat(64)
            ),
        )
        .unwrap();
        assert_eq!(cfg.hooks.claude, Some(PathBuf::from("h/cc.json")));
        assert_eq!(cfg.hooks.codex, Some(PathBuf::from("cx.json")));
        assert_eq!(cfg.hooks.approved.len(), 1);
        let e = parse_config("t.toml", "[hooks]\napproved = [\"abc\"]\n").unwrap_err();
        assert!(e.to_string().contains("t.toml: [hooks] approved"), "{e}");
        assert!(parse_config("t.toml", "[hooks]\nclaud = \"x\"\n").is_err());
    }

    #[test]
    fn the_events_table_names_the_event_log() {
        // OBS-2
        let cfg = parse_config(
            "t.toml",
            "[events]\nlog = \"logs/events.jsonl\"\n[servers.a]\ncommand = \"x\"\n",
        )
        .unwrap();
        assert_eq!(cfg.event_log, Some(PathBuf::from("logs/events.jsonl")));
        assert_eq!(cfg.servers.len(), 1);
        assert!(parse_config("t.toml", "[events]\nlogs = 1\n").is_err());
    }

    #[test]
    fn unknown_keys_are_rejected_with_position() {
        let err = parse_config_file(
            "t.toml",
            "[servers.a]\ncommand = \"x\"\n[servers.a.reconnect]\nbogus = 1\n",
        )
        .unwrap_err();
        let all = err.problems.join("\n");
        assert!(all.contains("t.toml"), "{all}");
        assert!(all.contains("bogus"), "{all}");
        assert!(all.contains("line 4"), "{all}");
    }

    #[test]
    fn bad_server_name_and_missing_transport_are_reported() {
        // CONN-2: the error names the field.
        let err = parse_config_file(
            "t.toml",
            "[servers.\"my server\"]\ncommand = \"x\"\n[servers.b]\n",
        )
        .unwrap_err();
        let all = err.problems.join("\n");
        assert!(all.contains("server_name \"my server\""), "{all}");
        assert!(all.contains("servers.b: missing command"), "{all}");
    }

    #[test]
    fn the_liveness_pings_are_set_from_the_file() {
        // CONN-14: interval, timeout and failure threshold per HTTP server.
        let cfg = parse_config_file(
            "t.toml",
            "[servers.r]\nurl = \"https://example.com/mcp\"\nping_interval_ms = 2000\nping_timeout_ms = 700\nping_failure_threshold = 5\n",
        )
        .unwrap();
        let TransportConfig::StreamableHttp(h) = &cfg[0].transport else {
            panic!("an HTTP server");
        };
        assert_eq!(h.ping_interval, Duration::from_millis(2000));
        assert_eq!(h.ping_timeout, Duration::from_millis(700));
        assert_eq!(h.ping_failure_threshold, 5);
        let zero = parse_config_file(
            "t.toml",
            "[servers.r]\nurl = \"https://example.com/mcp\"\nping_failure_threshold = 0\n",
        )
        .unwrap_err();
        assert!(
            zero.to_string().contains("ping_failure_threshold"),
            "{zero}"
        );
    }
}
