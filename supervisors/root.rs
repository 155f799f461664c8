//! `RootSupervisor`: the top of a runtime's tree. One-for-one over its scope
//! supervisors; it escalates nothing — a failed scope is reported (logged and
//! dropped), never allowed to take the runtime down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{broadcast, watch};

use super::scope::{ScopeArgs, ScopeMsg, ScopeSupervisor};
use super::server::SHUTDOWN_DEADLINE;
use super::spec::{Shutdown, stop_child};
use crate::actors::registry::ScopeSnapshot;
use crate::messages::capabilities::ClientHandlers;
use crate::messages::config::Scope;
use crate::messages::status::{RuntimeEvent, ShutdownReport};

/// What the runtime keeps of a scope: its supervisor and its snapshot.
#[derive(Debug, Clone)]
pub struct ScopeHandle {
    /// The scope supervisor.
    pub actor: ActorRef<ScopeMsg>,
    /// The registry's published catalog.
    pub snapshot: watch::Receiver<Arc<ScopeSnapshot>>,
}

/// Messages of the root supervisor.
pub enum RootMsg {
    /// Get (or create) a scope.
    Scope {
        /// The scope.
        scope: Scope,
        /// Its handle.
        reply: RpcReplyPort<Result<ScopeHandle, String>>,
    },
    /// Shut every scope down concurrently and report.
    Shutdown {
        /// The merged report.
        reply: RpcReplyPort<ShutdownReport>,
    },
}

/// Arguments.
#[derive(Debug)]
pub struct RootArgs {
    /// Runtime events.
    pub events: broadcast::Sender<RuntimeEvent>,
    /// See [`ScopeArgs::skip_close_barrier`].
    pub skip_close_barrier: bool,
    /// See [`ScopeArgs::handlers`].
    pub handlers: ClientHandlers,
}

/// The root supervisor.
#[derive(Debug, Default)]
pub struct RootSupervisor;

/// Its state.
#[derive(Debug)]
pub struct RootState {
    events: broadcast::Sender<RuntimeEvent>,
    scopes: BTreeMap<Scope, ScopeHandle>,
    skip_close_barrier: bool,
    handlers: ClientHandlers,
    shutting_down: bool,
}

impl Actor for RootSupervisor {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        args: RootArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RootState {
            events: args.events,
            scopes: BTreeMap::new(),
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
        let span = tracing::debug_span!("root_supervisor", scopes = st.scopes.len());
        async move {
            tracing::debug!("handling a message");
            match msg {
                RootMsg::Scope { scope, reply } => {
                    if st.shutting_down {
                        let _ = reply.send(Err("the runtime is shutting down".into()));
                        return Ok(());
                    }
                    if let Some(h) = st.scopes.get(&scope) {
                        let _ = reply.send(Ok(h.clone()));
                        return Ok(());
                    }
                    let (tx, rx) = watch::channel(Arc::new(ScopeSnapshot::default()));
                    let args = ScopeArgs {
                        scope: scope.clone(),
                        snapshot: tx,
                        events: st.events.clone(),
                        skip_close_barrier: st.skip_close_barrier,
                        handlers: st.handlers.clone(),
                    };
                    let result =
                        match Actor::spawn_linked(None, ScopeSupervisor, args, myself.get_cell())
                            .await
                        {
                            Ok((actor, _)) => {
                                let h = ScopeHandle {
                                    actor,
                                    snapshot: rx,
                                };
                                st.scopes.insert(scope, h.clone());
                                Ok(h)
                            }
                            Err(e) => Err(format!("could not start scope {scope}: {e}")),
                        };
                    let _ = reply.send(result);
                }
                RootMsg::Shutdown { reply } => {
                    st.shutting_down = true;
                    let waits = st.scopes.iter().map(|(scope, h)| {
                        let actor = h.actor.clone();
                        let scope = scope.clone();
                        async move {
                            let limit = SHUTDOWN_DEADLINE + Duration::from_secs(5);
                            match actor
                                .call(|r| ScopeMsg::Shutdown { reply: r }, Some(limit))
                                .await
                            {
                                Ok(ractor::rpc::CallResult::Success(report)) => report,
                                _ => ShutdownReport {
                                    unconfirmed: vec![format!("scope {scope} did not report")],
                                    ..Default::default()
                                },
                            }
                        }
                    });
                    let mut report = ShutdownReport::default();
                    for r in futures::future::join_all(waits).await {
                        report.absorb(r);
                    }
                    for (_, h) in std::mem::take(&mut st.scopes) {
                        stop_child(
                            &h.actor.get_cell(),
                            Shutdown::Timeout(Duration::from_secs(1)),
                        )
                        .await;
                    }
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
        if let SupervisionEvent::ActorFailed(cell, err) = evt {
            let failed: Vec<Scope> = st
                .scopes
                .iter()
                .filter(|(_, h)| h.actor.get_id() == cell.get_id())
                .map(|(s, _)| s.clone())
                .collect();
            for scope in failed {
                tracing::error!(%scope, "scope supervisor failed: {err}");
                st.scopes.remove(&scope);
            }
        }
        Ok(())
    }
}
