//! `ToolRegistry(scope)`: the catalog of one scope.
//!
//! Owns exclusively: the scope's published snapshot (a `watch` channel of
//! immutable, generation-stamped [`ScopeSnapshot`]s). Supervisor:
//! `ScopeSupervisor`, permanent. Every server's status, live call handle and
//! tools change only through this actor's mailbox, so readers never see a half
//! catalog or two generations of one server (SYNC-3, SYNC-6); callers read the
//! snapshot directly and never queue behind this mailbox. States: one
//! (serving), every message a transition of the snapshot. Messages:
//! `RegistryMsg` (messages/registry.rs).

use std::sync::Arc;
use tracing::Instrument;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::messages::call::ToolDefinition;
use crate::messages::config::Scope;
use crate::messages::registry::{LiveConn, Published, RegistryMsg, ScopeSnapshot, SwapError};
use crate::messages::status::{RuntimeEvent, ServerState};

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

    /// Put what a supervisor published into the current snapshot (not yet
    /// sent): the entry's tools, tool count and generation stay the
    /// registry's. `None` for a server no longer registered; otherwise
    /// whether the status changed.
    fn apply(&mut self, published: Published) -> Option<bool> {
        let Published {
            mut status,
            live,
            instructions,
        } = published;
        let name = status.server.clone();
        let old = self.current.servers.get(&name)?;
        status.tools = old.tools.len();
        status.generation = old.status.generation;
        let changed = old.status != status;
        let instructions_changed = old.instructions != instructions;
        let text = instructions_changed.then(|| instructions.clone().unwrap_or_default());
        // A new entry around the new status: the old one (and its stderr
        // tail) is not copied, only dropped.
        let entry = old.with_status(status, live, instructions);
        self.current.servers.insert(name.clone(), Arc::new(entry));
        if let Some(text) = text {
            let _ = self.events.send(RuntimeEvent::ModelText {
                scope: self.scope.clone(),
                origin: format!("instructions:{name}"),
                text,
            });
        }
        if self.current.refresh_providers() {
            self.emit_resource_tools();
        }
        Some(changed)
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
                    st.current.servers.insert(name.clone(), Arc::new(*entry));
                    if st.current.reindex() {
                        st.emit_resource_tools();
                    }
                    st.publish();
                    st.emit_status(&name);
                }
                RegistryMsg::Publish(published) => {
                    let name = published.status.server.clone();
                    if let Some(changed) = st.apply(*published) {
                        st.publish();
                        if changed {
                            st.emit_status(&name);
                        }
                    }
                }
                RegistryMsg::Swap {
                    server,
                    conn_gen,
                    generation,
                    tools,
                    live,
                    then,
                    reply,
                } => {
                    let result = swap(st, &server, conn_gen, generation, tools, live);
                    let mut then = *then;
                    if let Err(e) = &result {
                        then.status.error = Some(e.to_string());
                        then.instructions = None;
                    }
                    st.apply(then);
                    st.publish();
                    if result.is_ok() {
                        st.emit_catalog(&server);
                    }
                    st.emit_status(&server);
                    let _ = reply.send(result);
                }
                RegistryMsg::RemoveTools { server } => {
                    if let Some(entry) = st.current.servers.get_mut(&server) {
                        let entry = Arc::make_mut(entry);
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
                        let entry = Arc::make_mut(entry);
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
                RegistryMsg::Forget { server } => {
                    if let Some(entry) = st.current.servers.remove(&server) {
                        if st.current.reindex() {
                            st.emit_resource_tools();
                        }
                        st.publish();
                        let _ = st.events.send(RuntimeEvent::CatalogChanged {
                            scope: st.scope.clone(),
                            server,
                            generation: entry.status.generation,
                            tools: 0,
                        });
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
    live: Option<LiveConn>,
) -> Result<usize, SwapError> {
    let Some(entry) = st.current.servers.get_mut(server) else {
        return Err(SwapError::NotRegistered {
            server: server.to_owned(),
        });
    };
    // The one copy of this server's entry a swap makes (the snapshot
    // published last still holds the old one); the other servers' entries
    // are shared.
    let entry = Arc::make_mut(entry);
    // A new connection's first catalog: the handle and the tools are
    // published in one snapshot.
    if let Some(live) = live.filter(|l| l.conn_gen == conn_gen) {
        if entry.live.as_ref().map(|l| l.conn_gen) != Some(conn_gen) {
            entry.up_since = Some(Instant::now());
        }
        entry.live = Some(live);
    }
    match &entry.live {
        Some(live) if live.conn_gen == conn_gen => {}
        _ => return Err(SwapError::Stale { conn_gen }),
    }
    let conflict = tools
        .iter()
        .find_map(|t| match st.current.index.get(&t.name) {
            Some(owner) if owner.server != server => Some((t.name.clone(), owner.server.clone())),
            _ => None,
        });
    let Some(entry) = st.current.servers.get_mut(server) else {
        return Err(SwapError::NotRegistered {
            server: server.to_owned(),
        });
    };
    let entry = Arc::make_mut(entry);
    entry.status.generation = generation;
    if let Some((name, owner)) = conflict {
        // SYNC-4: the partial new generation is rolled back; the server ends with zero tools.
        entry.tools = Arc::new(Vec::new());
        entry.status.tools = 0;
        entry.instructions = None;
        let conflict = SwapError::NameConflict { name, owner };
        entry.status.error = Some(conflict.to_string());
        if st.current.reindex() {
            st.emit_resource_tools();
        }
        return Err(conflict);
    }
    let n = tools.len();
    entry.tools = Arc::new(tools);
    entry.status.tools = n;
    if st.current.reindex() {
        st.emit_resource_tools();
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use ractor::Actor;
    use rmcp::{ServerHandler, ServiceExt};

    use super::*;
    use crate::messages::catalog::build_catalog;
    use crate::messages::config::ServerConfig;
    use crate::messages::registry::{Activity, ServerEntry};
    use crate::messages::server::ServerSupervisorMsg;
    use crate::messages::status::ServerStatus;

    /// A server supervisor that ignores everything: an entry needs one.
    struct Idle;
    impl Actor for Idle {
        type Msg = ServerSupervisorMsg;
        type State = ();
        type Arguments = ();
        async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    /// A server with rmcp's default (empty) handler.
    #[derive(Clone)]
    struct Quiet;
    impl ServerHandler for Quiet {}

    /// A live handle of connection `conn_gen` to an in-process server, and
    /// the client service behind it (alive while it is held).
    async fn live(
        conn_gen: u64,
    ) -> (
        LiveConn,
        rmcp::service::RunningService<rmcp::RoleClient, ()>,
    ) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            if let Ok(running) = Quiet.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        let running = ().serve(client).await.unwrap();
        let live = LiveConn {
            conn_gen,
            client: crate::messages::registry::McpClient::new(running.peer().clone()),
            redactions: Arc::new([]),
            deliveries: None,
            era: crate::messages::server::Era::Session,
            progress: Default::default(),
            handlers: Default::default(),
        };
        (live, running)
    }

    fn tools(generation: u64, name: &str) -> Vec<Arc<ToolDefinition>> {
        let raw = serde_json::json!({"name": name, "inputSchema": {"type": "object"}});
        build_catalog(&Scope::Global, "srv", generation, vec![raw])
            .unwrap()
            .tools
    }

    async fn swap_msg(
        registry: &ActorRef<RegistryMsg>,
        conn_gen: u64,
        generation: u64,
        name: &str,
        live: Option<LiveConn>,
        then: Published,
    ) -> Result<usize, SwapError> {
        let then = Box::new(then);
        ractor::call_t!(
            registry,
            |reply| RegistryMsg::Swap {
                server: "srv".into(),
                conn_gen,
                generation,
                tools: tools(generation, name),
                live,
                then,
                reply,
            },
            5000
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_new_connection_becomes_callable_in_the_same_snapshot_as_its_catalog() {
        // The live handle of a new connection is never
        // published with the previous connection's definitions.
        let (snap_tx, mut snap_rx) = watch::channel(Arc::new(ScopeSnapshot::default()));
        let (events, _) = broadcast::channel(64);
        let (registry, _) = Actor::spawn(
            None,
            ToolRegistry,
            RegistryArgs {
                scope: Scope::Global,
                snapshot: snap_tx,
                events,
            },
        )
        .await
        .unwrap();
        let (supervisor, _) = Actor::spawn(None, Idle, ()).await.unwrap();
        let status = ServerStatus::new(Scope::Global, "srv", "in_process", 3);
        let config = Arc::new(ServerConfig::stdio("srv", "true", Vec::new()));
        registry
            .cast(RegistryMsg::Register {
                entry: Box::new(ServerEntry {
                    status,
                    live: None,
                    up_since: None,
                    tools: Arc::new(Vec::new()),
                    instructions: None,
                    supervisor: crate::messages::server::ServerHandle {
                        actor: supervisor.clone(),
                    },
                    activity: Arc::new(Activity::new()),
                    config,
                    output: Arc::default(),
                }),
            })
            .unwrap();
        // Connection 1 with tool `old`; then it is lost (live withdrawn, the
        // tools kept, RECO-5 keep).
        let then = |status: &ServerStatus, live: &LiveConn| Published {
            status: status.clone(),
            live: Some(live.clone()),
            instructions: None,
        };
        let (first, _first_client) = live(1).await;
        let mut ready = ServerStatus::new(Scope::Global, "srv", "stdio", 1);
        ready.state = ServerState::Ready;
        assert_eq!(
            swap_msg(
                &registry,
                1,
                1,
                "old",
                Some(first.clone()),
                then(&ready, &first)
            )
            .await,
            Ok(1)
        );
        let callable = |s: &ScopeSnapshot| s.servers["srv"].live.as_ref().map(|l| l.conn_gen);
        let names = |s: &ScopeSnapshot| {
            s.servers["srv"]
                .tools
                .iter()
                .map(|t| t.raw_name.clone())
                .collect::<Vec<_>>()
        };
        let s = snap_rx.borrow_and_update().clone();
        assert_eq!((callable(&s), names(&s)), (Some(1), vec!["old".to_owned()]));
        let mut lost = s.servers["srv"].status.clone();
        lost.state = ServerState::Reconnecting { attempt: 1, of: 3 };
        registry
            .cast(RegistryMsg::Publish(Box::new(Published {
                status: lost.clone(),
                live: None,
                instructions: None,
            })))
            .unwrap();
        // Connection 2 lists `new`: one swap installs the handle, the tools
        // and the supervisor's status (ready again) in one snapshot.
        let (second, _second_client) = live(2).await;
        let mut up = lost.clone();
        up.state = ServerState::Ready;
        up.connection_generation = 2;
        assert_eq!(
            swap_msg(
                &registry,
                2,
                2,
                "new",
                Some(second.clone()),
                then(&up, &second)
            )
            .await,
            Ok(1)
        );
        let s = snap_rx.borrow_and_update().clone();
        assert_eq!((callable(&s), names(&s)), (Some(2), vec!["new".to_owned()]));
        assert!(s.servers["srv"].up_since.is_some());
        let status = &s.servers["srv"].status;
        assert_eq!(
            (
                &status.state,
                status.connection_generation,
                status.tools,
                status.generation
            ),
            (&ServerState::Ready, 2, 1, 2),
            "the status went out with the tools: {status:?}"
        );
        // A re-sync carries no handle and needs connection 2 to be the live one.
        assert_eq!(
            swap_msg(&registry, 2, 3, "newer", None, then(&up, &second)).await,
            Ok(1)
        );
        // A stale swap's status says why nothing was swapped.
        assert_eq!(
            swap_msg(&registry, 1, 4, "stale", None, then(&up, &second)).await,
            Err(SwapError::Stale { conn_gen: 1 })
        );
        let s = snap_rx.borrow_and_update().clone();
        let error = s.servers["srv"].status.error.clone().unwrap_or_default();
        assert!(error.contains('1'), "stale swap error: {error:?}");
        let s = snap_rx.borrow_and_update().clone();
        assert_eq!(
            (callable(&s), names(&s)),
            (Some(2), vec!["newer".to_owned()])
        );
        registry.stop(None);
        supervisor.stop(None);
    }
}
