//! OTP vocabulary for supervision written on top of ractor (G6 of the style guide).
//!
//! ractor links actors and reports `SupervisionEvent`s but leaves strategy,
//! intensity and shutdown order to the implementor. The pieces here are the
//! pure parts of that: restart types, shutdown specs and the intensity window.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// When a child is restarted (OTP `restart()`).
#[allow(dead_code)] // the full OTP vocabulary; the tree uses Transient today
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Always restarted.
    Permanent,
    /// Restarted only after an abnormal exit.
    Transient,
    /// Never restarted.
    Temporary,
}

impl Restart {
    /// Whether a child with this restart type is restarted after an exit.
    pub fn restarts_after(self, abnormal: bool) -> bool {
        match self {
            Restart::Permanent => true,
            Restart::Transient => abnormal,
            Restart::Temporary => false,
        }
    }
}

#[allow(dead_code)] // the full OTP vocabulary; the tree uses Timeout today
/// How a child is stopped (OTP `shutdown()`): `Timeout(t)` = `stop_and_wait`
/// for `t`, then kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Killed at once.
    BrutalKill,
    /// Asked to stop, killed after the timeout.
    Timeout(Duration),
    /// Waited for without limit (supervisors, whose children have their own deadlines).
    Infinity,
}

/// OTP's default worker shutdown: "5000" ms.
#[allow(dead_code)] // used by the tests and the child-spec core
pub const DEFAULT_WORKER_SHUTDOWN: Shutdown = Shutdown::Timeout(Duration::from_millis(5000));

/// Stop one child as its shutdown spec says: `BrutalKill` kills at once;
/// `Timeout(t)` asks it to stop and kills it if it has not stopped after `t`;
/// `Infinity` waits for the stop. Returns false when the child had to be killed.
pub async fn stop_child(child: &ractor::ActorCell, shutdown: Shutdown) -> bool {
    match shutdown {
        Shutdown::BrutalKill => {
            child.kill();
            false
        }
        Shutdown::Timeout(t) => match child.stop_and_wait(Some("shutdown".into()), Some(t)).await {
            Ok(()) => true,
            Err(_) => {
                let _ = child.kill_and_wait(Some(t)).await;
                false
            }
        },
        Shutdown::Infinity => child
            .stop_and_wait(Some("shutdown".into()), None)
            .await
            .is_ok(),
    }
}

/// Restart intensity: more than `max_restarts` restarts within `period` and the
/// supervisor gives up on the child (OTP `intensity`/`period`; defaults 1 / 5 s:
/// "a supervisor that restarts a child more often than that is hiding a bug").
#[derive(Debug, Clone)]
pub struct Intensity {
    /// Restarts allowed within the period.
    pub max_restarts: u32,
    /// The sliding window.
    pub period: Duration,
    log: VecDeque<Instant>,
}

impl Default for Intensity {
    fn default() -> Self {
        Self::new(1, Duration::from_secs(5))
    }
}

impl Intensity {
    /// A new window.
    pub fn new(max_restarts: u32, period: Duration) -> Self {
        Self {
            max_restarts,
            period,
            log: VecDeque::new(),
        }
    }

    /// Record a restart at `now`; false when that exceeds the intensity.
    pub fn allow(&mut self, now: Instant) -> bool {
        while self
            .log
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.period)
        {
            self.log.pop_front();
        }
        self.log.push_back(now);
        self.log.len() <= self.max_restarts as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn intensity_allows_max_restarts_per_period_then_refuses() {
        let mut i = Intensity::new(2, Duration::from_secs(5));
        let t0 = Instant::now();
        assert!(i.allow(t0));
        assert!(i.allow(t0 + Duration::from_secs(1)));
        assert!(!i.allow(t0 + Duration::from_secs(2)));
        // after the window slides past the first entries, restarts are allowed again
        assert!(i.allow(t0 + Duration::from_secs(9)));
    }

    #[tokio::test]
    async fn a_child_that_ignores_stop_is_killed_after_its_shutdown_timeout() {
        use ractor::{Actor, ActorProcessingErr, ActorRef};
        struct Stuck;
        impl Actor for Stuck {
            type Msg = ();
            type State = ();
            type Arguments = ();
            async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
                Ok(())
            }
            async fn handle(
                &self,
                _: ActorRef<()>,
                _: (),
                _: &mut (),
            ) -> Result<(), ActorProcessingErr> {
                std::future::pending::<()>().await; // a handler that never returns
                Ok(())
            }
        }
        let (stuck, handle) = Actor::spawn(None, Stuck, ()).await.unwrap();
        stuck.cast(()).unwrap();
        tokio::task::yield_now().await;
        let graceful = stop_child(
            &stuck.get_cell(),
            Shutdown::Timeout(Duration::from_millis(50)),
        )
        .await;
        assert!(
            !graceful,
            "stop cannot interrupt a running handler: it was killed"
        );
        handle.await.unwrap();
        let (ok, handle) = Actor::spawn(None, Stuck, ()).await.unwrap();
        assert!(stop_child(&ok.get_cell(), DEFAULT_WORKER_SHUTDOWN).await);
        handle.await.unwrap();
    }

    #[test]
    fn restart_types_follow_otp() {
        assert!(Restart::Permanent.restarts_after(false));
        assert!(Restart::Transient.restarts_after(true));
        assert!(!Restart::Transient.restarts_after(false));
        assert!(!Restart::Temporary.restarts_after(true));
    }
}
