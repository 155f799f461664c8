//! OTP vocabulary for supervision written on top of ractor (G6 of the style guide).
//!
//! ractor links actors and reports `SupervisionEvent`s but leaves strategy,
//! intensity and shutdown order to the implementor. The pieces here are that
//! part: restart types, shutdown specs, the intensity window, child specs,
//! and the one shutdown fan-out every supervisor of the tree uses
//! ([`Children::shutdown`]).

use std::collections::VecDeque;
use std::time::Duration;

use futures::future::BoxFuture;
use ractor::rpc::CallResult;
use ractor::{ActorCell, ActorId, ActorRef, Message, RpcReplyPort};
use tokio::time::Instant;

use crate::messages::status::ShutdownReport;
pub use crate::messages::tree::AskError;

/// When a child is restarted (OTP `restart()`).
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

/// How a child is stopped (OTP `shutdown()`): `Timeout(t)` = `stop_and_wait`
/// for `t`, then kill. The tree's children always quiesce first (their own
/// deadlines), so a bounded stop is the only kind it needs; OTP's
/// `brutal_kill` and `infinity` are not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Asked to stop, killed after the timeout.
    Timeout(Duration),
}

/// Stop one child as its shutdown spec says: `Timeout(t)` asks it to stop
/// and kills it if it has not stopped after `t`. Returns false when the
/// child had to be killed.
pub async fn stop_child(child: &ractor::ActorCell, shutdown: Shutdown) -> bool {
    match shutdown {
        Shutdown::Timeout(t) => match child.stop_and_wait(Some("shutdown".into()), Some(t)).await {
            Ok(()) => true,
            Err(_) => {
                let _ = child.kill_and_wait(Some(t)).await;
                false
            }
        },
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

/// A child's seed, derived from its parent's and its name: one runtime
/// seed makes every random choice of the tree reproducible (jitter, slug
/// suffixes), and siblings draw different numbers.
pub fn derive_seed(seed: u64, label: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // DefaultHasher::new() has fixed keys: the same inputs, the same seed.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    seed.hash(&mut h);
    label.hash(&mut h);
    h.finish()
}

/// A request to an actor (OTP `call`), with a deadline (`None`: without
/// one), as a typed result: every handle of the tree asks through this, so
/// `CallResult` is matched in one place.
pub async fn ask<M: Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    request: impl FnOnce(RpcReplyPort<T>) -> M,
    limit: Option<Duration>,
) -> Result<T, AskError> {
    match actor.call(request, limit).await {
        Ok(CallResult::Success(answer)) => Ok(answer),
        Ok(CallResult::Timeout) => Err(AskError::Timeout(limit.unwrap_or_default())),
        Ok(CallResult::SenderError) | Err(_) => Err(AskError::Gone),
    }
}

/// The quiescing request for a child whose message enum has a
/// report-carrying shutdown variant: its report, `None` without one in time.
pub fn quiesce<M: Message>(
    actor: &ActorRef<M>,
    request: fn(RpcReplyPort<ShutdownReport>) -> M,
    limit: Duration,
) -> Quiesce {
    let actor = actor.clone();
    Box::pin(async move { ask(&actor, request, Some(limit)).await.ok() })
}

/// A child's place in its supervisor (OTP `child_spec()`): how it is named
/// in reports, when it is restarted, how it is stopped, and its tier in the
/// start order.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Its name among its siblings (a server name, a scope, `hooks`).
    pub id: String,
    /// When it is restarted.
    pub restart: Restart,
    /// How it is stopped once it has quiesced (or did not in time).
    pub shutdown: Shutdown,
    /// Its start tier: lower tiers start first and stop last. Children of one
    /// tier quiesce concurrently, so no child blocks another's shutdown
    /// (CONN-1).
    pub tier: u8,
}

/// One running child: its spec, its cell, the supervisor's handle on it, and
/// its own restart window (intensity is per child, so one failing child
/// never uses up another's restarts).
#[derive(Debug)]
pub struct Child<H> {
    /// Its spec.
    pub spec: ChildSpec,
    /// The actor.
    pub cell: ActorCell,
    /// What the supervisor keeps of it (an actor ref, a config).
    pub handle: H,
    /// Its restart window.
    pub intensity: Intensity,
}

/// The quiescing request of one child in a shutdown fan-out: its report, or
/// `None` when it did not report within its deadline.
pub type Quiesce = BoxFuture<'static, Option<ShutdownReport>>;

/// A supervisor's children, in start order.
#[derive(Debug)]
pub struct Children<H> {
    list: Vec<Child<H>>,
}

impl<H> Default for Children<H> {
    fn default() -> Self {
        Self { list: Vec::new() }
    }
}

impl<H> Children<H> {
    /// Append a started child (start order is insertion order).
    pub fn push(&mut self, child: Child<H>) {
        self.list.push(child);
    }

    /// The child with this spec id.
    pub fn get(&self, id: &str) -> Option<&Child<H>> {
        self.list.iter().find(|c| c.spec.id == id)
    }

    /// The child with this spec id, mutably.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Child<H>> {
        self.list.iter_mut().find(|c| c.spec.id == id)
    }

    /// The spec id of the child whose actor is `actor`.
    pub fn id_of(&self, actor: ActorId) -> Option<String> {
        self.list
            .iter()
            .find(|c| c.cell.get_id() == actor)
            .map(|c| c.spec.id.clone())
    }

    /// Remove a child from the list (it exited, or was stopped).
    pub fn remove(&mut self, id: &str) -> Option<Child<H>> {
        let i = self.list.iter().position(|c| c.spec.id == id)?;
        Some(self.list.remove(i))
    }

    /// The children, in start order.
    pub fn iter(&self) -> impl Iterator<Item = &Child<H>> {
        self.list.iter()
    }

    /// Take one child out for good (OTP `terminate_child` + `delete_child`):
    /// it leaves the list first, so its exit is no failure to restart; then
    /// it is asked to quiesce (`quiesce` as in [`Self::shutdown`]) and
    /// stopped as its spec says. `None` when no child has that id.
    pub async fn remove_quiesced(
        &mut self,
        id: &str,
        prefix: &str,
        quiesce: impl Fn(&Child<H>) -> Option<Quiesce>,
    ) -> Option<ShutdownReport> {
        let child = self.remove(id)?;
        let mut report = ShutdownReport::default();
        if let Some(q) = quiesce(&child) {
            match q.await {
                Some(r) => report.absorb(r),
                None => report
                    .unconfirmed
                    .push(format!("{prefix}{id}: did not report within its deadline")),
            }
        }
        stop_child(&child.cell, child.spec.shutdown).await;
        Some(report)
    }

    /// The one shutdown fan-out (RECO-7): tier by tier, highest first, every
    /// child of a tier is asked to quiesce concurrently (`quiesce` builds the
    /// request; `None`: nothing to quiesce) and its report is merged; a child
    /// that does not report is named (`{prefix}{id}`) as unconfirmed. Then
    /// every child is stopped as its spec says, in reverse start order.
    pub async fn shutdown(
        &mut self,
        prefix: &str,
        quiesce: impl Fn(&Child<H>) -> Option<Quiesce>,
    ) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        let mut tiers: Vec<u8> = self.list.iter().map(|c| c.spec.tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        for tier in tiers.into_iter().rev() {
            let waits = self
                .list
                .iter()
                .filter(|c| c.spec.tier == tier)
                .filter_map(|c| quiesce(c).map(|q| (c.spec.id.clone(), q)))
                .map(|(id, q)| async move { (id, q.await) });
            for (id, r) in futures::future::join_all(waits).await {
                match r {
                    Some(r) => report.absorb(r),
                    None => report
                        .unconfirmed
                        .push(format!("{prefix}{id}: did not report within its deadline")),
                }
            }
        }
        for child in std::mem::take(&mut self.list).into_iter().rev() {
            stop_child(&child.cell, child.spec.shutdown).await;
        }
        report
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
        let otp_worker_default = Shutdown::Timeout(Duration::from_millis(5000));
        assert!(stop_child(&ok.get_cell(), otp_worker_default).await);
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
