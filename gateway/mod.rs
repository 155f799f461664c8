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
mod drain;
mod guard;
mod metrics;
mod notify;
mod owner;
mod relay;
mod results;
mod session;
mod sessions;
mod stdio;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{CallOptions, OutcomeKind, ResourceOp, Runtime, RuntimeEvent, Scope, ToolDefinition};

pub use approver::ClientApprover;
use guard::*;
pub use guard::{RequestGuard, no_delay};
use notify::*;
pub use session::GatewaySession;
pub use sessions::{CappedSessions, SessionError};

/// The `_meta` key naming the server a resource comes from.
pub const SERVER_META_KEY: &str = "io.mcpvisor/server";

/// The `_meta` key of a handle to state that lives in one gateway process
/// (SCALE-2): a pinned server's results carry it, and a call that sends it
/// back runs only where that state is (see [`GatewayOptions::pinned`]).
pub const HANDLE_META_KEY: &str = "io.mcpvisor/handle";

/// The `_meta` key of a tool list naming the servers whose tools it lacks
/// (not ready: still starting, reconnecting, failed), with their state and
/// last error.
pub const UNAVAILABLE_META_KEY: &str = "io.mcpvisor/unavailable";

/// Notifications a slow listen stream may fall behind by before it is
/// told of a tool list change instead of what it missed.
const LISTEN_BACKLOG: usize = 64;

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
    /// The first `initialize`, `server/discover`, list or call waits at
    /// most this long for servers still making their first connection
    /// (the binary sets the longest `startup_timeout_ms` of its servers):
    /// a client that lists once sees every server that could start.
    pub first_list_wait: Duration,
    /// The HTTP listener's session-era client sessions at most (GW-5);
    /// one more is refused until one ends. Stateless clients hold none.
    pub max_sessions: usize,
    /// A session-era client session with no request for this long ends.
    pub session_idle: Duration,
    /// Serve each tool under its server's own name where no other server
    /// has a tool of that name (GW-4), so that a client configured for one
    /// server can be pointed at the gateway unchanged; colliding ones keep
    /// their public names. Public names are taken in calls either way.
    pub raw_names: bool,
    /// This gateway's name among replicas behind one balancer (issue 35):
    /// the request states it hands out (`input_required` rounds) end in
    /// `@<replica>`, so a balancer can send a client's retry to the
    /// replica running its call, and another replica that gets one answers
    /// that the call is on that replica instead of not knowing it.
    pub replica: Option<String>,
    /// The servers whose state lives in this process (SCALE-2): the seats'
    /// providers (a browser, a desktop) and stateful backends. Their
    /// results carry a handle ([`HANDLE_META_KEY`]) naming this process,
    /// the server's connection and the replica; a call that sends it back
    /// is refused as `lost` when that process or connection ended, and as
    /// `moved` when another replica holds it (or forwarded there, see
    /// [`GatewayOptions::peers`]).
    pub pinned: Vec<String>,
    /// The other replicas' base URLs (`http://host:port`) by name: over
    /// HTTP, a request whose state another replica holds (its
    /// `requestState`'s or its handle's `@<replica>`) is forwarded there
    /// and its reply passed back.
    pub peers: std::collections::BTreeMap<String, String>,
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
            // A server's default `startup_timeout_ms`.
            first_list_wait: Duration::from_secs(30),
            max_sessions: 1024,
            session_idle: Duration::from_secs(300),
            raw_names: false,
            replica: None,
            pinned: Vec::new(),
            peers: std::collections::BTreeMap::new(),
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
    /// The resource URIs the gateway asked a backend to follow, and which
    /// backend: asked again when that backend comes back.
    followed: Mutex<HashMap<String, String>>,
    /// A listed prompt's public name → (server, the server's name for it).
    prompt_owner: Mutex<HashMap<String, (String, String)>>,
    /// list_changed notifications sent (all clients), for status and tests.
    notified: AtomicU64,
    /// What the open `subscriptions/listen` streams of stateless clients
    /// are sent (each stream passes on what its filter accepted).
    listens: tokio::sync::broadcast::Sender<rmcp::model::ServerNotification>,
    /// The log level each session client set (`logging/setLevel`), by
    /// session id: backends' log messages below it are not sent to it.
    log_levels: Mutex<HashMap<u64, usize>>,
    /// Stateless clients' trust questions awaiting their answer, by the
    /// request state handed out with the question.
    pending_asks: relay::Pending<PendingAsk>,
    /// Stateless clients' calls awaiting their answer to a backend's
    /// request (GW-2), by the request state handed out with it.
    rounds: relay::Pending<relay::Waiting>,
    /// Set once no server of the scope is still in its first connection
    /// attempt (or [`GatewayOptions::first_list_wait`] passed).
    settled: tokio::sync::OnceCell<()>,
    /// The catalog's fingerprint when it settled: what every client's first
    /// list held, so no list change is owed for it.
    settled_catalog: std::sync::OnceLock<u64>,
    /// Held (written) while a config reload runs: the notifier waits, so
    /// the reload's changes reach clients as one list_changed.
    hold: Arc<tokio::sync::RwLock<()>>,
    /// Drain for rolling deploys: readiness, the requests in flight.
    drain: Arc<drain::Drain>,
    /// What `/metrics` serves.
    metrics: Arc<metrics::Metrics>,
    /// This process's random name, in the handles it hands out.
    process: String,
    /// Each pinned server's state identity as last seen, and its epoch.
    epochs: Mutex<HashMap<String, (u64, u64)>>,
    /// The next epoch.
    next_epoch: AtomicU64,
    /// The other replicas, when any are known.
    peers: Option<Arc<owner::Peers>>,
    /// Cancelled when the last handle drops: ends the notifier and the HTTP sessions.
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
}

/// A stateless client's call refused pending its answer to the trust
/// question (GW-1): the retry must be the same call.
struct PendingAsk {
    /// The chat the question was asked in (the retry's).
    chat: String,
    /// The server and public tool name asked about.
    server: String,
    tool: String,
    /// The call's arguments, as asked about.
    arguments: Option<Value>,
}

/// How long a stateless client has to answer a trust question or a
/// backend's request.
const PENDING_ASK_TTL: Duration = Duration::from_secs(600);
/// The most questions of each kind awaiting answers at once (the oldest go
/// first).
const MAX_PENDING_ASKS: usize = 1024;

/// MCP's log levels, least severe first.
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of a log level in [`LOG_LEVELS`] (an unknown one: `info`'s).
fn log_rank(level: &str) -> usize {
    LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(1)
}

/// The input request key of the trust question in an `input_required` result.
pub const TRUST_INPUT_KEY: &str = "mcpvisor_trust";

impl Shared {
    /// Wait (once per gateway; later callers return at once) until no
    /// server of the scope is still making its first connection, or
    /// [`GatewayOptions::first_list_wait`] passed: a first `tools/list`
    /// then holds every server that could start, and names those that
    /// could not (`_meta`, [`UNAVAILABLE_META_KEY`]).
    async fn settle(&self) {
        self.settled
            .get_or_init(|| async {
                self.first_connections().await;
                let _ = self.settled_catalog.set(self.catalog_fingerprint());
            })
            .await;
    }

    /// The error for a retry whose `requestState` this gateway does not
    /// hold: when the state names another replica as its owner, that the
    /// call is there (`moved`: the retry must reach that replica, or the
    /// tool be called again without it); else that it is unknown or
    /// expired.
    fn unknown_state(&self, state: &str) -> rmcp::ErrorData {
        let here = self.options.replica.as_deref();
        match relay::state_owner(state) {
            Some(owner) if Some(owner) != here => {
                owner::moved(owner, here, "the call this requestState answers")
            }
            _ => rmcp::ErrorData::invalid_params(
                "the requestState is not one this gateway gave (or its question expired): call the tool again without it",
                None,
            ),
        }
    }

    /// The pinned server ([`GatewayOptions::pinned`]) whose tool `public`
    /// is, with its status now.
    fn pinned_server(&self, public: &str) -> Option<crate::ServerStatus> {
        if self.options.pinned.is_empty() {
            return None;
        }
        self.runtime
            .catalogs(&self.options.scope)
            .into_iter()
            .find(|(s, tools)| {
                self.options.pinned.contains(&s.server) && tools.iter().any(|t| t.name == public)
            })
            .map(|(s, _)| s)
    }

    /// The epoch of `server`'s state now: a number this process gives
    /// each identity of that state the first time it sees it — the
    /// server's connection and process, and the processes of the seat
    /// resources it holds (a browser). A restart, a reconnect, a server
    /// removed and added again, a browser closed or crashed and opened
    /// anew: each is a new epoch. A seat that cannot say what it holds
    /// (busy releasing) changes nothing: the last epoch stands.
    async fn epoch(&self, server: &crate::ServerStatus) -> u64 {
        use std::hash::{Hash, Hasher};
        let name = server.server.as_str();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (
            server.connection_generation,
            server.pid,
            server.state.name(),
        )
            .hash(&mut hasher);
        let mut seat_pids = Vec::new();
        let mut unread = false;
        for seat in self.runtime.seats().await {
            if seat.holder.as_deref() == Some(name) {
                seat_pids.extend(seat.pids);
            } else if seat.holder.is_none() && !seat.still_open.is_empty() {
                unread = true;
            }
        }
        seat_pids.sort_unstable();
        seat_pids.hash(&mut hasher);
        let identity = hasher.finish();
        let Ok(mut epochs) = self.epochs.lock() else {
            return self.next_epoch.fetch_add(1, Ordering::Relaxed);
        };
        match epochs.get(name) {
            Some((seen, epoch)) if *seen == identity || unread => *epoch,
            _ => {
                let epoch = self.next_epoch.fetch_add(1, Ordering::Relaxed);
                epochs.insert(name.to_owned(), (identity, epoch));
                epoch
            }
        }
    }

    /// Whether a call of `server`'s tool that sent `handle` back may run
    /// here (SCALE-2): its state must be this process's, in the same epoch
    /// ([`Shared::epoch`]); else `moved` (another replica's) or `lost`.
    fn check_handle(&self, handle: &Value, server: &str, epoch: u64) -> Result<(), McpError> {
        let text = handle.as_str().unwrap_or_default();
        let Some(h) = owner::Handle::parse(text) else {
            return Err(McpError::invalid_params(
                format!(
                    "the _meta {HANDLE_META_KEY:?} {handle} is not a handle this gateway hands out (<server>~<process>.<connection>[@<replica>])"
                ),
                None,
            ));
        };
        if h.server != server {
            return Err(McpError::invalid_params(
                format!(
                    "the handle {text:?} names the state of server {:?}, and this tool is {server:?}'s",
                    h.server
                ),
                None,
            ));
        }
        let here = self.options.replica.as_deref();
        if let Some(owner) = h.owner
            && Some(owner) != here
        {
            return Err(owner::moved(owner, here, "the state this handle names"));
        }
        if h.process != self.process {
            return Err(owner::lost(
                here,
                &format!(
                    "the handle names server {server:?}'s state in an earlier process of this gateway, which ended"
                ),
            ));
        }
        if h.epoch != epoch {
            return Err(owner::lost(
                here,
                &format!(
                    "server {server:?}'s state was replaced since the handle was handed out (the server restarted, reconnected or was added again, or its browser or desktop was closed or replaced)"
                ),
            ));
        }
        Ok(())
    }

    /// Whether `handle` names state in this process (of this replica).
    fn holds_handle(&self, handle: &str) -> bool {
        owner::Handle::parse(handle).is_some_and(|h| {
            h.process == self.process && h.owner == self.options.replica.as_deref()
        })
    }

    /// Put the handle of `server`'s state here, as of `epoch`, in a
    /// result's `_meta`.
    fn hand_out(&self, meta: &mut Option<rmcp::model::MetaObject>, server: &str, epoch: u64) {
        let handle = owner::Handle::mint(
            server,
            &self.process,
            epoch,
            self.options.replica.as_deref(),
        );
        meta.get_or_insert_with(|| rmcp::model::MetaObject(Map::new()))
            .0
            .insert(HANDLE_META_KEY.into(), Value::String(handle));
    }

    /// What the scope's catalog is now, as a number: a hash of every tool
    /// as clients see it and of each server's connection (a restarted
    /// backend is news even with the same tools), not of the catalog
    /// generations, which a refetch that found the same tools raises too.
    fn catalog_fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut connections: Vec<(String, u64)> = self
            .runtime
            .status()
            .into_iter()
            .filter(|s| s.scope == self.options.scope)
            .map(|s| (s.server, s.connection_generation))
            .collect();
        connections.sort();
        connections.hash(&mut hasher);
        let mut tools = self.runtime.tools(&self.options.scope);
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let json = |m: &Map<String, Value>| serde_json::to_string(m).unwrap_or_default();
        for t in &tools {
            (&t.name, &t.title, &t.description, t.task_support_required).hash(&mut hasher);
            json(&t.input_schema).hash(&mut hasher);
            t.output_schema.as_deref().map(json).hash(&mut hasher);
            t.annotations
                .as_ref()
                .map(|a| a.to_string())
                .hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Until no server of the scope is still in its first connection
    /// attempt, or [`GatewayOptions::first_list_wait`] passed.
    async fn first_connections(&self) {
        let mut events = self.runtime.subscribe();
        let deadline = tokio::time::Instant::now() + self.options.first_list_wait;
        let scope = &self.options.scope;
        loop {
            let starting = self.runtime.status().iter().any(|s| {
                &s.scope == scope
                    && s.state == crate::ServerState::Connecting
                    && s.consecutive_failures == 0
            });
            if !starting {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return,
                () = self.stop.cancelled() => return,
                ev = events.recv() => {
                    if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                        return;
                    }
                }
            }
        }
    }

    /// The name each tool is served under (public name → served name):
    /// its server's own name in raw-names mode when no other server's tool
    /// has it (GW-4), else its public name.
    fn served_names(&self) -> HashMap<String, String> {
        let tools = self.runtime.tools(&self.options.scope);
        if !self.options.raw_names {
            return tools
                .iter()
                .map(|t| (t.name.clone(), t.name.clone()))
                .collect();
        }
        let mut by_raw: HashMap<&str, usize> = HashMap::new();
        for t in &tools {
            *by_raw.entry(t.raw_name.as_str()).or_default() += 1;
        }
        tools
            .iter()
            .map(|t| {
                let served = if by_raw.get(t.raw_name.as_str()) == Some(&1) {
                    t.raw_name.clone()
                } else {
                    t.name.clone()
                };
                (t.name.clone(), served)
            })
            .collect()
    }

    /// The public name of the tool a client called `name` (a served raw
    /// name, or a public name).
    fn public_name(&self, name: &str) -> String {
        if !self.options.raw_names {
            return name.to_owned();
        }
        self.served_names()
            .into_iter()
            .find(|(_, served)| served == name)
            .map(|(public, _)| public)
            .unwrap_or_else(|| name.to_owned())
    }

    /// The scope's servers that are not ready now, each with its state and
    /// its last error: what a client's tool list lacks, and why.
    fn unavailable(&self) -> Vec<Value> {
        self.runtime
            .status()
            .into_iter()
            .filter(|s| s.scope == self.options.scope && s.state != crate::ServerState::Ready)
            .map(|s| {
                json!({
                    "server": s.server,
                    "state": s.state.name(),
                    "error": s.error,
                })
            })
            .collect()
    }
}

impl Gateway {
    /// Wait until the servers still making their first connection are up,
    /// or the first-list wait is over (what a client's first answer waits
    /// for, [`GatewayOptions::first_list_wait`]).
    pub async fn first_catalog(&self) {
        self.shared.settle().await;
    }

    /// Raw tool names more than one server has (each with its servers): in
    /// raw-names mode those tools are served under their public names.
    pub fn raw_name_collisions(&self) -> Vec<(String, Vec<String>)> {
        let mut by_raw: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for t in self.shared.runtime.tools(&self.shared.options.scope) {
            by_raw
                .entry(t.raw_name.clone())
                .or_default()
                .push(t.server.clone());
        }
        by_raw.into_iter().filter(|(_, s)| s.len() > 1).collect()
    }

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
        let replica = options.replica.clone();
        if replica.is_none() && !options.peers.is_empty() {
            tracing::warn!(
                "gateway: peers are given without this replica's name (GatewayOptions::replica): nothing is forwarded"
            );
        }
        let peers = replica
            .clone()
            .and_then(|here| owner::Peers::new(here, options.peers.clone()));
        let shared = Arc::new(Shared {
            runtime,
            options,
            approver,
            clients: Mutex::default(),
            next_session: AtomicU64::new(1),
            uri_owner: Mutex::default(),
            prompt_owner: Mutex::default(),
            subscriptions: Mutex::default(),
            followed: Mutex::default(),
            notified: AtomicU64::new(0),
            listens: tokio::sync::broadcast::channel(LISTEN_BACKLOG).0,
            settled: tokio::sync::OnceCell::new(),
            drain: Arc::default(),
            metrics: Arc::new(metrics::Metrics::new()),
            process: owner::process_name(),
            epochs: Mutex::default(),
            next_epoch: AtomicU64::new(1),
            peers,
            settled_catalog: std::sync::OnceLock::new(),
            pending_asks: relay::Pending::new(
                "ask-",
                replica.as_deref(),
                PENDING_ASK_TTL,
                MAX_PENDING_ASKS,
            ),
            rounds: relay::Pending::new(
                "relay-",
                replica.as_deref(),
                PENDING_ASK_TTL,
                MAX_PENDING_ASKS,
            ),
            log_levels: Mutex::default(),
            hold: Arc::default(),
            stop: stop.clone(),
            _stop_on_drop: stop.clone().drop_guard(),
        });
        // One task reads the runtime's events (a call's own events wake
        // nothing else) and hands each kind to the task that serves it.
        let mut routes = Routes::default();
        let catalog = routes.add(|ev| matches!(ev, RuntimeEvent::CatalogChanged { .. }));
        let lists = routes.add(|ev| matches!(ev, RuntimeEvent::ListChanged { .. }));
        let logs = routes.add(|ev| matches!(ev, RuntimeEvent::ServerLog { .. }));
        let updates = routes.add(|ev| matches!(ev, RuntimeEvent::ResourceUpdated { .. }));
        let restarts = routes.add(|ev| matches!(ev, RuntimeEvent::ServerStatus(_)));
        tokio::spawn(dispatch(
            events,
            routes,
            shared.metrics.clone(),
            shared.options.scope.clone(),
            stop.clone(),
        ));
        tokio::spawn(list_changes(Arc::downgrade(&shared), lists, stop.clone()));
        tokio::spawn(server_logs(Arc::downgrade(&shared), logs, stop.clone()));
        tokio::spawn(notifier(Arc::downgrade(&shared), catalog, stop.clone()));
        tokio::spawn(resubscribe(Arc::downgrade(&shared), restarts, stop.clone()));
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

    /// Start draining (a rolling deploy's SIGTERM): `/readyz` fails from
    /// now on and HTTP requests that would start new work are refused with
    /// 503 (they did not run); the requests already taken go on. Wait for
    /// them with [`Gateway::drained`], then [`Gateway::close`].
    pub fn drain(&self) {
        self.shared.drain.start();
    }

    /// HTTP requests whose replies have not ended.
    pub fn in_flight(&self) -> usize {
        self.shared.drain.in_flight()
    }

    /// Wait until no HTTP request is in flight, or `deadline` passed: how
    /// many are left (0: drained). A call paused in an `input_required`
    /// round is not waited for: its client may never come back (most that
    /// do, come back at once, and are taken while the replica is up).
    pub async fn drained(&self, deadline: Duration) -> usize {
        self.shared.drain.drained(deadline).await
    }

    /// Whether the replica takes new work: its first catalog settled (each
    /// server up, or failed, or past its startup timeout) and it is not
    /// draining. What `/readyz` says.
    pub fn is_ready(&self) -> bool {
        self.shared.settled.initialized() && !self.shared.drain.is_draining()
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
            input_closed: CancellationToken::new(),
        }
    }

    /// Serve one client over `read`/`write` (stdio: stdin and stdout) until
    /// it closes its side or the gateway is closed.
    pub async fn serve_io<R, W>(&self, read: R, write: W) -> Result<(), GatewayError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        // On the runtime's workers, not in the caller's task: a caller in
        // `block_on` would otherwise read and write on its own thread, and
        // every call would cross from it to a worker and back. Dropping
        // this future ends the session, as it would in the caller's task.
        let serving = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(stdio::serve(
            self.session(),
            read,
            write,
            self.shared.stop.clone(),
        )));
        serving
            .await
            .map_err(|e| GatewayError::Serve(format!("the stdio session's task ended: {e}")))?
    }

    /// The HTTP side: streamable HTTP at `/mcp` (sessions) and the OBS-1
    /// status as JSON at `/health`. Every route checks `Host` against
    /// `allowed_hosts` (loopback names by default; an empty list allows
    /// any), against DNS rebinding, and refuses a browser's request from
    /// another origin (GW-5): see [`RequestGuard`]. Serve it on
    /// [`no_delay`]`(listener)` (GW-6).
    pub fn http_router(&self, allowed_hosts: Option<Vec<String>>) -> axum::Router {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        // A stateless (2026-07-28) request's reply is plain JSON when
        // nothing comes before it (SSE when progress or a log does): no
        // event stream to open and parse for the common call.
        let mut config = StreamableHttpServerConfig::default()
            .with_json_response(true)
            .with_cancellation_token(self.shared.stop.child_token());
        let allowed = allowed_hosts.clone();
        if let Some(hosts) = allowed_hosts {
            config = config.with_allowed_hosts(hosts);
        }
        let gateway = self.clone();
        let sessions = Arc::new(CappedSessions::new(&self.shared.options));
        let service =
            StreamableHttpService::new(move || Ok(gateway.session()), sessions.clone(), config);
        let health = self.clone();
        let guard = Arc::new(RequestGuard::new(allowed_hosts_or_loopback(&allowed)));
        // Readiness comes once the first catalog settled: started here, not
        // at a client's first request.
        let settling = self.clone();
        tokio::spawn(async move { settling.first_catalog().await });
        let drain = self.shared.drain.clone();
        // While draining, a retry goes on only for a call paused here.
        let shared = self.shared.clone();
        let holds: Arc<dyn Fn(&str) -> bool + Send + Sync> = Arc::new(move |state| {
            shared.rounds.holds(state)
                || shared.pending_asks.holds(state)
                || shared.holds_handle(state)
        });
        let mut mcp = axum::Router::new().nest_service("/mcp", service);
        // A request whose state another replica holds goes there (after
        // the drain's count: a forwarded call is in flight here too).
        if let Some(peers) = self.shared.peers.clone() {
            mcp = mcp.layer(axum::middleware::from_fn(move |req, next| {
                owner::route(peers.clone(), req, next)
            }));
        }
        let mcp = mcp.layer(axum::middleware::from_fn(move |req, next| {
            drain::counted(drain.clone(), holds.clone(), req, next)
        }));
        let ready = self.clone();
        // Liveness and readiness for a balancer or an orchestrator: no Host
        // check (they say nothing about the servers), no token.
        let probes = axum::Router::new()
            .route("/livez", axum::routing::get(|| async { "live\n" }))
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let ready = ready.clone();
                    async move {
                        let (status, text) = if ready.is_ready() {
                            (axum::http::StatusCode::OK, "ready\n")
                        } else if ready.shared.drain.is_draining() {
                            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                        } else {
                            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting\n")
                        };
                        (status, text)
                    }
                }),
            );
        let scraped = self.clone();
        axum::Router::new()
            .merge(mcp)
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let g = scraped.clone();
                    async move {
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            g.metrics().await,
                        )
                    }
                }),
            )
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
                    let sessions = sessions.clone();
                    // A request that could open a session (a POST naming none).
                    let opening = req.method() == axum::http::Method::POST
                        && !req.headers().contains_key("mcp-session-id");
                    async move {
                        use axum::response::IntoResponse;
                        if let Some(why) = refused {
                            return (axum::http::StatusCode::FORBIDDEN, why).into_response();
                        }
                        let response = next.run(req).await;
                        // The cap held: say so, and when to try again.
                        if opening
                            && response.status() == axum::http::StatusCode::INTERNAL_SERVER_ERROR
                            && let Some(full) = sessions.full().await
                        {
                            return (
                                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                [(axum::http::header::RETRY_AFTER, "5")],
                                full.to_string(),
                            )
                                .into_response();
                        }
                        response
                    }
                },
            ))
            .merge(probes)
    }

    /// The OpenMetrics text of this gateway's metrics (what
    /// `/metrics` serves): calls by server, tool and outcome, their
    /// latency, each server's state, restarts and reconnect budget left,
    /// the session-era clients, the requests in flight, the drain, the seats.
    pub async fn metrics(&self) -> String {
        // A seat busy (releasing) does not hold the scrape up: its series
        // are left out of this one.
        let seats = tokio::time::timeout(Duration::from_secs(2), self.shared.runtime.seats())
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !s.still_open.iter().any(|o| o.starts_with("the seat ")))
            .collect::<Vec<_>>();
        let scope = &self.shared.options.scope;
        let servers: Vec<_> = self
            .shared
            .runtime
            .status()
            .into_iter()
            .filter(|s| &s.scope == scope)
            .collect();
        self.shared.metrics.render(metrics::Now {
            servers: &servers,
            seats: &seats,
            clients: self.clients(),
            in_flight: self.in_flight(),
            draining: self.shared.drain.is_draining(),
        })
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
            // The threads the gateway's calls run on (`gateway --threads`).
            "worker_threads": tokio::runtime::Handle::try_current()
                .ok()
                .map(|h| h.metrics().num_workers()),
            "servers": servers,
        })
    }
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

#[cfg(test)]
mod tests;
