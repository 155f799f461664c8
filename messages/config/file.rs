//! The TOML layer (`mcpvisor.toml`): the file as written ([`RawConfigFile`]
//! and its tables), and its parse into the validated types of
//! [`super`], every problem named with its field and position.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::*;
use crate::messages::trust::TrustMode;

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
    /// `[model]`: the model `mcpvisor chat` talks to (LOOP-7).
    pub model: Option<RawModel>,
    /// `[providers]`: the browser_use / computer_use seats' providers (SEAT-4).
    pub providers: Option<RawProviders>,
    /// `[mods]`: JS mods (MOD-1), off unless enabled and listed.
    pub mods: Option<RawMods>,
}

/// `[mods]` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMods {
    /// Mods load only when this is `true`.
    #[serde(default)]
    pub enabled: bool,
    /// `[[mods.load]]`: each mod, in load order.
    #[serde(default)]
    pub load: Vec<RawModLoad>,
    /// Each mod's memory limit in MiB (default 32).
    pub memory_mib: Option<u64>,
    /// Each handler's deadline (default 500).
    pub deadline_ms: Option<u64>,
}

/// One `[[mods.load]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModLoad {
    /// The ES module file (relative to the config file).
    pub path: PathBuf,
    /// Granted host APIs: `log`, `config`, `spawn`, `http`.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// `[providers]` as written: `browser` takes the `browser_use` seat,
/// `computer` the `computer_use` seat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProviders {
    /// `[providers.browser]`.
    pub browser: Option<RawProvider>,
    /// `[providers.computer]`.
    pub computer: Option<RawProvider>,
}

/// One `[providers.*]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    /// `browser-native` (built), `browser-playwright-mcp`,
    /// `browser-devtools-mcp`, `computer-native`.
    pub kind: String,
    /// `launch` (default) or `attach`.
    pub mode: Option<String>,
    /// `attach`: the CDP endpoint (`http://127.0.0.1:9222`).
    pub cdp_endpoint: Option<String>,
    /// `computer-native`: the X display (`:99`).
    pub display: Option<String>,
    /// The MCP-backed providers' pinned package version.
    pub version: Option<String>,
    /// The MCP-backed providers: a directory whose `node_modules` has the
    /// package (default: `npx --yes <package>@<version>`).
    pub package_dir: Option<PathBuf>,
    /// The Chromium binary (default: `$MCPVISOR_CHROMIUM`, then the usual places).
    pub executable: Option<PathBuf>,
    /// Offer `evaluate` (off by default).
    pub evaluate: Option<bool>,
    /// Trust of the provider's tools (default `ask`, TRUST-4).
    pub trust: Option<TrustMode>,
    /// `[width, height]` of the browser window (default 1280×800).
    pub window: Option<[u32; 2]>,
    /// Every action's (and CDP request's) timeout (default 15000).
    pub action_timeout_ms: Option<u64>,
    /// How long the browser may take to start (default 20000).
    pub launch_timeout_ms: Option<u64>,
}

/// The provider kinds of the spec (SEAT-4), and whether this build has them.
pub const PROVIDER_KINDS: &[(&str, bool)] = &[
    ("browser-native", true),
    ("browser-playwright-mcp", true),
    ("browser-devtools-mcp", true),
    ("computer-native", true),
];

/// The host APIs a mod may be granted, and whether they are built.
const MOD_CAPABILITIES: &[(&str, bool)] = &[
    ("log", true),
    ("config", true),
    ("spawn", true),
    ("http", true),
    ("tools", true),
];

/// Check `[mods]`: known capabilities, positive limits.
fn check_mods(origin: &str, m: &RawMods) -> Result<(), ConfigError> {
    let mut problems = Vec::new();
    for (i, l) in m.load.iter().enumerate() {
        for c in &l.capabilities {
            match MOD_CAPABILITIES.iter().find(|(k, _)| k == c) {
                None => problems.push(format!(
                    "{origin}: [[mods.load]] #{} ({}): capability {c:?}: expected one of \"log\", \"config\", \"spawn\", \"http\", \"tools\"",
                    i + 1,
                    l.path.display()
                )),
                Some((_, false)) => problems.push(format!(
                    "{origin}: [[mods.load]] #{} ({}): capability {c:?} is not built in this version yet (built: log, config)",
                    i + 1,
                    l.path.display()
                )),
                Some(_) => {}
            }
        }
    }
    for (key, v) in [("memory_mib", m.memory_mib), ("deadline_ms", m.deadline_ms)] {
        if v == Some(0) {
            problems.push(format!("{origin}: [mods] {key} = 0: must be positive"));
        }
    }
    ConfigError::from_problems(problems)
}

/// Check `[providers]`: known kinds in the right seat, a mode the kind has.
fn check_providers(origin: &str, p: &RawProviders) -> Result<(), ConfigError> {
    let mut problems = Vec::new();
    for (table, raw, seat_prefix) in [
        ("browser", &p.browser, "browser-"),
        ("computer", &p.computer, "computer-"),
    ] {
        let Some(raw) = raw else { continue };
        let at = format!("{origin}: [providers.{table}]");
        match PROVIDER_KINDS.iter().find(|(k, _)| *k == raw.kind) {
            None => problems.push(format!(
                "{at} kind = {:?}: expected one of {}",
                raw.kind,
                PROVIDER_KINDS
                    .iter()
                    .map(|(k, _)| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some((k, _)) if !k.starts_with(seat_prefix) => problems.push(format!(
                "{at} kind = {k:?} belongs in [providers.{}]",
                if table == "browser" {
                    "computer"
                } else {
                    "browser"
                }
            )),
            Some((k, false)) => problems.push(format!(
                "{at} kind = {k:?} is not built in this version yet"
            )),
            Some(_) => {}
        }
        match raw.mode.as_deref() {
            None | Some("launch") => {
                if raw.cdp_endpoint.is_some() {
                    problems.push(format!(
                        "{at} cdp_endpoint is for mode = \"attach\" (the mode is launch)"
                    ));
                }
            }
            Some("attach") if !raw.kind.starts_with("browser-") => problems.push(format!(
                "{at} mode = \"attach\" is for the browser kinds, not {:?}",
                raw.kind
            )),
            Some("attach") => match &raw.cdp_endpoint {
                None => problems.push(format!(
                    "{at} mode = \"attach\" needs cdp_endpoint (e.g. \"http://127.0.0.1:9222\")"
                )),
                Some(e) => {
                    let http = e.replacen("ws://", "http://", 1);
                    if let Err(why) = crate::messages::trust::validate_endpoint(&http) {
                        problems.push(format!("{at} cdp_endpoint: {why}"));
                    }
                }
            },
            Some(m) => problems.push(format!(
                "{at} mode = {m:?}: expected \"launch\" or \"attach\""
            )),
        }
        if let Some([w, h]) = raw.window
            && (w < 100 || h < 100 || w > 8192 || h > 8192)
        {
            problems.push(format!(
                "{at} window = [{w}, {h}]: each side must be 100 to 8192"
            ));
        }
        for (key, v) in [
            ("action_timeout_ms", raw.action_timeout_ms),
            ("launch_timeout_ms", raw.launch_timeout_ms),
        ] {
            if v == Some(0) {
                problems.push(format!("{at} {key} = 0: a timeout must be positive"));
            }
        }
    }
    ConfigError::from_problems(problems)
}

/// `[model]` as written: the defaults of `mcpvisor chat`'s flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// `openai`, `anthropic` or `openai-responses`.
    pub provider: Option<String>,
    /// The base URL (OpenAI-compatible: usually ending in `/v1`).
    pub endpoint: Option<String>,
    /// The model name.
    pub model: Option<String>,
    /// The secret holding the API key.
    pub key_secret: Option<String>,
    /// At most this many rounds per turn.
    pub max_rounds: Option<u32>,
    /// `false` for a route without tool calling (TRUST-7).
    pub supports_tools: Option<bool>,
    /// Responses API: ask for reasoning items' encrypted content (a
    /// reasoning model), `ModelRoute::encrypted_reasoning`.
    pub encrypted_reasoning: Option<bool>,
    /// `auto`, `native` or `local`: which search a turn that defers its
    /// tools uses, `ModelRoute::tool_search`.
    pub tool_search: Option<String>,
}

/// `[hooks]` (HOOK-4, HOOK-12). Relative paths resolve against the config
/// file's directory (`~/` at home), like a server's `cwd`.
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
    /// A named hook file that cannot be loaded is a warning, not an error,
    /// for the commands that run tools (`call`, `chat`, `gateway`).
    #[serde(default)]
    pub optional: bool,
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
    /// See [`ServerConfig::parallel_calls`].
    pub parallel_calls: Option<bool>,
    /// 0 = never.
    pub idle_stop_after_s: Option<u64>,
    /// See [`ServerConfig::on_disconnect`].
    pub on_disconnect: Option<OnDisconnect>,
    /// See [`ServerConfig::protocol`].
    pub protocol: Option<crate::messages::config::ProtocolChoice>,
    /// See [`ServerConfig::max_input_rounds`].
    pub max_input_rounds: Option<u32>,
    /// `[servers.<name>.reconnect]`.
    pub reconnect: Option<RawReconnect>,
    /// `[servers.<name>.oauth]` (CONN-13).
    pub oauth: Option<crate::messages::config::OAuthConfig>,
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
        for (key, map) in [
            ("env_secrets", &raw.env_secrets),
            ("header_secrets", &raw.header_secrets),
        ] {
            for (target, reference) in map {
                if let Err(e) = crate::messages::trust::secret_reference(reference) {
                    problems.push(format!(
                        "{prefix}.{key}.{target}: {e} (a secret's name, or a text holding one `${{NAME}}`, such as \"Bearer ${{TOKEN}}\")"
                    ));
                }
            }
        }
        let transport = match (raw.command, raw.url) {
            (Some(command), None) => {
                if !raw.headers.is_empty() || !raw.header_secrets.is_empty() {
                    problems.push(format!(
                        "{prefix}.headers and header_secrets apply only to url servers"
                    ));
                }
                if raw.oauth.is_some() {
                    problems.push(format!("{prefix}.oauth applies only to url servers"));
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
                    oauth: raw.oauth.inspect(|o| {
                        if o.grant == crate::messages::config::OAuthGrant::ClientCredentials
                            && (o.client_id.is_none()
                                || (o.client_secret.is_none() && o.client_assertion_key.is_none()))
                        {
                            problems.push(format!(
                                "{prefix}.oauth: grant = \"client_credentials\" needs client_id, and client_secret or client_assertion_key (secret names)"
                            ));
                        }
                        if o.grant == crate::messages::config::OAuthGrant::Enterprise
                            && (o.client_id.is_none()
                                || o.idp_issuer.is_none()
                                || o.idp_token_endpoint.is_none()
                                || o.idp_client_id.is_none()
                                || o.idp_id_token.is_none())
                        {
                            problems.push(format!(
                                "{prefix}.oauth: grant = \"enterprise\" needs client_id, idp_issuer, idp_token_endpoint, idp_client_id and idp_id_token (a secret name)"
                            ));
                        }
                        if o.grant == crate::messages::config::OAuthGrant::JwtBearer
                            && o.assertion.is_none()
                            && o.assertion_file.is_none()
                        {
                            problems.push(format!(
                                "{prefix}.oauth: grant = \"jwt_bearer\" needs assertion (a secret name) or assertion_file (a path) holding the workload's JWT"
                            ));
                        }
                        if o.grant == crate::messages::config::OAuthGrant::Enterprise
                            && o.dpop == Some(true)
                        {
                            problems.push(format!(
                                "{prefix}.oauth: dpop = true does not apply to grant = \"enterprise\" (its token exchange makes bearer tokens)"
                            ));
                        }
                        if let Some(a) = &o.signing_algorithm
                            && !["ES256", "ES384", "RS256", "RS384", "RS512"].contains(&a.as_str())
                        {
                            problems.push(format!(
                                "{prefix}.oauth.signing_algorithm = {a:?}: expected ES256, ES384, RS256, RS384 or RS512"
                            ));
                        }
                        if let Some(u) = &o.client_metadata_url
                            && !u.starts_with("https://")
                        {
                            problems.push(format!(
                                "{prefix}.oauth.client_metadata_url must be an https URL, got {u:?}"
                            ));
                        }
                    })
                    .map(Box::new),
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
        cfg.parallel_calls = raw.parallel_calls;
        if let Some(v) = raw.on_disconnect {
            cfg.on_disconnect = v;
        }
        if let Some(v) = raw.protocol {
            cfg.protocol = v;
        }
        if let Some(v) = raw.max_input_rounds {
            cfg.max_input_rounds = v;
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
    /// `[model]`.
    pub model: RawModel,
    /// `[providers]`, checked.
    pub providers: RawProviders,
    /// `[mods]`, checked, paths resolved against the config file.
    pub mods: RawMods,
}

/// A duplicate key: a table defined twice (`[servers.a]` again: a server
/// name used twice), or a key set twice in one table. The line is the one
/// the error points at ("TOML parse error at line N").
fn explain_duplicate(text: &str, message: &str) -> String {
    let line_no = message
        .split("at line ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    let Some(line) = line_no.and_then(|n| text.lines().nth(n.saturating_sub(1))) else {
        return String::new();
    };
    let line = line.trim();
    let header = line
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .map(str::trim);
    if let Some(table) = header {
        let earlier = text
            .lines()
            .position(|l| l.trim() == line)
            .map(|i| format!(" (first at line {})", i + 1))
            .unwrap_or_default();
        return match table.strip_prefix("servers.") {
            Some(name) if !name.contains('.') => format!(
                "\n  a server named {name:?} is already defined{earlier}: each server name is used once; rename one of them, or merge the two tables"
            ),
            _ => format!("\n  the table [{table}] is already defined{earlier}; merge the two"),
        };
    }
    match line.split_once('=') {
        Some((key, _)) => format!(
            "\n  `{}` is set twice in the same table; keep one",
            key.trim()
        ),
        None => String::new(),
    }
}

/// What to add to a TOML error so a person can act on it: the key meant
/// for an unknown one (did-you-mean), what a number key takes, a key or
/// table given twice, and where a file in another tool's format goes
/// (`mcpvisor import`).
fn explain_toml_error(origin: &str, text: &str, message: &str) -> String {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || origin.ends_with(".json") {
        return "\n  this looks like a JSON file (an `mcpServers` config?): mcpvisor reads TOML; `mcpvisor import FILE` converts one".into();
    }
    if let Some(rest) = message.split("unknown field `").nth(1)
        && let Some((field, expected)) = rest.split_once("`, expected one of ")
    {
        if field == "mcp_servers" {
            return "\n  this is Codex's `[mcp_servers]` table: mcpvisor's is `[servers]`; `mcpvisor import FILE` converts a Codex config.toml".into();
        }
        if field == "mcpServers" {
            return "\n  `mcpServers` is the JSON configs' key: mcpvisor's table is `[servers]`; `mcpvisor import FILE` converts one".into();
        }
        let keys: Vec<&str> = expected
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .collect();
        if let Some(close) = crate::messages::naming::closest(field, keys.iter().copied()) {
            return format!("\n  did you mean `{close}`?");
        }
    }
    if message.contains("duplicate key") {
        return explain_duplicate(text, message);
    }
    if message.contains("invalid type") && message.contains("expected u64") {
        let line = message
            .lines()
            .find(|l| l.contains(" = "))
            .unwrap_or_default();
        if line.contains("_ms") {
            return "\n  this key is a number of milliseconds, without quotes or a unit (e.g. 60000)".into();
        }
        if line.contains("_s ") || line.contains("_s=") {
            return "\n  this key is a number of seconds, without quotes or a unit (e.g. 600)"
                .into();
        }
        return "\n  this key is a whole number, without quotes".into();
    }
    String::new()
}

/// Parse a whole config file; `origin` (the path) prefixes every problem,
/// and relative paths in it are its directory's; `~/` is `home` (the
/// caller's `HOME`: this layer reads no environment).
pub fn parse_config_at(
    origin: &str,
    text: &str,
    home: Option<&std::path::Path>,
) -> Result<FileConfig, ConfigError> {
    let raw: RawConfigFile = toml::from_str(text).map_err(|e| ConfigError {
        problems: vec![format!(
            "{origin}: {}{}",
            e.to_string().trim_end(),
            explain_toml_error(origin, text, &e.to_string())
        )],
    })?;
    // Like a server's `cwd`: relative to the config file, `~/` at home, so
    // that tokens and logs never land wherever the command happened to run.
    let base = config_dir(origin);
    let event_log = raw
        .events
        .as_ref()
        .and_then(|e| e.log.as_deref())
        .map(|p| resolve_path(p, base.as_deref(), home));
    let secrets_file = raw
        .secrets
        .as_ref()
        .and_then(|s| s.file.as_deref())
        .map(|p| resolve_path(p, base.as_deref(), home));
    let secrets_keyring = raw.secrets.as_ref().and_then(|s| s.keyring.clone());
    if secrets_file.is_some() && secrets_keyring.is_some() {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [secrets] names both a file and a keyring; choose one"
            )],
        });
    }
    let mut hooks = raw.hooks.clone().unwrap_or_default();
    for p in [&mut hooks.claude, &mut hooks.codex, &mut hooks.project_dir]
        .into_iter()
        .flatten()
    {
        *p = resolve_path(p, base.as_deref(), home);
    }
    let model = raw.model.clone().unwrap_or_default();
    if let Some(p) = &model.provider
        && crate::messages::provider::Provider::parse(p).is_none()
    {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [model] provider = {p:?}: expected \"openai\", \"anthropic\" or \"openai-responses\""
            )],
        });
    }
    if let Some(word) = &model.tool_search
        && crate::messages::provider::ToolSearch::parse(word).is_none()
    {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [model] tool_search = {word:?}: expected \"auto\", \"native\" or \"local\""
            )],
        });
    }
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
    let mut providers = raw.providers.clone().unwrap_or_default();
    check_providers(origin, &providers)?;
    // Paths of a provider table resolve against the config file's directory.
    let base = std::path::Path::new(origin)
        .parent()
        .filter(|p| !p.as_os_str().is_empty());
    for p in [&mut providers.browser, &mut providers.computer]
        .into_iter()
        .flatten()
    {
        let Some(b) = base else { continue };
        if let Some(dir) = p.package_dir.as_mut().filter(|d| d.is_relative()) {
            *dir = b.join(&*dir);
        }
        // A bare name is looked up in PATH; a relative path is the file's.
        if let Some(exe) = p
            .executable
            .as_mut()
            .filter(|e| e.is_relative() && e.components().count() > 1)
        {
            *exe = b.join(&*exe);
        }
    }
    let mut mods = raw.mods.clone().unwrap_or_default();
    check_mods(origin, &mods)?;
    if let Some(b) = base {
        for m in &mut mods.load {
            if m.path.is_relative() {
                m.path = b.join(&m.path);
            }
        }
    }
    let servers = servers_of(origin, raw, home)?;
    Ok(FileConfig {
        mods,
        providers,
        servers,
        event_log,
        secrets_file,
        secrets_keyring,
        hooks,
        model,
    })
}

/// A stdio server's `command` (when it is a path, not a bare name looked
/// up in PATH) and `cwd`, and an HTTP server's `oauth.assertion_file`,
/// relative to the config file's directory; `~/` is the home directory.
/// Arguments are the server's own and stay as written.
fn resolve_paths(
    c: &mut ServerConfig,
    base: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) {
    let resolve = |p: &std::path::Path| resolve_path(p, base, home);
    let stdio = match &mut c.transport {
        TransportConfig::Stdio(stdio) => stdio,
        TransportConfig::StreamableHttp(http) => {
            if let Some(file) = http.oauth.as_mut().and_then(|o| o.assertion_file.as_mut()) {
                *file = resolve(file);
            }
            return;
        }
        TransportConfig::InProcess(_) => return,
    };
    if stdio.command.starts_with("~/")
        || (stdio.command.contains('/') && !stdio.command.starts_with('/'))
    {
        stdio.command = resolve(std::path::Path::new(&stdio.command))
            .to_string_lossy()
            .into_owned();
    }
    if let Some(cwd) = &stdio.cwd {
        stdio.cwd = Some(resolve(cwd));
    }
}

/// `p` with `~/` at home, and relative to `base` (the config file's directory).
fn resolve_path(
    p: &std::path::Path,
    base: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) -> PathBuf {
    if let (Ok(rest), Some(h)) = (p.strip_prefix("~"), home) {
        return h.join(rest);
    }
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p.to_path_buf(),
    }
}

/// The directory of the config file at `origin` (`None` for a bare name).
fn config_dir(origin: &str) -> Option<PathBuf> {
    std::path::Path::new(origin)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(std::path::Path::to_path_buf)
}

fn servers_of(
    origin: &str,
    raw: RawConfigFile,
    home: Option<&std::path::Path>,
) -> Result<Vec<ServerConfig>, ConfigError> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let base = config_dir(origin);
    for (name, server) in raw.servers {
        match ServerConfig::from_raw(&name, server) {
            Ok(mut c) => {
                resolve_paths(&mut c, base.as_deref(), home);
                out.push(c)
            }
            Err(e) => problems.extend(e.problems.into_iter().map(|p| format!("{origin}: {p}"))),
        }
    }
    ConfigError::from_problems(problems).map(|()| out)
}

/// The tests' home directory (`~/`).
#[cfg(test)]
pub(crate) const TEST_HOME: &str = "/home/tester";

/// [`parse_config_at`] with [`TEST_HOME`], for the tests.
#[cfg(test)]
pub(crate) fn parse_config(origin: &str, text: &str) -> Result<FileConfig, ConfigError> {
    parse_config_at(origin, text, Some(std::path::Path::new(TEST_HOME)))
}

/// The servers of [`parse_config`], for the tests.
#[cfg(test)]
pub(crate) fn parse_config_file(
    origin: &str,
    text: &str,
) -> Result<Vec<ServerConfig>, ConfigError> {
    parse_config(origin, text).map(|c| c.servers)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod provider_tables;

#[cfg(test)]
mod props;
