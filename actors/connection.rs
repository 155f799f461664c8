//! `Connection(conn_gen)`: one rmcp session with one server instance.
//!
//! Owns exclusively: the transport of one generation — for stdio the child
//! process group (via [`ProcessHandle`]), for HTTP the rmcp session, for
//! in-process servers the stream. Supervisor: `ServerSupervisor`, restart type
//! temporary (the supervisor decides about a *new* generation under its budget).
//!
//! ```text
//!  Connecting ──handshake+catalog ok──▶ Up ──transport closed / pings fail──▶ stop(cause)
//!      └──error/timeout──▶ stop(cause)          Up ──stop──▶ post_stop: close
//! ```
//! Every exit path runs the close sequence in a detached task that reports
//! `ConnectionEnded { conn_gen, reaped }` to the supervisor: the close barrier
//! (RECO-3) waits for that message, never for this actor. Messages:
//! [`ConnectionMsg`], private (only its own handshake and watcher tasks send).

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation,
    ListToolsRequest, PaginatedRequestParams, PingRequest, ProtocolVersion, ServerResult,
    UrlElicitationCapability,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RunningService,
};
use rmcp::{ClientHandler, ErrorData as McpError, ServiceExt};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::stdio::{self, Diagnostics, ProcessHandle};
use crate::messages::capabilities::{
    ClientHandlers, ElicitationRequest, ElicitationResponse, apply_schema_defaults,
};
use crate::messages::config::{ServerConfig, TransportConfig};
use crate::messages::server::{ConnInfo, ServerSupervisorMsg, Unreaped};
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

/// Most `tools/list` pages accepted in one catalog (SYNC-3).
pub const MAX_CATALOG_PAGES: usize = 1000;
/// How long a crash error waits for the exit status and stderr (CONN-7).
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long closing waits for rmcp's service loop to end.
const SERVICE_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// How long an in-process server may take to confirm its close.
const IN_PROCESS_CLOSE_WAIT: Duration = Duration::from_secs(10);

// ===== Client handler (CONN-10, CONN-11) =====

/// The rmcp client handler: explicit client info, EMPTY capabilities, and -32601
/// for every server→client request.
#[derive(Debug, Clone)]
pub struct SupervisedClient {
    conn_gen: u64,
    server: String,
    supervisor: ActorRef<ServerSupervisorMsg>,
    handlers: ClientHandlers,
    /// The connection's diagnostics: its secret values (TRUST-2).
    diag: Arc<Diagnostics>,
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
        let mut capabilities = ClientCapabilities::default();
        if self.handlers.elicitation.is_some() {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::new());
            elicitation.url = Some(UrlElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("mcpvisor", env!("CARGO_PKG_VERSION")).with_title("mcpvisor"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        _: rmcp::model::CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        Err(no_capabilities("sampling/createMessage"))
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, McpError> {
        Err(no_capabilities("roots/list"))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let Some(handler) = &self.handlers.elicitation else {
            return Err(no_capabilities("elicitation/create"));
        };
        let request = match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => ElicitationRequest {
                server: self.server.clone(),
                message,
                requested_schema: Some(serde_json::to_value(&requested_schema).map_err(|e| {
                    McpError::invalid_params(format!("unreadable requestedSchema: {e}"), None)
                })?),
                url: None,
            },
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => ElicitationRequest {
                server: self.server.clone(),
                message,
                requested_schema: None,
                url: Some(url),
            },
            _ => return Err(no_capabilities("elicitation/create (unknown mode)")),
        };
        // TRUST-2: what the server asks is its output; a user reads it.
        let secrets = self.diag.redactions();
        let mut request = request;
        if !secrets.is_empty() {
            request.message = redact(&request.message, &secrets);
            if let Some(schema) = request.requested_schema.as_mut() {
                crate::messages::trust::redact_value(schema, &secrets);
            }
            request.url = request.url.map(|u| redact(&u, &secrets));
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

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(no_capabilities(&request.method))
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

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        // Our tokens are call ids; any other token is not ours to route.
        let rmcp::model::NumberOrString::Number(id) = params.progress_token.0 else {
            return;
        };
        let (Some((scope, events)), Ok(call_id)) =
            (&self.handlers.notifications, u64::try_from(id))
        else {
            return;
        };
        // TRUST-2: a progress message is the server's output.
        let message = params.message.map(|m| redact(&m, &self.diag.redactions()));
        let _ = events.send(crate::messages::status::RuntimeEvent::CallProgress {
            scope: scope.clone(),
            server: self.server.clone(),
            call_id,
            progress: params.progress,
            total: params.total,
            message,
        });
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.supervisor.cast(ServerSupervisorMsg::ToolsListChanged {
            conn_gen: self.conn_gen,
        });
    }
}

// ===== Catalog fetch (SYNC-3 phase 1) =====

/// Fetch every page of `tools/list`, bypassing rmcp's response cache. Entries
/// come back as raw JSON so malformed ones can be dropped one by one (SYNC-7).
pub async fn fetch_catalog(
    peer: &Peer<RoleClient>,
    request_timeout: Duration,
    diag: &Diagnostics,
) -> Result<Vec<Value>, String> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    for _page in 0..MAX_CATALOG_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(request_timeout))
            .await
            .map_err(|e| format!("tools/list could not be sent: {}", service_words(&e)))?;
        let id = super::stdio::request_id_key(&handle.id);
        let response = handle
            .await_response()
            .await
            .map_err(|e| format!("tools/list failed: {}", service_words(&e)))?;
        // The page as the server wrote it, when the transport kept it
        // (stdio always, HTTP for SSE replies): its entries keep what
        // rmcp's typed Tool drops (execution.taskSupport, SYNC-7) and any
        // malformed entry, for build_catalog to judge one by one.
        let stashed = diag.take_tools_page(&id);
        let next = match response {
            ServerResult::ListToolsResult(page) => {
                match stashed {
                    Some(raw) => entries.extend(raw),
                    None => {
                        for tool in &page.tools {
                            entries.push(serde_json::to_value(tool).map_err(|e| e.to_string())?);
                        }
                    }
                }
                page.next_cursor
            }
            ServerResult::CustomResult(raw) => {
                // A page rmcp's typed model could not read (e.g. one malformed entry).
                let value = raw.0;
                let tools = value
                    .get("tools")
                    .and_then(Value::as_array)
                    .ok_or_else(|| "tools/list result has no tools array".to_owned())?;
                match stashed {
                    Some(raw) => entries.extend(raw),
                    None => entries.extend(tools.iter().cloned()),
                }
                value
                    .get("nextCursor")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }
            _ => return Err("tools/list answered with an unexpected result type".into()),
        };
        match next {
            None => return Ok(entries),
            Some(c) => {
                if !seen.insert(c.clone()) {
                    return Err(format!("tools/list repeated cursor {c:?}: invalid catalog"));
                }
                cursor = Some(c);
            }
        }
    }
    Err(format!(
        "tools/list exceeded {MAX_CATALOG_PAGES} pages: invalid catalog"
    ))
}

// ===== The actor =====

/// Arguments of one connection generation.
pub struct ConnectionArgs {
    /// Generation.
    pub conn_gen: u64,
    /// The server's config.
    pub config: Arc<ServerConfig>,
    /// Where to report.
    pub supervisor: ActorRef<ServerSupervisorMsg>,
    /// Shared with the status.
    pub diag: Arc<Diagnostics>,
    /// Opt-in client capabilities (CONN-11).
    pub handlers: ClientHandlers,
    /// Where this generation's transport registers its close confirmation.
    pub open: Arc<OpenTransports>,
    /// Test-only break switches.
    pub chaos: crate::messages::config::ChaosSwitches,
}

/// The transports of one server that have not confirmed their close, kept
/// outside its supervisor (the scope holds it): a supervisor restarted after
/// a failure finds them, waits for them, and continues the generation count
/// (RECO-3 across a restart).
#[derive(Debug, Default)]
pub struct OpenTransports {
    inner: std::sync::Mutex<OpenInner>,
}

#[derive(Debug, Default)]
struct OpenInner {
    next_gen: u64,
    closed: std::collections::BTreeMap<u64, Unreaped>,
}

impl OpenTransports {
    fn lock(&self) -> std::sync::MutexGuard<'_, OpenInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next connection generation (1 for a new server).
    pub fn next_gen(&self) -> u64 {
        self.lock().next_gen.max(1)
    }

    /// Remember the next connection generation.
    pub fn set_next_gen(&self, next: u64) {
        self.lock().next_gen = next;
    }

    /// `conn_gen`'s transport is open; `closed` tells once its close is confirmed.
    pub fn register(&self, conn_gen: u64, closed: Unreaped) {
        self.lock().closed.insert(conn_gen, closed);
    }

    /// `conn_gen` confirmed its close.
    pub fn forget(&self, conn_gen: u64) {
        self.lock().closed.remove(&conn_gen);
    }

    /// The registered transports not confirmed closed yet.
    pub fn pending(&self) -> Vec<(u64, Unreaped)> {
        self.lock()
            .closed
            .iter()
            .filter(|(_, u)| !*u.reaped.borrow())
            .map(|(g, u)| (*g, u.clone()))
            .collect()
    }
}

/// Messages of the `Connection` actor: private self-messages, sent only by
/// the actor's own tasks (the handshake, the transport watcher, the pinger).
pub enum ConnectionMsg {
    /// The handshake task finished.
    Established(Result<Box<Established>, String>),
    /// The transport ended, or liveness failed (CONN-14).
    Lost(String),
}

/// What the handshake task hands the actor.
pub struct Established {
    running: RunningService<RoleClient, SupervisedClient>,
    info: ConnInfo,
    catalog: Vec<Value>,
}

/// How this generation's transport is closed and confirmed.
enum Closer {
    Process(ProcessHandle),
    /// Turns `true` once the in-process server confirmed its close.
    InProcess(tokio::sync::watch::Receiver<bool>),
    Network,
}

/// The `Connection` actor.
#[derive(Debug, Default)]
pub struct Connection;

/// State of one connection.
pub struct ConnectionState {
    /// Generation.
    conn_gen: u64,
    /// Config.
    config: Arc<ServerConfig>,
    /// Supervisor.
    supervisor: ActorRef<ServerSupervisorMsg>,
    /// Output diagnostics.
    diag: Arc<Diagnostics>,
    /// The close half of the transport; taken by the close task.
    closer: Option<Closer>,
    /// Child pid (stdio).
    pid: Option<u32>,
    /// The handshake task while connecting.
    connect_task: Option<JoinHandle<()>>,
    /// Cancels rmcp's service loop.
    service_ct: Option<rmcp::service::RunningServiceCancellationToken>,
    /// Ends when the service loop ends.
    watcher: Option<JoinHandle<()>>,
    /// HTTP liveness pings (CONN-14).
    pinger: Option<JoinHandle<()>>,
    /// HTTP: ends the connection when the server drops its session (CALL-5).
    session_watch: Option<JoinHandle<()>>,
    /// `ConnectionEnded` is sent exactly once.
    ended_sent: bool,
}

/// A killed actor (or one whose parent failed) skips `post_stop`: its tasks
/// must not outlive it. The close sequence, when it ran, took them already.
impl Drop for ConnectionState {
    fn drop(&mut self) {
        for task in [
            self.connect_task.take(),
            self.pinger.take(),
            self.session_watch.take(),
            self.watcher.take(),
        ]
        .into_iter()
        .flatten()
        {
            task.abort();
        }
        if let Some(ct) = self.service_ct.take() {
            ct.cancel();
        }
    }
}

impl Actor for Connection {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConnectionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = ConnectionState {
            conn_gen: args.conn_gen,
            config: args.config,
            supervisor: args.supervisor,
            diag: args.diag,
            closer: None,
            pid: None,
            connect_task: None,
            service_ct: None,
            watcher: None,
            pinger: None,
            session_watch: None,
            ended_sent: false,
        };
        let handler = SupervisedClient {
            conn_gen: state.conn_gen,
            server: state.config.server_name.clone(),
            supervisor: state.supervisor.clone(),
            handlers: args.handlers.clone(),
            diag: state.diag.clone(),
        };
        let cfg = state.config.clone();
        let diag = state.diag.clone();
        let me = myself.clone();
        // Start the transport synchronously so the process is owned from the first instant.
        // TRUST-2: values of env_secrets / header_secrets, fetched now, redacted everywhere.
        let wanted = match &cfg.transport {
            TransportConfig::Stdio(c) => c.env_secrets.clone(),
            TransportConfig::StreamableHttp(c) => c.header_secrets.clone(),
            TransportConfig::InProcess(_) => Default::default(),
        };
        // A store that does not answer must not wedge this actor's parent:
        // the lookups share the startup deadline (issue 10, defect 13).
        let lookups = resolve_secrets(&cfg.server_name, &wanted, args.handlers.secrets.as_deref());
        let secrets = match tokio::time::timeout(cfg.startup_timeout, lookups).await {
            Ok(found) => found,
            Err(_) => Err(format!(
                "the secrets of server {} could not be had: the secret store did not answer within startup_timeout_ms = {}",
                cfg.server_name,
                cfg.startup_timeout.as_millis()
            )),
        };
        if args.chaos.no_redaction {
            diag.break_redaction();
        }
        if let Ok(values) = &secrets {
            diag.add_redactions(values.iter().map(|(_, v)| v.expose().to_owned()));
        }
        let connect: BoxFuture<'static, Result<Box<Established>, String>> =
            match (&cfg.transport, secrets) {
                (_, Err(e)) => Box::pin(futures::future::ready(Err(e))),
                (TransportConfig::Stdio(stdio_cfg), Ok(secret_env)) => {
                    match stdio::spawn(stdio_cfg, secret_env, diag.clone(), args.chaos) {
                        Ok(child) => {
                            state.pid = Some(child.process.pid);
                            args.open.register(state.conn_gen, child.process.unreaped());
                            state.closer = Some(Closer::Process(child.process));
                            let pid = state.pid;
                            Box::pin(handshake(
                                handler,
                                child.transport,
                                cfg.clone(),
                                diag.clone(),
                                pid,
                            ))
                        }
                        Err(e) => Box::pin(futures::future::ready(Err(e.to_string()))),
                    }
                }
                (TransportConfig::StreamableHttp(http_cfg), Ok(secret_headers)) => {
                    state.closer = Some(Closer::Network);
                    let session_lost = CancellationToken::new();
                    let (lost, me) = (session_lost.clone(), myself.clone());
                    state.session_watch = Some(tokio::spawn(async move {
                        lost.cancelled().await;
                        let _ = me.cast(ConnectionMsg::Lost(
                            "the session is gone; a new connection opens a new one".into(),
                        ));
                    }));
                    let parts = super::http::HttpParts {
                        secret_headers,
                        diag: diag.clone(),
                        session_lost,
                        replay_for_chaos: args.chaos.replay_expired_sessions,
                        server: cfg.server_name.clone(),
                        secrets: args.handlers.secrets.clone(),
                    };
                    let (http_cfg, cfg, diag) = (http_cfg.clone(), cfg.clone(), diag.clone());
                    Box::pin(async move {
                        let t = super::http::connect(&http_cfg, parts).await?;
                        handshake(handler, t, cfg, diag, None).await
                    })
                }
                (TransportConfig::InProcess(factory), Ok(_)) => match (factory.0)() {
                    Ok(conn) => {
                        let (confirmed, closed) = tokio::sync::watch::channel(false);
                        let confirm = conn.closed;
                        tokio::spawn(async move {
                            if confirm.await {
                                let _ = confirmed.send(true);
                            }
                        });
                        // Nothing to kill in process: the close is only watched.
                        let unreaped = Unreaped {
                            reaped: closed.clone(),
                            kill_again: std::sync::Arc::new(|| {}),
                        };
                        args.open.register(state.conn_gen, unreaped);
                        state.closer = Some(Closer::InProcess(closed));
                        Box::pin(handshake(
                            handler,
                            conn.stream,
                            cfg.clone(),
                            diag.clone(),
                            None,
                        ))
                    }
                    Err(e) => Box::pin(futures::future::ready(Err(e))),
                },
            };
        let startup = cfg.startup_timeout;
        let name = cfg.server_name.clone();
        state.connect_task = Some(tokio::spawn(async move {
            let result = match tokio::time::timeout(startup, connect).await {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "startup timed out after {} ms (spawn/connect through initialize and the first tools/list); a server that needs longer: raise `startup_timeout_ms` in [servers.{}]",
                    startup.as_millis(),
                    name
                )),
            };
            let _ = me.cast(ConnectionMsg::Established(result));
        }));
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("connection", server = %state.config.server_name, conn_gen = state.conn_gen);
        // Boxed: ractor keeps the message loop's future for the actor's
        // whole life, sized for the largest handler (PERF-1, memory per
        // idle connection); a connection handles a message or two.
        Box::pin(
            async move {
                tracing::debug!("handling a message");
                match msg {
                    ConnectionMsg::Established(Ok(est)) => {
                        state.connect_task = None;
                        let Established {
                            running,
                            info,
                            catalog,
                        } = *est;
                        let peer = running.peer().clone();
                        state.service_ct = Some(running.cancellation_token());
                        let me = myself.clone();
                        state.watcher = Some(tokio::spawn(async move {
                            let reason = match running.waiting().await {
                                Ok(rmcp::service::QuitReason::Cancelled) => return,
                                Ok(r) => format!("the transport closed ({r:?})"),
                                Err(e) => format!("the service task failed: {e}"),
                            };
                            let _ = me.cast(ConnectionMsg::Lost(reason));
                        }));
                        if let TransportConfig::StreamableHttp(h) = &state.config.transport {
                            state.pinger = Some(spawn_pinger(peer.clone(), h, myself.clone()));
                        }
                        state.supervisor.cast(ServerSupervisorMsg::ConnUp {
                            conn_gen: state.conn_gen,
                            peer,
                            info,
                            catalog,
                        })?;
                    }
                    ConnectionMsg::Established(Err(e)) => {
                        state.connect_task = None;
                        let cause = compose_cause(state, &e, false).await;
                        myself.stop(Some(cause));
                    }
                    ConnectionMsg::Lost(reason) => {
                        let cause = compose_cause(state, &reason, true).await;
                        myself.stop(Some(cause));
                    }
                }
                Ok(())
            }
            .instrument(span),
        )
        .await
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        start_close(state);
        Ok(())
    }
}

/// The error text of a failed connection: the real cause, with exit status,
/// stderr tail and non-JSON hints (CONN-6, CONN-7, CONN-8).
async fn compose_cause(
    state: &mut ConnectionState,
    reason: &str,
    exit_is_the_cause: bool,
) -> String {
    let exit = match &mut state.closer {
        Some(Closer::Process(p)) => p.wait_exit(EXIT_WAIT).await,
        _ => None,
    };
    // A handshake that failed because the pipe broke or closed under it
    // (the two ways a race with an exiting server shows): the exit is the
    // cause, and the words are the same whichever side noticed first.
    let handshake_lost = reason.starts_with("initialize failed")
        && (reason.contains("Broken pipe")
            || reason.contains("connection closed")
            || reason.contains("error: Transport"));
    let mut cause = match exit {
        // The transport closed: the exit is the real cause (CONN-8).
        Some(status) if exit_is_the_cause => format!("server {status}"),
        Some(status) if handshake_lost => {
            format!("initialize failed: the server {status} before answering")
        }
        // The attempt failed for its own reason; the exit is a consequence.
        Some(status) => format!("{reason} (server {status})"),
        None => reason.to_owned(),
    };
    if let Some(fatal) = state.diag.fatal() {
        cause = format!("{fatal} ({cause})");
    }
    // TRUST-2: the reason may quote what the server sent (an error of its
    // `initialize` answer); the stderr tail is redacted already.
    let mut cause = without_type_names(&redact(&cause, &state.diag.redactions()));
    cause.push_str(&state.diag.explain());
    cause
}

/// Run the close sequence in a detached task that reports `ConnectionEnded`.
/// Safe to call more than once: the closer is taken.
fn start_close(state: &mut ConnectionState) {
    if let Some(t) = state.connect_task.take() {
        t.abort();
    }
    if let Some(t) = state.pinger.take() {
        t.abort();
    }
    if let Some(t) = state.session_watch.take() {
        t.abort();
    }
    if state.ended_sent {
        return;
    }
    state.ended_sent = true;
    // Nothing was opened (spawn or connector failed): there is nothing to close.
    let closer = state.closer.take().unwrap_or(Closer::Network);
    let ct = state.service_ct.take();
    let watcher = state.watcher.take();
    let supervisor = state.supervisor.clone();
    let conn_gen = state.conn_gen;
    let pid = state.pid;
    let tag = match &state.config.transport {
        TransportConfig::Stdio(s) => s.env.get(super::process::TAG_VAR).cloned(),
        _ => None,
    };
    tokio::spawn(async move {
        if let Some(ct) = ct {
            ct.cancel();
        }
        if let Some(w) = watcher {
            let _ = tokio::time::timeout(SERVICE_CLOSE_WAIT, w).await;
        }
        let mut escaped = Vec::new();
        let (reaped, reaped_later) = match closer {
            Closer::Process(mut p) => {
                let later = p.unreaped();
                let reaped = p.close().await;
                // RECO-7: what left the group (setsid) dies with the
                // connection too, found by the server's tag, and goes into
                // the shutdown report.
                // Once the close returns nothing of the server runs: every
                // process killed here (the escaped ones and the group's
                // members still dying) is waited for, bounded; one still
                // running is the shutdown sweep's to report.
                if let Some(tag) = &tag {
                    // The group is the server's pid (its own group leader).
                    let swept = super::process::kill_tagged(tag, false, pid);
                    if !swept.escaped.is_empty() {
                        tracing::warn!(
                            escaped = ?swept.escaped,
                            "killed processes that had left the server's process group"
                        );
                    }
                    let left = super::process::still_running(
                        &swept.killed,
                        super::process::SWEPT_EXIT_WAIT,
                    )
                    .await;
                    if !left.is_empty() {
                        tracing::warn!(
                            ?left,
                            "processes of a closed server still run after SIGKILL"
                        );
                    }
                    escaped = swept.escaped;
                }
                (reaped, (!reaped).then_some(later))
            }
            Closer::InProcess(mut closed) => {
                let confirmed =
                    tokio::time::timeout(IN_PROCESS_CLOSE_WAIT, closed.wait_for(|c| *c))
                        .await
                        .is_ok_and(|r| r.is_ok());
                (confirmed, None)
            }
            Closer::Network => (true, None),
        };
        let _ = supervisor.cast(ServerSupervisorMsg::ConnectionEnded {
            conn_gen,
            reaped,
            pid,
            reaped_later,
            escaped,
        });
    });
}

/// Fetch every secret a transport needs (TRUST-2). A missing one fails the
/// connect with "secret NAME for server SERVER is not available".
async fn resolve_secrets(
    server: &str,
    wanted: &std::collections::BTreeMap<String, String>,
    store: Option<&dyn crate::messages::trust::SecretStore>,
) -> Result<Vec<(String, crate::messages::trust::Secret)>, String> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // The runtime's builder always installs one (the environment by default).
    let Some(store) = store else {
        return Err(format!(
            "server {server} needs secrets, but no secret store is installed"
        ));
    };
    let mut out = Vec::with_capacity(wanted.len());
    for (target, secret_name) in wanted {
        match store.get(secret_name).await {
            Ok(value) => out.push((target.clone(), value)),
            Err(why) => {
                return Err(format!(
                    "{} ({why})",
                    crate::messages::trust::secret_unavailable(secret_name, server)
                ));
            }
        }
    }
    Ok(out)
}

/// An rmcp service error in words, without rmcp's wrapper and its type
/// names: `Transport [rmcp::transport::worker::WorkerTransport<…>] error:
/// Session expired (HTTP 404)` reads "Session expired (HTTP 404)".
pub(crate) fn service_words(e: &(dyn std::error::Error + 'static)) -> String {
    let text = e.to_string();
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

/// `initialize` (empty capabilities), `notifications/initialized`, then the whole
/// catalog when the server has tools (CONN-10, SYNC-3).
async fn handshake<T, E, A>(
    handler: SupervisedClient,
    transport: T,
    cfg: Arc<ServerConfig>,
    diag: Arc<Diagnostics>,
    pid: Option<u32>,
) -> Result<Box<Established>, String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = handler
        .serve(transport)
        .await
        .map_err(|e| initialize_error(&e, &cfg.transport, &diag))?;
    let peer = running.peer().clone();
    peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
        .await;
    let Some(server) = peer.peer_info() else {
        return Err("initialize finished without server info".into());
    };
    if !SPOKEN_VERSIONS.contains(&server.protocol_version) {
        return Err(format!(
            "initialize failed: the server answered with protocol version {:?}, which this client does not speak: it offered {} and speaks {}",
            server.protocol_version.as_str(),
            ProtocolVersion::LATEST_WITH_INITIALIZE,
            SPOKEN_VERSIONS
                .iter()
                .map(ProtocolVersion::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // TRUST-2: what the server says of itself is its output too.
    let secrets = diag.redactions();
    let instructions = crate::messages::resources::attribute_instructions(
        &cfg.server_name,
        &redact(server.instructions.as_deref().unwrap_or(""), &secrets),
        cfg.max_instruction_bytes,
        cfg.oversized_instructions,
    )?;
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
    let catalog = if has_tools {
        fetch_catalog(&peer, cfg.request_timeout, &diag).await?
    } else {
        Vec::new()
    };
    Ok(Box::new(Established {
        running,
        info,
        catalog,
    }))
}

/// Ping on an interval; past the failure threshold the connection is lost (CONN-14).
fn spawn_pinger(
    peer: Peer<RoleClient>,
    cfg: &crate::messages::config::HttpConfig,
    conn: ActorRef<ConnectionMsg>,
) -> JoinHandle<()> {
    let interval = cfg.ping_interval;
    let timeout = cfg.ping_timeout;
    let threshold = cfg.ping_failure_threshold.max(1);
    tokio::spawn(async move {
        let mut failures = 0u32;
        let mut last = String::new();
        loop {
            tokio::time::sleep(interval).await;
            let ping = ClientRequest::PingRequest(PingRequest::default());
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
                let _ = conn.cast(ConnectionMsg::Lost(format!(
                    "the endpoint failed {failures} consecutive liveness pings (last: {last})"
                )));
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_error_texts_lose_their_type_names() {
        // Issue 31, defect 4: no `WorkerTransport<…>` in what a user reads.
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
