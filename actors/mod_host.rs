//! `ModHostActor`: the JS mods' host under the supervision tree (MOD-1).
//!
//! Owns: the mod host (`crate::mods::ModHost`: the QuickJS engines on their
//! dedicated thread). Supervisor: the root (tier 1, beside the hooks
//! supervisor), so a shutdown drains it after the scopes and seats have
//! stopped: the in-flight chain finishes, then the engines are dropped.
//! Chains themselves do not pass through this mailbox: the runtime and the
//! call pipeline hold the host and run chains from their own tasks (as
//! calls bypass actors, ADR 0002); this actor owns the host's lifecycle.
//!
//! ```text
//! | State   | Event | Actions                                            | Next    |
//! |---------|-------|----------------------------------------------------|---------|
//! | running | Drain | stop the host (blocking thread): the in-flight     | stopped |
//! |         |       | chain ends, the engines go; reply; stop            |         |
//! | any     | stop  | (killed with the tree) the last handle's drop stops |         |
//! |         |       | the host                                           |         |
//! ```
//! Messages: [`ModsMsg`].

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::messages::mods::ModsMsg;
use crate::messages::status::ShutdownReport;
use crate::mods::ModHost;

/// The actor.
#[derive(Debug, Default)]
pub struct ModHostActor;

impl Actor for ModHostActor {
    type Msg = ModsMsg;
    type State = Arc<ModHost>;
    type Arguments = Arc<ModHost>;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        host: Arc<ModHost>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(host)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        host: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ModsMsg::Drain { reply } => {
                let h = host.clone();
                let stopped = tokio::task::spawn_blocking(move || h.stop()).await;
                let report = match stopped {
                    Ok(()) => ShutdownReport::default(),
                    Err(e) => ShutdownReport {
                        unconfirmed: vec![format!("the mod host did not stop: {e}")],
                        ..Default::default()
                    },
                };
                let _ = reply.send(report);
                myself.stop(Some("drained".into()));
            }
        }
        Ok(())
    }
}
