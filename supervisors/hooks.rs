//! `HooksSupervisor`: the parent of every `HookRun` actor (HOOK-8).
//!
//! Owns nothing but its children: temporary `HookRun`s, one per running hook,
//! each owning its process group; never restarted. Started by the hook
//! engine (`runtime::hooks::HookEngine`). States: running, then draining on
//! `Drain` (every run is stopped, its group killed and reaped), then stopped.
//! Messages: [`HooksMsg`].

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::actors::hook_run::{HookRun, HookRunArgs};
use crate::messages::tree::HooksMsg;

// ===== The supervisor of hook runs =====

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
