//! `RootSupervisor`: the top of a runtime's one tree.
//!
//! Owns: the tree's services and the scopes. Supervisor: none — the
//! `Runtime` handle spawns it and stops it (on drop, ractor kills the whole
//! tree below it; every process group is SIGKILLed by its owner's drop).
//! It escalates nothing: a failed scope is logged and dropped (made again on
//! next use), never allowed to take the runtime down.
//!
//! Children, in start order ([`ChildSpec`] tiers):
//! 1. tier 0: the `EventLog` (when configured), so the shutdown's own events
//!    are in the file: it is stopped last;
//! 2. tier 1: the `HooksSupervisor`, parent of every hook run;
//! 3. tier 2: one `ScopeSupervisor` per scope, started on first use;
//! 4. tier 3: the two provider seats (`browser_use`, `computer_use`): a
//!    shutdown releases them first, while the scopes their tools are
//!    mounted in still run.
//!
//! ```text
//! | State    | Event            | Actions                                       | Next    |
//! |----------|------------------|-----------------------------------------------|---------|
//! | running  | Scope(s)         | the scope's handle; start it if new (off/on)  | running |
//! | running  | SetEnabled(b)    | remember b; switch every scope (TRUST-1);     | running |
//! |          |                  | off: the seats close their resources          |         |
//! | running  | HooksSupervisor  | its ref (for the hook engine)                 | running |
//! | running  | Seats            | the seats' refs (for the runtime)             | running |
//! | running  | scope failed     | log, drop it                                  | running |
//! | running  | Shutdown         | fan-out by tier: seats, scopes, hooks, log    | stopped |
//! | stopped  | Scope(s)         | refused: shutting down                        | stopped |
//! ```
//! Messages: [`RootMsg`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{broadcast, watch};
use tracing::Instrument;

use super::hooks::HooksSupervisor;
use super::scope::{ScopeArgs, ScopeSupervisor};
use super::seat::{DISPOSE_DEADLINE, Seat};
use super::server::SHUTDOWN_DEADLINE;
use super::spec::{
    AskError, Child, ChildSpec, Children, Intensity, Restart, Shutdown, ask, derive_seed, quiesce,
};
use crate::actors::event_log::{EventLog, EventLogArgs};
use crate::messages::capabilities::ClientHandlers;
use crate::messages::config::Scope;
use crate::messages::registry::ScopeSnapshot;
use crate::messages::seat::{SeatKind, SeatMsg};
use crate::messages::status::{RuntimeEvent, ShutdownReport};
use crate::messages::tree::{EventLogMsg, HooksMsg, RootMsg, ScopeHandle, ScopeMsg, TreeError};

/// How long a scope has to report its quiescent stop.
const SCOPE_REPORT: Duration = Duration::from_secs(SHUTDOWN_DEADLINE.as_secs() + 5);
/// How long the hooks supervisor has to stop its runs (they are killed at once).
const HOOKS_DRAIN: Duration = Duration::from_secs(5);
/// How long the mod host has to finish its chain and drop its engines.
#[cfg(feature = "mods")]
const MODS_DRAIN: Duration = Duration::from_secs(10);
/// How long the event log has to drain and flush.
const LOG_FLUSH: Duration = Duration::from_secs(5);
/// How long a seat has to release its provider (every activation's
/// resources close concurrently).
const SEAT_RELEASE: Duration = Duration::from_secs(DISPOSE_DEADLINE.as_secs() + 20);
/// Stop spec of the root's children once they have quiesced.
const CHILD_STOP: Shutdown = Shutdown::Timeout(Duration::from_secs(1));

impl ScopeHandle {
    /// Whether the scope's supervisor still runs (a failed scope is made
    /// again by the root on next use).
    pub fn is_alive(&self) -> bool {
        matches!(
            self.actor.get_status(),
            ractor::ActorStatus::Running | ractor::ActorStatus::Starting
        )
    }

    /// Add and start a server (CONN-4); its server_name, or why not.
    pub async fn add_server(
        &self,
        config: Box<crate::messages::config::ServerConfig>,
    ) -> Result<Result<String, TreeError>, AskError> {
        ask(
            &self.actor,
            |reply| ScopeMsg::AddServer { config, reply },
            None,
        )
        .await
    }

    /// Stop a server and take it out of the scope (hot reload).
    pub async fn remove_server(
        &self,
        server: &str,
    ) -> Result<Result<ShutdownReport, TreeError>, AskError> {
        let server = server.to_owned();
        ask(
            &self.actor,
            |reply| ScopeMsg::RemoveServer { server, reply },
            Some(SCOPE_REPORT),
        )
        .await
    }

    /// Turn one server off, or on again (TRUST-1).
    pub async fn set_server_enabled(
        &self,
        server: &str,
        enabled: bool,
    ) -> Result<Result<ShutdownReport, TreeError>, AskError> {
        let server = server.to_owned();
        ask(
            &self.actor,
            |reply| ScopeMsg::SetServerEnabled {
                server,
                enabled,
                reply,
            },
            Some(SCOPE_REPORT),
        )
        .await
    }
}

/// The root's handle, for the `Runtime`.
#[derive(Debug, Clone)]
pub struct RootHandle {
    actor: ActorRef<RootMsg>,
}

impl RootHandle {
    /// The scope's handle, starting the scope on first use.
    pub async fn scope(&self, scope: &Scope) -> Result<Result<ScopeHandle, TreeError>, AskError> {
        let scope = scope.clone();
        ask(&self.actor, |reply| RootMsg::Scope { scope, reply }, None).await
    }

    /// The hooks supervisor (for the hook engine).
    pub async fn hooks_supervisor(&self) -> Result<super::hooks::HooksHandle, AskError> {
        ask(
            &self.actor,
            |reply| RootMsg::HooksSupervisor { reply },
            Some(Duration::from_secs(5)),
        )
        .await
        .map(super::hooks::HooksHandle::new)
    }

    /// The provider seats.
    pub async fn seats(&self) -> Result<Vec<super::seat::SeatHandle>, AskError> {
        let seats = ask(
            &self.actor,
            |reply| RootMsg::Seats { reply },
            Some(Duration::from_secs(5)),
        )
        .await?;
        Ok(seats
            .into_iter()
            .map(|(kind, actor)| super::seat::SeatHandle::new(kind, actor))
            .collect())
    }

    /// The global switch (TRUST-1): every scope, the merged report.
    pub async fn set_enabled(&self, enabled: bool) -> Result<ShutdownReport, AskError> {
        ask(
            &self.actor,
            |reply| RootMsg::SetEnabled { enabled, reply },
            Some(SCOPE_REPORT),
        )
        .await
    }

    /// Shut the tree down (RECO-7), within `deadline`.
    pub async fn shutdown(&self, deadline: Duration) -> Result<ShutdownReport, AskError> {
        ask(
            &self.actor,
            |reply| RootMsg::Shutdown { reply },
            Some(deadline),
        )
        .await
    }

    /// Stop the root (and so the tree) without a quiescent shutdown.
    pub fn stop(&self) {
        self.actor.stop(None);
    }

    /// Kill the root (and so the tree).
    pub fn kill(&self) {
        self.actor.kill();
    }
}

/// Arguments.
#[derive(Debug)]
pub struct RootArgs {
    /// Runtime events.
    pub events: broadcast::Sender<RuntimeEvent>,
    /// See [`ScopeArgs::chaos`].
    pub chaos: crate::messages::config::ChaosSwitches,
    /// See [`ScopeArgs::handlers`].
    pub handlers: ClientHandlers,
    /// The event log's file (OBS-2), when there is one.
    pub event_log: Option<PathBuf>,
    /// The runtime's seed (every random choice of the tree derives from it).
    pub seed: u64,
    /// The JS mods' host, when mods are enabled (owned by a child, tier 1).
    #[cfg(feature = "mods")]
    pub mods: Option<Arc<crate::mods::ModHost>>,
}

/// What the root keeps of a child.
#[derive(Debug)]
pub enum RootChild {
    /// The event log (tier 0).
    EventLog(ActorRef<EventLogMsg>),
    /// The hooks supervisor (tier 1).
    Hooks(ActorRef<HooksMsg>),
    /// A scope (tier 2).
    Scope(ScopeHandle),
    /// A provider seat (tier 3).
    Seat(SeatKind, ActorRef<SeatMsg>),
    /// The JS mods' host (tier 1).
    #[cfg(feature = "mods")]
    Mods(ActorRef<crate::messages::mods::ModsMsg>),
}

/// The root supervisor.
#[derive(Debug, Default)]
pub struct RootSupervisor;

/// Its state.
#[derive(Debug)]
pub struct RootState {
    events: broadcast::Sender<RuntimeEvent>,
    children: Children<RootChild>,
    hooks: ActorRef<HooksMsg>,
    chaos: crate::messages::config::ChaosSwitches,
    handlers: ClientHandlers,
    /// The runtime is turned off (TRUST-1).
    off: bool,
    shutting_down: bool,
    seed: u64,
}

fn spec(id: &str, restart: Restart, tier: u8) -> ChildSpec {
    ChildSpec {
        id: id.to_owned(),
        restart,
        shutdown: CHILD_STOP,
        tier,
    }
}

fn scope_id(scope: &Scope) -> String {
    format!("scope {scope}")
}

impl RootSupervisor {
    /// Spawn the root and its services (the event log, the hooks supervisor).
    /// Also returns the root's task, which ends when the tree has stopped.
    pub async fn start(
        args: RootArgs,
    ) -> Result<(RootHandle, tokio::task::JoinHandle<()>), ractor::SpawnErr> {
        let (actor, task) = Actor::spawn(None, RootSupervisor, args).await?;
        Ok((RootHandle { actor }, task))
    }
}

impl Actor for RootSupervisor {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: RootArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut children = Children::default();
        if let Some(path) = args.event_log {
            let log_args = EventLogArgs {
                path,
                events: args.events.subscribe(),
            };
            let (log, _) = Actor::spawn_linked(None, EventLog, log_args, myself.get_cell())
                .await
                .map_err(|e| format!("cannot start the event log: {e}"))?;
            children.push(Child {
                spec: spec("event log", Restart::Temporary, 0),
                cell: log.get_cell(),
                handle: RootChild::EventLog(log),
                intensity: Intensity::default(),
            });
        }
        let (hooks, _) = Actor::spawn_linked(None, HooksSupervisor, (), myself.get_cell())
            .await
            .map_err(|e| format!("could not start the hooks supervisor: {e}"))?;
        children.push(Child {
            spec: spec("hooks", Restart::Temporary, 1),
            cell: hooks.get_cell(),
            handle: RootChild::Hooks(hooks.clone()),
            intensity: Intensity::default(),
        });
        #[cfg(feature = "mods")]
        if let Some(host) = args.mods.clone() {
            let (mods, _) = Actor::spawn_linked(
                None,
                crate::actors::mod_host::ModHostActor,
                host,
                myself.get_cell(),
            )
            .await
            .map_err(|e| format!("could not start the mod host: {e}"))?;
            children.push(Child {
                spec: spec("mods", Restart::Temporary, 1),
                cell: mods.get_cell(),
                handle: RootChild::Mods(mods),
                intensity: Intensity::default(),
            });
        }
        for kind in SeatKind::ALL {
            let (seat, _) = Actor::spawn_linked(None, Seat, kind, myself.get_cell())
                .await
                .map_err(|e| format!("could not start the {kind} seat: {e}"))?;
            children.push(Child {
                spec: spec(&format!("seat {kind}"), Restart::Temporary, 3),
                cell: seat.get_cell(),
                handle: RootChild::Seat(kind, seat),
                intensity: Intensity::default(),
            });
        }
        Ok(RootState {
            events: args.events,
            children,
            hooks,
            chaos: args.chaos,
            handlers: args.handlers,
            off: false,
            shutting_down: false,
            seed: args.seed,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("root_supervisor", children = st.children.iter().count());
        async move {
            tracing::debug!("handling a message");
            match msg {
                RootMsg::Scope { scope, reply } => {
                    let result = scope_handle(&myself, st, scope).await;
                    let _ = reply.send(result);
                }
                RootMsg::HooksSupervisor { reply } => {
                    let _ = reply.send(st.hooks.clone());
                }
                RootMsg::Seats { reply } => {
                    let seats = st.children.iter().filter_map(|c| match &c.handle {
                        RootChild::Seat(k, s) => Some((*k, s.clone())),
                        _ => None,
                    });
                    let _ = reply.send(seats.collect());
                }
                RootMsg::SetEnabled { enabled, reply } => {
                    st.off = !enabled;
                    let waits = st.children.iter().filter_map(|c| match &c.handle {
                        RootChild::Scope(h) => Some((c.spec.id.clone(), h.actor.clone())),
                        _ => None,
                    });
                    let waits = waits.map(|(id, actor)| async move {
                        let asked = ask(
                            &actor,
                            |reply| ScopeMsg::SetEnabled { enabled, reply },
                            Some(SCOPE_REPORT),
                        )
                        .await;
                        asked.map_err(|e| format!("{id}: the scope supervisor {e}"))
                    });
                    let mut report = ShutdownReport::default();
                    for r in futures::future::join_all(waits).await {
                        match r {
                            Ok(r) => report.absorb(r),
                            Err(e) => report.unconfirmed.push(e),
                        }
                    }
                    // Off: no process runs, the providers' browsers included.
                    if !enabled {
                        let seats = st.children.iter().filter_map(|c| match &c.handle {
                            RootChild::Seat(k, s) => Some((*k, s.clone())),
                            _ => None,
                        });
                        let closes = seats.map(|(kind, seat)| async move {
                            ask(
                                &seat,
                                |reply| SeatMsg::CloseResources { reply },
                                Some(SEAT_RELEASE),
                            )
                            .await
                            .map_err(|e| format!("seat {kind}: {e}"))
                        });
                        for r in futures::future::join_all(closes).await {
                            match r {
                                Ok(r) => report.absorb(r),
                                Err(e) => report.unconfirmed.push(e),
                            }
                        }
                    }
                    let _ = reply.send(report);
                }
                RootMsg::Shutdown { reply } => {
                    st.shutting_down = true;
                    let report = st
                        .children
                        .shutdown("", |child| match &child.handle {
                            RootChild::Scope(h) => Some(quiesce(
                                &h.actor,
                                |reply| ScopeMsg::Shutdown { reply },
                                SCOPE_REPORT,
                            )),
                            RootChild::Seat(_, seat) => Some(quiesce(
                                seat,
                                |reply| SeatMsg::Shutdown { reply },
                                SEAT_RELEASE,
                            )),
                            RootChild::Hooks(hooks) => {
                                let hooks = hooks.clone();
                                Some(Box::pin(async move {
                                    let drained = ask(
                                        &hooks,
                                        |reply| HooksMsg::Drain {
                                            limit: HOOKS_DRAIN,
                                            reply,
                                        },
                                        Some(HOOKS_DRAIN + Duration::from_secs(1)),
                                    )
                                    .await;
                                    // Gone: it had nothing left to stop.
                                    match drained {
                                        Ok(()) | Err(AskError::Gone) => {
                                            Some(ShutdownReport::default())
                                        }
                                        Err(AskError::Timeout(_)) => None,
                                    }
                                }))
                            }
                            #[cfg(feature = "mods")]
                            RootChild::Mods(mods) => Some(quiesce(
                                mods,
                                |reply| crate::messages::mods::ModsMsg::Drain { reply },
                                MODS_DRAIN,
                            )),
                            RootChild::EventLog(log) => {
                                let log = log.clone();
                                Some(Box::pin(async move {
                                    let flushed = ask(
                                        &log,
                                        |reply| EventLogMsg::Stop { reply },
                                        Some(LOG_FLUSH),
                                    )
                                    .await;
                                    flushed.ok().map(|()| ShutdownReport::default())
                                }))
                            }
                        })
                        .await;
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
        _: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            // Starts need no action; process groups are a ractor feature
            // this tree does not use.
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {
                return Ok(());
            }
        };
        // Temporary children: a scope is made again on next use; the
        // services end only with the tree.
        if let Some(id) = st.children.id_of(cell.get_id())
            && !st.shutting_down
        {
            tracing::error!(child = %id, "a child of the root exited: {why}");
            st.children.remove(&id);
        }
        Ok(())
    }
}

/// `Scope`: the existing scope's handle, or a new scope started in the
/// runtime's current on/off state.
async fn scope_handle(
    myself: &ActorRef<RootMsg>,
    st: &mut RootState,
    scope: Scope,
) -> Result<ScopeHandle, TreeError> {
    if st.shutting_down {
        return Err(TreeError::ShuttingDown);
    }
    let id = scope_id(&scope);
    if let Some(RootChild::Scope(h)) = st.children.get(&id).map(|c| &c.handle) {
        return Ok(h.clone());
    }
    let (tx, rx) = watch::channel(Arc::new(ScopeSnapshot::default()));
    let args = ScopeArgs {
        scope: scope.clone(),
        snapshot: tx,
        events: st.events.clone(),
        chaos: st.chaos,
        handlers: st.handlers.clone(),
        off: st.off,
        seed: derive_seed(st.seed, &id),
    };
    let (actor, _) = Actor::spawn_linked(None, ScopeSupervisor, args, myself.get_cell())
        .await
        .map_err(|e| TreeError::Start {
            what: format!("scope {scope}"),
            reason: e.to_string(),
        })?;
    let handle = ScopeHandle {
        actor,
        snapshot: rx,
    };
    st.children.push(Child {
        spec: spec(&id, Restart::Temporary, 2),
        cell: handle.actor.get_cell(),
        handle: RootChild::Scope(handle.clone()),
        intensity: Intensity::default(),
    });
    Ok(handle)
}
