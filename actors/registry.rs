//! `ToolRegistry(scope)`: the catalog of one scope.
//!
//! Owns exclusively: the scope's published snapshot (a `watch` channel of
//! immutable, generation-stamped [`ScopeSnapshot`]s). Supervisor:
//! `ScopeSupervisor`, permanent. Every server's status, live call handle and
//! tools change only through this actor's mailbox, so readers never see a half
//! catalog or two generations of one server (SYNC-3, SYNC-6); callers read the
//! snapshot directly and never queue behind this mailbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tracing::Instrument;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::messages::call::ToolDefinition;
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::server::ServerSupervisorMsg;
use crate::messages::status::{RuntimeEvent, ServerState, ServerStatus};

/// Activity of one server, updated by calls in the caller's task (RECO-6).
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    last_ms: AtomicU64,
}

impl Activity {
    /// A fresh activity record; "last call" is now.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
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
    /// rmcp call handle.
    pub peer: Peer<RoleClient>,
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
    pub supervisor: ActorRef<ServerSupervisorMsg>,
    /// Call activity.
    pub activity: Arc<Activity>,
    /// Config.
    pub config: Arc<ServerConfig>,
}

/// An immutable view of one scope's catalog and servers.
#[derive(Debug, Clone, Default)]
pub struct ScopeSnapshot {
    /// Servers by name.
    pub servers: BTreeMap<String, ServerEntry>,
    /// Public tool name → (server, index in its tools).
    pub index: BTreeMap<String, (String, usize)>,
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
        let (server, i) = self.index.get(public)?;
        let entry = self.servers.get(server)?;
        Some((entry, entry.tools.get(*i)?))
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
    fn reindex(&mut self) -> bool {
        let changed = self.refresh_providers();
        self.index.clear();
        for (name, entry) in &self.servers {
            for (i, t) in entry.tools.iter().enumerate() {
                self.index.insert(t.name.clone(), (name.clone(), i));
            }
        }
        changed
    }

    /// Recompute the resource providers; the shared tools follow them (RES-2).
    /// True when they changed.
    fn refresh_providers(&mut self) -> bool {
        let providers: Vec<String> = self
            .servers
            .iter()
            // A server the config says never to call provides no resources
            // either: the shared tools are not trust-gated per call (TRUST-4).
            .filter(|(_, e)| {
                e.live.is_some()
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

/// Messages of the registry.
pub enum RegistryMsg {
    /// Add a server entry (before its supervisor starts connecting).
    Register {
        /// The initial entry.
        entry: Box<ServerEntry>,
    },
    /// Replace a server's status and live handle.
    Publish {
        /// Status.
        status: Box<ServerStatus>,
        /// Live handle (`None` = not callable).
        live: Option<LiveConn>,
        /// Instructions, published with the tools (RES-5).
        instructions: Option<String>,
    },
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
        /// Ok(count) or the conflict / staleness.
        reply: RpcReplyPort<Result<usize, String>>,
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
    /// Answered once every message sent before it has been handled: lets a
    /// caller make sure a `Register` it caused is visible in the snapshot.
    Barrier {
        /// Answered with ().
        reply: RpcReplyPort<()>,
    },
}

/// The registry actor.
#[derive(Debug, Default)]
pub struct ToolRegistry;

/// Arguments: the scope and the channels it publishes on.
#[derive(Debug)]
pub struct RegistryArgs {
    /// The scope.
    pub scope: Scope,
    /// Snapshot publisher.
    pub snapshot: watch::Sender<Arc<ScopeSnapshot>>,
    /// Runtime events.
    pub events: broadcast::Sender<RuntimeEvent>,
}

/// Registry state.
#[derive(Debug)]
pub struct RegistryState {
    scope: Scope,
    current: ScopeSnapshot,
    snapshot: watch::Sender<Arc<ScopeSnapshot>>,
    events: broadcast::Sender<RuntimeEvent>,
}

impl RegistryState {
    fn publish(&mut self) {
        self.snapshot.send_replace(Arc::new(self.current.clone()));
    }

    fn emit_status(&self, server: &str) {
        if let Some(e) = self.current.servers.get(server) {
            let _ = self
                .events
                .send(RuntimeEvent::ServerStatus(Box::new(e.status.clone())));
        }
    }

    /// Model-visible text the runtime produced (OBS-2): the shared resource
    /// tools' descriptions whenever they change.
    fn emit_resource_tools(&self) {
        let text = self
            .current
            .resource_tools
            .iter()
            .map(|t| format!("{}: {}", t.name, t.description.as_deref().unwrap_or("")))
            .collect::<Vec<_>>()
            .join("\n");
        let _ = self.events.send(RuntimeEvent::ModelText {
            scope: self.scope.clone(),
            origin: "resource_tools".into(),
            text,
        });
    }

    fn emit_catalog(&self, server: &str) {
        if let Some(e) = self.current.servers.get(server) {
            let _ = self.events.send(RuntimeEvent::CatalogChanged {
                scope: self.scope.clone(),
                server: server.to_owned(),
                generation: e.status.generation,
                tools: e.tools.len(),
            });
        }
    }
}

impl Actor for ToolRegistry {
    type Msg = RegistryMsg;
    type State = RegistryState;
    type Arguments = RegistryArgs;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        args: RegistryArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RegistryState {
            current: ScopeSnapshot {
                scope: Some(args.scope.clone()),
                ..ScopeSnapshot::default()
            },
            scope: args.scope,
            snapshot: args.snapshot,
            events: args.events,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("tool_registry", scope = %st.scope);
        async move {
            tracing::debug!("handling a message");
            match msg {
                RegistryMsg::Register { entry } => {
                    let name = entry.status.server.clone();
                    st.current.servers.insert(name.clone(), *entry);
                    if st.current.reindex() {
                        st.emit_resource_tools();
                    }
                    st.publish();
                    st.emit_status(&name);
                }
                RegistryMsg::Publish {
                    status,
                    live,
                    instructions,
                } => {
                    let mut status = *status;
                    let name = status.server.clone();
                    let Some(entry) = st.current.servers.get_mut(&name) else {
                        return Ok(());
                    };
                    status.tools = entry.tools.len();
                    status.generation = entry.status.generation;
                    let changed = entry.status != status;
                    entry.up_since = match (&entry.live, &live) {
                        (Some(old), Some(new)) if old.conn_gen == new.conn_gen => entry.up_since,
                        (_, Some(_)) => Some(Instant::now()),
                        (_, None) => None,
                    };
                    let instructions_changed = entry.instructions != instructions;
                    entry.status = status;
                    entry.live = live;
                    entry.instructions = instructions;
                    if instructions_changed {
                        let text = entry.instructions.clone().unwrap_or_default();
                        let _ = st.events.send(RuntimeEvent::ModelText {
                            scope: st.scope.clone(),
                            origin: format!("instructions:{name}"),
                            text,
                        });
                    }
                    if st.current.refresh_providers() {
                        st.emit_resource_tools();
                    }
                    st.publish();
                    if changed {
                        st.emit_status(&name);
                    }
                }
                RegistryMsg::Swap {
                    server,
                    conn_gen,
                    generation,
                    tools,
                    reply,
                } => {
                    let result = swap(st, &server, conn_gen, generation, tools);
                    st.publish();
                    if result.is_ok() {
                        st.emit_catalog(&server);
                    }
                    st.emit_status(&server);
                    let _ = reply.send(result);
                }
                RegistryMsg::RemoveTools { server } => {
                    if let Some(entry) = st.current.servers.get_mut(&server) {
                        entry.tools = Arc::new(Vec::new());
                        entry.status.tools = 0;
                        entry.instructions = None;
                        if st.current.reindex() {
                            st.emit_resource_tools();
                        }
                        st.publish();
                        st.emit_catalog(&server);
                    }
                }
                RegistryMsg::Abandon { server, error } => {
                    if let Some(entry) = st.current.servers.get_mut(&server) {
                        entry.live = None;
                        entry.up_since = None;
                        entry.tools = Arc::new(Vec::new());
                        entry.instructions = None;
                        entry.status.tools = 0;
                        entry.status.pid = None;
                        entry.status.state = ServerState::Failed;
                        entry.status.error = Some(error);
                        if st.current.reindex() {
                            st.emit_resource_tools();
                        }
                        st.publish();
                        st.emit_catalog(&server);
                        st.emit_status(&server);
                    }
                }
                RegistryMsg::Barrier { reply } => {
                    let _ = reply.send(());
                }
            }
            Ok(())
        }
        .instrument(span)
        .await
    }
}

fn swap(
    st: &mut RegistryState,
    server: &str,
    conn_gen: u64,
    generation: u64,
    tools: Vec<Arc<ToolDefinition>>,
) -> Result<usize, String> {
    let Some(entry) = st.current.servers.get(server) else {
        return Err(format!("server \"{server}\" is not registered"));
    };
    match &entry.live {
        Some(live) if live.conn_gen == conn_gen => {}
        _ => {
            return Err(format!(
                "stale catalog of connection {conn_gen} dropped: no longer the live connection"
            ));
        }
    }
    let conflict = tools
        .iter()
        .find_map(|t| match st.current.index.get(&t.name) {
            Some((owner, _)) if owner != server => Some((t.name.clone(), owner.clone())),
            _ => None,
        });
    let Some(entry) = st.current.servers.get_mut(server) else {
        return Err(format!("server \"{server}\" is not registered"));
    };
    entry.status.generation = generation;
    if let Some((name, owner)) = conflict {
        // SYNC-4: the partial new generation is rolled back; the server ends with zero tools.
        entry.tools = Arc::new(Vec::new());
        entry.status.tools = 0;
        entry.instructions = None;
        let msg = format!(
            "tool name \"{name}\" is already registered by server \"{owner}\": catalog rolled back, zero tools"
        );
        entry.status.error = Some(msg.clone());
        if st.current.reindex() {
            st.emit_resource_tools();
        }
        return Err(msg);
    }
    let n = tools.len();
    entry.tools = Arc::new(tools);
    entry.status.tools = n;
    if st.current.reindex() {
        st.emit_resource_tools();
    }
    Ok(n)
}
