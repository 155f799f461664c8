//! `ScopeSupervisor(scope)`: one per caller-visible scope (CONN-4).
//!
//! Owns: the scope's children and the scope's part of the off switch
//! (TRUST-1: whether the runtime is off, and which servers were turned off
//! one by one). Supervisor: the `RootSupervisor`, which started it on first
//! use; restart type temporary (a failed scope is dropped and made again on
//! next use).
//!
//! Children, in start order ([`ChildSpec`] tiers): the scope's `ToolRegistry`
//! (tier 0, permanent: its exit escalates), then one `ServerSupervisor` per
//! server (tier 1, transient, intensity 3 restarts / 5 s *per server*).
//! Shutdown is the tree's one fan-out: the servers quiesce concurrently (no
//! server can block another's shutdown, CONN-1), then the registry; then all
//! are stopped in reverse start order.
//!
//! ```text
//! | State   | Event                       | Actions                                  | Next    |
//! |---------|-----------------------------|------------------------------------------|---------|
//! | running | AddServer (on, name free)   | spawn ServerSupervisor, barrier registry | running |
//! | running | AddServer (off / taken)     | refuse                                   | running |
//! | running | SetEnabled(on/off)          | switch every enabled server not kept off | running |
//! | running | SetServerEnabled            | keep off / release, switch that server   | running |
//! | running | server failed, within limit | respawn it (same config, same activity)  | running |
//! | running | server failed, past limit   | drop it, Abandon its tools               | running |
//! | running | registry exited             | escalate (fail)                          | —       |
//! | running | RemoveServer                | quiesce it, drop it, Forget its entry    | running |
//! | running | Shutdown                    | fan-out, reply, stop                     | stopped |
//! ```
//! Messages: [`ScopeMsg`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::server::{SHUTDOWN_DEADLINE, ServerSupervisor, ServerSupervisorArgs};
use super::spec::{
    AskError, Child, ChildSpec, Children, Intensity, Restart, Shutdown, ask, derive_seed, quiesce,
};
use crate::actors::registry::{RegistryArgs, ToolRegistry};
use crate::messages::capabilities::ClientHandlers;
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::naming::derive_slug;
use crate::messages::registry::{Activity, RegistryMsg, ScopeSnapshot};
use crate::messages::server::ServerSupervisorMsg;
use crate::messages::status::{RuntimeEvent, ShutdownReport};
use crate::messages::tree::{ScopeMsg, TreeError};
use crate::transport::open::OpenTransports;

/// Shutdown spec of the scope's children once they have quiesced.
const WORKER_STOP: Shutdown = Shutdown::Timeout(Duration::from_secs(1));
/// How long a server supervisor has to report its quiescent stop.
const SERVER_REPORT: Duration = Duration::from_secs(SHUTDOWN_DEADLINE.as_secs() + 2);
/// The registry's child id: not a valid server name, so never a server's.
const REGISTRY_ID: &str = "(tool registry)";
/// A server supervisor's restart intensity, per server.
const SERVER_INTENSITY: (u32, Duration) = (3, Duration::from_secs(5));

/// Arguments.
#[derive(Debug)]
pub struct ScopeArgs {
    /// The scope.
    pub scope: Scope,
    /// Snapshot publisher handed to the registry.
    pub snapshot: watch::Sender<Arc<ScopeSnapshot>>,
    /// Runtime events.
    pub events: broadcast::Sender<RuntimeEvent>,
    /// Test-only (feature `chaos`): see [`ServerSupervisorArgs::chaos`].
    pub chaos: crate::messages::config::ChaosSwitches,
    /// Opt-in client capabilities for every server of the scope (CONN-11).
    pub handlers: ClientHandlers,
    /// Whether the runtime is turned off (TRUST-1) when the scope starts.
    pub off: bool,
    /// Seed of the scope's random choices (slug suffixes, its servers' jitter).
    pub seed: u64,
}

/// What the scope keeps of a child.
#[derive(Debug)]
pub enum ScopeChild {
    /// The registry (tier 0).
    Registry,
    /// A server supervisor (tier 1).
    Server(ServerChild),
}

/// One server child.
#[derive(Debug)]
pub struct ServerChild {
    actor: ActorRef<ServerSupervisorMsg>,
    config: Arc<ServerConfig>,
    activity: Arc<Activity>,
    /// Outlives a failed supervisor, so its replacement waits (RECO-3).
    open: Arc<OpenTransports>,
}

/// The scope supervisor.
#[derive(Debug, Default)]
pub struct ScopeSupervisor;

/// Its state.
#[derive(Debug)]
pub struct ScopeState {
    scope: Scope,
    registry: ActorRef<RegistryMsg>,
    children: Children<ScopeChild>,
    chaos: crate::messages::config::ChaosSwitches,
    handlers: ClientHandlers,
    /// The runtime is off (TRUST-1): no server is added or turned on.
    off: bool,
    /// Servers turned off one by one; a global on leaves them off.
    kept_off: BTreeSet<String>,
    /// The scope's seed (each server's is derived from it and its name).
    seed: u64,
    /// Slug suffixes (SYNC-2).
    rng: StdRng,
    shutting_down: bool,
}

impl ScopeState {
    fn server(&self, name: &str) -> Option<&ServerChild> {
        match self.children.get(name).map(|c| &c.handle) {
            Some(ScopeChild::Server(s)) => Some(s),
            _ => None,
        }
    }

    fn servers(&self) -> impl Iterator<Item = (&str, &ServerChild)> {
        self.children.iter().filter_map(|c| match &c.handle {
            ScopeChild::Server(s) => Some((c.spec.id.as_str(), s)),
            ScopeChild::Registry => None,
        })
    }
}

fn server_spec(name: &str) -> ChildSpec {
    ChildSpec {
        id: name.to_owned(),
        restart: Restart::Transient,
        shutdown: WORKER_STOP,
        tier: 1,
    }
}

async fn spawn_server(
    myself: &ActorRef<ScopeMsg>,
    st: &ScopeState,
    config: Arc<ServerConfig>,
    activity: Arc<Activity>,
    open: Arc<OpenTransports>,
) -> Result<ActorRef<ServerSupervisorMsg>, ServerSpawnError> {
    let config_name = config.server_name.clone();
    let args = ServerSupervisorArgs {
        scope: st.scope.clone(),
        config,
        registry: st.registry.clone(),
        activity,
        chaos: st.chaos,
        handlers: st.handlers.clone(),
        seed: derive_seed(st.seed, &config_name),
        open,
    };
    Actor::spawn_linked(None, ServerSupervisor, args, myself.get_cell())
        .await
        .map(|(a, _)| a)
        .map_err(ServerSpawnError)
}

/// A server's supervisor did not start (ractor's reason).
#[derive(Debug, thiserror::Error)]
#[error("could not start the server supervisor: {0}")]
struct ServerSpawnError(ractor::SpawnErr);

/// `SetEnabled` to one server supervisor, within its shutdown deadline.
async fn switch(
    supervisor: &ActorRef<ServerSupervisorMsg>,
    enabled: bool,
) -> Result<ShutdownReport, AskError> {
    let limit = Some(SERVER_REPORT);
    ask(
        supervisor,
        |reply| ServerSupervisorMsg::SetEnabled { enabled, reply },
        limit,
    )
    .await
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
        let mut handlers = args.handlers;
        handlers.notifications = Some((args.scope.clone(), args.events.clone()));
        let reg_args = RegistryArgs {
            scope: args.scope.clone(),
            snapshot: args.snapshot,
            events: args.events,
        };
        let (registry, _) =
            Actor::spawn_linked(None, ToolRegistry, reg_args, myself.get_cell()).await?;
        let mut children = Children::default();
        children.push(Child {
            spec: ChildSpec {
                id: REGISTRY_ID.into(),
                restart: Restart::Permanent,
                shutdown: WORKER_STOP,
                tier: 0,
            },
            cell: registry.get_cell(),
            handle: ScopeChild::Registry,
            intensity: Intensity::default(),
        });
        Ok(ScopeState {
            scope: args.scope,
            registry,
            children,
            chaos: args.chaos,
            handlers,
            off: args.off,
            kept_off: BTreeSet::new(),
            seed: args.seed,
            rng: StdRng::seed_from_u64(args.seed),
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
                ScopeMsg::AddServer { config, reply } => {
                    let result = add_server(&myself, st, config).await;
                    let _ = reply.send(result);
                }
                ScopeMsg::SetEnabled { enabled, reply } => {
                    st.off = !enabled;
                    let targets: Vec<ActorRef<ServerSupervisorMsg>> = st
                        .servers()
                        .filter(|(name, s)| {
                            s.config.enabled && !(enabled && st.kept_off.contains(*name))
                        })
                        .map(|(_, s)| s.actor.clone())
                        .collect();
                    let waits = targets.iter().map(|s| switch(s, enabled));
                    let mut report = ShutdownReport::default();
                    for r in futures::future::join_all(waits).await {
                        match r {
                            Ok(r) => report.absorb(r),
                            Err(e) => report
                                .unconfirmed
                                .push(format!("scope {}: a server supervisor {e}", st.scope)),
                        }
                    }
                    let _ = reply.send(report);
                }
                ScopeMsg::SetServerEnabled {
                    server,
                    enabled,
                    reply,
                } => {
                    let result = if enabled && st.off {
                        Err(TreeError::Off { adding: false })
                    } else if let Some(actor) = st.server(&server).map(|s| s.actor.clone()) {
                        if enabled {
                            st.kept_off.remove(&server);
                        } else {
                            st.kept_off.insert(server.clone());
                        }
                        switch(&actor, enabled)
                            .await
                            .map_err(|why| TreeError::NoAnswer {
                                actor: "server supervisor",
                                why,
                            })
                    } else {
                        Err(TreeError::NoSuchServer {
                            scope: st.scope.clone(),
                        })
                    };
                    let _ = reply.send(result);
                }
                ScopeMsg::RemoveServer { server, reply } => {
                    let result = if st.server(&server).is_none() {
                        Err(TreeError::NoSuchServer {
                            scope: st.scope.clone(),
                        })
                    } else {
                        let prefix = format!("{}/", st.scope);
                        let report = st
                            .children
                            .remove_quiesced(&server, &prefix, quiesce_server)
                            .await
                            .unwrap_or_default();
                        st.kept_off.remove(&server);
                        let _ = st.registry.cast(RegistryMsg::Forget {
                            server: server.clone(),
                        });
                        Ok(report)
                    };
                    let _ = reply.send(result);
                }
                ScopeMsg::Shutdown { reply } => {
                    st.shutting_down = true;
                    let prefix = format!("{}/", st.scope);
                    let report = st.children.shutdown(&prefix, quiesce_server).await;
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
            // Starts need no action; process groups are a ractor feature
            // this tree does not use.
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {
                return Ok(());
            }
        };
        let Some(id) = st.children.id_of(cell.get_id()) else {
            return Ok(());
        };
        if id == REGISTRY_ID {
            if st.shutting_down {
                return Ok(());
            }
            // The registry is permanent and the servers depend on it: escalate.
            return Err(format!("the tool registry of scope {} exited: {why}", st.scope).into());
        }
        let Some(child) = st.children.get_mut(&id) else {
            return Ok(());
        };
        if st.shutting_down || !child.spec.restart.restarts_after(abnormal) {
            st.children.remove(&id);
            return Ok(());
        }
        tracing::error!(scope = %st.scope, server = %id, "server supervisor failed: {why}");
        let allowed = child.intensity.allow(Instant::now());
        let respawned = match (&child.handle, allowed) {
            (ScopeChild::Server(s), true) => {
                let (config, activity, open) =
                    (s.config.clone(), s.activity.clone(), s.open.clone());
                spawn_server(&myself, st, config, activity, open).await.ok()
            }
            _ => None,
        };
        match (respawned, st.children.get_mut(&id)) {
            (Some(actor), Some(child)) => {
                child.cell = actor.get_cell();
                if let ScopeChild::Server(s) = &mut child.handle {
                    s.actor = actor;
                }
            }
            _ => {
                st.children.remove(&id);
                let _ = st.registry.cast(RegistryMsg::Abandon {
                    server: id,
                    error: format!("the server's supervisor failed and was not restarted: {why}"),
                });
            }
        }
        Ok(())
    }
}

/// A server child's quiescent stop; the registry has none.
fn quiesce_server(child: &Child<ScopeChild>) -> Option<super::spec::Quiesce> {
    match &child.handle {
        ScopeChild::Server(s) => Some(quiesce(
            &s.actor,
            |reply| ServerSupervisorMsg::Shutdown { reply },
            SERVER_REPORT,
        )),
        ScopeChild::Registry => None,
    }
}

/// `AddServer`: derive the name, refuse what must be refused, start the
/// server's supervisor, and answer once `status()` shows it.
async fn add_server(
    myself: &ActorRef<ScopeMsg>,
    st: &mut ScopeState,
    mut config: Box<ServerConfig>,
) -> Result<String, TreeError> {
    if config.server_name.is_empty()
        && let Some(display) = &config.display_name
    {
        // SYNC-2: derived on every add, against this scope's names.
        config.server_name = derive_slug(
            display,
            |s| st.children.get(s).is_some(),
            || format!("{:08x}", st.rng.random::<u32>()),
        );
    }
    let name = config.server_name.clone();
    if st.shutting_down {
        return Err(TreeError::ShuttingDown);
    }
    if st.off {
        return Err(TreeError::Off { adding: true });
    }
    if st.children.get(&name).is_some() {
        return Err(TreeError::NameTaken {
            name,
            scope: st.scope.clone(),
        });
    }
    config.validate()?;
    let config = Arc::new(*config);
    let activity = Arc::new(Activity::new());
    let open = Arc::new(OpenTransports::default());
    let actor = spawn_server(myself, st, config.clone(), activity.clone(), open.clone())
        .await
        .map_err(|e| TreeError::Start {
            what: "the server supervisor".into(),
            reason: e.to_string(),
        })?;
    // The new supervisor registered itself from pre_start; make that visible
    // before answering, so status() shows the server.
    let _ = ask(
        &st.registry,
        |reply| RegistryMsg::Barrier { reply },
        Some(Duration::from_secs(5)),
    )
    .await;
    let (max_restarts, period) = SERVER_INTENSITY;
    st.children.push(Child {
        spec: server_spec(&name),
        cell: actor.get_cell(),
        handle: ScopeChild::Server(ServerChild {
            actor,
            config,
            activity,
            open,
        }),
        intensity: Intensity::new(max_restarts, period),
    });
    Ok(name)
}
