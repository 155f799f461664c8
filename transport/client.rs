//! The client side of one MCP session: rmcp's client handler (explicit
//! client info, empty capabilities unless an embedder installs handlers,
//! CONN-10/11), the handshake and the first catalog, the catalog fetch
//! (SYNC-3 phase 1), HTTP liveness pings (CONN-14), and rmcp's errors in
//! words.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation,
    ListToolsRequest, PaginatedRequestParams, PingRequest, ProtocolVersion, RequestMetaObject,
    ServerResult, TASKS_EXTENSION_ID, UrlElicitationCapability,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RequestContext, RoleClient, RunningService,
};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData as McpError};
use serde_json::{Map, Value};

use super::WireError;
use super::diagnostics::Diagnostics;
use crate::messages::capabilities::{
    CallerRelay, ClientHandlers, ElicitationRequest, ElicitationResponse, Offers, RELAY_KEY,
    RelayAsk, apply_schema_defaults,
};
use crate::messages::catalog::ToolPages;
use crate::messages::config::{ProtocolChoice, ServerConfig, TransportConfig};
use crate::messages::registry::{McpClient, Relay};
use crate::messages::server::{ConnInfo, Era, ServerSupervisorMsg};
use crate::messages::trust::redact;

/// The protocol versions a server may answer `initialize` with (mcp.md:
/// down to 2025-03-26; and 2024-11-05, which rmcp speaks too and many
/// stdio servers still answer). Anything else ends the attempt.
pub const SPOKEN_VERSIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2024_11_05,
];

/// The stateless-era versions this client speaks (ERA-1), newest first.
pub const STATELESS_VERSIONS: [ProtocolVersion; 1] = [ProtocolVersion::V_2026_07_28];

/// How a connection opens (ERA-1): the config's choice, and for `auto` the
/// era the previous connection of the same config spoke. A server known to
/// speak the session era gets `initialize` at once (no probe); otherwise
/// `auto` probes `server/discover` first and falls back to `initialize` on
/// the answers the spec names (a JSON-RPC error that is not a stateless-era
/// rejection, an HTTP 4xx other than 401/403) or, after 10 s of silence, as
/// rmcp's `Auto` mode does.
///
/// An in-process server is the runtime's own (a seat provider) or the
/// embedder's: `auto` speaks the session era to it, whose list_changed and
/// elicitation the providers use; set `protocol = "2026-07-28"` for an
/// in-process server of the stateless era.
pub fn lifecycle(
    choice: ProtocolChoice,
    in_process: bool,
    remembered: Option<Era>,
) -> ClientLifecycleMode {
    match (choice, remembered) {
        (ProtocolChoice::Session, _) | (ProtocolChoice::Auto, Some(Era::Session)) => {
            ClientLifecycleMode::Initialize
        }
        (ProtocolChoice::Auto, _) if in_process => ClientLifecycleMode::Initialize,
        (ProtocolChoice::Stateless, _) => ClientLifecycleMode::Discover {
            preferred_versions: STATELESS_VERSIONS.to_vec(),
        },
        (ProtocolChoice::Auto, _) => ClientLifecycleMode::Auto {
            preferred_versions: STATELESS_VERSIONS.to_vec(),
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with "…".
fn capped(text: &str, max: usize) -> String {
    let end = crate::messages::budget::floor_char_boundary(text, max);
    if end == text.len() {
        return text.to_owned();
    }
    format!("{}…", &text[..end])
}

fn version_list(versions: &[ProtocolVersion]) -> String {
    versions
        .iter()
        .map(ProtocolVersion::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The versions this client speaks, in words: both eras.
fn spoken_words() -> String {
    format!(
        "{} (server/discover) and {} (initialize)",
        version_list(&STATELESS_VERSIONS),
        version_list(&SPOKEN_VERSIONS)
    )
}

/// A failed opening in words that name both sides' versions where a
/// version is the cause (ERA-1), and say which `protocol` setting to try.
fn opening_error(
    e: &rmcp::service::ClientInitializeError,
    cfg: &ServerConfig,
    diag: &Diagnostics,
) -> String {
    use rmcp::service::ClientInitializeError as E;
    let fix = |to: &str| {
        format!(
            "; to speak its era, set protocol = \"{to}\" (or \"auto\") in [servers.{}]",
            cfg.server_name
        )
    };
    match e {
        E::NoCompatibleProtocolVersion {
            server_supported, ..
        } => format!(
            "server/discover failed: no protocol version both sides speak: the server speaks {}; this client speaks {}",
            if server_supported.is_empty() {
                "none it named".to_owned()
            } else {
                version_list(server_supported)
            },
            spoken_words()
        ),
        // The transport named the cause already (an HTTP status, a
        // refused connection): the probe's own words add nothing.
        E::LegacyFallbackFailed { fallback, .. } if diag.fatal().is_some() => {
            initialize_error(fallback.as_ref(), &cfg.transport, diag)
        }
        E::LegacyFallbackFailed { discover, fallback } => format!(
            "server/discover failed ({}), and so did initialize: {}",
            capped(&without_type_names(&discover.to_string()), 300),
            initialize_error(fallback.as_ref(), &cfg.transport, diag)
        ),
        E::JsonRpcError(data) if data.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => {
            let supported = data
                .data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let modern = supported.split(", ").any(|v| v >= "2026-07-28");
            format!(
                "initialize failed: the server does not speak {}: it speaks {}; this client speaks {}{}",
                ProtocolVersion::LATEST_WITH_INITIALIZE,
                if supported.is_empty() {
                    "another version"
                } else {
                    &supported
                },
                spoken_words(),
                if modern && cfg.protocol == ProtocolChoice::Session {
                    fix("2026-07-28")
                } else {
                    String::new()
                }
            )
        }
        E::JsonRpcError(data)
            if cfg.protocol == ProtocolChoice::Stateless
                && data.message.starts_with("server/discover: ") =>
        {
            format!(
                "{}, and this server's config allows only {}{}",
                data.message,
                version_list(&STATELESS_VERSIONS),
                fix("2025-11-25")
            )
        }
        E::JsonRpcError(data) if cfg.protocol == ProtocolChoice::Stateless => format!(
            "server/discover failed: {} (code {}): the server seems to speak only the session era, and this server's config allows only {}{}",
            data.message,
            data.code.0,
            version_list(&STATELESS_VERSIONS),
            fix("2025-11-25")
        ),
        other => initialize_error(other, &cfg.transport, diag),
    }
}

/// Most `tools/list` pages accepted in one catalog (SYNC-3).
pub const MAX_CATALOG_PAGES: usize = 1000;

/// The rmcp client handler: explicit client info, EMPTY capabilities, and -32601
/// for every server→client request.
#[derive(Debug, Clone)]
pub struct SupervisedClient {
    /// The connection generation it serves.
    pub conn_gen: u64,
    /// The server's name.
    pub server: String,
    /// Where catalog changes go.
    pub supervisor: ActorRef<ServerSupervisorMsg>,
    /// The embedder's opt-in capabilities (CONN-11).
    pub handlers: ClientHandlers,
    /// The connection's diagnostics: its secret values (TRUST-2).
    pub diag: Arc<Diagnostics>,
}

/// The capabilities this client declares (CONN-11): none but elicitation,
/// and that only when the embedder installed a handler; elicitation,
/// sampling and roots when the runtime relays them to calling clients
/// (GW-2).
pub fn declared_capabilities(handlers: &ClientHandlers) -> ClientCapabilities {
    capabilities_of(Offers {
        elicitation: handlers.elicitation.is_some() || handlers.relays,
        sampling: handlers.relays,
        roots: handlers.relays,
    })
}

/// The client capabilities that answer `offers`.
fn capabilities_of(offers: Offers) -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    if offers.sampling {
        capabilities.sampling = Some(Default::default());
    }
    if offers.roots {
        capabilities.roots = Some(Default::default());
    }
    if offers.elicitation {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::new());
        elicitation.url = Some(UrlElicitationCapability::default());
        capabilities.elicitation = Some(elicitation);
    }
    capabilities
}

/// A stateless-era request's `_meta` declaring `capabilities`, and the
/// tasks extension (`io.modelcontextprotocol/tasks`, ERA-6) when `tasks`.
fn request_meta(mut capabilities: ClientCapabilities, tasks: bool) -> RequestMetaObject {
    if tasks {
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), Map::new());
    }
    let mut meta = RequestMetaObject::default();
    meta.set_client_capabilities(capabilities);
    meta
}

/// The `_meta` of a stateless-era request that declares the tasks extension
/// besides [`declared_capabilities`]. The extension is declared per
/// request: a server may answer a `tools/call` with a task only when that
/// request declared it, and serves `tasks/get`, `tasks/update` and
/// `tasks/cancel` only to requests that declare it too.
pub fn tasks_meta(handlers: &ClientHandlers) -> RequestMetaObject {
    request_meta(declared_capabilities(handlers), true)
}

/// The `_meta` of a stateless-era call made for a relaying client (GW-2):
/// what that client declared, so that the server asks it only for that
/// (and the tasks extension when `tasks`).
pub fn relay_meta(offers: Offers, tasks: bool) -> RequestMetaObject {
    request_meta(capabilities_of(offers), tasks)
}

impl SupervisedClient {
    /// The server's prompt or resource `list` changed: a `ListChanged` event.
    fn list_changed(&self, list: &'static str) {
        if let Some((scope, events)) = &self.handlers.notifications {
            let _ = events.send(crate::messages::status::RuntimeEvent::ListChanged {
                scope: scope.clone(),
                server: self.server.clone(),
                list,
            });
        }
    }
}

impl SupervisedClient {
    /// `method` passed to the client of the calls (reads, prompts) under
    /// way (GW-2), its
    /// answer read as `R`; None when no such client declared it.
    async fn relayed<P: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Option<Result<R, McpError>> {
        let relay = match self.diag.progress.relay() {
            Relay::None => return None,
            Relay::Ambiguous => {
                return Some(Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "{method}: requests of several clients are under way on this server, so the request cannot be passed to the one it is for"
                    ),
                    None,
                )));
            }
            Relay::To(relay) => relay,
        };
        if !relay.offers().answers(method) {
            return None;
        }
        let mut params = match serde_json::to_value(params) {
            Ok(v) => v,
            Err(e) => return Some(Err(McpError::internal_error(e.to_string(), None))),
        };
        if let Some(obj) = params.as_object_mut() {
            obj.remove("_meta");
        }
        // TRUST-2: what the server asks is its output; a user reads it.
        crate::messages::trust::redact_value(&mut params, &self.diag.redactions());
        let asks = vec![RelayAsk {
            key: RELAY_KEY.to_owned(),
            method: method.to_owned(),
            params,
        }];
        let answer = relay
            .ask(asks)
            .await
            .map(|mut answers| answers.remove(RELAY_KEY).unwrap_or(Value::Null));
        Some(match answer {
            Ok(answer) => serde_json::from_value(answer).map_err(|e| {
                McpError::internal_error(
                    format!("{method}: the calling client's answer is not one: {e}"),
                    None,
                )
            }),
            Err(e) => Err(McpError::new(ErrorCode(e.code), e.message, None)),
        })
    }
}

fn no_capabilities(method: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("{method}: this client exposes no MCP capabilities"),
        None,
    )
}

#[allow(deprecated)]
impl ClientHandler for SupervisedClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            declared_capabilities(&self.handlers),
            Implementation::new("mcpvisor", env!("CARGO_PKG_VERSION")).with_title("mcpvisor"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        match self.relayed("sampling/createMessage", &params).await {
            Some(answer) => answer,
            None => Err(no_capabilities("sampling/createMessage")),
        }
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, McpError> {
        match self.relayed("roots/list", &Map::new()).await {
            Some(answer) => answer,
            None => Err(no_capabilities("roots/list")),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let Some(answer) = self.relayed("elicitation/create", &params).await {
            return answer;
        }
        elicit(
            &self.handlers,
            &self.server,
            &self.diag.redactions(),
            params,
        )
        .await
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(no_capabilities(&request.method))
    }

    #[allow(deprecated)] // logging: deprecated by SEP-2577, still what session-era servers send
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        if let Some((scope, events)) = &self.handlers.notifications {
            let mut data = params.data;
            crate::messages::trust::redact_value(&mut data, &self.diag.redactions());
            let level = serde_json::to_value(params.level)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = events.send(crate::messages::status::RuntimeEvent::ServerLog {
                scope: scope.clone(),
                server: self.server.clone(),
                level,
                logger: params.logger,
                data,
            });
        }
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.list_changed("prompts");
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.list_changed("resources");
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        if let Some((scope, events)) = &self.handlers.notifications {
            let _ = events.send(crate::messages::status::RuntimeEvent::ResourceUpdated {
                scope: scope.clone(),
                server: self.server.clone(),
                uri: params.uri,
            });
        }
    }

    /// Progress notifications are routed by the transport as they are
    /// read ([`SupervisedClient::progress_arrived`]), not here.
    async fn on_progress(
        &self,
        _: rmcp::model::ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.supervisor.cast(ServerSupervisorMsg::ToolsListChanged {
            conn_gen: self.conn_gen,
        });
    }
}

impl SupervisedClient {
    /// A server's progress notification, read off the wire: to the call
    /// its token belongs to, as that call's event. Called in wire order,
    /// so a call's progress is out before its `CallFinished`.
    pub fn progress_arrived(&self, params: &rmcp::model::ProgressNotificationParam) {
        // TRUST-2: a progress message is the server's output.
        let note = crate::messages::registry::ProgressNote {
            progress: params.progress,
            total: params.total,
            message: params
                .message
                .as_deref()
                .map(|m| redact(m, &self.diag.redactions())),
        };
        if let Some((call_id, note)) = self
            .diag
            .progress
            .arrive(progress_key(&params.progress_token), note)
        {
            emit_progress(&self.handlers, &self.server, call_id, note);
        }
    }
}

/// Answer a server's elicitation (a session-era `elicitation/create`, or a
/// stateless-era `input_required` entry) through the embedder's handler;
/// -32601 when none is installed (CONN-11). What the server asks is its
/// output: secrets are redacted before a user reads it (TRUST-2).
pub async fn elicit(
    handlers: &ClientHandlers,
    server: &str,
    redactions: &[String],
    params: ElicitRequestParams,
) -> Result<ElicitResult, McpError> {
    let Some(handler) = &handlers.elicitation else {
        return Err(no_capabilities("elicitation/create"));
    };
    let request = match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => ElicitationRequest {
            server: server.to_owned(),
            message,
            requested_schema: Some(serde_json::to_value(&requested_schema).map_err(|e| {
                McpError::invalid_params(format!("unreadable requestedSchema: {e}"), None)
            })?),
            url: None,
        },
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => ElicitationRequest {
            server: server.to_owned(),
            message,
            requested_schema: None,
            url: Some(url),
        },
        _ => return Err(no_capabilities("elicitation/create (unknown mode)")),
    };
    // TRUST-2: what the server asks is its output; a user reads it.
    let secrets = redactions;
    let mut request = request;
    if !secrets.is_empty() {
        request.message = redact(&request.message, secrets);
        if let Some(schema) = request.requested_schema.as_mut() {
            crate::messages::trust::redact_value(schema, secrets);
        }
        request.url = request.url.map(|u| redact(&u, secrets));
    }
    Ok(match handler.elicit(&request).await {
        ElicitationResponse::Accept(content) => {
            let content = match &request.requested_schema {
                Some(schema) => apply_schema_defaults(content, schema),
                None => content,
            };
            ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
        }
        ElicitationResponse::Decline => ElicitResult::new(ElicitationAction::Decline),
        ElicitationResponse::Cancel => ElicitResult::new(ElicitationAction::Cancel),
    })
}

/// A stateless server asked for what this client does not give (ERA-5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputRefused {
    /// Sampling or roots: this client declares neither.
    #[error(
        "the server asked for {0}, which this client does not offer (it declares no such capability)"
    )]
    Undeclared(&'static str),
    /// The elicitation handler failed, or there is none.
    #[error("the server asked for input (elicitation), which could not be answered: {0}")]
    Elicitation(String),
    /// An answer could not be written as JSON.
    #[error("an answer to the server's input request could not be written: {0}")]
    Unwritable(String),
    /// The call's client refused or failed the request passed to it.
    #[error("the server asked for {0}, which the calling client refused: {1}")]
    Relayed(String, String),
    /// The result asked for nothing and carried no state to echo.
    #[error("the server answered input_required with neither input requests nor request state")]
    Empty,
}

/// The answers and request state of one `input_required` round.
pub type Answers = (Option<rmcp::model::InputResponses>, Option<String>);

/// Who answers a stateless server's `input_required` on requests other
/// than `tools/call` (ERA-5): the connection's handlers and secrets, and
/// the server's round limit.
pub struct Answerer<'a> {
    /// The embedder's handlers.
    pub handlers: &'a ClientHandlers,
    /// The server's name (shown with an elicitation).
    pub server: &'a str,
    /// The server's secret values (TRUST-2).
    pub redactions: &'a [String],
    /// `max_input_rounds`.
    pub max_rounds: u32,
    /// The request's client, when a gateway relays what the server asks
    /// to it (GW-2): asked first, for what it declared.
    pub relay: Option<&'a Arc<dyn CallerRelay>>,
    /// The server speaks the stateless era (its requests carry what the
    /// relaying client declared).
    pub stateless: bool,
    /// The connection's routes: a session-era server's requests during
    /// the request go to `relay`.
    pub routes: &'a crate::messages::registry::ProgressRoutes,
}

/// The answers to a stateless server's `input_required` result (ERA-5),
/// from the same sources as the session era's requests: elicitation through
/// the embedder's handler; sampling and roots refused, as this client
/// declares neither. Returns the responses to send with the retried request
/// and the `requestState` to echo untouched.
pub async fn answer_input_required(
    handlers: &ClientHandlers,
    relay: Option<&dyn CallerRelay>,
    server: &str,
    redactions: &[String],
    result: rmcp::model::InputRequiredResult,
) -> Result<Answers, InputRefused> {
    let requests = result.input_requests.unwrap_or_default();
    if requests.is_empty() && result.request_state.is_none() {
        return Err(InputRefused::Empty);
    }
    let mut responses = rmcp::model::InputResponses::new();
    // The call's client answers what it declared (GW-2), all in one go.
    let mut relayed = Vec::new();
    let mut rest = Vec::new();
    for (key, request) in requests {
        let Some(relay) = relay else {
            rest.push((key, request));
            continue;
        };
        let asked =
            serde_json::to_value(&request).map_err(|e| InputRefused::Unwritable(e.to_string()))?;
        let method = asked
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if relay.offers().answers(&method) {
            let mut params = asked.get("params").cloned().unwrap_or(Value::Null);
            crate::messages::trust::redact_value(&mut params, redactions);
            relayed.push(RelayAsk {
                key,
                method,
                params,
            });
        } else {
            rest.push((key, request));
        }
    }
    if let (Some(relay), false) = (relay, relayed.is_empty()) {
        let methods: Vec<String> = relayed.iter().map(|a| a.method.clone()).collect();
        let answers = relay
            .ask(relayed)
            .await
            .map_err(|e| InputRefused::Relayed(methods.join(", "), e.message))?;
        responses.extend(answers);
    }
    for (key, request) in rest {
        let answer = match request {
            rmcp::model::InputRequest::Elicitation(e) => {
                let r = elicit(handlers, server, redactions, e.params)
                    .await
                    .map_err(|e| InputRefused::Elicitation(e.message.into_owned()))?;
                serde_json::to_value(r).map_err(|e| InputRefused::Unwritable(e.to_string()))?
            }
            rmcp::model::InputRequest::CreateMessage(_) => {
                return Err(InputRefused::Undeclared("sampling/createMessage"));
            }
            rmcp::model::InputRequest::ListRoots(_) => {
                return Err(InputRefused::Undeclared("roots/list"));
            }
            _ => {
                return Err(InputRefused::Undeclared(
                    "an input this client does not know",
                ));
            }
        };
        responses.insert(key, answer);
    }
    Ok((
        (!responses.is_empty()).then_some(responses),
        result.request_state,
    ))
}

/// The key of a progress token in [`ProgressRoutes`](crate::messages::registry::ProgressRoutes).
pub fn progress_key(token: &rmcp::model::ProgressToken) -> String {
    match &token.0 {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => format!("s:{s}"),
    }
}

/// A progress note of call `call_id` as the runtime's event.
pub fn emit_progress(
    handlers: &ClientHandlers,
    server: &str,
    call_id: u64,
    note: crate::messages::registry::ProgressNote,
) {
    if let Some((scope, events)) = &handlers.notifications {
        let _ = events.send(crate::messages::status::RuntimeEvent::CallProgress {
            scope: scope.clone(),
            server: server.to_owned(),
            call_id,
            progress: note.progress,
            total: note.total,
            message: note.message,
        });
    }
}

/// Fetch every page of `tools/list`, bypassing rmcp's response cache. Entries
/// come back as raw JSON so malformed ones can be dropped one by one (SYNC-7).
pub async fn fetch_catalog(
    client: &McpClient,
    request_timeout: Duration,
    diag: &Diagnostics,
) -> Result<ToolPages, WireError> {
    let mut entries = Vec::new();
    // The shortest page's ttlMs; none when any page lacks one (SEP-2549).
    let mut fresh_ms: Option<Option<u64>> = None;
    let mut merge = |page_ttl: Option<u64>| {
        fresh_ms = Some(match (fresh_ms, page_ttl) {
            (None, t) => t,
            (Some(Some(a)), Some(b)) => Some(a.min(b)),
            _ => None,
        });
    };
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    for _page in 0..MAX_CATALOG_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let handle = client
            .peer()
            .send_request_with_option(request, PeerRequestOptions::with_timeout(request_timeout))
            .await
            .map_err(|e| WireError::NotSent {
                method: "tools/list",
                source: Box::new(e.into()),
            })?;
        let id = crate::transport::stdio::request_id_key(&handle.id);
        let response = handle
            .await_response()
            .await
            .map_err(|e| WireError::Failed {
                method: "tools/list",
                source: Box::new(e.into()),
            })?;
        // The page as the server wrote it, when the transport kept it
        // (stdio always, HTTP for SSE replies): its entries keep what
        // rmcp's typed Tool drops (execution.taskSupport, SYNC-7) and any
        // malformed entry, for build_catalog to judge one by one.
        let stashed = diag.take_tools_page(&id);
        let next = match response {
            ServerResult::ListToolsResult(page) => {
                merge(page.ttl_ms);
                match stashed {
                    Some(raw) => entries.extend(raw),
                    None => {
                        for tool in &page.tools {
                            entries.push(serde_json::to_value(tool).map_err(WireError::Result)?);
                        }
                    }
                }
                page.next_cursor
            }
            ServerResult::CustomResult(raw) => {
                // A page rmcp's typed model could not read (e.g. one malformed entry).
                let value = raw.0;
                merge(value.get("ttlMs").and_then(Value::as_u64));
                let tools = value
                    .get("tools")
                    .and_then(Value::as_array)
                    .ok_or(WireError::NoToolsArray)?;
                match stashed {
                    Some(raw) => entries.extend(raw),
                    None => entries.extend(tools.iter().cloned()),
                }
                value
                    .get("nextCursor")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }
            _ => {
                return Err(WireError::UnexpectedResult {
                    method: "tools/list",
                });
            }
        };
        match next {
            None => {
                return Ok(ToolPages {
                    entries,
                    fresh_for: fresh_ms.flatten().map(Duration::from_millis),
                });
            }
            Some(c) => {
                if !seen.insert(c.clone()) {
                    return Err(WireError::RepeatedCursor { cursor: c });
                }
                cursor = Some(c);
            }
        }
    }
    Err(WireError::TooManyPages {
        pages: MAX_CATALOG_PAGES,
    })
}

/// A finished handshake: the running service, what the server said of
/// itself, and its first catalog.
pub struct Established {
    /// rmcp's service over the transport.
    pub running: RunningService<RoleClient, SupervisedClient>,
    /// What the server said of itself.
    pub info: ConnInfo,
    /// The first catalog's pages.
    pub catalog: ToolPages,
    /// Stateless era, a server with tools: the listen stream, opened
    /// before the first catalog was fetched (ERA-4).
    pub listen: Option<Listen>,
}

/// The `subscriptions/listen` stream of a stateless connection as the
/// opening left it (ERA-4).
pub enum Listen {
    /// Acknowledged: every tool list change from before the first catalog
    /// on is on it.
    Open(Box<rmcp::service::Subscription>),
    /// Refused with a JSON-RPC error: the server offers no such stream.
    Refused(String),
    /// Not acknowledged in time, or the request failed in transport: opened
    /// again after a backoff.
    Retry,
}

/// The filter of the listen stream: tool list changes.
fn listen_filter() -> rmcp::model::SubscriptionFilter {
    rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resources_list_changed()
        .build()
}

/// Open the listen stream, within `limit`.
async fn open_listen(client: &McpClient, limit: Duration) -> Listen {
    match tokio::time::timeout(limit, client.peer().listen(listen_filter())).await {
        Ok(Ok(stream)) => Listen::Open(Box::new(stream)),
        Ok(Err(rmcp::service::ServiceError::McpError(e))) => Listen::Refused(format!(
            "subscriptions/listen refused: {} (code {}); tool list changes are not seen",
            e.message, e.code.0
        )),
        Ok(Err(_)) | Err(_) => Listen::Retry,
    }
}

/// Whether `e` is a request's send that wrote nothing to the server (its
/// stdin's read end was closed): the request never ran (CALL-5).
pub(crate) fn nothing_written(e: &rmcp::service::ServiceError) -> bool {
    let rmcp::service::ServiceError::TransportSend(sent) = e else {
        return false;
    };
    sent.error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .is_some_and(|inner| inner.is::<crate::transport::stdio::NothingWritten>())
}

/// An rmcp service error in words, without rmcp's wrapper and its type
/// names: `Transport [rmcp::transport::worker::WorkerTransport<…>] error:
/// Session expired (HTTP 404)` reads "Session expired (HTTP 404)".
pub(crate) fn service_words(e: &(dyn std::error::Error + 'static)) -> String {
    words(e.to_string())
}

/// [`service_words`] of an error's text.
pub(super) fn words(text: String) -> String {
    match text.split_once("] error: ") {
        Some((head, rest)) if head.contains('[') => rest.to_owned(),
        _ => without_type_names(&text),
    }
}

/// `text` with every `Transport [<a Rust type>] error: ` of rmcp's error
/// texts written `transport error: ` (no type names in what a user or a
/// model reads).
pub(crate) fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("Transport [") {
        let after = &rest[at + "Transport [".len()..];
        let Some(end) = after.find("] error: ") else {
            break;
        };
        if !after[..end].contains("::") {
            out.push_str(&rest[..at + "Transport [".len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        out.push_str("transport error: ");
        rest = &after[end + "] error: ".len()..];
    }
    out.push_str(rest);
    out
}

/// The words of a failed `initialize`. Over HTTP, when the transport
/// already named the cause (`reqwest_cause`, a refused connection, DNS,
/// TLS, a timeout; or an HTTP status), the error says only that
/// `initialize` failed, without rmcp's wrapper and its type names.
fn initialize_error(
    e: &(dyn std::error::Error + 'static),
    transport: &TransportConfig,
    diag: &Diagnostics,
) -> String {
    let text = e.to_string();
    let TransportConfig::StreamableHttp(http) = transport else {
        return format!("initialize failed: {text}");
    };
    // The legacy HTTP+SSE transport's endpoints end in /sse by convention.
    let legacy = if http.url.trim_end_matches('/').ends_with("/sse") {
        "; a URL ending in /sse is usually the legacy HTTP+SSE transport, which is not supported: use the server's streamable HTTP endpoint (often /mcp)"
    } else {
        ""
    };
    if diag.fatal().is_some() {
        return format!("initialize failed{legacy}");
    }
    // Strip `Send message error Transport [type<…>] error: ` and the tail.
    let inner = service_words(e);
    let inner = inner.as_str();
    let inner = inner
        .split(", when send initialize request")
        .next()
        .unwrap_or(inner);
    format!("initialize failed: {inner}{legacy}")
}

/// The opening of the era [`lifecycle`] picks (`server/discover`, or
/// `initialize` with empty capabilities and `notifications/initialized`),
/// then the whole catalog when the server has tools (ERA-1, CONN-10, SYNC-3).
pub async fn handshake<T, E, A>(
    handler: SupervisedClient,
    transport: T,
    cfg: Arc<ServerConfig>,
    diag: Arc<Diagnostics>,
    pid: Option<u32>,
    remembered: Option<Era>,
) -> Result<Box<Established>, WireError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let routes = handler.clone();
    let transport = super::opening::Opening::new(transport.into_transport())
        .with_progress(move |p| routes.progress_arrived(p));
    let running = handler
        .serve_with_lifecycle(
            transport,
            lifecycle(
                cfg.protocol,
                matches!(cfg.transport, TransportConfig::InProcess(_)),
                remembered,
            ),
        )
        .await
        .map_err(|e| WireError::Initialize {
            words: opening_error(&e, &cfg, &diag),
        })?;
    let peer = running.peer().clone();
    peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
        .await;
    let client = McpClient::new(peer.clone());
    let Some(server) = peer.peer_info() else {
        return Err(WireError::NoServerInfo);
    };
    let era = Era::of(server.protocol_version.as_str());
    let spoken = match era {
        Era::Stateless => STATELESS_VERSIONS.contains(&server.protocol_version),
        Era::Session => SPOKEN_VERSIONS.contains(&server.protocol_version),
    };
    if !spoken {
        return Err(WireError::Version {
            answered: server.protocol_version.as_str().to_owned(),
        });
    }
    // TRUST-2: what the server says of itself is its output too.
    let secrets = diag.redactions();
    let instructions = crate::messages::resources::attribute_instructions(
        &cfg.server_name,
        &redact(server.instructions.as_deref().unwrap_or(""), &secrets),
        cfg.max_instruction_bytes,
        cfg.oversized_instructions,
    )
    .map_err(WireError::Instructions)?;
    let has_tools = server.capabilities.tools.is_some();
    let info = ConnInfo {
        protocol_version: server.protocol_version.to_string(),
        server_info: server
            .server_info
            .as_ref()
            .map(|i| redact(&format!("{} {}", i.name, i.version), &secrets)),
        instructions,
        has_resources: server.capabilities.resources.is_some(),
        has_prompts: server.capabilities.prompts.is_some(),
        pid,
    };
    // ERA-4: the stream first, then the list, so that no change falls
    // between the two.
    let listen = if era == Era::Stateless && has_tools {
        Some(open_listen(&client, cfg.request_timeout).await)
    } else {
        None
    };
    let catalog = if has_tools {
        fetch_catalog(&client, cfg.request_timeout, &diag).await?
    } else {
        ToolPages {
            entries: Vec::new(),
            fresh_for: None,
        }
    };
    Ok(Box::new(Established {
        running,
        info,
        catalog,
        listen,
    }))
}

/// Ping on an interval until the failure threshold is reached (CONN-14);
/// then the reason the connection is lost. The stateless era has no `ping`:
/// its liveness request is `server/discover`, which every server of that
/// era answers and which changes nothing (ERA-3).
pub async fn ping_until_dead(
    client: McpClient,
    cfg: &crate::messages::config::HttpConfig,
    era: Era,
) -> String {
    let peer = client.peer();
    let interval = cfg.ping_interval;
    let timeout = cfg.ping_timeout;
    let threshold = cfg.ping_failure_threshold.max(1);
    {
        let mut failures = 0u32;
        let mut last = String::new();
        loop {
            tokio::time::sleep(interval).await;
            let ping = match era {
                Era::Session => ClientRequest::PingRequest(PingRequest::default()),
                Era::Stateless => ClientRequest::DiscoverRequest(
                    rmcp::model::DiscoverRequest::new(rmcp::model::DiscoverRequestParams {}),
                ),
            };
            let result = match peer
                .send_request_with_option(ping, PeerRequestOptions::with_timeout(timeout))
                .await
            {
                Ok(h) => h.await_response().await.map(|_| ()),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    last = service_words(&e);
                }
            }
            if failures >= threshold {
                return format!(
                    "the endpoint failed {failures} consecutive liveness pings (last: {last})"
                );
            }
        }
    }
}

/// The first wait before a `subscriptions/listen` stream that ended is
/// opened again; it doubles up to [`LISTEN_MAX_BACKOFF`] (ERA-4).
pub const LISTEN_FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two openings of a listen stream.
pub const LISTEN_MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Stateless era: `notifications/tools/list_changed` arrives only on a
/// `subscriptions/listen` stream (ERA-4). Follow the stream the opening
/// left and call `changed` for each change; a stream that ends while the
/// connection lives is opened again after a backoff (1 s, doubling to
/// 30 s), each opening bounded by `limit`, and `changed` is called once it
/// is back, as a change may have been missed meanwhile. Returns when the
/// transport closed, or when the server refuses the request (a JSON-RPC
/// error: it offers no such stream), with the reason.
pub async fn listen_for_changes(
    client: McpClient,
    first: Listen,
    limit: Duration,
    changed: impl Fn() + Send,
    other_list_changed: impl Fn(&'static str) + Send,
) -> String {
    let mut backoff = LISTEN_FIRST_BACKOFF;
    let mut listen = first;
    let mut reopened = false;
    loop {
        match listen {
            Listen::Open(mut stream) => {
                if reopened {
                    changed();
                }
                backoff = LISTEN_FIRST_BACKOFF;
                while let Ok(Some(note)) = stream.next().await {
                    use rmcp::model::ServerNotification as N;
                    match note {
                        N::ToolListChangedNotification(_) => changed(),
                        N::PromptListChangedNotification(_) => other_list_changed("prompts"),
                        N::ResourceListChangedNotification(_) => other_list_changed("resources"),
                        _ => {}
                    }
                }
            }
            Listen::Refused(why) => return why,
            Listen::Retry => {}
        }
        if client.is_closed() {
            return "the transport closed".into();
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LISTEN_MAX_BACKOFF);
        reopened = true;
        listen = open_listen(&client, limit).await;
    }
}

// ===== The client's requests =====

/// A request handed to the session's loop, its reply still to come.
pub type PendingRequest = rmcp::service::RequestHandle<RoleClient>;

impl McpClient {
    /// The client of a running session.
    pub(crate) fn of(running: &RunningService<RoleClient, SupervisedClient>) -> Self {
        Self::new(running.peer().clone())
    }

    /// Hand `tools/call` of `raw_name` with `arguments` to the session's
    /// loop; the reply is awaited on the returned handle. rmcp gives the
    /// request a progress token of its own (`PendingRequest::progress_token`):
    /// the caller routes it to the call ([`ProgressRoutes`](crate::messages::registry::ProgressRoutes)).
    ///
    /// `answers` are the input responses and request state of a retry after
    /// `input_required` (ERA-5); `None` for the first round. `meta`, when
    /// given, is the request's `_meta` ([`tasks_meta`] for a call that may
    /// become a task).
    pub async fn send_call(
        &self,
        raw_name: &str,
        arguments: Map<String, Value>,
        answers: Option<Answers>,
        meta: Option<RequestMetaObject>,
    ) -> Result<PendingRequest, rmcp::service::ServiceError> {
        let mut params =
            rmcp::model::CallToolRequestParams::new(raw_name.to_owned()).with_arguments(arguments);
        if let Some((responses, state)) = answers {
            params.input_responses = responses;
            params.request_state = state;
        }
        let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        // Through the options: they override the capabilities rmcp puts in
        // every stateless-era request's `_meta`, which the params' would not.
        let mut options = PeerRequestOptions::no_options();
        options.meta = meta;
        self.peer().send_request_with_option(request, options).await
    }

    /// One `tasks/*` request with `meta` (which declares the extension), its
    /// answer awaited.
    async fn task_request(
        &self,
        request: ClientRequest,
        meta: RequestMetaObject,
    ) -> Result<ServerResult, rmcp::service::ServiceError> {
        self.peer()
            .send_request_with_option(request, PeerRequestOptions::default().with_meta(meta))
            .await?
            .await_response()
            .await
    }

    /// `tasks/get` of `task_id` (ERA-6): the task's state, and its result
    /// or error once it ended. `meta` declares the tasks extension
    /// ([`tasks_meta`]).
    pub async fn get_task(
        &self,
        task_id: &str,
        meta: RequestMetaObject,
    ) -> Result<ServerResult, rmcp::service::ServiceError> {
        let params = rmcp::model::GetTaskParams::new(task_id);
        let request = ClientRequest::GetTaskRequest(rmcp::model::GetTaskRequest::new(params));
        self.task_request(request, meta).await
    }

    /// `tasks/update` of `task_id` with the answers to its input requests
    /// (ERA-6).
    pub async fn update_task(
        &self,
        task_id: &str,
        responses: rmcp::model::InputResponses,
        meta: RequestMetaObject,
    ) -> Result<ServerResult, rmcp::service::ServiceError> {
        let params = rmcp::model::UpdateTaskParams::new(task_id, responses);
        let request = ClientRequest::UpdateTaskRequest(rmcp::model::UpdateTaskRequest::new(params));
        self.task_request(request, meta).await
    }

    /// `tasks/cancel` of `task_id` (ERA-6): the server acknowledges; the
    /// cancellation itself is cooperative.
    pub async fn cancel_task(
        &self,
        task_id: &str,
        meta: RequestMetaObject,
    ) -> Result<ServerResult, rmcp::service::ServiceError> {
        let params = rmcp::model::CancelTaskParams::new(task_id);
        let request = ClientRequest::CancelTaskRequest(rmcp::model::CancelTaskRequest::new(params));
        self.task_request(request, meta).await
    }

    /// Whether the session's transport is closed.
    pub fn is_closed(&self) -> bool {
        self.peer().is_transport_closed()
    }

    /// One page of `resources/list`, as raw JSON.
    pub async fn list_resources(
        &self,
        cursor: Option<String>,
        timeout: Duration,
    ) -> Result<Value, WireError> {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListResourcesRequest(
            rmcp::model::ListResourcesRequest::with_param(params),
        );
        self.request_value(request, timeout).await
    }

    /// One page of `resources/templates/list`, as raw JSON.
    pub async fn list_resource_templates(
        &self,
        cursor: Option<String>,
        timeout: Duration,
    ) -> Result<Value, WireError> {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request = ClientRequest::ListResourceTemplatesRequest(
            rmcp::model::ListResourceTemplatesRequest::with_param(params),
        );
        self.request_value(request, timeout).await
    }

    /// `resources/read` of `uri`, as raw JSON; a stateless server's
    /// `input_required` answered by `answerer` (ERA-5).
    pub async fn read_resource(
        &self,
        uri: String,
        timeout: Duration,
        answerer: &Answerer<'_>,
    ) -> Result<Value, WireError> {
        let params = rmcp::model::ReadResourceRequestParams::new(uri);
        self.answering(timeout, answerer, |answers| {
            let mut p = params.clone();
            if let Some((responses, state)) = answers {
                p.input_responses = responses;
                p.request_state = state;
            }
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(p))
        })
        .await
    }

    /// One page of `prompts/list`, as raw JSON.
    pub async fn list_prompts(
        &self,
        cursor: Option<String>,
        timeout: Duration,
    ) -> Result<Value, WireError> {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let request =
            ClientRequest::ListPromptsRequest(rmcp::model::ListPromptsRequest::with_param(params));
        self.request_value(request, timeout).await
    }

    /// `prompts/get` of `name` with `arguments`, as raw JSON; a stateless
    /// server's `input_required` answered by `answerer` (ERA-5).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        timeout: Duration,
        answerer: &Answerer<'_>,
    ) -> Result<Value, WireError> {
        let mut params = rmcp::model::GetPromptRequestParams::new(name.to_owned());
        if let Some(args) = arguments {
            params = params.with_arguments(args);
        }
        self.answering(timeout, answerer, |answers| {
            let mut p = params.clone();
            if let Some((responses, state)) = answers {
                p.input_responses = responses;
                p.request_state = state;
            }
            ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(p))
        })
        .await
    }

    /// A request that a stateless server may answer with `input_required`
    /// (ERA-5): `build` makes it, first without answers, then with the
    /// answers and the state of the last round; at most `max_rounds`
    /// rounds, all of them (the answering included) within `timeout`.
    async fn answering(
        &self,
        timeout: Duration,
        answerer: &Answerer<'_>,
        build: impl Fn(Option<Answers>) -> ClientRequest,
    ) -> Result<Value, WireError> {
        let rounds = async {
            let mut answers = None;
            let mut round = 0u32;
            loop {
                let mut options = PeerRequestOptions::with_timeout(timeout);
                // Made for a relaying client: a stateless server is told
                // what that client can answer (GW-2), as with a call.
                if let (Some(relay), true) = (answerer.relay, answerer.stateless) {
                    options.meta = Some(relay_meta(relay.offers(), false));
                }
                // A session-era server asks with requests of its own
                // meanwhile (from the moment it has the request): they go
                // to the relaying client (GW-2).
                let session_relay = answerer.relay.filter(|_| !answerer.stateless);
                let handing = answerer.routes.sending(session_relay);
                let handle = self
                    .peer()
                    .send_request_with_option(build(answers.take()), options)
                    .await
                    .map_err(WireError::from)?;
                let _claimed = session_relay.map(|relay| {
                    answerer
                        .routes
                        .claim(progress_key(&handle.progress_token), relay.clone())
                });
                drop(handing);
                match handle.await_response().await.map_err(WireError::from)? {
                    ServerResult::InputRequiredResult(asked) => {
                        round += 1;
                        if round > answerer.max_rounds {
                            return Err(WireError::Rounds {
                                rounds: round,
                                max: answerer.max_rounds,
                            });
                        }
                        answers = Some(
                            answer_input_required(
                                answerer.handlers,
                                answerer.relay.map(|r| &**r),
                                answerer.server,
                                answerer.redactions,
                                asked,
                            )
                            .await
                            .map_err(WireError::Input)?,
                        );
                    }
                    result => return serde_json::to_value(&result).map_err(WireError::Result),
                }
            }
        };
        tokio::time::timeout(timeout, rounds)
            .await
            .unwrap_or(Err(WireError::Timeout { after: timeout }))
    }

    /// `resources/subscribe` (`on`) or `resources/unsubscribe` to `uri`.
    /// The stateless era has neither: a subscription is a
    /// `subscriptions/listen` stream for the one URI, whose updates go out
    /// as [`RuntimeEvent::ResourceUpdated`](crate::RuntimeEvent::ResourceUpdated)
    /// through `handlers`; unsubscribing drops it.
    pub async fn subscription(
        &self,
        uri: &str,
        on: bool,
        timeout: Duration,
        era: Era,
        handlers: &ClientHandlers,
        server: &str,
    ) -> Result<Value, WireError> {
        if era == Era::Stateless {
            return self
                .listen_to_resource(uri, on, timeout, handlers, server)
                .await;
        }
        #[allow(deprecated)] // legacy-only in rmcp; what 2025-11-25 servers speak
        let request = if on {
            ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(uri),
            ))
        } else {
            ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                rmcp::model::UnsubscribeRequestParams::new(uri),
            ))
        };
        self.request_value(request, timeout).await
    }

    /// `completion/complete` with `params` (the request's parameters, in
    /// the server's own names); the result as raw JSON.
    pub async fn complete(&self, params: Value, timeout: Duration) -> Result<Value, WireError> {
        let params: rmcp::model::CompleteRequestParams =
            serde_json::from_value(params).map_err(|source| WireError::Params {
                method: "completion/complete",
                source,
            })?;
        let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(params));
        self.request_value(request, timeout).await
    }

    /// A stateless subscription to `uri` (see [`Self::subscription`]).
    async fn listen_to_resource(
        &self,
        uri: &str,
        on: bool,
        timeout: Duration,
        handlers: &ClientHandlers,
        server: &str,
    ) -> Result<Value, WireError> {
        if !on {
            self.streams().remove(uri);
            return Ok(Value::Object(Map::new()));
        }
        if self.streams().has(uri) {
            return Ok(Value::Object(Map::new()));
        }
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscriptions([uri])
            .build();
        let mut stream = tokio::time::timeout(timeout, self.peer().listen(filter))
            .await
            .map_err(|_| WireError::Timeout { after: timeout })?
            .map_err(WireError::from)?;
        let honored = stream
            .acknowledged()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|u| u == uri));
        if !honored {
            return Err(WireError::SubscriptionRefused {
                uri: uri.to_owned(),
            });
        }
        let events = handlers.notifications.clone();
        let (server, mine) = (server.to_owned(), uri.to_owned());
        let task = tokio::spawn(async move {
            while let Ok(Some(note)) = stream.next().await {
                if let rmcp::model::ServerNotification::ResourceUpdatedNotification(n) = note
                    && let Some((scope, events)) = &events
                    && n.params.uri == mine
                {
                    let _ = events.send(crate::messages::status::RuntimeEvent::ResourceUpdated {
                        scope: scope.clone(),
                        server: server.clone(),
                        uri: n.params.uri,
                    });
                }
            }
        });
        self.streams().insert(uri, task.abort_handle());
        Ok(Value::Object(Map::new()))
    }

    /// Send one request with a timeout and return its result as raw JSON.
    async fn request_value(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<Value, WireError> {
        let handle = self
            .peer()
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(WireError::from)?;
        let result = handle.await_response().await.map_err(WireError::from)?;
        serde_json::to_value(&result).map_err(WireError::Result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_error_texts_lose_their_type_names() {
        // No `WorkerTransport<…>` in what a user reads.
        let raw = "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<mcpvisor::actors::http::TappedClient>>] error: Session expired (HTTP 404)";
        assert_eq!(
            without_type_names(raw),
            "Send message error transport error: Session expired (HTTP 404)"
        );
        let plain = "Transport [closed] error: x; nothing else";
        assert_eq!(without_type_names(plain), plain);
        assert_eq!(without_type_names("no types here"), "no types here");
    }
}
