//! The requests the runtime's facade makes of a server supervisor, as the
//! methods of [`ServerHandle`]: each builds its message and waits for the
//! answer within its own bound.

use std::time::Duration;

use crate::messages::server::{ServerHandle, ServerSupervisorMsg};
use crate::supervisors::spec::{AskError, ask};

/// How long an explicit restart may take to begin.
const RESTART_ANSWER: Duration = Duration::from_secs(5);

impl ServerHandle {
    /// Restart the server (RECO-4): the budget reset, a fresh connection.
    /// Answered once the restart began, or with why it was refused.
    pub(crate) async fn restart(&self) -> Result<Result<(), String>, AskError> {
        ask(
            &self.actor,
            |reply| ServerSupervisorMsg::Restart { reply },
            Some(RESTART_ANSWER),
        )
        .await
    }

    /// Wake an idle-stopped server (RECO-6): answered once it is ready, or
    /// with why not, within `limit`.
    pub(crate) async fn wake(&self, limit: Duration) -> Result<(), String> {
        match ask(
            &self.actor,
            |reply| ServerSupervisorMsg::Wake { reply },
            Some(limit),
        )
        .await
        {
            Ok(answer) => answer,
            Err(AskError::Timeout(_)) => Err("the server did not come back in time".into()),
            Err(AskError::Gone) => Err("the server's supervisor is gone".into()),
        }
    }

    /// Test-only (feature `chaos`): make the supervisor fail, as a bug in it
    /// would.
    #[cfg(feature = "chaos")]
    pub(crate) fn fail_for_chaos(&self) -> Result<(), AskError> {
        self.actor
            .cast(ServerSupervisorMsg::FailForChaos)
            .map_err(|_| AskError::Gone)
    }

    /// Test-only: the supervisor itself, to send it what its own timers
    /// would.
    #[cfg(test)]
    pub(crate) fn actor(&self) -> &ractor::ActorRef<ServerSupervisorMsg> {
        &self.actor
    }
}
