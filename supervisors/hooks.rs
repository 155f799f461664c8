//! `HooksSupervisor`: the parent of every `HookRun` actor (HOOK-8).
//!
//! Owns nothing but its children: temporary `HookRun`s, one per running hook,
//! each owning its process group; never restarted. The supervisor starts
//! each run itself when the hook engine (`runtime::hooks::HookEngine`) asks
//! through its [`HooksHandle`]. States: running, then draining on `Drain`
//! (every run is stopped, its group killed and reaped), then stopped.
//! Messages: [`HooksMsg`].

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::actors::hook_run::{HookRun, HookRunArgs};
use crate::messages::hooks::codec::RawRun;
use crate::messages::hooks::run::HookCommand;
use crate::messages::tree::HooksMsg;

// ===== The supervisor of hook runs =====

/// The hook engine's side of the hooks supervisor: a run asked for, the
/// runs drained, the supervisor stopped.
#[derive(Debug, Clone)]
pub struct HooksHandle {
    actor: ActorRef<HooksMsg>,
}

impl HooksHandle {
    pub(crate) fn new(actor: ActorRef<HooksMsg>) -> Self {
        Self { actor }
    }

    /// Ask for one run of `command`; its result comes on `reply` (dropped
    /// unanswered when the run is stopped). An error when the supervisor is
    /// gone.
    pub(crate) fn run(
        &self,
        command: HookCommand,
        cancel: CancellationToken,
        disposed: CancellationToken,
        reply: oneshot::Sender<RawRun>,
    ) -> Result<(), HooksGone> {
        self.actor
            .cast(HooksMsg::Run {
                command,
                cancel,
                disposed,
                reply,
            })
            .map_err(|e| HooksGone(Box::new(e)))
    }

    /// Stop every running hook and wait for their reaps, up to `limit`.
    pub(crate) async fn drain(&self, limit: Duration) {
        let _ = ractor::call!(self.actor, |reply| HooksMsg::Drain { limit, reply });
    }

    /// Stop the supervisor (and with it every run).
    pub(crate) fn stop(&self) {
        self.actor.stop(None);
    }
}

/// The hooks supervisor did not take a run: it is gone (ractor's reason;
/// the unsent run is dropped with it).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct HooksGone(Box<ractor::MessagingErr<HooksMsg>>);

/// Parent of every [`HookRun`]: temporary children, never restarted.
#[derive(Debug, Default)]
pub struct HooksSupervisor;

impl Actor for HooksSupervisor {
    type Msg = HooksMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HooksMsg::Run {
                command,
                cancel,
                disposed,
                reply,
            } => {
                let args = HookRunArgs {
                    command,
                    cancel,
                    disposed,
                    reply,
                };
                // A run that cannot start drops its reply: the engine reads
                // that as a run that did not happen.
                if let Err(e) = Actor::spawn_linked(None, HookRun, args, myself.get_cell()).await {
                    tracing::warn!(error = %e, "a hook run could not start");
                }
            }
            HooksMsg::Drain { limit, reply } => {
                myself
                    .stop_children_and_wait(Some("hook bridge disposed".into()), Some(limit))
                    .await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        // Temporary children: a failed run is reported by its caller (the
        // reply is dropped, which reads as a cancelled run); never restarted.
        if let SupervisionEvent::ActorFailed(cell, e) = evt {
            tracing::warn!(actor = %cell.get_id(), error = %e, "hook run failed");
        }
        Ok(())
    }
}
