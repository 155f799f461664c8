//! The gateway (BIN-2): every tool of one scope served as ONE MCP
//! server, over stdio or streamable HTTP, with supervision, trust, hooks and
//! the result checks applied — for clients that cannot embed this library.
//!
//! - `tools/list` is the scope's catalog under its public names, with the
//!   real input and output schemas; one failed backend leaves the rest.
//! - `tools/call` goes through [`Runtime::call`] (trust → hooks → call →
//!   result checks). Every outcome comes back as a `CallToolResult`: the
//!   backend's own result (content, images, `structuredContent`) when it
//!   has one and the runtime accepted it, else `isError` with the runtime's
//!   honest text (TRUST-6); never a dropped connection or a protocol error.
//! - `notifications/tools/list_changed` goes to every connected client,
//!   coalesced, whenever the scope's catalog changes.
//! - Resources pass through across servers; each names its server in `_meta`.
//! - A client's `notifications/cancelled` cancels the call, and the backend
//!   is sent the cancel.
//!
//! One runtime serves every client: one process per configured server,
//! however many clients connect. See `docs/gateway.md`.

mod approver;
mod results;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{CallOptions, OutcomeKind, ResourceOp, Runtime, RuntimeEvent, Scope, ToolDefinition};

pub use approver::ClientApprover;

/// The `_meta` key naming the server a resource comes from.
pub const SERVER_META_KEY: &str = "io.mcpvisor/server";

/// The opt-in status tool's name (off by default).
pub const STATUS_TOOL: &str = "mcpvisor_status";

/// How the gateway serves.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The scope whose tools are served.
    pub scope: Scope,
    /// Also list a `mcpvisor_status` tool returning the OBS-1 status as JSON.
    pub status_tool: bool,
    /// A burst of catalog changes is announced once after this quiet time…
    pub notify_quiet: Duration,
    /// …and at the latest this long after its first change.
    pub notify_max_wait: Duration,
    /// The combined, attributed instructions of the backends are cut here.
    pub max_instruction_bytes: usize,
    /// The server name in `initialize`.
    pub name: String,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            scope: Scope::Global,
            status_tool: false,
            notify_quiet: Duration::from_millis(50),
            notify_max_wait: Duration::from_secs(1),
            max_instruction_bytes: 32 * 1024,
            name: "mcpvisor-gateway".into(),
        }
    }
}

/// An MCP server in front of a [`Runtime`]. Cloning shares it.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

struct Shared {
    runtime: Runtime,
    options: GatewayOptions,
    approver: Option<Arc<ClientApprover>>,
    /// Connected clients, by session id, for list_changed.
    clients: Mutex<HashMap<u64, Peer<RoleServer>>>,
    next_session: AtomicU64,
    /// Which server listed a resource URI (reads go there).
    uri_owner: Mutex<HashMap<String, String>>,
    /// Resource URIs clients subscribed to → the sessions that did.
    subscriptions: Mutex<HashMap<String, std::collections::HashSet<u64>>>,
    /// A listed prompt's public name → (server, the server's name for it).
    prompt_owner: Mutex<HashMap<String, (String, String)>>,
    /// list_changed notifications sent (all clients), for status and tests.
    notified: AtomicU64,
    /// Held (written) while a config reload runs: the notifier waits, so
    /// the reload's changes reach clients as one list_changed.
    hold: Arc<tokio::sync::RwLock<()>>,
    /// Cancelled when the last handle drops: ends the notifier and the HTTP sessions.
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
}

impl Gateway {
    /// A gateway serving `runtime`'s tools. `approver` is the
    /// [`ClientApprover`] the runtime was built with, if any: `ask` is then
    /// put to the calling client as an elicitation. Must be called within a
    /// tokio runtime (it starts the list_changed notifier).
    pub fn new(
        runtime: Runtime,
        approver: Option<Arc<ClientApprover>>,
        options: GatewayOptions,
    ) -> Self {
        let stop = CancellationToken::new();
        let events = runtime.subscribe();
        let shared = Arc::new(Shared {
            runtime,
            options,
            approver,
            clients: Mutex::default(),
            next_session: AtomicU64::new(1),
            uri_owner: Mutex::default(),
            prompt_owner: Mutex::default(),
            subscriptions: Mutex::default(),
            notified: AtomicU64::new(0),
            hold: Arc::default(),
            stop: stop.clone(),
            _stop_on_drop: stop.clone().drop_guard(),
        });
        let updates = shared.runtime.subscribe();
        tokio::spawn(notifier(Arc::downgrade(&shared), events, stop.clone()));
        tokio::spawn(resource_updates(Arc::downgrade(&shared), updates, stop));
        Self { shared }
    }

    /// The runtime served.
    pub fn runtime(&self) -> &Runtime {
        &self.shared.runtime
    }

    /// Cancelled when the gateway stops (every handle dropped, or [`Self::close`]).
    pub fn stopped(&self) -> CancellationToken {
        self.shared.stop.clone()
    }

    /// Stop serving: HTTP sessions end and the notifier stops. The runtime
    /// is the caller's to shut down.
    pub fn close(&self) {
        self.shared.stop.cancel();
    }

    /// Hold list_changed notifications until the returned guard drops:
    /// catalog changes meanwhile (a config reload removing, adding and
    /// restarting servers) reach each client as one notification after it.
    pub async fn hold_notifications(&self) -> NotificationHold {
        NotificationHold {
            _guard: self.shared.hold.clone().write_owned().await,
        }
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// One client session's MCP handler (a new session id).
    pub fn session(&self) -> GatewaySession {
        GatewaySession {
            shared: self.shared.clone(),
            id: self.shared.next_session.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Serve one client over `read`/`write` (stdio: stdin and stdout) until
    /// it closes its side or the gateway is closed.
    pub async fn serve_io<R, W>(&self, read: R, write: W) -> Result<(), GatewayError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let running = rmcp::ServiceExt::serve(self.session(), (read, write))
            .await
            .map_err(|e| GatewayError::Handshake(e.to_string()))?;
        let ct = running.cancellation_token();
        let stop = self.shared.stop.clone();
        tokio::select! {
            r = running.waiting() => {
                r.map_err(|e| GatewayError::Serve(e.to_string()))?;
            }
            _ = stop.cancelled() => ct.cancel(),
        }
        Ok(())
    }

    /// The HTTP side: streamable HTTP at `/mcp` (sessions) and the OBS-1
    /// status as JSON at `/health`. Every route checks `Host` against
    /// `allowed_hosts` (loopback names by default; an empty list allows
    /// any), against DNS rebinding, and refuses a browser's request from
    /// another origin (GW-5): see [`RequestGuard`]. Serve it on
    /// [`no_delay`]`(listener)` (GW-6).
    pub fn http_router(&self, allowed_hosts: Option<Vec<String>>) -> axum::Router {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(self.shared.stop.child_token());
        let allowed = allowed_hosts.clone();
        if let Some(hosts) = allowed_hosts {
            config = config.with_allowed_hosts(hosts);
        }
        let gateway = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(gateway.session()),
            LocalSessionManager::default().into(),
            config,
        );
        let health = self.clone();
        let guard = Arc::new(RequestGuard::new(allowed_hosts_or_loopback(&allowed)));
        axum::Router::new()
            .nest_service("/mcp", service)
            .route(
                "/health",
                axum::routing::get(move || {
                    let g = health.clone();
                    async move {
                        (
                            [(axum::http::header::CONTENT_TYPE, "application/json")],
                            g.health().to_string(),
                        )
                    }
                }),
            )
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let refused = guard.refuses(req.headers());
                    async move {
                        use axum::response::IntoResponse;
                        match refused {
                            None => next.run(req).await,
                            Some(why) => (axum::http::StatusCode::FORBIDDEN, why).into_response(),
                        }
                    }
                },
            ))
    }

    /// What `/health` and the status tool return: every server's OBS-1
    /// status, the tool count and the connected clients.
    pub fn health(&self) -> Value {
        let runtime = &self.shared.runtime;
        let servers = serde_json::to_value(runtime.status()).unwrap_or(Value::Null);
        json!({
            "scope": self.shared.options.scope.to_string(),
            "tools": runtime.tools(&self.shared.options.scope).len(),
            "clients": self.clients(),
            "list_changed_sent": self.shared.notified.load(Ordering::Relaxed),
            "servers": servers,
        })
    }
}

/// The loopback names the gateway answers to when no hosts are given.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

fn allowed_hosts_or_loopback(allowed: &Option<Vec<String>>) -> Vec<String> {
    match allowed {
        Some(hosts) => hosts.clone(),
        None => LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect(),
    }
}

/// What every HTTP route of the gateway checks before anything else
/// (GW-5, the transport spec's "Security Warning"):
///
/// - `Host` must name an allowed host (any port): a web page that got a
///   name of its own resolved to 127.0.0.1 (DNS rebinding) is refused. An
///   empty list allows any host (a remote gateway, guarded by its token).
/// - An `Origin`, when a browser sends one, must be an allowed host too
///   (http or https, any port), or the very host the request was sent to
///   (same origin): a page of another site is refused, also one that
///   reached the gateway by its real address. Clients that are not
///   browsers send no `Origin` and are not affected.
///
/// A refusal is `403 Forbidden` with a sentence naming what was refused.
#[derive(Debug, Clone)]
pub struct RequestGuard {
    /// Lowercase host names, without brackets or port.
    hosts: Vec<String>,
}

impl RequestGuard {
    /// A guard allowing `hosts` (names or `name:port`; an empty list allows
    /// any host).
    pub fn new(hosts: Vec<String>) -> Self {
        Self {
            hosts: hosts.iter().map(|h| host_name(h)).collect(),
        }
    }

    /// `None` when the request may pass; otherwise why it is refused.
    pub fn refuses(&self, headers: &axum::http::HeaderMap) -> Option<String> {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(host_name);
        let allowed = |name: &str| self.hosts.is_empty() || self.hosts.iter().any(|h| h == name);
        match &host {
            Some(h) if allowed(h) => {}
            Some(h) => return Some(format!("Forbidden: the Host {h:?} is not allowed")),
            None => return Some("Forbidden: the request names no Host".into()),
        }
        let origin = headers.get(axum::http::header::ORIGIN)?;
        let text = origin.to_str().unwrap_or("");
        let parsed = url::Url::parse(text).ok();
        let origin_host = parsed
            .as_ref()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .and_then(|u| u.host_str())
            .map(host_name);
        match origin_host {
            Some(o) if (!self.hosts.is_empty() && allowed(&o)) || Some(&o) == host.as_ref() => None,
            _ => Some(format!("Forbidden: the Origin {text:?} is not allowed")),
        }
    }
}

/// `name`, `name:port`, `[v6]:port` or `v6`: the lowercase name alone.
fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let name = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if a.matches(':').count() == 1 {
        a.split(':').next().unwrap_or(a)
    } else {
        a
    };
    name.to_ascii_lowercase()
}

/// `listener` with `TCP_NODELAY` on every socket it accepts (GW-6): without
/// it a small reply waits for the client's delayed ACK, about 40 ms per
/// sequential request over loopback.
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY could not be set: {e}");
        }
    })
}

/// See [`Gateway::hold_notifications`].
pub struct NotificationHold {
    _guard: tokio::sync::OwnedRwLockWriteGuard<()>,
}

/// Why serving a client ended badly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// The client's `initialize` failed.
    #[error("the client's handshake failed: {0}")]
    Handshake(String),
    /// The session ended with an error.
    #[error("serving the client failed: {0}")]
    Serve(String),
}

/// One client's session: the MCP handler. Its id is the chat id of its calls
/// (`gateway-<id>`), so "allow this chat" grants last as long as the session.
#[derive(Clone)]
pub struct GatewaySession {
    shared: Arc<Shared>,
    id: u64,
}

impl GatewaySession {
    fn chat(&self) -> String {
        format!("gateway-{}", self.id)
    }

    fn scope(&self) -> &Scope {
        &self.shared.options.scope
    }

    /// The combined, attributed instructions, cut at the byte limit.
    fn instructions(&self) -> Option<String> {
        let all = self.shared.runtime.instructions(self.scope());
        if all.is_empty() {
            return None;
        }
        let text = all.join("\n\n");
        let max = self.shared.options.max_instruction_bytes;
        Some(crate::apply_budget(&text, max, "the gateway's combined instructions").0)
    }

    /// A call of the shared resource tool `op`; its canonical value per server.
    async fn resource_call(
        &self,
        op: ResourceOp,
        args: Value,
        ct: &CancellationToken,
    ) -> Result<Map<String, Value>, String> {
        let outcome = self
            .shared
            .runtime
            .call(
                self.scope(),
                op.tool_name(),
                Some(args),
                CallOptions {
                    cancel: Some(ct.clone()),
                    chat: Some(self.chat()),
                    ..CallOptions::default()
                },
            )
            .await;
        match (outcome.kind, outcome.canonical) {
            (OutcomeKind::Ok, Some(Value::Object(per_server))) => Ok(per_server),
            // No server of the scope provides resources.
            (OutcomeKind::UnknownTool, _) => Ok(Map::new()),
            _ => Err(outcome.projection),
        }
    }

    /// The server that listed `uri` (listing first when none has yet: a
    /// client may read a URI it knows); for a URI no server listed, the
    /// scope's only resource server, if there is just one.
    async fn owner_of(&self, uri: &str, ct: &CancellationToken) -> Option<String> {
        let known = |s: &Self| {
            s.shared
                .uri_owner
                .lock()
                .ok()
                .and_then(|o| o.get(uri).cloned())
        };
        if let Some(server) = known(self) {
            return Some(server);
        }
        let _ = self.list_all(ResourceOp::List, "resources", ct).await;
        known(self).or_else(|| {
            // A URI no server listed (a template's instance, a resource the
            // server does not list): unambiguous only with one provider.
            let providers: Vec<String> = self
                .shared
                .runtime
                .status()
                .into_iter()
                .filter(|s| s.resources && &s.scope == self.scope())
                .map(|s| s.server)
                .collect();
            match providers.as_slice() {
                [only] => Some(only.clone()),
                _ => None,
            }
        })
    }

    /// Every item under `key` of every server's pages (each server's
    /// cursors followed, at most 100 pages), with its server in `_meta`.
    async fn list_all(&self, op: ResourceOp, key: &str, ct: &CancellationToken) -> Vec<Value> {
        let first = match self.resource_call(op, json!({}), ct).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "gateway: {} failed", op.tool_name());
                return Vec::new();
            }
        };
        let mut items = Vec::new();
        for (server, mut page) in first {
            for _ in 0..100 {
                if let Some(list) = page.get(key).and_then(Value::as_array) {
                    for item in list {
                        let mut item = item.clone();
                        if let Some(obj) = item.as_object_mut() {
                            let meta = obj
                                .entry("_meta")
                                .or_insert_with(|| Value::Object(Map::new()));
                            if let Some(meta) = meta.as_object_mut() {
                                meta.insert(SERVER_META_KEY.into(), Value::String(server.clone()));
                            }
                            if let Some(uri) = obj.get("uri").and_then(Value::as_str)
                                && let Ok(mut owners) = self.shared.uri_owner.lock()
                            {
                                owners.insert(uri.to_owned(), server.clone());
                            }
                        }
                        items.push(item);
                    }
                }
                let Some(cursor) = page.get("nextCursor").and_then(Value::as_str) else {
                    break;
                };
                let args = json!({"server": server, "cursor": cursor});
                page = match self.resource_call(op, args, ct).await {
                    Ok(mut m) => m.remove(&server).unwrap_or(Value::Null),
                    Err(e) => {
                        tracing::warn!(server = %server, error = %e, "gateway: a resource page failed");
                        break;
                    }
                };
            }
        }
        items
    }
}

impl ServerHandler for GatewaySession {
    // Logging is deprecated by SEP-2577, but clients of 2025-11-25 (and the
    // conformance suite) still send logging/setLevel: it is accepted.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            self.shared.options.name.clone(),
            env!("CARGO_PKG_VERSION"),
        ));
        match self.instructions() {
            Some(text) => info.with_instructions(text),
            None => info,
        }
    }

    /// The session era only (up to 2025-11-25): what the gateway serves.
    /// rmcp's default lists 2026-07-28 too, in `server/discover`, and a
    /// modern client then picks it and rejects every relayed result (they
    /// carry no `resultType`). Without it such clients fall back to
    /// `initialize`.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        if let Ok(mut clients) = self.shared.clients.lock() {
            clients.retain(|_, p| !p.is_transport_closed());
            clients.insert(self.id, ctx.peer.clone());
        }
        if let Some(approver) = &self.shared.approver {
            approver.register(self.chat(), ctx.peer);
        }
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools: Vec<Tool> = self
            .shared
            .runtime
            .tools(self.scope())
            .iter()
            .filter_map(|d| to_mcp_tool(d))
            .collect();
        if self.shared.options.status_tool {
            tools.push(status_tool());
        }
        let mut page = ListToolsResult::default();
        page.tools = tools;
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.shared.options.status_tool && request.name == STATUS_TOOL {
            let text = serde_json::to_string_pretty(
                &Gateway {
                    shared: self.shared.clone(),
                }
                .health(),
            )
            .unwrap_or_default();
            return Ok(CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]).into());
        }
        let arguments = request.arguments.map(Value::Object);
        let outcome = self
            .shared
            .runtime
            .call(
                self.scope(),
                &request.name,
                arguments,
                CallOptions {
                    cancel: Some(ctx.ct.clone()),
                    chat: Some(self.chat()),
                    ..CallOptions::default()
                },
            )
            .await;
        Ok(results::to_call_result(outcome).into())
    }

    /// The level is accepted; the gateway sends no log messages of its own
    /// yet (its log goes to its stderr), nor the backends'.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        _: rmcp::model::SetLevelRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        let mut prompts = Vec::new();
        for (server, listed) in self.shared.runtime.list_prompts(self.scope()).await {
            let list = match listed {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(server = %server, error = %e, "gateway: prompts/list failed");
                    continue;
                }
            };
            for mut prompt in list {
                let Some(raw) = prompt
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    continue;
                };
                let public = crate::public_tool_name(&server, &raw);
                if let Some(obj) = prompt.as_object_mut() {
                    obj.insert("name".into(), Value::String(public.clone()));
                    let meta = obj
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.insert(SERVER_META_KEY.into(), Value::String(server.clone()));
                    }
                }
                if let Ok(p) = serde_json::from_value(prompt) {
                    prompts.push(p);
                    if let Ok(mut owners) = self.shared.prompt_owner.lock() {
                        owners.insert(public, (server.clone(), raw));
                    }
                }
            }
        }
        let mut result = rmcp::model::ListPromptsResult::default();
        result.prompts = prompts;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let owner = |s: &Self| {
            s.shared
                .prompt_owner
                .lock()
                .ok()
                .and_then(|o| o.get(&request.name).cloned())
        };
        let mut found = owner(self);
        if found.is_none() {
            let _ = self.list_prompts(None, ctx).await;
            found = owner(self);
        }
        let Some((server, raw)) = found else {
            return Err(McpError::invalid_params(
                format!(
                    "no server of this gateway lists the prompt {:?}",
                    request.name
                ),
                None,
            ));
        };
        let value = self
            .shared
            .runtime
            .get_prompt(self.scope(), &server, &raw, request.arguments)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let result: rmcp::model::GetPromptResult = serde_json::from_value(value).map_err(|e| {
            McpError::internal_error(
                format!("server \"{server}\" answered prompts/get with an invalid result: {e}"),
                None,
            )
        })?;
        Ok(result.into())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let items = self.list_all(ResourceOp::List, "resources", &ctx.ct).await;
        let mut result = ListResourcesResult::default();
        result.resources = items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        Ok(result)
    }

    /// `resources/subscribe`: passed to the server that listed the URI
    /// (once per URI, however many clients subscribe); its updates go to
    /// every session that subscribed.
    #[allow(deprecated)] // legacy-only in rmcp; what 2025-11-25 clients send
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let uri = request.uri;
        let Some(server) = self.owner_of(&uri, &ctx.ct).await else {
            return Err(not_listed(&uri));
        };
        let first = self
            .shared
            .subscriptions
            .lock()
            .map(|s| s.get(&uri).is_none_or(|ids| ids.is_empty()))
            .unwrap_or(true);
        if first {
            self.shared
                .runtime
                .subscribe_resource(self.scope(), &server, &uri)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        }
        if let Ok(mut subs) = self.shared.subscriptions.lock() {
            subs.entry(uri).or_default().insert(self.id);
        }
        Ok(())
    }

    /// `resources/unsubscribe`: the last session to leave a URI unsubscribes
    /// the server.
    #[allow(deprecated)] // as above
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let uri = request.uri;
        let last = match self.shared.subscriptions.lock() {
            Ok(mut subs) => {
                let ids = subs.entry(uri.clone()).or_default();
                ids.remove(&self.id);
                let empty = ids.is_empty();
                if empty {
                    subs.remove(&uri);
                }
                empty
            }
            Err(_) => false,
        };
        if last && let Some(server) = self.owner_of(&uri, &ctx.ct).await {
            let _ = self
                .shared
                .runtime
                .unsubscribe_resource(self.scope(), &server, &uri)
                .await;
        }
        Ok(())
    }

    #[allow(clippy::field_reassign_with_default)] // non_exhaustive results
    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let items = self
            .list_all(ResourceOp::Templates, "resourceTemplates", &ctx.ct)
            .await;
        let mut result = ListResourceTemplatesResult::default();
        result.resource_templates = items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let Some(server) = self.owner_of(&uri, &ctx.ct).await else {
            return Err(not_listed(&uri));
        };
        let args = json!({"server": server, "uri": uri});
        let mut per_server = self
            .resource_call(ResourceOp::Read, args, &ctx.ct)
            .await
            .map_err(|e| McpError::internal_error(e, None))?;
        let value = per_server.remove(&server).unwrap_or(Value::Null);
        let result: ReadResourceResult = serde_json::from_value(value).map_err(|e| {
            McpError::internal_error(
                format!("server \"{server}\" answered resources/read with an invalid result: {e}"),
                None,
            )
        })?;
        Ok(result.into())
    }
}

fn not_listed(uri: &str) -> McpError {
    McpError::resource_not_found(
        format!("no server of this gateway listed the resource {uri:?}"),
        None,
    )
}

/// The MCP form of a catalog entry: public name, real schemas, annotations.
fn to_mcp_tool(def: &ToolDefinition) -> Option<Tool> {
    let mut tool = json!({
        "name": def.name,
        "inputSchema": Value::Object((*def.input_schema).clone()),
    });
    if let Some(t) = &def.title {
        tool["title"] = Value::String(t.clone());
    }
    if let Some(d) = &def.description {
        tool["description"] = Value::String(d.clone());
    }
    if let Some(o) = &def.output_schema {
        tool["outputSchema"] = Value::Object((**o).clone());
    }
    if let Some(a) = &def.annotations {
        tool["annotations"] = a.clone();
    }
    match serde_json::from_value(tool) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(tool = %def.name, error = %e, "gateway: a tool could not be listed");
            None
        }
    }
}

fn status_tool() -> Tool {
    let schema = json!({"type": "object", "properties": {}});
    let schema = schema.as_object().cloned().unwrap_or_default();
    Tool::new(
        STATUS_TOOL,
        "The gateway's status: every backend server's state, tools, last error and stderr tail (JSON).",
        Arc::new(schema),
    )
}

/// Sends `notifications/tools/list_changed` to every client after a burst
/// of catalog changes in the gateway's scope (coalesced), until the gateway
/// stops.
async fn notifier(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    let (scope, quiet, max_wait) = match shared.upgrade() {
        Some(s) => (
            s.options.scope.clone(),
            s.options.notify_quiet,
            s.options.notify_max_wait,
        ),
        None => return,
    };
    let relevant = |ev: &Result<RuntimeEvent, RecvError>| match ev {
        Ok(RuntimeEvent::CatalogChanged { scope: s, .. }) => *s == scope,
        // Missed events may have been catalog changes.
        Err(RecvError::Lagged(_)) => true,
        _ => false,
    };
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            ev = events.recv() => ev,
        };
        if matches!(first, Err(RecvError::Closed)) {
            return;
        }
        if !relevant(&first) {
            continue;
        }
        // Coalesce: wait until `quiet` passed without another change, at
        // most `max_wait` after the first.
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut last = tokio::time::Instant::now();
        loop {
            let until = (last + quiet).min(deadline);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(until) => break,
                ev = events.recv() => {
                    if matches!(ev, Err(RecvError::Closed)) {
                        break;
                    }
                    if relevant(&ev) {
                        last = tokio::time::Instant::now();
                    }
                }
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // A reload in progress: wait for it, then count what it changed
        // in this one notification.
        let hold = shared.hold.clone();
        let _released = tokio::select! {
            _ = stop.cancelled() => return,
            r = hold.read_owned() => r,
        };
        while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
            events.try_recv()
        {}
        let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
            Ok(mut clients) => {
                clients.retain(|_, p| !p.is_transport_closed());
                clients.values().cloned().collect()
            }
            Err(_) => Vec::new(),
        };
        for peer in peers {
            shared.notified.fetch_add(1, Ordering::Relaxed);
            // A client that stopped reading holds up nobody else.
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), peer.notify_tool_list_changed())
                        .await;
            });
        }
    }
}

/// Forwards the backends' `notifications/resources/updated` to the sessions
/// that subscribed to the URI, until the gateway stops.
async fn resource_updates(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = events.recv() => ev,
        };
        let (scope, uri) = match ev {
            Ok(RuntimeEvent::ResourceUpdated { scope, uri, .. }) => (scope, uri),
            Err(RecvError::Closed) => return,
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if scope != shared.options.scope {
            continue;
        }
        let ids: Vec<u64> = shared
            .subscriptions
            .lock()
            .ok()
            .and_then(|s| s.get(&uri).map(|ids| ids.iter().copied().collect()))
            .unwrap_or_default();
        let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
            Ok(c) => ids.iter().filter_map(|id| c.get(id).cloned()).collect(),
            Err(_) => Vec::new(),
        };
        for peer in peers {
            let params = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    peer.notify_resource_updated(params),
                )
                .await;
            });
        }
    }
}

#[cfg(test)]
mod tests;
