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
    /// `openai` or `anthropic`.
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
    /// `[model]`.
    pub model: RawModel,
    /// `[providers]`, checked.
    pub providers: RawProviders,
    /// `[mods]`, checked, paths resolved against the config file.
    pub mods: RawMods,
}

/// What to add to a TOML error so a person can act on it: the key meant
/// for an unknown one (did-you-mean), what a number key takes, and where
/// a file in another tool's format goes (`mcpvisor import`).
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
    let hooks = raw.hooks.clone().unwrap_or_default();
    let model = raw.model.clone().unwrap_or_default();
    if let Some(p) = &model.provider
        && crate::messages::model::Provider::parse(p).is_none()
    {
        return Err(ConfigError {
            problems: vec![format!(
                "{origin}: [model] provider = {p:?}: expected \"openai\" or \"anthropic\""
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
/// up in PATH) and `cwd`, relative to the config file's directory; `~/`
/// is the home directory. Arguments are the server's own and stay as written.
fn resolve_paths(
    c: &mut ServerConfig,
    base: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) {
    let TransportConfig::Stdio(stdio) = &mut c.transport else {
        return;
    };
    let resolve = |p: &std::path::Path| resolve_path(p, base, home);
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
mod tests {
    use super::*;

    #[test]
    fn an_oauth_table_is_checked_where_it_is_written() {
        // CONN-13: an empty table is enough; its mistakes say where.
        let cfg = parse_config(
            "m.toml",
            "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\n",
        )
        .unwrap();
        match &cfg.servers[0].transport {
            TransportConfig::StreamableHttp(h) => {
                assert_eq!(
                    h.oauth.as_deref(),
                    Some(&crate::messages::config::OAuthConfig::default())
                );
            }
            other => panic!("{other:?}"),
        }
        let bad = |text: &str| parse_config("m.toml", text).unwrap_err().to_string();
        let e = bad("[servers.n]\ncommand = \"x\"\n[servers.n.oauth]\n");
        assert!(
            e.contains("servers.n.oauth applies only to url servers"),
            "{e}"
        );
        let e = bad(
            "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"client_credentials\"\n",
        );
        assert!(e.contains("needs client_id"), "{e}");
        let e = bad(
            "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"enterprise\"\nclient_id = \"c\"\n",
        );
        assert!(e.contains("needs client_id, idp_issuer"), "{e}");
        let e = bad(
            "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\nclient_metadata_url = \"http://x/m.json\"\nsigning_algorithm = \"HS256\"\n",
        );
        assert!(
            e.contains("must be an https URL") && e.contains("expected ES256"),
            "{e}"
        );
        let e = bad(
            "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\nclient_sercet = \"S\"\n",
        );
        assert!(e.contains("client_sercet"), "{e}");
    }

    #[test]
    fn a_relative_command_and_cwd_resolve_against_the_config_files_directory() {
        let cfg = parse_config(
            "/etc/mcp/mcpvisor.toml",
            "[servers.a]\ncommand = \"bin/server\"\ncwd = \"data\"\n[servers.b]\ncommand = \"node\"\nargs = [\"rel/server.js\"]\n",
        )
        .unwrap();
        let stdio = |i: usize| match &cfg.servers[i].transport {
            TransportConfig::Stdio(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(stdio(0).command, "/etc/mcp/bin/server");
        assert_eq!(stdio(0).cwd, Some(PathBuf::from("/etc/mcp/data")));
        assert_eq!(stdio(1).command, "node", "a bare name is looked up in PATH");
        assert_eq!(stdio(1).args, vec!["rel/server.js".to_owned()]);
    }

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
        // Relative to the config file's directory, `~/` at home.
        let other = parse_config(
            "/etc/mcp/m.toml",
            "[events]\nlog = \"logs/e.jsonl\"\n[secrets]\nfile = \"~/s.toml\"\n",
        )
        .unwrap();
        assert_eq!(
            other.event_log,
            Some(PathBuf::from("/etc/mcp/logs/e.jsonl"))
        );
        assert_eq!(
            other.secrets_file,
            Some(PathBuf::from(TEST_HOME).join("s.toml"))
        );
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

#[cfg(test)]
mod provider_tables {
    use super::*;

    fn err(text: &str) -> String {
        parse_config("/etc/mcp/mcpvisor.toml", text)
            .unwrap_err()
            .problems
            .join("\n")
    }

    #[test]
    fn a_browser_provider_table_parses_and_its_paths_resolve_against_the_file() {
        let cfg = parse_config(
            "/etc/mcp/mcpvisor.toml",
            "[providers.browser]\nkind = \"browser-playwright-mcp\"\nversion = \"0.0.83\"\npackage_dir = \"peers\"\nexecutable = \"bin/chrome\"\ntrust = \"always\"\n",
        )
        .unwrap();
        let b = cfg.providers.browser.unwrap();
        assert_eq!(b.package_dir, Some(PathBuf::from("/etc/mcp/peers")));
        assert_eq!(b.executable, Some(PathBuf::from("/etc/mcp/bin/chrome")));
        assert_eq!(b.trust, Some(TrustMode::Always));
        assert!(cfg.servers.is_empty());
    }

    #[test]
    fn provider_tables_with_bad_kinds_modes_and_sizes_say_what_and_where() {
        let e = err("[providers.browser]\nkind = \"browser-magic\"\n");
        assert!(
            e.contains("[providers.browser] kind = \"browser-magic\": expected one of"),
            "{e}"
        );
        assert!(e.contains("\"browser-native\""), "{e}");
        let e = err("[providers.computer]\nkind = \"browser-native\"\n");
        assert!(e.contains("belongs in [providers.browser]"), "{e}");
        let e = err("[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\n");
        assert!(e.contains("needs cdp_endpoint"), "{e}");
        // TRUST-3: the one endpoint validator.
        let e = err(
            "[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://10.0.0.5:9222\"\n",
        );
        assert!(e.contains("cdp_endpoint") && e.contains("10.0.0.5"), "{e}");
        let e = err(
            "[providers.computer]\nkind = \"computer-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n",
        );
        assert!(e.contains("is for the browser kinds"), "{e}");
        let e = err(
            "[providers.browser]\nkind = \"browser-native\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n",
        );
        assert!(e.contains("is for mode = \"attach\""), "{e}");
        assert!(
            parse_config(
                "x.toml",
                "[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n"
            )
            .is_ok()
        );
        let e = err("[providers.browser]\nkind = \"browser-native\"\nmode = \"borrow\"\n");
        assert!(e.contains("expected \"launch\" or \"attach\""), "{e}");
        let e = err("[providers.browser]\nkind = \"browser-native\"\nwindow = [10, 10]\n");
        assert!(e.contains("window = [10, 10]"), "{e}");
        let e = err("[providers.browser]\nkind = \"browser-native\"\naction_timeout_ms = 0\n");
        assert!(e.contains("action_timeout_ms = 0"), "{e}");
        let e = err("[providers.browser]\nkind = \"browser-native\"\nwindwo = [1, 2]\n");
        assert!(e.contains("windwo"), "{e}");
        let e = err("[providers.tablet]\nkind = \"browser-native\"\n");
        assert!(e.contains("tablet"), "{e}");
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the TOML config parser.

    use super::*;
    use crate::messages::prop_gen::{config, tricky_text};
    use proptest::prelude::*;
    use toml::{Table, Value as Toml};

    /// Where the config came from.
    fn origin() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z/._-]{1,20}", tricky_text()]
    }

    /// A server name: valid (CONN-2) or not.
    fn server_name() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[A-Za-z0-9_-]{1,32}",
            1 => "[A-Za-z0-9_-]{33,40}",
            1 => Just(String::new()),
            1 => "[a-z .é/\"]{1,10}",
        ]
    }

    fn toml_scalar() -> impl Strategy<Value = Toml> {
        prop_oneof![
            "[a-z:/.$ -]{0,12}".prop_map(Toml::String),
            Just(Toml::String("https://example.com/mcp".into())),
            Just(Toml::String("http://example.com/mcp".into())),
            Just(Toml::String("http://localhost:8080/mcp".into())),
            prop::sample::select(vec![
                "ask", "always", "never", "keep", "remove", "fail", "truncate", "warn"
            ])
            .prop_map(|s| Toml::String(s.into())),
            any::<i64>().prop_map(Toml::Integer),
            (-2i64..5).prop_map(Toml::Integer),
            (0i64..100_000).prop_map(Toml::Integer),
            any::<f64>().prop_map(Toml::Float),
            any::<bool>().prop_map(Toml::Boolean),
        ]
    }

    fn toml_value() -> impl Strategy<Value = Toml> {
        toml_scalar().prop_recursive(2, 12, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Toml::Array),
                prop::collection::btree_map("[A-Za-z_]{1,6}", inner, 0..4)
                    .prop_map(|m| Toml::Table(m.into_iter().collect())),
            ]
        })
    }

    const SERVER_KEYS: [&str; 25] = [
        "command",
        "args",
        "env",
        "env_passthrough",
        "env_secrets",
        "header_secrets",
        "cwd",
        "url",
        "headers",
        "ping_interval_ms",
        "ping_timeout_ms",
        "ping_failure_threshold",
        "tool_call_timeout_ms",
        "startup_timeout_ms",
        "request_timeout_ms",
        "fail_on_startup_error",
        "max_instruction_bytes",
        "oversized_instructions",
        "enabled",
        "trust",
        "tool_trust",
        "idle_stop_after_s",
        "on_disconnect",
        "reconnect",
        "bogus",
    ];

    const RECONNECT_KEYS: [&str; 6] = [
        "enabled",
        "initial_delay_ms",
        "max_delay_ms",
        "max_attempts",
        "jitter",
        "bogus",
    ];

    /// A value for `key`: mostly of the type the field takes (so that the
    /// validation behind the TOML layer is reached), sometimes anything.
    fn value_for(key: &'static str) -> BoxedStrategy<Toml> {
        let s = |v: &str| Toml::String(v.to_owned());
        let strings = || prop::collection::vec("[a-zA-Z_ -]{0,6}".prop_map(Toml::String), 0..3);
        let string_map = |values: Vec<&'static str>| {
            prop::collection::btree_map("[A-Za-z_-]{1,6}", prop::sample::select(values), 0..3)
                .prop_map(|m| {
                    Toml::Table(
                        m.into_iter()
                            .map(|(k, v)| (k, Toml::String(v.into())))
                            .collect(),
                    )
                })
        };
        let typed: BoxedStrategy<Toml> = match key {
            "command" | "cwd" => prop_oneof![
                "[a-z./-]{1,10}".prop_map(Toml::String),
                Just(s("")),
                Just(s("  ")),
            ]
            .boxed(),
            "url" => prop::sample::select(vec![
                "https://example.com/mcp",
                "http://example.com/mcp",
                "http://localhost:8080/mcp",
                "http://[::1]/mcp",
                "ftp://example.com",
                "not a url",
                "",
            ])
            .prop_map(s)
            .boxed(),
            "args" | "env_passthrough" => strings().prop_map(Toml::Array).boxed(),
            "env" | "headers" | "env_secrets" | "header_secrets" => {
                string_map(vec!["a", "SECRET_NAME", ""]).boxed()
            }
            "tool_trust" => string_map(vec!["ask", "always", "never", "maybe"]).boxed(),
            "trust" => prop::sample::select(vec!["ask", "always", "never", "maybe"])
                .prop_map(s)
                .boxed(),
            "on_disconnect" => prop::sample::select(vec!["keep", "remove", "drop"])
                .prop_map(s)
                .boxed(),
            "oversized_instructions" => {
                prop::sample::select(vec!["fail", "truncate", "warn", "nope"])
                    .prop_map(s)
                    .boxed()
            }
            "fail_on_startup_error" | "enabled" | "jitter" => {
                any::<bool>().prop_map(Toml::Boolean).boxed()
            }
            "reconnect" => prop::collection::btree_map(
                prop::sample::select(RECONNECT_KEYS.to_vec()),
                Just(()),
                0..5,
            )
            .prop_flat_map(|keys| {
                keys.into_keys()
                    .map(|k| (Just(k.to_owned()), value_for(k)))
                    .collect::<Vec<_>>()
            })
            .prop_map(|kv| Toml::Table(kv.into_iter().collect()))
            .boxed(),
            // The numbers: milliseconds, seconds, counts, bytes.
            _ => prop_oneof![
                3 => (0i64..100_000).prop_map(Toml::Integer),
                1 => Just(Toml::Integer(0)),
                1 => (i64::from(u32::MAX) - 1..i64::from(u32::MAX) + 2).prop_map(Toml::Integer),
                1 => any::<i64>().prop_map(Toml::Integer),
            ]
            .boxed(),
        };
        prop_oneof![12 => typed, 1 => toml_value()].boxed()
    }

    /// A `[servers.NAME]` table of random known (and unknown) keys of
    /// random types.
    fn server_table() -> impl Strategy<Value = Table> {
        let transport = prop::sample::select(vec![
            vec!["command"],
            vec!["url"],
            vec!["command", "url"],
            vec![],
        ]);
        (
            prop::collection::btree_map(prop::sample::select(SERVER_KEYS.to_vec()), Just(()), 0..5),
            transport,
        )
            .prop_flat_map(|(mut keys, transport)| {
                keys.extend(transport.into_iter().map(|k| (k, ())));
                keys.into_keys()
                    .map(|k| (Just(k.to_owned()), value_for(k)))
                    .collect::<Vec<_>>()
            })
            .prop_map(|kv| kv.into_iter().collect())
    }

    /// A whole file of `[servers.NAME]` tables (and sometimes other tables).
    fn config_text() -> impl Strategy<Value = String> {
        let other = prop::sample::select(vec!["events", "secrets", "hooks", "bogus"]);
        (
            prop::collection::btree_map(server_name(), server_table(), 0..4),
            prop::option::weighted(0.2, (other, toml_value())),
        )
            .prop_filter_map("TOML the toml crate can write", |(servers, other)| {
                let mut root = Table::new();
                root.insert(
                    "servers".into(),
                    Toml::Table(
                        servers
                            .into_iter()
                            .map(|(k, v)| (k, Toml::Table(v)))
                            .collect(),
                    ),
                );
                if let Some((k, v)) = other {
                    root.insert(k.to_owned(), v);
                }
                toml::to_string(&root).ok()
            })
    }

    /// One valid server: its name, and its command or its URL.
    #[derive(Debug, Clone)]
    struct ValidServer {
        name: String,
        command: Option<String>,
        url: String,
        args: Vec<String>,
        timeouts: [Option<u32>; 3],
        reconnect: Option<(u32, u32, u32)>,
    }

    fn valid_server() -> impl Strategy<Value = ValidServer> {
        (
            "[A-Za-z0-9_-]{1,32}",
            prop::option::of("[a-z./-]{0,10}[a-z]"),
            "https://[a-z]{1,10}\\.example(:[0-9]{2,4})?/[a-z/]{0,10}",
            prop::collection::vec("[a-z é-]{0,8}", 0..3),
            [
                prop::option::of(1u32..),
                prop::option::of(1u32..),
                prop::option::of(1u32..),
            ],
            prop::option::of((1u32..10_000, 0u32..10_000, 1u32..100)),
        )
            .prop_map(
                |(name, command, url, args, timeouts, reconnect)| ValidServer {
                    name,
                    command,
                    url,
                    args,
                    timeouts,
                    reconnect: reconnect
                        .map(|(initial, extra, attempts)| (initial, initial + extra, attempts)),
                },
            )
    }

    fn valid_text(servers: &[ValidServer]) -> String {
        let mut table = Table::new();
        for s in servers {
            let mut t = Table::new();
            match &s.command {
                Some(c) => {
                    t.insert("command".into(), Toml::String(c.clone()));
                    t.insert(
                        "args".into(),
                        Toml::Array(s.args.iter().cloned().map(Toml::String).collect()),
                    );
                }
                None => {
                    t.insert("url".into(), Toml::String(s.url.clone()));
                }
            }
            for (key, v) in [
                "tool_call_timeout_ms",
                "startup_timeout_ms",
                "request_timeout_ms",
            ]
            .into_iter()
            .zip(s.timeouts)
            {
                if let Some(v) = v {
                    t.insert(key.into(), Toml::Integer(v.into()));
                }
            }
            if let Some((initial, max, attempts)) = s.reconnect {
                let mut r = Table::new();
                r.insert("initial_delay_ms".into(), Toml::Integer(initial.into()));
                r.insert("max_delay_ms".into(), Toml::Integer(max.into()));
                r.insert("max_attempts".into(), Toml::Integer(attempts.into()));
                t.insert("reconnect".into(), Toml::Table(r));
            }
            table.insert(s.name.clone(), Toml::Table(t));
        }
        let mut root = Table::new();
        root.insert("servers".into(), Toml::Table(table));
        toml::to_string(&root).unwrap()
    }

    /// Every problem names the file; a TOML-level one gives the position and
    /// quotes the line (so the key); a validation one names the server and
    /// the field.
    fn check_problems(
        origin: &str,
        text: &str,
        names: &[String],
        e: &ConfigError,
    ) -> Result<(), TestCaseError> {
        let named = format!("{origin}: ");
        let lines: Vec<&str> = text.lines().collect();
        for p in &e.problems {
            prop_assert!(p.starts_with(&named), "{}", p);
            let p = &p[named.len()..];
            if let Some(at) = p.strip_prefix("TOML parse error at line ") {
                let line: usize = at.split(',').next().unwrap_or("").parse().unwrap();
                prop_assert!(at.contains(", column "), "{}", p);
                let quoted = lines.get(line - 1).copied().unwrap_or("");
                prop_assert!(
                    p.contains(quoted.trim_end()),
                    "line {} not quoted: {}",
                    line,
                    p
                );
            } else if !p.starts_with("[") {
                prop_assert!(
                    names.iter().any(|n| {
                        p.starts_with(&format!("servers.{n}."))
                            || p.starts_with(&format!("servers.{n}:"))
                            || p.starts_with(&format!("server_name {n:?} is invalid"))
                    }),
                    "the server is not named: {}",
                    p
                );
                let fields = SERVER_KEYS
                    .iter()
                    .chain(&RECONNECT_KEYS)
                    .chain(&["server_name"]);
                prop_assert!(
                    fields.into_iter().any(|f| p.contains(f)),
                    "no field named: {}",
                    p
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_text_parses_or_fails_naming_its_file(origin in origin(), text in prop_oneof![tricky_text(), "[\\[\\]a-z=\" .\n{},0-9]{0,60}"]) {
            if let Err(e) = parse_config(&origin, &text) {
                prop_assert!(!e.problems.is_empty());
                check_problems(&origin, &text, &[], &e)?;
            }
        }

        #[test]
        fn a_generated_config_parses_or_every_problem_names_file_server_and_field(
            origin in origin(),
            text in config_text(),
        ) {
            // CONN-2: the error names the field; the TOML layer gives the
            // position. Nothing panics on any key of any type.
            let parsed: Table = toml::from_str(&text).unwrap();
            let names: Vec<String> = parsed
                .get("servers")
                .and_then(Toml::as_table)
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default();
            match parse_config(&origin, &text) {
                Ok(cfg) => {
                    let got: Vec<&str> = cfg.servers.iter().map(|s| s.server_name.as_str()).collect();
                    prop_assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
                    for s in &cfg.servers {
                        prop_assert_eq!(s.validate(), Ok(()));
                    }
                }
                Err(e) => check_problems(&origin, &text, &names, &e)?,
            }
        }

        #[test]
        fn a_valid_config_parses_to_the_servers_written(
            servers in prop::collection::btree_map("[A-Za-z0-9_-]{1,32}", valid_server(), 0..5),
        ) {
            // CONN-2, CONN-3, RECO-1.
            let servers: Vec<ValidServer> = servers
                .into_iter()
                .map(|(name, s)| ValidServer { name, ..s })
                .collect();
            let text = valid_text(&servers);
            let cfg = parse_config_file("mcpvisor.toml", &text).unwrap();
            prop_assert_eq!(cfg.len(), servers.len());
            for (c, s) in cfg.iter().zip(&servers) {
                prop_assert_eq!(&c.server_name, &s.name);
                match (&c.transport, &s.command) {
                    (TransportConfig::Stdio(io), Some(command)) => {
                        prop_assert_eq!(&io.command, command);
                        prop_assert_eq!(&io.args, &s.args);
                    }
                    (TransportConfig::StreamableHttp(h), None) => prop_assert_eq!(&h.url, &s.url),
                    (t, _) => prop_assert!(false, "wrong transport {:?} for {:?}", t, s),
                }
                let ms = |v: Option<u32>, default: u64| Duration::from_millis(v.map_or(default, u64::from));
                prop_assert_eq!(c.tool_call_timeout, ms(s.timeouts[0], DEFAULT_TOOL_CALL_TIMEOUT_MS));
                prop_assert_eq!(c.startup_timeout, ms(s.timeouts[1], DEFAULT_STARTUP_TIMEOUT_MS));
                prop_assert_eq!(c.request_timeout, ms(s.timeouts[2], DEFAULT_REQUEST_TIMEOUT_MS));
                if let Some((initial, max, attempts)) = s.reconnect {
                    prop_assert_eq!(c.reconnect.initial_delay, Duration::from_millis(initial.into()));
                    prop_assert_eq!(c.reconnect.max_delay, Duration::from_millis(max.into()));
                    prop_assert_eq!(c.reconnect.max_attempts, attempts);
                }
            }
        }
    }
}
