//! A scope's catalog as the `ToolRegistry` publishes it (SYNC-3, SYNC-6):
//! the immutable [`ScopeSnapshot`] every caller reads without an actor hop,
//! its [`ServerEntry`]s, the live call handle of a generation, the call
//! activity a server's idle stop reads (RECO-6), and the registry's
//! protocol ([`RegistryMsg`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ractor::RpcReplyPort;
use rmcp::service::{Peer, RoleClient};
use tokio::time::Instant;

use super::call::ToolDefinition;
use super::capabilities::CallerRelay;
use super::config::{Scope, ServerConfig};
use super::status::ServerStatus;

/// Activity of one server, updated by calls in the caller's task (RECO-6).
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    last_ms: AtomicU64,
    /// The connection generation an idle stop claimed (0: none).
    closing: AtomicU64,
}

impl Activity {
    /// A fresh activity record; "last call" is now.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            closing: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Mark a call as started; the guard marks it finished.
    pub fn begin(self: &Arc<Self>) -> ActivityGuard {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.last_ms.store(self.now_ms(), Ordering::SeqCst);
        ActivityGuard(self.clone())
    }

    /// Calls in flight right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Time since the last call started or finished, or `None` while calls are in flight.
    pub fn idle_for(&self) -> Option<std::time::Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = self.last_ms.load(Ordering::SeqCst);
        Some(std::time::Duration::from_millis(
            self.now_ms().saturating_sub(last),
        ))
    }

    /// RECO-6, the supervisor's half: claim connection `conn_gen` for an
    /// idle stop, if no call is in flight and none started within `limit`.
    /// The claim is published before the calls are counted, and a call is
    /// counted ([`Activity::begin`]) before it looks at the claim
    /// ([`Activity::closing`]), all sequentially consistent: of a call and
    /// an idle stop that race, at least one sees the other, so no call is
    /// sent on a connection being idle-stopped.
    pub fn claim_idle_stop(&self, conn_gen: u64, limit: std::time::Duration) -> bool {
        self.closing.store(conn_gen, Ordering::SeqCst);
        match self.idle_for() {
            Some(idle) if idle >= limit => true,
            _ => {
                self.closing.store(0, Ordering::SeqCst);
                false
            }
        }
    }

    /// RECO-6, the call's half, after [`Activity::begin`]: true when an idle
    /// stop claimed connection `conn_gen`; the call must not be sent on it
    /// (nothing was written yet: wake the server instead).
    pub fn closing(&self, conn_gen: u64) -> bool {
        self.closing.load(Ordering::SeqCst) == conn_gen
    }

    /// Restart the idle clock (on connect).
    pub fn reset(&self) {
        self.last_ms.store(self.now_ms(), Ordering::SeqCst);
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

/// Ends one call's activity.
#[derive(Debug)]
pub struct ActivityGuard(Arc<Activity>);

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.0.last_ms.store(self.0.now_ms(), Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The live connection of a server: the cloneable call handle of one generation.
#[derive(Debug, Clone)]
pub struct LiveConn {
    /// Connection generation.
    pub conn_gen: u64,
    /// The connection's MCP client: every request to the server goes
    /// through its methods (`transport/client.rs`).
    pub client: McpClient,
    /// The server's secret values (TRUST-2): redacted from everything the
    /// runtime makes of this connection's output. Empty for most servers.
    pub redactions: Arc<[String]>,
    /// What became of each `tools/call` request on the wire, where the
    /// transport can tell (streamable HTTP): a failed call the server never
    /// received is "not sent", not "side effects unknown" (CALL-5).
    pub deliveries: Option<Arc<Deliveries>>,
    /// The protocol era the connection speaks (ERA-1).
    pub era: crate::messages::server::Era,
    /// Which call each progress token belongs to.
    pub progress: Arc<ProgressRoutes>,
    /// The embedder's client handlers: what answers a stateless server's
    /// `input_required` (ERA-5).
    pub handlers: Arc<crate::messages::capabilities::ClientHandlers>,
}

/// What became of a request on the wire, as far as the transport saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Never handed to the wire (the connection ended first).
    NotSent,
    /// Handed over, and the server may have received it.
    MayHaveArrived,
    /// The server answered the request itself without running it (HTTP
    /// 404 for an ended session), or it never got through (the connection
    /// was refused): nothing ran. Why, in words.
    Refused(String),
}

/// Per connection, the `tools/call` requests the transport handed to the
/// wire, by JSON-RPC id (its JSON text), and the ones refused unrun; the
/// call path forgets each once its call ended. Bounded: past
/// One `notifications/progress` of a server, before it is an event.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressNote {
    /// Progress so far.
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// The server's message, redacted (TRUST-2).
    pub message: Option<String>,
}

/// A progress token's route while its request is under way
/// ([`ProgressRoutes::held`]).
#[derive(Debug)]
pub struct RouteHeld<'a> {
    routes: &'a ProgressRoutes,
    token: String,
}

impl Drop for RouteHeld<'_> {
    fn drop(&mut self) {
        self.routes.forget(&self.token);
    }
}

/// Where a server's request goes ([`ProgressRoutes::relay`]).
#[derive(Debug, Clone)]
pub enum Relay {
    /// No call under way was made for a relaying client.
    None,
    /// The client of every call under way.
    To(Arc<dyn CallerRelay>),
    /// Calls of more than one client are under way.
    Ambiguous,
}

/// Where one request's progress and a server's requests meanwhile go
/// ([`ProgressRoutes::route`]).
#[derive(Debug, Clone, Default)]
pub struct CallRoute {
    /// The call (its events' id); None for a request that is no call (a
    /// read, a prompt), whose notes are no call's events.
    pub call_id: Option<u64>,
    /// The client a server's requests go to (GW-2).
    pub relay: Option<Arc<dyn CallerRelay>>,
    /// The caller's own progress channel, given each note as it comes.
    pub progress: Option<super::call::ProgressSink>,
}

/// Which call each progress token of a connection belongs to. rmcp gives
/// every request a progress token of its own (a per-connection counter), so
/// the call path records the token of each `tools/call` it sends, and the
/// client handler looks the call up when a notification comes. A
/// notification that beats the record is kept (at most
/// [`ProgressRoutes::EARLY`]) and handed over when it is made.
#[derive(Debug, Default)]
pub struct ProgressRoutes {
    inner: std::sync::Mutex<RoutesInner>,
    /// Numbers the requests being handed over ([`ProgressRoutes::sending`]).
    handing: AtomicU64,
}

#[derive(Debug, Default)]
struct RoutesInner {
    calls: HashMap<String, CallRoute>,
    early: std::collections::VecDeque<(String, ProgressNote)>,
}

impl ProgressRoutes {
    /// Notifications kept for a token not yet routed.
    pub const EARLY: usize = 64;

    fn lock(&self) -> std::sync::MutexGuard<'_, RoutesInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Route `token`'s notifications to `call_id`; the notes that came
    /// before, in their order.
    /// The notes go to the route's progress sink first, under the lock:
    /// before any that comes after.
    pub fn route(&self, token: String, route: CallRoute) -> Vec<ProgressNote> {
        let mut r = self.lock();
        let mut early = Vec::new();
        if !r.early.is_empty() {
            let (mine, rest): (Vec<_>, Vec<_>) = r.early.drain(..).partition(|(t, _)| *t == token);
            r.early = rest.into();
            early = mine.into_iter().map(|(_, n)| n).collect();
        }
        if let Some(sink) = &route.progress {
            for note in &early {
                sink.send(note.clone());
            }
        }
        r.calls.insert(token, route);
        early
    }

    /// A request that is not a call (a `resources/read`, a `prompts/get`)
    /// made for `relay`'s client under `token`: the server's requests
    /// meanwhile go to that client (GW-2), as during its calls. Its
    /// progress notes are dropped: only calls have progress events.
    pub fn claim(&self, token: String, relay: Arc<dyn CallerRelay>) -> RouteHeld<'_> {
        let route = CallRoute {
            call_id: None,
            relay: Some(relay),
            progress: None,
        };
        self.route(token.clone(), route);
        self.held(token)
    }

    /// A request for `relay`'s client being handed to the transport,
    /// before its progress token is known: a server that asks at once (it
    /// may, before the caller gets its request's handle back) finds that
    /// client. Held until the request's own route is made.
    pub fn sending(&self, relay: Option<&Arc<dyn CallerRelay>>) -> Option<RouteHeld<'_>> {
        let relay = relay?.clone();
        // Not a progress token's key (a number, or `s:` and a string).
        let key = format!("sending {}", self.handing.fetch_add(1, Ordering::Relaxed));
        Some(self.claim(key, relay))
    }

    /// `token`'s route, forgotten when the guard is dropped (its request
    /// is over).
    pub fn held(&self, token: String) -> RouteHeld<'_> {
        RouteHeld {
            routes: self,
            token,
        }
    }

    /// The call of `token` is over.
    pub fn forget(&self, token: &str) {
        self.lock().calls.remove(token);
    }

    /// The client a server's request on this connection goes to (GW-2):
    /// the one client whose calls are under way. A server's request does
    /// not say which request it serves (over stdio nothing can), so with
    /// requests of several clients under way it is [`Relay::Ambiguous`].
    pub fn relay(&self) -> Relay {
        let r = self.lock();
        let mut found: Option<&Arc<dyn CallerRelay>> = None;
        for relay in r
            .calls
            .values()
            .filter_map(|route| route.relay.as_ref())
            .filter(|relay| !relay.gone())
        {
            match found {
                Some(f) if f.client() != relay.client() => return Relay::Ambiguous,
                _ => found = Some(relay),
            }
        }
        found.map_or(Relay::None, |f| Relay::To(f.clone()))
    }

    /// The call `token` belongs to, with the note; or None, the note kept
    /// for when the token is routed.
    pub fn arrive(&self, token: String, note: ProgressNote) -> Option<(u64, ProgressNote)> {
        let mut r = self.lock();
        if let Some(route) = r.calls.get(&token) {
            if let Some(sink) = &route.progress {
                sink.send(note.clone());
            }
            return route.call_id.map(|id| (id, note));
        }
        if r.early.len() >= Self::EARLY {
            r.early.pop_front();
        }
        r.early.push_back((token, note));
        None
    }
}

/// [`Deliveries::MAX`] in flight the oldest are forgotten, and from then
/// on an unknown id reads "may have arrived" (the safe side).
#[derive(Debug, Default)]
pub struct Deliveries {
    inner: std::sync::Mutex<DeliveriesInner>,
}

#[derive(Debug, Default)]
struct DeliveriesInner {
    order: std::collections::VecDeque<String>,
    states: HashMap<String, Delivery>,
    /// Ids forgotten past the bound: not "never sent".
    forgot: bool,
}

impl Deliveries {
    /// How many requests are remembered.
    pub const MAX: usize = 4096;

    fn lock(&self) -> std::sync::MutexGuard<'_, DeliveriesInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request `id` goes on the wire now.
    pub fn handed(&self, id: String) {
        let mut d = self.lock();
        if d.order.len() >= Self::MAX
            && let Some(old) = d.order.pop_front()
        {
            d.states.remove(&old);
            d.forgot = true;
        }
        d.order.push_back(id.clone());
        d.states.insert(id, Delivery::MayHaveArrived);
    }

    /// The request `id` was refused unrun, for `why`.
    pub fn refused(&self, id: &str, why: String) {
        if let Some(state) = self.lock().states.get_mut(id) {
            *state = Delivery::Refused(why);
        }
    }

    /// The call of request `id` ended: it is not looked up any more.
    pub fn forget(&self, id: &str) {
        let mut d = self.lock();
        if d.states.remove(id).is_some()
            && let Some(at) = d.order.iter().rposition(|i| i == id)
        {
            d.order.remove(at);
        }
    }

    /// What became of request `id`.
    pub fn of(&self, id: &str) -> Delivery {
        let d = self.lock();
        match d.states.get(id) {
            Some(state) => state.clone(),
            None if d.forgot => Delivery::MayHaveArrived,
            None => Delivery::NotSent,
        }
    }
}

/// One live MCP session's client side, cheap to clone: the only way to
/// send the server a request. Its methods are the MCP wire's, and live with
/// it in `transport/client.rs` (ADR 0014): rmcp's client API is called
/// there and nowhere else.
#[derive(Debug, Clone)]
pub struct McpClient {
    peer: Peer<RoleClient>,
    /// Stateless era: the listen stream of each resource subscribed to.
    streams: Arc<ResourceStreams>,
}

impl McpClient {
    /// The client over rmcp's handle of a running session.
    pub(crate) fn new(peer: Peer<RoleClient>) -> Self {
        Self {
            peer,
            streams: Arc::default(),
        }
    }

    /// rmcp's handle, for the wire's own code (`transport/`).
    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// The resource subscriptions' streams (`transport/`).
    pub(crate) fn streams(&self) -> &ResourceStreams {
        &self.streams
    }
}

/// The tasks following one `subscriptions/listen` stream per subscribed
/// resource (stateless era), by URI; they end with the connection's last
/// client, or when unsubscribed.
#[derive(Debug, Default)]
pub struct ResourceStreams {
    by_uri: std::sync::Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

impl ResourceStreams {
    /// Whether `uri` is followed.
    pub(crate) fn has(&self, uri: &str) -> bool {
        self.lock().get(uri).is_some_and(|t| !t.is_finished())
    }

    /// Follow `uri` with `task` (one already following it is stopped).
    pub(crate) fn insert(&self, uri: &str, task: tokio::task::AbortHandle) {
        if let Some(old) = self.lock().insert(uri.to_owned(), task) {
            old.abort();
        }
    }

    /// Stop following `uri`; whether it was.
    pub(crate) fn remove(&self, uri: &str) -> bool {
        self.lock().remove(uri).inspect(|t| t.abort()).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio::task::AbortHandle>> {
        self.by_uri.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ResourceStreams {
    fn drop(&mut self) {
        for task in self.lock().values() {
            task.abort();
        }
    }
}

/// One server as the scope's snapshot shows it.
#[derive(Debug, Clone)]
pub struct ServerEntry {
    /// Status (OBS-1).
    pub status: ServerStatus,
    /// The live call handle while ready.
    pub live: Option<LiveConn>,
    /// When the current connection came up.
    pub up_since: Option<Instant>,
    /// The registered tools of the current catalog generation.
    pub tools: Arc<Vec<Arc<ToolDefinition>>>,
    /// Attributed instructions (RES-5).
    pub instructions: Option<String>,
    /// The server's supervisor (cold-path requests: wake, restart).
    pub supervisor: crate::messages::server::ServerHandle,
    /// Call activity.
    pub activity: Arc<Activity>,
    /// Config.
    pub config: Arc<ServerConfig>,
    /// The current connection's output, read when a status is asked for.
    pub output: OutputSlot,
}

/// What a server's current connection has written so far, which changes
/// between the supervisor's publishes (OBS-1): a status shows the stderr
/// tail and the non-JSON line count as they are when it is read, not as
/// they were at the last publish (a line written after `ready` would
/// otherwise not show until something else changed).
pub trait LiveOutput: Send + Sync + std::fmt::Debug {
    /// The stderr tail, secret values redacted.
    fn stderr_tail(&self) -> String;
    /// Non-JSON lines skipped on stdout.
    fn non_json_lines(&self) -> u64;
}

/// The supervisor points this at each new connection's output.
pub type OutputSlot = Arc<std::sync::Mutex<Option<Arc<dyn LiveOutput>>>>;

/// The tools of a scope by public name: each definition once, found by its
/// name without a copy of the name (a `ToolDefinition` hashes and compares
/// as its `name`).
#[derive(Debug, Default)]
pub struct ToolIndex(HashSet<ByName>);

impl ToolIndex {
    /// The definition named `public`.
    pub fn get(&self, public: &str) -> Option<&Arc<ToolDefinition>> {
        self.0.get(public).map(|t| &t.0)
    }
}

/// A definition keyed by its public name.
#[derive(Debug)]
struct ByName(Arc<ToolDefinition>);

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.name.as_str().hash(h);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl ServerEntry {
    /// This entry with a new status, live handle and instructions; the
    /// catalog and the handles are shared, the old status is not copied.
    /// `up_since` is kept while the connection stays the same.
    pub(crate) fn with_status(
        &self,
        status: ServerStatus,
        live: Option<LiveConn>,
        instructions: Option<String>,
    ) -> Self {
        let up_since = match (&self.live, &live) {
            (Some(old), Some(new)) if old.conn_gen == new.conn_gen => self.up_since,
            (_, Some(_)) => Some(Instant::now()),
            (_, None) => None,
        };
        Self {
            status,
            live,
            up_since,
            tools: self.tools.clone(),
            instructions,
            supervisor: self.supervisor.clone(),
            activity: self.activity.clone(),
            config: self.config.clone(),
            output: self.output.clone(),
        }
    }
}

/// An immutable view of one scope's catalog and servers.
#[derive(Debug, Clone, Default)]
pub struct ScopeSnapshot {
    /// Servers by name. A new snapshot shares every entry that did not
    /// change (PERF-1: a publish copies no status, stderr tail or catalog).
    pub servers: BTreeMap<String, Arc<ServerEntry>>,
    /// Public tool name → definition, rebuilt only when a catalog changes
    /// and shared by every snapshot until then.
    pub index: Arc<ToolIndex>,
    /// The scope's shared resource tools (RES-2): present while at least one
    /// live server provides resources.
    pub resource_tools: Vec<Arc<ToolDefinition>>,
    /// The live resource providers, by name (RES-1).
    pub resource_providers: Vec<String>,
    /// Bumped whenever the set of providers changes.
    pub resource_generation: u64,
    /// The scope.
    pub scope: Option<Scope>,
}

impl ScopeSnapshot {
    /// Resolve a public tool name.
    pub fn resolve(&self, public: &str) -> Option<(&ServerEntry, &Arc<ToolDefinition>)> {
        let tool = self.index.get(public)?;
        Some((self.servers.get(&tool.server)?, tool))
    }

    /// Every tool of the scope, by server then server order, then the shared
    /// resource tools.
    pub fn tools(&self) -> Vec<Arc<ToolDefinition>> {
        self.servers
            .values()
            .flat_map(|s| s.tools.iter().cloned())
            .chain(self.resource_tools.iter().cloned())
            .collect()
    }

    /// A shared resource tool by name, if installed.
    pub fn resource_tool(&self, name: &str) -> Option<&Arc<ToolDefinition>> {
        self.resource_tools.iter().find(|t| t.name == name)
    }

    /// Rebuild the name index; true when the shared resource tools changed.
    pub(crate) fn reindex(&mut self) -> bool {
        let changed = self.refresh_providers();
        let total = self.servers.values().map(|e| e.tools.len()).sum();
        let mut index = HashSet::with_capacity(total);
        for entry in self.servers.values() {
            index.extend(entry.tools.iter().cloned().map(ByName));
        }
        self.index = Arc::new(ToolIndex(index));
        changed
    }

    /// Recompute the resource providers; the shared tools follow them (RES-2).
    /// True when they changed.
    pub(crate) fn refresh_providers(&mut self) -> bool {
        let providers: Vec<String> = self
            .servers
            .iter()
            // A server the config says never to call provides no resources
            // either: the shared tools are not trust-gated per call (TRUST-4).
            // An idle-stopped provider still provides: a resource call
            // wakes it (RECO-6, RES-2).
            .filter(|(_, e)| {
                (e.live.is_some() || e.status.state == super::status::ServerState::IdleStopped)
                    && e.status.resources
                    && e.config.trust != crate::messages::trust::TrustMode::Never
            })
            .map(|(n, _)| n.clone())
            .collect();
        if providers != self.resource_providers {
            self.resource_generation += 1;
            self.resource_providers = providers;
            let scope = self.scope.clone().unwrap_or(Scope::Global);
            self.resource_tools = crate::messages::resources::resource_tools(
                &scope,
                &self.resource_providers,
                self.resource_generation,
            );
            return true;
        }
        false
    }
}

/// What a server supervisor publishes about its server: its status, its
/// live handle and its instructions.
#[derive(Debug)]
pub struct Published {
    /// Status.
    pub status: ServerStatus,
    /// Live handle (`None` = not callable).
    pub live: Option<LiveConn>,
    /// Instructions, published with the tools (RES-5).
    pub instructions: Option<String>,
}

/// Messages of the registry.
pub enum RegistryMsg {
    /// Add a server entry (before its supervisor starts connecting).
    Register {
        /// The initial entry.
        entry: Box<ServerEntry>,
    },
    /// Replace a server's status and live handle.
    Publish(Box<Published>),
    /// Phase 2 of a sync: swap in generation `generation` of `server`'s tools,
    /// if connection `conn_gen` is still the live one (SYNC-6). A public-name
    /// conflict with another server leaves this server with zero tools (SYNC-4).
    Swap {
        /// Server.
        server: String,
        /// Connection generation that fetched the catalog.
        conn_gen: u64,
        /// The new catalog generation.
        generation: u64,
        /// The new definitions.
        tools: Vec<Arc<ToolDefinition>>,
        /// The live handle of connection `conn_gen`, for its first catalog:
        /// installed together with the tools, so a new connection is never
        /// callable under the previous connection's definitions. `None` for
        /// a re-sync: then connection `conn_gen` must be the live one.
        live: Option<LiveConn>,
        /// The supervisor's status as it stands with the swap done, published
        /// in the same snapshot (one publish per sync, not one for the tools
        /// and one for the status). The registry fills in the tool count,
        /// the generation and, on a failed swap, the error; a failed swap
        /// also drops the instructions (RES-5).
        then: Box<Published>,
        /// Ok(count) or the conflict / staleness.
        reply: RpcReplyPort<Result<usize, SwapError>>,
    },
    /// Remove a server's tools (RECO-4, RECO-5).
    RemoveTools {
        /// Server.
        server: String,
    },
    /// The scope gave up on a server's supervisor: no live handle, no tools,
    /// state `failed` with the reason — visible, never silently stale.
    Abandon {
        /// Server.
        server: String,
        /// Why.
        error: String,
    },
    /// The server was removed from its scope: its entry goes (tools, status).
    Forget {
        /// Server.
        server: String,
    },
    /// Answered once every message sent before it has been handled: lets a
    /// caller make sure a `Register` it caused is visible in the snapshot.
    Barrier {
        /// Answered with ().
        reply: RpcReplyPort<()>,
    },
}

/// Why the registry did not swap a catalog generation in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    /// The server has no entry in the scope.
    #[error("server \"{server}\" is not registered")]
    NotRegistered {
        /// The server.
        server: String,
    },
    /// The connection that fetched it is no longer the live one (SYNC-6).
    #[error("stale catalog of connection {conn_gen} dropped: no longer the live connection")]
    Stale {
        /// Its connection generation.
        conn_gen: u64,
    },
    /// A public name is another server's (SYNC-4): the server has zero tools.
    #[error(
        "tool name \"{name}\" is already registered by server \"{owner}\": catalog rolled back, zero tools"
    )]
    NameConflict {
        /// The public name.
        name: String,
        /// The server that has it.
        owner: String,
    },
}

#[cfg(test)]
mod tests {

    #[derive(Debug)]
    struct Client(u64);

    impl CallerRelay for Client {
        fn client(&self) -> u64 {
            self.0
        }
        fn offers(&self) -> crate::Offers {
            crate::Offers::default()
        }
        fn ask(
            &self,
            _: Vec<crate::RelayAsk>,
        ) -> futures::future::BoxFuture<
            'static,
            Result<serde_json::Map<String, serde_json::Value>, crate::RelayError>,
        > {
            Box::pin(async { Ok(serde_json::Map::new()) })
        }
    }

    fn call(call_id: u64, relay: Option<Arc<dyn CallerRelay>>) -> CallRoute {
        CallRoute {
            call_id: Some(call_id),
            relay,
            progress: None,
        }
    }

    #[test]
    fn a_servers_request_goes_to_the_one_client_with_calls_under_way_and_to_none_when_two_have() {
        // GW-2: a session-era server's request names no call; it goes to
        // the client whose calls are under way, never a guess between two.
        let routes = ProgressRoutes::default();
        assert!(matches!(routes.relay(), Relay::None));
        routes.route("1".into(), call(1, None));
        assert!(matches!(routes.relay(), Relay::None), "a call of no client");
        routes.route("2".into(), call(2, Some(Arc::new(Client(7)))));
        routes.route("3".into(), call(3, Some(Arc::new(Client(7)))));
        assert!(matches!(routes.relay(), Relay::To(c) if c.client() == 7));
        routes.route("4".into(), call(4, Some(Arc::new(Client(8)))));
        assert!(matches!(routes.relay(), Relay::Ambiguous));
        routes.forget("2");
        routes.forget("3");
        assert!(matches!(routes.relay(), Relay::To(c) if c.client() == 8));
    }

    #[test]
    fn a_read_claims_a_servers_requests_for_its_client_until_it_is_over() {
        // GW-2: a session-era server's request during a read (or a prompt)
        // made for a relaying client goes to that client; its progress is
        // no call's; the claim ends with the read.
        let routes = ProgressRoutes::default();
        let note = ProgressNote {
            progress: 1.0,
            total: None,
            message: None,
        };
        {
            let _held = routes.claim("5".into(), Arc::new(Client(9)));
            assert!(matches!(routes.relay(), Relay::To(c) if c.client() == 9));
            assert_eq!(routes.arrive("5".into(), note.clone()), None);
        }
        assert!(matches!(routes.relay(), Relay::None));
        // A request still being handed over, its token not known yet.
        let relay: Arc<dyn CallerRelay> = Arc::new(Client(4));
        let handing = routes.sending(Some(&relay));
        assert!(matches!(routes.relay(), Relay::To(c) if c.client() == 4));
        drop(handing);
        assert!(matches!(routes.relay(), Relay::None));
        assert!(routes.sending(None).is_none());
    }

    #[test]
    fn a_progress_note_goes_to_its_call_and_one_that_came_first_waits_for_the_route() {
        let routes = ProgressRoutes::default();
        let note = |p: f64| ProgressNote {
            progress: p,
            total: None,
            message: None,
        };
        // Before the route: kept; the route hands it over, in order.
        assert_eq!(routes.arrive("7".into(), note(1.0)), None);
        assert_eq!(routes.arrive("8".into(), note(9.0)), None);
        assert_eq!(routes.route("7".into(), call(42, None)), vec![note(1.0)]);
        assert_eq!(routes.arrive("7".into(), note(2.0)), Some((42, note(2.0))));
        // Another token's early note stays for its own route.
        assert_eq!(routes.route("8".into(), call(43, None)), vec![note(9.0)]);
        routes.forget("7");
        assert_eq!(routes.arrive("7".into(), note(3.0)), None);
        // Bounded: the oldest early notes fall out.
        for i in 0..(ProgressRoutes::EARLY + 5) {
            routes.arrive(format!("x{i}"), note(0.0));
        }
        assert!(routes.route("x0".into(), call(1, None)).is_empty());
        assert_eq!(
            routes
                .route(format!("x{}", ProgressRoutes::EARLY + 4), call(2, None))
                .len(),
            1
        );
    }
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_idle_stop_and_a_starting_call_always_see_each_other() {
        // RECO-6: the claim fails while a call is in flight; a call that
        // starts after the claim sees it (and wakes instead of sending).
        let a = Arc::new(Activity::new());
        tokio::time::advance(Duration::from_secs(5)).await;
        let guard = a.begin();
        assert!(
            !a.claim_idle_stop(1, Duration::from_secs(1)),
            "a call is in flight"
        );
        assert!(!a.closing(1), "a failed claim is withdrawn");
        drop(guard);
        assert!(
            !a.claim_idle_stop(1, Duration::from_secs(1)),
            "the call just ended: not idle for the limit yet"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(a.claim_idle_stop(1, Duration::from_secs(1)));
        let _late = a.begin();
        assert!(a.closing(1), "the late call sees the claim");
        assert!(!a.closing(2), "a claim names its connection");
    }
}
