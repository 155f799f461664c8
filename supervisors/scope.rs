//! `ScopeSupervisor(scope)`: one per caller-visible scope (CONN-4).
//!
//! Children, in start order: the scope's `ToolRegistry` (permanent), then one
//! `ServerSupervisor` per server (transient, intensity 3 restarts / 5 s).
//! Shutdown stops the servers concurrently (no server can block another's
//! shutdown, CONN-1), then the registry: reverse start order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::server::{SHUTDOWN_DEADLINE, ServerSupervisor, ServerSupervisorArgs};
use super::spec::{Intensity, Restart, Shutdown, stop_child};

/// Shutdown spec of the scope's children once they have quiesced.
const WORKER_STOP: Shutdown = Shutdown::Timeout(Duration::from_secs(1));
use crate::actors::registry::{Activity, RegistryArgs, RegistryMsg, ScopeSnapshot, ToolRegistry};
use crate::messages::capabilities::ClientHandlers;
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::naming::derive_slug;
use crate::messages::server::ServerSupervisorMsg;
use crate::messages::status::{RuntimeEvent, ShutdownReport};

/// Messages of a scope supervisor.
pub enum ScopeMsg {
    /// Add and start a server; refused when the name is taken in this scope (CONN-4).
    AddServer {
        /// Validated config.
        config: Box<ServerConfig>,
        /// The server_name (derived from the display name when empty, SYNC-2)
        /// once the server's supervisor runs.
        reply: RpcReplyPort<Result<String, String>>,
    },
    /// Stop everything in reverse start order and report (RECO-7).
    Shutdown {
        /// The report.
        reply: RpcReplyPort<ShutdownReport>,
    },
}

/// Arguments.
#[derive(Debug)]
pub struct ScopeArgs {
    /// The scope.
    pub scope: Scope,
    /// Snapshot publisher handed to the registry.
    pub snapshot: watch::Sender<Arc<ScopeSnapshot>>,
    /// Runtime events.
    pub events: broadcast::Sender<RuntimeEvent>,
    /// Test-only (feature `chaos`): see [`ServerSupervisorArgs::skip_close_barrier`].
    pub skip_close_barrier: bool,
    /// Opt-in client capabilities for every server of the scope (CONN-11).
    pub handlers: ClientHandlers,
}

/// One server child.
#[derive(Debug)]
struct ServerChild {
    actor: ActorRef<ServerSupervisorMsg>,
    config: Arc<ServerConfig>,
    activity: Arc<Activity>,
}

/// The scope supervisor.
#[derive(Debug, Default)]
pub struct ScopeSupervisor;

/// Its state.
#[derive(Debug)]
pub struct ScopeState {
    scope: Scope,
    registry: ActorRef<RegistryMsg>,
    servers: BTreeMap<String, ServerChild>,
    intensity: Intensity,
    skip_close_barrier: bool,
    handlers: ClientHandlers,
    shutting_down: bool,
}

async fn spawn_server(
    myself: &ActorRef<ScopeMsg>,
    st: &ScopeState,
    config: Arc<ServerConfig>,
    activity: Arc<Activity>,
) -> Result<ActorRef<ServerSupervisorMsg>, String> {
    let args = ServerSupervisorArgs {
        scope: st.scope.clone(),
        config,
        registry: st.registry.clone(),
        activity,
        skip_close_barrier: st.skip_close_barrier,
        handlers: st.handlers.clone(),
    };
    Actor::spawn_linked(None, ServerSupervisor, args, myself.get_cell())
        .await
        .map(|(a, _)| a)
        .map_err(|e| format!("could not start the server supervisor: {e}"))
}

impl Actor for ScopeSupervisor {
    type Msg = ScopeMsg;
    type State = ScopeState;
    type Arguments = ScopeArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ScopeArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let reg_args = RegistryArgs {
            scope: args.scope.clone(),
            snapshot: args.snapshot,
            events: args.events,
        };
        let (registry, _) =
            Actor::spawn_linked(None, ToolRegistry, reg_args, myself.get_cell()).await?;
        Ok(ScopeState {
            scope: args.scope,
            registry,
            servers: BTreeMap::new(),
            intensity: Intensity::new(3, Duration::from_secs(5)),
            skip_close_barrier: args.skip_close_barrier,
            handlers: args.handlers,
            shutting_down: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("scope_supervisor", scope = %st.scope);
        async move {
            tracing::debug!("handling a message");
            match msg {
                ScopeMsg::AddServer { mut config, reply } => {
                    if config.server_name.is_empty()
                        && let Some(display) = &config.display_name
                    {
                        // SYNC-2: derived on every add, against this scope's names.
                        config.server_name = derive_slug(
                            display,
                            |s| st.servers.contains_key(s),
                            || format!("{:08x}", rand::random::<u32>()),
                        );
                    }
                    let name = config.server_name.clone();
                    let result = if st.shutting_down {
                        Err("the runtime is shutting down".to_owned())
                    } else if st.servers.contains_key(&name) {
                        Err(format!(
                            "server_name \"{name}\" is already registered in scope {}",
                            st.scope
                        ))
                    } else if let Err(e) = config.validate() {
                        Err(e.to_string())
                    } else {
                        let config = Arc::new(*config);
                        let activity = Arc::new(Activity::new());
                        match spawn_server(&myself, st, config.clone(), activity.clone()).await {
                            Ok(actor) => {
                                // The new supervisor registered itself from pre_start; make
                                // that visible before answering, so status() shows the server.
                                let _ = st
                                    .registry
                                    .call(
                                        |reply| RegistryMsg::Barrier { reply },
                                        Some(Duration::from_secs(5)),
                                    )
                                    .await;
                                st.servers.insert(
                                    name.clone(),
                                    ServerChild {
                                        actor,
                                        config,
                                        activity,
                                    },
                                );
                                Ok(name)
                            }
                            Err(e) => Err(e),
                        }
                    };
                    let _ = reply.send(result);
                }
                ScopeMsg::Shutdown { reply } => {
                    st.shutting_down = true;
                    let waits = st.servers.values().map(|child| {
                        let actor = child.actor.clone();
                        let name = child.config.server_name.clone();
                        let scope = st.scope.clone();
                        async move {
                            let limit = SHUTDOWN_DEADLINE + Duration::from_secs(2);
                            match actor
                                .call(|r| ServerSupervisorMsg::Shutdown { reply: r }, Some(limit))
                                .await
                            {
                                Ok(ractor::rpc::CallResult::Success(report)) => report,
                                _ => ShutdownReport {
                                    unconfirmed: vec![format!(
                                        "{scope}/{name}: server supervisor did not report"
                                    )],
                                    ..Default::default()
                                },
                            }
                        }
                    });
                    let reports = futures::future::join_all(waits).await;
                    let mut report = ShutdownReport::default();
                    for r in reports {
                        report.absorb(r);
                    }
                    // Reverse start order: the servers (already quiesced above), then the registry.
                    for child in std::mem::take(&mut st.servers).into_values() {
                        stop_child(&child.actor.get_cell(), WORKER_STOP).await;
                    }
                    stop_child(&st.registry.get_cell(), WORKER_STOP).await;
                    let _ = reply.send(report);
                    myself.stop(Some("shutdown".into()));
                }
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, abnormal, why) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, true, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, false, reason.unwrap_or_default())
            }
            _ => return Ok(()),
        };
        if cell.get_id() == st.registry.get_id() {
            if st.shutting_down {
                return Ok(());
            }
            // The registry is permanent and the servers depend on it: escalate.
            return Err(format!("the tool registry of scope {} exited: {why}", st.scope).into());
        }
        let Some(name) = st
            .servers
            .iter()
            .find(|(_, c)| c.actor.get_id() == cell.get_id())
            .map(|(n, _)| n.clone())
        else {
            return Ok(());
        };
        if st.shutting_down || !Restart::Transient.restarts_after(abnormal) {
            st.servers.remove(&name);
            return Ok(());
        }
        tracing::error!(scope = %st.scope, server = %name, "server supervisor failed: {why}");
        let respawned = match st.servers.get(&name) {
            Some(child) if st.intensity.allow(Instant::now()) => {
                let (config, activity) = (child.config.clone(), child.activity.clone());
                spawn_server(&myself, st, config, activity).await.ok()
            }
            _ => None,
        };
        match respawned {
            Some(actor) => {
                if let Some(child) = st.servers.get_mut(&name) {
                    child.actor = actor;
                }
            }
            None => {
                st.servers.remove(&name);
                let _ = st.registry.cast(RegistryMsg::Abandon {
                    server: name,
                    error: format!("the server's supervisor failed and was not restarted: {why}"),
                });
            }
        }
        Ok(())
    }
}
