//! Configuration types and their validation (CONN-2, CONN-3, CONN-5, RECO-1, RECO-5).
//!
//! Two layers: the `Raw*` structs mirror the TOML file exactly (unknown keys are
//! rejected by serde, which reports line and column), and [`ServerConfig`] is the
//! validated form the runtime uses. [`ServerConfig::from_raw`] reports every
//! problem it finds, each naming its field.

pub mod file;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::naming::validate_server_name;
use super::transport::InProcessConnector;
use super::trust::TrustMode;

/// Default `tool_call_timeout_ms` (CONN-2).
pub const DEFAULT_TOOL_CALL_TIMEOUT_MS: u64 = 60_000;
/// Default `max_input_rounds` (ERA-5), as the Tier-1 SDKs bound it.
pub const DEFAULT_MAX_INPUT_ROUNDS: u32 = 10;
/// Default `startup_timeout_ms` (CONN-2): spawn/connect through `initialize` and the first full `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;
/// Default `request_timeout_ms` (CONN-2): every request other than `tools/call`.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 15_000;
/// Default `max_instruction_bytes` (CONN-2, RES-5).
pub const DEFAULT_MAX_INSTRUCTION_BYTES: usize = 32_768;
/// Default `idle_stop_after_s` (CONN-2, RECO-6).
pub const DEFAULT_IDLE_STOP_AFTER_S: u64 = 600;
/// Default HTTP liveness ping interval (CONN-14).
pub const DEFAULT_PING_INTERVAL_MS: u64 = 15_000;
/// Default HTTP liveness ping timeout (CONN-14).
pub const DEFAULT_PING_TIMEOUT_MS: u64 = 5_000;
/// Consecutive failed pings / transport errors that end an HTTP connection (CONN-14).
pub const DEFAULT_PING_FAILURE_THRESHOLD: u32 = 3;

/// A caller-visible scope in which servers are registered (CONN-4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum Scope {
    /// Visible to every caller of the runtime.
    Global,
    /// One agent's scope.
    Agent(String),
    /// One chat's scope.
    Chat(String),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("global"),
            Scope::Agent(id) => write!(f, "agent:{id}"),
            Scope::Chat(id) => write!(f, "chat:{id}"),
        }
    }
}

/// Declares [`ChaosSwitches`]: with the `chaos` feature a struct of public
/// flags, without it a zero-sized type whose every switch is a constant
/// `false`, so the code each switch guards is compiled out of a build that
/// does not ask for it. Either way the runtime reads a switch through the
/// method of its name.
macro_rules! chaos_switches {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Test-only switches that break the runtime on purpose, one per
        /// chaos invariant, so the chaos runner can show that each invariant
        /// fails when the behaviour it guards is gone. All off by default;
        /// only the builder's `*_for_chaos` methods turn one on. Public only
        /// with the `chaos` feature.
        #[cfg(feature = "chaos")]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct ChaosSwitches {
            $($(#[$doc])* pub $name: bool,)*
        }

        /// Without the `chaos` feature no switch exists: each reads `false`.
        #[cfg(not(feature = "chaos"))]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct ChaosSwitches;

        impl ChaosSwitches {
            $(
                #[cfg(feature = "chaos")]
                #[inline]
                pub(crate) fn $name(&self) -> bool {
                    self.$name
                }

                #[cfg(not(feature = "chaos"))]
                #[inline(always)]
                pub(crate) const fn $name(&self) -> bool {
                    false
                }
            )*
        }
    };
}

chaos_switches! {
    /// `no_overlap`: a replacement connection starts before the previous
    /// one confirmed its close.
    skip_close_barrier,
    /// `no_orphans`: processes start without `MCPVISOR_TAG`, so one that
    /// leaves its group is never found.
    untagged_children,
    /// `no_double_send`: after an HTTP 404 on the session, rmcp re-sends
    /// the request on a new session.
    replay_expired_sessions,
    /// `no_secret_leak`: a server's secret values are not redacted.
    no_redaction,
    /// `no_lost_reply`: the stdio line reader drops the part of a line read
    /// so far whenever rmcp drops a pending `receive()`.
    lossy_line_reader,
    /// `bounded_outcome`: a timed-out call's outcome comes 4 s late.
    late_timeouts,
    /// `one_generation`: a catalog is registered without its last tool.
    half_catalogs,
    /// `budget_respected`: reconnect attempts come without their backoff.
    no_backoff,
    /// `one_outcome_per_call`: every third call sends no `CallFinished`.
    silent_outcomes,
    /// `expected_consequences`: a `server_error` outcome is reported `ok`.
    wrong_kinds,
    /// `bounded_memory`: every call leaks 256 KiB.
    leak,
    /// `shutdown_within_deadline`: the root supervisor is killed just before
    /// the shutdown asks it to stop (a dead root must not report clean).
    dead_root,
    /// `reply_to_its_call`: the stdio transport hands a `tools/call` reply
    /// to another call in flight.
    cross_replies,
    /// `expected_consequences` (recovery): once a server has reconnected,
    /// its calls are refused as if it never came back.
    no_recovery,
}

/// Reconnect policy of one server (RECO-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconnectPolicy {
    /// Reconnect after a connection loss at all.
    pub enabled: bool,
    /// Delay before attempt 1.
    pub initial_delay: Duration,
    /// Cap of the delay; also the stability window (RECO-2).
    pub max_delay: Duration,
    /// Consecutive failed attempts allowed in one outage.
    pub max_attempts: u32,
    /// Spread delays randomly in `[delay/2, delay]` so fleets do not reconnect in lockstep.
    pub jitter: bool,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_millis(30_000),
            max_attempts: 10,
            jitter: false,
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `k` (1-based): `min(max_delay, initial_delay × 2^(k−1))` (RECO-1).
    /// Jitter is applied by the caller, which owns the random source.
    pub fn delay_for_attempt(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let factor = 1u64 << exp;
        let initial = u64::try_from(self.initial_delay.as_millis()).unwrap_or(u64::MAX);
        let max = u64::try_from(self.max_delay.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(initial.saturating_mul(factor).min(max))
    }

    /// The stability window: a connection that stayed up this long ends the outage (RECO-2).
    pub fn stability_window(&self) -> Duration {
        self.max_delay
    }
}

/// Which MCP protocol era a server is spoken to in (ERA-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ProtocolChoice {
    /// Probe the stateless era (`server/discover`) and fall back to
    /// `initialize` on the errors the spec names (or, on stdio, a probe that
    /// gets no answer); the era found is remembered until the config changes.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// The stateless era only (`server/discover`, per-request `_meta`).
    #[serde(rename = "2026-07-28")]
    Stateless,
    /// The session era only (`initialize`, down to 2024-11-05).
    #[serde(rename = "2025-11-25")]
    Session,
}

impl ProtocolChoice {
    /// The value as written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Stateless => "2026-07-28",
            Self::Session => "2025-11-25",
        }
    }
}

/// What happens to a server's registered tools when its connection is lost and
/// reconnect is disabled (RECO-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// Tools stay registered and fail with server-not-ready.
    #[default]
    Keep,
    /// Tools are removed from the registry.
    Remove,
}

/// What to do with server instructions over `max_instruction_bytes` (RES-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OversizedInstructions {
    /// Fail the connection attempt with an error naming the limit.
    #[default]
    Fail,
    /// Cut on a UTF-8 boundary with a marker.
    Truncate,
}

/// How a stdio server is started (CONN-3, CONN-5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StdioConfig {
    /// Executable, located on PATH and common prefixes when it has no `/`.
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Explicit environment for the child (added to the scrubbed parent environment).
    pub env: BTreeMap<String, String>,
    /// Further parent variables passed through explicitly.
    pub env_passthrough: Vec<String>,
    /// Environment variables whose values come from the secret store:
    /// variable name → secret name (TRUST-2).
    pub env_secrets: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
}

/// How a streamable-HTTP server is reached (CONN-3, CONN-9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpConfig {
    /// Endpoint URL (`http://` or `https://`).
    pub url: String,
    /// Extra request headers (plain values: no credentials here).
    pub headers: BTreeMap<String, String>,
    /// Headers whose values come from the secret store: header name → secret
    /// name (TRUST-2).
    pub header_secrets: BTreeMap<String, String>,
    /// Liveness ping interval (CONN-14).
    pub ping_interval: Duration,
    /// Liveness ping timeout (CONN-14).
    pub ping_timeout: Duration,
    /// Consecutive ping/transport failures that end the connection.
    pub ping_failure_threshold: u32,
    /// OAuth 2.1 authorization (CONN-13): `Some` sends the access token
    /// kept in the secret store (`mcpvisor auth login` obtains it), and
    /// refreshes it.
    pub oauth: Option<Box<OAuthConfig>>,
}

/// How a streamable-HTTP server's authorization is obtained (CONN-13):
/// `[servers.<name>.oauth]`. Every field is optional; with none, the
/// authorization server is discovered and the client registers itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// A client id registered with the authorization server out of band
    /// (then no registration is made).
    pub client_id: Option<String>,
    /// The secret-store name of that client's secret (TRUST-2: never the value).
    pub client_secret: Option<String>,
    /// An https URL of this client's Client ID Metadata Document, used as
    /// the client id where the authorization server supports it.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; empty: the challenge's, else all the
    /// server's `scopes_supported`, else none.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The name a dynamic registration gives (default `mcpvisor`).
    pub client_name: Option<String>,
    /// The 127.0.0.1 port of the login's redirect listener (default: any free one).
    pub redirect_port: Option<u16>,
    /// How tokens are obtained: `authorization_code` (default: a person
    /// authorizes, `mcpvisor auth login`) or `client_credentials` (a
    /// machine client with `client_id` and `client_secret` or
    /// `client_assertion_key`: the connection obtains its token itself, no
    /// login).
    #[serde(default)]
    pub grant: OAuthGrant,
    /// `client_credentials` with `private_key_jwt`: the secret-store name of
    /// the client's PEM private key (RSA or EC), which signs the assertion.
    pub client_assertion_key: Option<String>,
    /// The assertion's algorithm: `ES256` (default), `ES384`, `RS256`,
    /// `RS384`, `RS512`.
    pub signing_algorithm: Option<String>,
    /// `enterprise`: the identity provider's issuer.
    pub idp_issuer: Option<String>,
    /// `enterprise`: the identity provider's token endpoint.
    pub idp_token_endpoint: Option<String>,
    /// `enterprise`: this client's id at the identity provider.
    pub idp_client_id: Option<String>,
    /// `enterprise`: the secret-store name of its secret there.
    pub idp_client_secret: Option<String>,
    /// `enterprise`: the secret-store name of the user's ID token from the
    /// identity provider (the host keeps it current).
    pub idp_id_token: Option<String>,
    /// `jwt_bearer`: the secret-store name of the workload's JWT (the
    /// assertion), read again at every connection.
    pub assertion: Option<String>,
    /// `jwt_bearer`: a file holding the workload's JWT (a projected
    /// service-account token, say), read again at every connection; used
    /// when `assertion` is unset.
    pub assertion_file: Option<std::path::PathBuf>,
    /// DPoP-bound tokens (RFC 9449, SEP-1932): `true` always asks for
    /// them, `false` never; unset, they are asked for when the server's
    /// challenge names the `DPoP` scheme and the authorization server
    /// signs with ES256.
    pub dpop: Option<bool>,
}

/// The OAuth grant a server's tokens come from (CONN-13).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// Authorization code with PKCE: a person authorizes once.
    #[default]
    AuthorizationCode,
    /// Client credentials (the MCP extension SEP-1046): no person involved.
    ClientCredentials,
    /// Enterprise-managed authorization: the user's ID token from the
    /// identity provider is exchanged for an ID-JAG there, and that for an
    /// access token at the server's authorization server.
    Enterprise,
    /// The RFC 7523 JWT-bearer grant for workload identity federation
    /// (SEP-1933): a JWT the workload's platform issued is the assertion.
    JwtBearer,
}

/// The transport of a server instance.
#[derive(Clone, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum TransportConfig {
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio(StdioConfig),
    /// A streamable-HTTP endpoint.
    StreamableHttp(HttpConfig),
    /// An in-process server reached through a byte stream: for tests and embedders
    /// that host a server in the same process. Not reachable from a config file.
    #[serde(skip)]
    InProcess(InProcessConnector),
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio(c) => f.debug_tuple("Stdio").field(c).finish(),
            Self::StreamableHttp(c) => f.debug_tuple("StreamableHttp").field(c).finish(),
            Self::InProcess(_) => f.write_str("InProcess"),
        }
    }
}

impl TransportConfig {
    /// The transport's name as shown in status (OBS-1).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stdio(_) => "stdio",
            Self::StreamableHttp(_) => "streamable-http",
            Self::InProcess(_) => "in-process",
        }
    }
}

/// The validated configuration of one server instance (CONN-2).
#[derive(Debug, Clone, Serialize)]
pub struct ServerConfig {
    /// `[A-Za-z0-9_-]{1,32}`; part of every public tool name. Leave it empty
    /// and set `display_name` to have one derived (SYNC-2).
    pub server_name: String,
    /// A human name; when `server_name` is empty, the scope derives the
    /// server_name from it as a slug, unique within the scope (SYNC-2).
    pub display_name: Option<String>,
    /// How to reach the server.
    pub transport: TransportConfig,
    /// Timeout of one `tools/call`.
    pub tool_call_timeout: Duration,
    /// Spawn/connect through `initialize` and the first full `tools/list`.
    pub startup_timeout: Duration,
    /// Timeout of every other request.
    pub request_timeout: Duration,
    /// Fail `add_server`/start when the first connect fails (CONN-12).
    pub fail_on_startup_error: bool,
    /// Cap of the attributed instructions text (RES-5).
    pub max_instruction_bytes: usize,
    /// Over the cap: fail (default) or truncate (RES-5).
    pub oversized_instructions: OversizedInstructions,
    /// Reconnect policy (RECO-1).
    pub reconnect: ReconnectPolicy,
    /// Disabled servers are configured but never started.
    pub enabled: bool,
    /// Trust mode (TRUST-4).
    pub trust: TrustMode,
    /// Per-tool trust by raw tool name, overriding `trust` (TRUST-4's option).
    /// A tool set to `never` stays refused even after Always Allow.
    pub tool_trust: BTreeMap<String, TrustMode>,
    /// Whether this server's tools may run beside the other calls of a
    /// model round (`Runtime::turn`): `Some(true)` every tool, `Some(false)`
    /// none (each runs alone); `None`: a tool whose `readOnlyHint`
    /// annotation is true may, any other runs alone.
    pub parallel_calls: Option<bool>,
    /// Idle stop for stdio servers; `None` = never (RECO-6).
    pub idle_stop_after: Option<Duration>,
    /// Tools on connection loss without reconnect (RECO-5).
    pub on_disconnect: OnDisconnect,
    /// The protocol era spoken to this server (ERA-1).
    pub protocol: ProtocolChoice,
    /// Most `input_required` rounds one request may take (ERA-5): the
    /// request is answered and sent again at most this many times.
    pub max_input_rounds: u32,
    /// Appended to every tool description of this server: the guidance a
    /// seat provider gives the model (SEAT-6). Not in the config file.
    pub tool_note: Option<String>,
}

impl ServerConfig {
    /// A stdio server with every option at its default.
    pub fn stdio(
        server_name: impl Into<String>,
        command: impl Into<String>,
        args: Vec<String>,
    ) -> Self {
        Self::with_transport(
            server_name,
            TransportConfig::Stdio(StdioConfig {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                env_passthrough: Vec::new(),
                env_secrets: BTreeMap::new(),
                cwd: None,
            }),
        )
    }

    /// A server known by a display name; its `server_name` is derived as a
    /// slug when it is added to a scope (SYNC-2).
    pub fn with_display_name(display_name: impl Into<String>, transport: TransportConfig) -> Self {
        let mut c = Self::with_transport("", transport);
        c.display_name = Some(display_name.into());
        c
    }

    /// A streamable-HTTP server with every option at its default.
    pub fn http(server_name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            server_name,
            TransportConfig::StreamableHttp(HttpConfig {
                url: url.into(),
                headers: BTreeMap::new(),
                header_secrets: BTreeMap::new(),
                ping_interval: Duration::from_millis(DEFAULT_PING_INTERVAL_MS),
                ping_timeout: Duration::from_millis(DEFAULT_PING_TIMEOUT_MS),
                ping_failure_threshold: DEFAULT_PING_FAILURE_THRESHOLD,
                oauth: None,
            }),
        )
    }

    /// A server with the given transport and every option at its default.
    pub fn with_transport(server_name: impl Into<String>, transport: TransportConfig) -> Self {
        Self {
            server_name: server_name.into(),
            display_name: None,
            transport,
            tool_call_timeout: Duration::from_millis(DEFAULT_TOOL_CALL_TIMEOUT_MS),
            startup_timeout: Duration::from_millis(DEFAULT_STARTUP_TIMEOUT_MS),
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            fail_on_startup_error: false,
            max_instruction_bytes: DEFAULT_MAX_INSTRUCTION_BYTES,
            oversized_instructions: OversizedInstructions::Fail,
            reconnect: ReconnectPolicy::default(),
            enabled: true,
            trust: TrustMode::default(),
            tool_trust: BTreeMap::new(),
            parallel_calls: None,
            idle_stop_after: Some(Duration::from_secs(DEFAULT_IDLE_STOP_AFTER_S)),
            on_disconnect: OnDisconnect::default(),
            protocol: ProtocolChoice::default(),
            max_input_rounds: DEFAULT_MAX_INPUT_ROUNDS,
            tool_note: None,
        }
    }

    /// This server's tools are allowed without asking (`trust = "always"`, TRUST-4).
    pub fn trusted(mut self) -> Self {
        self.trust = TrustMode::Always;
        self
    }

    /// Check the invariants a hand-built config must hold (the same ones the
    /// file loader checks). Returns every problem, each naming its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let prefix = format!("servers.{}", self.server_name);
        let mut problems = Vec::new();
        let derived = self.server_name.is_empty() && self.display_name.is_some();
        if !derived && let Err(e) = validate_server_name(&self.server_name) {
            problems.push(e.to_string());
        }
        check_reconnect(&prefix, &self.reconnect, &mut problems);
        for (field, d) in [
            ("tool_call_timeout_ms", self.tool_call_timeout),
            ("startup_timeout_ms", self.startup_timeout),
            ("request_timeout_ms", self.request_timeout),
        ] {
            if d.is_zero() {
                problems.push(format!("{prefix}.{field} must be greater than 0"));
            }
        }
        match &self.transport {
            TransportConfig::Stdio(s) if s.command.trim().is_empty() => {
                problems.push(format!("{prefix}.command must not be empty"));
            }
            TransportConfig::StreamableHttp(h) => {
                check_url(&prefix, &h.url, &mut problems);
                if h.ping_failure_threshold == 0 {
                    problems.push(format!(
                        "{prefix}.ping_failure_threshold must be at least 1"
                    ));
                }
                if h.ping_interval.is_zero() || h.ping_timeout.is_zero() {
                    problems.push(format!(
                        "{prefix}.ping_interval_ms and ping_timeout_ms must be greater than 0"
                    ));
                }
            }
            _ => {}
        }
        ConfigError::from_problems(problems)
    }
}

fn check_url(prefix: &str, url: &str, problems: &mut Vec<String>) {
    // TRUST-3: the one endpoint validator every dialer uses.
    if let Err(e) = super::trust::validate_endpoint(url) {
        problems.push(format!("{prefix}.url: {e}"));
    }
}

fn check_reconnect(prefix: &str, r: &ReconnectPolicy, problems: &mut Vec<String>) {
    if r.initial_delay.is_zero() {
        problems.push(format!(
            "{prefix}.reconnect.initial_delay_ms must be greater than 0"
        ));
    }
    if r.max_delay.is_zero() {
        problems.push(format!(
            "{prefix}.reconnect.max_delay_ms must be greater than 0"
        ));
    }
    if r.initial_delay > r.max_delay {
        problems.push(format!(
            "{prefix}.reconnect.initial_delay_ms ({}) must not exceed max_delay_ms ({})",
            r.initial_delay.as_millis(),
            r.max_delay.as_millis()
        ));
    }
    if r.max_attempts < 1 {
        problems.push(format!(
            "{prefix}.reconnect.max_attempts must be at least 1"
        ));
    }
}

/// Configuration problems; every one names its field (and file position when known).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .problems.join("\n  - "))]
pub struct ConfigError {
    /// One line per problem.
    pub problems: Vec<String>,
}

impl ConfigError {
    pub(crate) fn from_problems(problems: Vec<String>) -> Result<(), ConfigError> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delay_doubles_from_initial_and_caps_at_max() {
        // RECO-1: delay(k) = min(max, initial * 2^(k-1))
        let p = ReconnectPolicy::default();
        let got: Vec<u128> = (1..=8)
            .map(|k| p.delay_for_attempt(k).as_millis())
            .collect();
        assert_eq!(got, vec![500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(p.delay_for_attempt(1000).as_millis(), 30000);
    }
}
