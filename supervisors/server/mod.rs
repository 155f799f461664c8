//! `ServerSupervisor(server)`: one per server instance (CONN-1).
//!
//! Owns: the server's connection generations, its reconnect budget (RECO-1/2/4),
//! the close barrier (RECO-3), catalog sync serialization (SYNC-5/6), idle stop
//! (RECO-6), its part of the off switch (TRUST-1) and of the quiescent shutdown
//! (RECO-7). Supervisor: `ScopeSupervisor` (transient, 3 restarts / 5 s).
//! Child: at most one `Connection(conn_gen)` at a time (temporary: a lost
//! connection is replaced by a *new* generation, only after the old one
//! confirmed its close). Messages: `ServerSupervisorMsg`. States: [`Phase`],
//! each holding exactly what it needs (the connection, the live handle, the
//! timer); the close barrier's open generations outlive every phase.
//!
//! ```text
//! | Phase          | Event                               | Actions                                      | Next           |
//! |----------------|-------------------------------------|----------------------------------------------|----------------|
//! | connecting     | ConnUp(g), g current                | publish live, swap catalog (CONN-10)         | ready          |
//! | connecting     | ConnUp(g), g stale                  | drop it (SYNC-6)                             | connecting     |
//! | connecting     | ToolsListChanged(g current)         | remember: sync once ready (SYNC-5)           | connecting     |
//! | connecting     | connection exit                     | failure (see below)                          | backing_off …  |
//! | ready          | ToolsListChanged(g), no sync        | start a CatalogSync actor                    | ready          |
//! | ready          | ToolsListChanged(g), sync running   | one follow-up sync pending (SYNC-5)          | ready          |
//! | ready          | SyncDone(g live, n running)         | swap catalog (or keep, with a warning)       | ready          |
//! | ready          | IdleCheck, idle ≥ limit             | stop the connection (not a failure)          | stopping(idle) |
//! | ready          | connection exit                     | failures+=1 (0 first if up ≥ window, RECO-2) | backing_off    |
//! | any live       | failure, reconnect disabled         | (on_disconnect=remove: withdraw tools)       | failed         |
//! | any live       | failure, failures > max_attempts    | withdraw tools (RECO-4)                      | exhausted      |
//! | backing_off(k) | Reconnect(k), barrier clear         | spawn Connection(next)                       | connecting     |
//! | backing_off(k) | Reconnect(k), close pending         | wait for ConnectionEnded (RECO-3)            | awaiting_close |
//! | awaiting_close | ConnectionEnded(reaped), all closed | spawn Connection(next)                       | connecting     |
//! | any            | ConnectionEnded(not reaped)         | stop reconnecting                            | failed         |
//! | any            | CloseDeadline(g), g still open      | stop reconnecting                            | failed         |
//! | stopping(idle) | connection exit, no Wake waiting    |                                              | idle_stopped   |
//! | stopping(idle) | connection exit, Wake waiting       | spawn Connection(next)                       | connecting     |
//! | idle_stopped   | Wake                                | spawn Connection(next), reply when ready     | connecting     |
//! | any but off    | Restart                             | budget reset; stop the connection, then spawn| stopping(restart) / connecting |
//! | stopping(rst)  | connection exit                     | spawn once the barrier is clear              | connecting / awaiting_close |
//! | any but off    | SetEnabled(false)                   | withdraw tools, quiesce                      | disposing(off) |
//! | off            | SetEnabled(true)                    | budget reset, spawn                          | connecting     |
//! | any            | Shutdown                            | quiesce                                      | disposing(stop)|
//! | disposing      | connection exit + all closes done   | reply with the report                        | off / stopped  |
//! | disposing      | ShutdownDeadline                    | report what did not confirm                  | off / stopped  |
//! ```
//!
//! Time is tokio's (paused in tests) and the jitter's random source is seeded
//! per server (`RuntimeBuilder::seed`), so every transition is reproducible.

mod decide;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use decide::{AfterExit, AfterFailure, StopFor};

use crate::actors::catalog_sync::{CatalogSync, CatalogSyncArgs, CatalogSyncMsg};
use crate::actors::connection::{Connection, ConnectionArgs, ConnectionMsg};
use crate::messages::capabilities::ClientHandlers;
use crate::messages::catalog::build_catalog_redacted;
use crate::messages::config::{Scope, ServerConfig, TransportConfig};
use crate::messages::registry::{
    Activity, LiveConn, OutputSlot, Published, RegistryMsg, ServerEntry,
};
use crate::messages::server::{ServerSupervisorMsg, Unreaped};
use crate::messages::status::{ServerState, ServerStatus, ShutdownReport};
use crate::transport::open::OpenTransports;
use crate::transport::stdio::Diagnostics;

/// A `send_after` timer; aborting it cancels the message.
type Timer = JoinHandle<Result<(), ractor::MessagingErr<ServerSupervisorMsg>>>;

/// How long the previous transport has to confirm its close (RECO-3).
pub const CLOSE_BARRIER: Duration = Duration::from_secs(5);
/// How long a server's part of the shutdown may take before it reports what did
/// not confirm (CONN-8's close sequence takes at most ~4.5 s).
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Arguments of one server supervisor.
#[derive(Debug)]
pub struct ServerSupervisorArgs {
    /// Scope.
    pub scope: Scope,
    /// Config.
    pub config: Arc<ServerConfig>,
    /// The scope's registry.
    pub registry: ActorRef<RegistryMsg>,
    /// Shared with calls.
    pub activity: Arc<Activity>,
    /// Test-only switch (feature `chaos`): skip the close barrier, to show the
    /// chaos runner's `no_overlap` invariant can fail.
    pub chaos: crate::messages::config::ChaosSwitches,
    /// Opt-in client capabilities (CONN-11).
    pub handlers: ClientHandlers,
    /// Seed of this server's random choices (reconnect jitter).
    pub seed: u64,
    /// The server's open transports, kept by the scope across restarts of
    /// this supervisor (RECO-3).
    pub open: Arc<OpenTransports>,
}

/// The current connection.
#[derive(Debug)]
struct ConnSlot {
    cell: ActorRef<ConnectionMsg>,
    conn_gen: u64,
    up_since: Option<Instant>,
    /// A list_changed arrived that the current catalog does not reflect yet
    /// (SYNC-5: one follow-up sync, however many arrive).
    resync_pending: bool,
    /// When the first and the last of the pending notifications arrived:
    /// the follow-up waits for [`SYNC_QUIET`] without one, at most
    /// [`SYNC_MAX_WAIT`] after the first.
    pending_since: Option<Instant>,
    last_notice: Option<Instant>,
    /// The last notification of any burst, kept after its follow-up started.
    last_seen: Option<Instant>,
}

/// SYNC-5: a follow-up sync starts once no `tools/list_changed` arrived for
/// this long, so a burst spread over a running sync costs one follow-up, not
/// one per sync it overlapped.
const SYNC_QUIET: Duration = Duration::from_millis(50);

/// SYNC-5: a server that never stops notifying still gets a follow-up sync
/// this long after the first pending notification.
const SYNC_MAX_WAIT: Duration = Duration::from_secs(1);

impl ConnSlot {
    /// Note a notification the catalog does not reflect yet; true when none
    /// was pending before.
    fn note_pending(&mut self) -> bool {
        let now = Instant::now();
        self.last_notice = Some(now);
        self.pending_since.get_or_insert(now);
        !std::mem::replace(&mut self.resync_pending, true)
    }

    /// How long the follow-up sync must still wait (SYNC-5), or `None` when
    /// it may start now.
    fn quiet_left(&self) -> Option<Duration> {
        let now = Instant::now();
        let quiet = self
            .last_notice
            .map(|t| (t + SYNC_QUIET).saturating_duration_since(now));
        let cap = self
            .pending_since
            .map(|t| (t + SYNC_MAX_WAIT).saturating_duration_since(now));
        match (quiet, cap) {
            (Some(q), Some(c)) if !q.is_zero() && !c.is_zero() => Some(q.min(c)),
            _ => None,
        }
    }

    /// The follow-up sync starts: nothing is pending any more.
    fn take_pending(&mut self) {
        self.resync_pending = false;
        self.pending_since = None;
        self.last_notice = None;
    }
}

/// What a quiescent stop leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The runtime shuts down: the supervisor stops (RECO-7).
    Stop,
    /// Turned off (TRUST-1): the supervisor stays, with no process.
    Off,
}

/// A quiescent stop in progress.
#[derive(Debug)]
struct Disposal {
    reply: Option<RpcReplyPort<ShutdownReport>>,
    then: Then,
    report: ShutdownReport,
    started: Instant,
    deadline: Option<Timer>,
    /// The state shown while quiescing: the one it was in.
    shown: ServerState,
}

/// Where a server is. Each phase holds what only it has, so a live handle
/// without a connection, a backoff timer while connected, or a connection
/// while idle-stopped cannot be written down.
/// The `CatalogSync` actor running for the live connection.
#[derive(Debug)]
struct RunningSync {
    actor: ActorRef<CatalogSyncMsg>,
    n: u64,
}

#[derive(Debug)]
enum Phase {
    /// Connection `conn` is doing its handshake; `attempt` > 0 for a
    /// reconnect attempt of the current outage.
    Connecting { conn: ConnSlot, attempt: u32 },
    /// Connected and serving calls.
    Ready {
        conn: ConnSlot,
        live: LiveConn,
        idle: Option<Timer>,
        sync: Option<RunningSync>,
    },
    /// The connection is being stopped on purpose.
    Stopping { conn: ConnSlot, why: StopFor },
    /// Waiting out the backoff before attempt `attempt` (RECO-1).
    BackingOff { attempt: u32, timer: Timer },
    /// Attempt `attempt` (0: restart, wake, on) is due, but a previous
    /// transport has not confirmed its close (RECO-3).
    AwaitingClose { attempt: u32 },
    /// Stopped after `idle_stop_after_s` without calls; a Wake starts it.
    IdleStopped,
    /// `enabled = false` in its configuration.
    Disabled,
    /// Turned off at run time (TRUST-1).
    Off,
    /// Failed and not retrying (reconnect disabled, or the close barrier).
    Failed,
    /// The reconnect budget is used up (RECO-4).
    Exhausted,
    /// A quiescent stop: the connection (if any) is stopping and the open
    /// generations must confirm their close.
    Disposing {
        conn: Option<ConnSlot>,
        disposal: Disposal,
    },
    /// Shut down; the supervisor is stopping.
    Stopped,
}

impl Phase {
    /// The current connection, whatever the phase.
    fn conn(&self) -> Option<&ConnSlot> {
        match self {
            Phase::Connecting { conn, .. }
            | Phase::Ready { conn, .. }
            | Phase::Stopping { conn, .. } => Some(conn),
            Phase::Disposing { conn, .. } => conn.as_ref(),
            Phase::BackingOff { .. }
            | Phase::AwaitingClose { .. }
            | Phase::IdleStopped
            | Phase::Disabled
            | Phase::Off
            | Phase::Failed
            | Phase::Exhausted
            | Phase::Stopped => None,
        }
    }

    fn live(&self) -> Option<&LiveConn> {
        match self {
            Phase::Ready { live, .. } => Some(live),
            _ => None,
        }
    }

    /// The published state of this phase.
    fn state(&self, max_attempts: u32) -> ServerState {
        let reconnecting = |attempt: u32| match attempt {
            0 => ServerState::Connecting,
            attempt => ServerState::Reconnecting {
                attempt,
                of: max_attempts,
            },
        };
        match self {
            Phase::Connecting { attempt, .. }
            | Phase::AwaitingClose { attempt }
            | Phase::BackingOff { attempt, .. } => reconnecting(*attempt),
            Phase::Ready { .. } => ServerState::Ready,
            // From the moment an idle stop begins, calls see idle_stopped and
            // wake the server (answered once the old connection is gone),
            // instead of reaching the closing connection (RECO-6).
            Phase::Stopping {
                why: StopFor::Idle, ..
            } => ServerState::IdleStopped,
            Phase::Stopping {
                why: StopFor::Restart,
                ..
            } => ServerState::Connecting,
            Phase::IdleStopped => ServerState::IdleStopped,
            Phase::Disabled | Phase::Off | Phase::Stopped => ServerState::Stopped,
            Phase::Failed => ServerState::Failed,
            Phase::Exhausted => ServerState::Exhausted,
            Phase::Disposing { disposal, .. } => disposal.shown.clone(),
        }
    }

    /// Take the phase out, leaving `Stopped` in its place, cancelling its
    /// timers and tasks; returns the connection it held.
    fn take_conn(&mut self) -> Option<ConnSlot> {
        match std::mem::replace(self, Phase::Stopped) {
            Phase::Connecting { conn, .. } | Phase::Stopping { conn, .. } => Some(conn),
            Phase::Ready {
                conn, idle, sync, ..
            } => {
                if let Some(t) = idle {
                    t.abort();
                }
                // The sync is the connection's: it goes with it, mid-page
                // or not (its post_stop aborts the fetch).
                if let Some(s) = sync {
                    s.actor.stop(Some("its connection ended".into()));
                }
                Some(conn)
            }
            Phase::BackingOff { timer, .. } => {
                timer.abort();
                None
            }
            Phase::Disposing { conn, .. } => conn,
            Phase::AwaitingClose { .. }
            | Phase::IdleStopped
            | Phase::Disabled
            | Phase::Off
            | Phase::Failed
            | Phase::Exhausted
            | Phase::Stopped => None,
        }
    }
}

/// The close barrier (RECO-3): connection generations whose transport has
/// not confirmed its close, with the deadline timer of each, and the closes
/// that were reported unconfirmed: they stay until confirmed, so a restart
/// or a switch-on never starts a second process beside one still alive.
#[derive(Debug, Default)]
struct Barrier {
    open: BTreeSet<u64>,
    timers: Vec<(u64, Timer)>,
    unconfirmed: std::collections::BTreeMap<u64, Unconfirmed>,
}

/// A close that was not confirmed in time.
#[derive(Debug)]
struct Unconfirmed {
    pid: Option<u32>,
    /// Tells if the process is reaped after all, and kills it again.
    reaped_later: Option<Unreaped>,
}

/// A `ConnectionEnded`, as the handler takes it.
struct Ended {
    conn_gen: u64,
    reaped: bool,
    pid: Option<u32>,
    reaped_later: Option<Unreaped>,
    escaped: Vec<u32>,
}

impl Barrier {
    fn is_clear(&self) -> bool {
        self.open.is_empty() && self.unconfirmed.is_empty()
    }

    /// Drop the unconfirmed closes that were reaped since; for the others,
    /// SIGKILL the group again (skipped if it was reaped meanwhile: never a
    /// reused id) and watch for the reap. What is still open, for the refusal.
    fn retry_unconfirmed(&mut self, myself: &ActorRef<ServerSupervisorMsg>) -> Vec<String> {
        self.unconfirmed
            .retain(|_, u| !u.reaped_later.as_ref().is_some_and(|w| *w.reaped.borrow()));
        let mut still = Vec::new();
        for (conn_gen, u) in &self.unconfirmed {
            if let Some(later) = &u.reaped_later {
                (later.kill_again)();
            }
            if let (Some(pid), Some(later)) = (u.pid, &u.reaped_later) {
                let (me, conn_gen, mut watch) = (myself.clone(), *conn_gen, later.reaped.clone());
                tokio::spawn(async move {
                    let reaped = tokio::time::timeout(CLOSE_BARRIER, watch.wait_for(|r| *r)).await;
                    if matches!(reaped, Ok(Ok(_))) {
                        let _ = me.cast(ServerSupervisorMsg::ConnectionEnded {
                            conn_gen,
                            reaped: true,
                            pid: Some(pid),
                            reaped_later: None,
                            escaped: Vec::new(),
                        });
                    }
                });
            }
            still.push(match u.pid {
                Some(pid) => format!("process {pid} (connection {conn_gen})"),
                None => format!("connection {conn_gen}"),
            });
        }
        still
    }

    /// `conn_gen` confirmed (or gave up on) its close.
    fn close(&mut self, conn_gen: u64) {
        self.open.remove(&conn_gen);
        self.timers.retain(|(g, t)| {
            if *g == conn_gen {
                t.abort();
            }
            *g != conn_gen
        });
    }

    fn abort_timers(&mut self) {
        for (_, t) in self.timers.drain(..) {
            t.abort();
        }
    }
}

/// The supervisor actor.
#[derive(Debug, Default)]
pub struct ServerSupervisor;

/// Its state.
#[derive(Debug)]
pub struct ServerSupervisorState {
    scope: Scope,
    config: Arc<ServerConfig>,
    registry: ActorRef<RegistryMsg>,
    activity: Arc<Activity>,
    chaos: crate::messages::config::ChaosSwitches,
    handlers: ClientHandlers,
    /// The jitter's random source (RECO-1), seeded per server.
    rng: StdRng,
    /// Where the server is.
    phase: Phase,
    /// Generations not yet confirmed closed.
    barrier: Barrier,
    /// The same, as the scope keeps it for a restarted supervisor.
    open: Arc<OpenTransports>,
    /// Consecutive failures in the current outage (RECO-2).
    failures: u32,
    /// Wake callers waiting for the connection to be ready.
    waiters: Vec<RpcReplyPort<Result<(), String>>>,
    /// Diagnostics of the current (or last) connection.
    diag: Arc<Diagnostics>,
    /// Where the registry's entry reads the current connection's output.
    output: OutputSlot,
    /// What `status()` shows (its `state` follows the phase).
    status: ServerStatus,
    /// Next connection generation.
    next_gen: u64,
    /// Current catalog generation.
    catalog_gen: u64,
    /// Re-syncs started so far: the next `CatalogSync`'s number is one more.
    syncs: u64,
    instructions: Option<String>,
    catalog_warnings: Vec<String>,
}

impl ServerSupervisorState {
    fn name(&self) -> &str {
        &self.config.server_name
    }

    /// Publish the status (state from the phase) and the live handle.
    fn publish(&mut self) {
        let state = self.phase.state(self.config.reconnect.max_attempts);
        self.publish_as(state);
    }

    /// Publish with `state` shown (the live handle goes out before `ready`,
    /// CONN-10).
    fn publish_as(&mut self, state: ServerState) {
        let published = self.published(state);
        let _ = self
            .registry
            .cast(RegistryMsg::Publish(Box::new(published)));
    }

    /// The status with `state` shown, brought up to date, with the live
    /// handle and the instructions: what a publish sends.
    fn published(&mut self, state: ServerState) -> Published {
        self.status.state = state;
        self.status.syncing = match &self.phase {
            Phase::Ready { conn, sync, .. } => sync.is_some() || conn.resync_pending,
            Phase::Connecting { conn, .. } => conn.resync_pending,
            _ => false,
        };
        self.status.catalog_sync = match &self.phase {
            Phase::Ready { sync: Some(s), .. } => Some(s.n),
            _ => None,
        };
        // Once ready, the waiters are being answered: nobody waits any more.
        self.status.waking = !self.waiters.is_empty() && !matches!(self.phase, Phase::Ready { .. });
        let (count, first) = self.diag.non_json();
        self.status.non_json_lines = count;
        self.status.stderr_tail = self.diag.stderr_tail();
        let mut warnings = Vec::new();
        if let Some(first) = first {
            warnings.push(format!(
                "{count} non-JSON line(s) on stdout skipped; first: {first:?}"
            ));
        }
        warnings.extend(self.catalog_warnings.iter().cloned());
        self.status.warnings = warnings;
        self.status.consecutive_failures = self.failures;
        self.status.budget_left = self
            .config
            .reconnect
            .max_attempts
            .saturating_sub(self.failures);
        self.status.connection_generation = self.next_gen.saturating_sub(1);
        Published {
            status: self.status.clone(),
            live: self.phase.live().cloned(),
            instructions: self.instructions.clone(),
        }
    }

    /// Enter `phase` and publish it.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.publish();
    }

    fn answer_waiters(&mut self, result: Result<(), String>) {
        for w in self.waiters.drain(..) {
            let _ = w.send(result.clone());
        }
    }

    fn remove_tools(&mut self) {
        let _ = self.registry.cast(RegistryMsg::RemoveTools {
            server: self.config.server_name.clone(),
        });
        self.instructions = None; // RES-5: withdrawn together with the tools.
    }
}

fn initial_status(scope: &Scope, config: &ServerConfig) -> ServerStatus {
    ServerStatus::new(
        scope.clone(),
        config.server_name.clone(),
        config.transport.kind(),
        config.reconnect.max_attempts,
    )
}

impl Actor for ServerSupervisor {
    type Msg = ServerSupervisorMsg;
    type State = ServerSupervisorState;
    type Arguments = ServerSupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ServerSupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut status = initial_status(&args.scope, &args.config);
        if args.config.enabled {
            status.state = ServerState::Connecting; // post_start connects right away
        }
        let output: OutputSlot = Arc::default();
        // Registered from here so that every later Publish finds the entry (same sender, same order).
        args.registry.cast(RegistryMsg::Register {
            entry: Box::new(ServerEntry {
                status: status.clone(),
                live: None,
                up_since: None,
                tools: Arc::new(Vec::new()),
                instructions: None,
                supervisor: myself,
                activity: args.activity.clone(),
                config: args.config.clone(),
                output: output.clone(),
            }),
        })?;
        Ok(ServerSupervisorState {
            status,
            scope: args.scope,
            config: args.config,
            registry: args.registry,
            activity: args.activity,
            chaos: args.chaos,
            handlers: args.handlers,
            rng: StdRng::seed_from_u64(args.seed),
            // Replaced in post_start.
            phase: Phase::Disabled,
            barrier: Barrier::default(),
            next_gen: args.open.next_gen(),
            open: args.open,
            failures: 0,
            waiters: Vec::new(),
            diag: Arc::new(Diagnostics::default()),
            output,
            catalog_gen: 0,
            syncs: 0,
            instructions: None,
            catalog_warnings: Vec::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A supervisor restarted after a failure: the transports of its
        // predecessor are waited for before anything starts (RECO-3).
        for (conn_gen, mut closed) in st.open.pending() {
            st.barrier.open.insert(conn_gen);
            let me = myself.clone();
            tokio::spawn(async move {
                let reaped = matches!(
                    tokio::time::timeout(CLOSE_BARRIER, closed.reaped.wait_for(|c| *c)).await,
                    Ok(Ok(_))
                );
                let _ = me.cast(ServerSupervisorMsg::ConnectionEnded {
                    conn_gen,
                    reaped,
                    pid: None,
                    reaped_later: (!reaped).then_some(closed),
                    escaped: Vec::new(),
                });
            });
        }
        if st.config.enabled {
            connect_when_clear(&myself, st, 0).await;
        } else {
            st.status.error = Some("disabled in configuration".into());
            st.enter(Phase::Disabled);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("server_supervisor", scope = %st.scope, server = %st.config.server_name, conn_gen = st.next_gen.saturating_sub(1), catalog_gen = st.catalog_gen);
        // Boxed: ractor keeps its message loop's future for the actor's
        // whole life, sized for the largest handler; a box per message
        // keeps an idle server's loop small (PERF-1, memory per idle
        // connection). Messages here are rare (calls bypass the actor).
        Box::pin(async move {
            tracing::debug!("handling a message");
            match msg {
                ServerSupervisorMsg::ConnUp {
                    conn_gen,
                    client,
                    info,
                    catalog,
                } => on_conn_up(&myself, st, conn_gen, client, info, catalog).await,
                ServerSupervisorMsg::ConnectionEnded {
                    conn_gen,
                    reaped,
                    pid,
                    reaped_later,
                    escaped,
                } => {
                    on_connection_ended(
                        &myself,
                        st,
                        Ended {
                            conn_gen,
                            reaped,
                            pid,
                            reaped_later,
                            escaped,
                        },
                    )
                    .await
                }
                ServerSupervisorMsg::ToolsListChanged { conn_gen } => {
                    on_tools_list_changed(&myself, st, conn_gen).await
                }
                ServerSupervisorMsg::ResyncDue { conn_gen } => {
                    let idle = matches!(&st.phase, Phase::Ready { live, sync: None, .. } if live.conn_gen == conn_gen);
                    if idle {
                        sync_if_pending(&myself, st).await;
                    }
                }
                ServerSupervisorMsg::SyncDone {
                    conn_gen,
                    n,
                    result,
                } => on_sync_done(&myself, st, conn_gen, n, result).await,
                ServerSupervisorMsg::Reconnect { attempt } => {
                    on_reconnect(&myself, st, attempt).await
                }
                ServerSupervisorMsg::CloseDeadline { conn_gen } => {
                    if st.barrier.open.contains(&conn_gen)
                        && !matches!(st.phase, Phase::Disposing { .. })
                    {
                        barrier_failed(st, conn_gen, None);
                    }
                }
                ServerSupervisorMsg::IdleCheck => check_idle(&myself, st),
                ServerSupervisorMsg::Wake { reply } => on_wake(&myself, st, reply).await,
                ServerSupervisorMsg::Restart { reply } => {
                    let answer = on_restart(&myself, st).await;
                    let _ = reply.send(answer);
                }
                ServerSupervisorMsg::Shutdown { reply } => quiesce(&myself, st, reply, Then::Stop),
                ServerSupervisorMsg::SetEnabled {
                    enabled: false,
                    reply,
                } => match st.phase {
                    Phase::Off | Phase::Disposing { .. } | Phase::Stopped => {
                        let _ = reply.send(ShutdownReport::default());
                    }
                    _ => {
                        st.remove_tools();
                        quiesce(&myself, st, reply, Then::Off);
                    }
                },
                ServerSupervisorMsg::SetEnabled {
                    enabled: true,
                    reply,
                } => {
                    let mut report = ShutdownReport::default();
                    if matches!(st.phase, Phase::Off) {
                        let still = st.barrier.retry_unconfirmed(&myself);
                        if still.is_empty() {
                            st.failures = 0;
                            st.status.error = None;
                            connect_when_clear(&myself, st, 0).await;
                        } else {
                            // Not turned on beside a process still alive.
                            report.unconfirmed.push(format!(
                                "{}/{}: not turned on: {} did not confirm its exit",
                                st.scope,
                                st.config.server_name,
                                still.join(", ")
                            ));
                        }
                    }
                    let _ = reply.send(report);
                }
                #[cfg(feature = "chaos")]
                ServerSupervisorMsg::FailForChaos => {
                    return Err("a failure injected by the chaos runner".into());
                }
                ServerSupervisorMsg::ShutdownDeadline => on_shutdown_deadline(&myself, st),
            }
            Ok(())
        }
        .instrument(span))
        .await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed, as `handle` is.
        Box::pin(on_supervision_event(myself, evt, st)).await
    }
}

/// A supervision event: the connection or the running CatalogSync stopped.
async fn on_supervision_event(
    myself: ActorRef<ServerSupervisorMsg>,
    evt: SupervisionEvent,
    st: &mut ServerSupervisorState,
) -> Result<(), ActorProcessingErr> {
    let (cell, reason, failed): (ActorCell, String, bool) = match evt {
        SupervisionEvent::ActorTerminated(cell, _, reason) => (
            cell,
            reason.unwrap_or_else(|| "the connection stopped".into()),
            false,
        ),
        SupervisionEvent::ActorFailed(cell, err) => {
            (cell, format!("the connection actor failed: {err}"), true)
        }
        SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {
            return Ok(());
        }
    };
    // The running CatalogSync failed (a panic: no SyncDone comes): the
    // catalog stays, with a warning, and a pending follow-up runs. Its
    // normal stop is not this: supervision events overtake messages, so
    // its SyncDone may still be in the mailbox.
    if failed
        && let Phase::Ready { sync, .. } = &mut st.phase
        && sync
            .as_ref()
            .is_some_and(|s| s.actor.get_id() == cell.get_id())
    {
        *sync = None;
        st.catalog_warnings = vec![
            "catalog re-sync failed (its CatalogSync actor failed), previous generation kept"
                .into(),
        ];
        st.publish();
        sync_if_pending(&myself, st).await;
        return Ok(());
    }
    let is_current = st.phase.conn().map(|c| c.cell.get_id()) == Some(cell.get_id());
    if is_current {
        on_connection_exit(&myself, st, reason).await;
    }
    Ok(())
}

/// `ConnUp`: the current connection finished its handshake and first fetch.
async fn on_conn_up(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    client: crate::messages::registry::McpClient,
    info: crate::messages::server::ConnInfo,
    catalog: Vec<serde_json::Value>,
) {
    let current = matches!(&st.phase, Phase::Connecting { conn, .. } if conn.conn_gen == conn_gen);
    if !current {
        return; // SYNC-6: a late result from an older connection is dropped.
    }
    let Some(mut conn) = st.phase.take_conn() else {
        return;
    };
    conn.up_since = Some(Instant::now());
    st.activity.reset();
    st.instructions = info.instructions.clone();
    st.status.pid = info.pid;
    st.status.protocol_version = Some(info.protocol_version.clone());
    st.status.server_info = info.server_info.clone();
    st.status.resources = info.has_resources;
    st.status.prompts = info.has_prompts;
    st.status.error = None;
    st.phase = Phase::Ready {
        conn,
        live: LiveConn {
            conn_gen,
            client,
            redactions: st.diag.redactions().into(),
            deliveries: matches!(
                st.config.transport,
                crate::messages::config::TransportConfig::StreamableHttp(_)
            )
            .then(|| st.diag.deliveries.clone()),
        },
        idle: None,
        sync: None,
    };
    // The live handle goes out with the first catalog, in one registry
    // snapshot: never callable under the previous connection's definitions;
    // `ready` only once the catalog is registered (CONN-10).
    apply_catalog(st, conn_gen, catalog, true).await;
    st.answer_waiters(Ok(()));
    arm_idle(myself, st, None);
    // A list_changed during the handshake: the first catalog may be old.
    sync_if_pending(myself, st).await;
}

/// `ConnectionEnded`: a transport confirmed its close, or could not.
async fn on_connection_ended(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    ended: Ended,
) {
    let Ended {
        conn_gen,
        reaped,
        pid,
        reaped_later,
        escaped,
    } = ended;
    st.barrier.close(conn_gen);
    if reaped {
        st.barrier.unconfirmed.remove(&conn_gen);
        st.open.forget(conn_gen);
    } else {
        // Never reported closed while not reaped (RECO-3, SEAT-10).
        st.barrier
            .unconfirmed
            .insert(conn_gen, Unconfirmed { pid, reaped_later });
    }
    if let Phase::Disposing { disposal, .. } = &mut st.phase {
        disposal.report.escaped.extend(escaped);
        match (reaped, pid) {
            (true, Some(pid)) => disposal.report.processes_reaped.push(pid),
            (false, _) => disposal.report.unconfirmed.push(format!(
                "{}/{}: connection {conn_gen} did not confirm its close{}",
                st.scope,
                st.config.server_name,
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            )),
            _ => {}
        }
        finish_if_done(myself, st);
        return;
    }
    if !reaped {
        barrier_failed(st, conn_gen, pid);
    } else if st.barrier.is_clear()
        && let Phase::AwaitingClose { attempt } = st.phase
    {
        if attempt > 0 {
            st.status.restarts += 1;
        }
        start_connection(myself, st, attempt).await;
    }
}

/// `ToolsListChanged` (SYNC-5): sync now, or once after the running sync.
async fn on_tools_list_changed(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
) {
    let (newly_pending, idle) = match &mut st.phase {
        Phase::Ready {
            conn, live, sync, ..
        } if live.conn_gen == conn_gen => {
            // A notification within the quiet period of the last one is part
            // of its burst, even when the burst's first sync already ended
            // (the handler's notifications can reach us after its SyncDone).
            let recent = conn.last_seen.is_some_and(|t| t.elapsed() < SYNC_QUIET);
            conn.last_seen = Some(Instant::now());
            if sync.is_none() && !conn.resync_pending && !recent {
                start_sync(myself, st).await; // publishes: the status shows syncing
                return;
            }
            // SYNC-5: coalesce into one follow-up sync (also while its
            // quiet period runs: the notification extends it).
            (conn.note_pending(), sync.is_none())
        }
        Phase::Connecting { conn, .. } if conn.conn_gen == conn_gen => {
            conn.last_seen = Some(Instant::now());
            (conn.note_pending(), false)
        }
        _ => (false, false),
    };
    if newly_pending && idle {
        // No sync runs to end and start the follow-up: its timer does.
        sync_if_pending(myself, st).await;
    }
    if newly_pending {
        st.publish(); // the status shows syncing
    }
}

/// `SyncDone`: phase 1 of a re-sync finished (SYNC-3); swap it in if it
/// comes from the sync running now, on the live connection (SYNC-6): a late
/// result of an older connection or an older sync is dropped.
async fn on_sync_done(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    n: u64,
    result: Result<Vec<serde_json::Value>, String>,
) {
    let Phase::Ready { live, sync, .. } = &mut st.phase else {
        return;
    };
    if live.conn_gen != conn_gen || sync.as_ref().is_none_or(|s| s.n != n) {
        return; // SYNC-6
    }
    *sync = None;
    match result {
        Ok(entries) => apply_catalog(st, conn_gen, entries, false).await,
        Err(e) => {
            st.catalog_warnings = vec![format!(
                "catalog re-sync failed, previous generation kept: {e}"
            )];
            st.publish();
        }
    }
    sync_if_pending(myself, st).await;
}

/// `Reconnect(k)`: the backoff before attempt `k` is over (RECO-1).
async fn on_reconnect(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    attempt: u32,
) {
    if !matches!(st.phase, Phase::BackingOff { attempt: a, .. } if a == attempt) {
        return; // a stale timer: the phase moved on
    }
    if st.barrier.is_clear() || st.chaos.skip_close_barrier() {
        st.status.restarts += 1;
        start_connection(myself, st, attempt).await;
    } else {
        st.enter(Phase::AwaitingClose { attempt }); // RECO-3: wait for the close confirmation.
    }
}

/// `Wake` (RECO-6): a call found the server not connected.
async fn on_wake(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    reply: RpcReplyPort<Result<(), String>>,
) {
    match &mut st.phase {
        Phase::Disposing { .. } | Phase::Stopped => {
            let _ = reply.send(Err("the runtime is shutting down".into()));
        }
        Phase::Off => {
            let _ = reply.send(Err("the server is turned off".into()));
        }
        Phase::Ready { .. } => {
            let _ = reply.send(Ok(()));
        }
        // Answered once connected (an idle stop in progress starts again;
        // a close still unconfirmed is waited for first). The first waiter
        // shows in the status: later calls wait for the same connection.
        Phase::Connecting { .. } | Phase::Stopping { .. } | Phase::AwaitingClose { .. } => {
            st.waiters.push(reply);
            if st.waiters.len() == 1 {
                st.publish();
            }
        }
        Phase::IdleStopped => {
            st.waiters.push(reply);
            connect_when_clear(myself, st, 0).await;
        }
        Phase::BackingOff { .. } | Phase::Disabled | Phase::Failed | Phase::Exhausted => {
            let state = st.phase.state(st.config.reconnect.max_attempts);
            let why = st.status.error.clone().unwrap_or_else(|| state.to_string());
            let _ = reply.send(Err(format!("server is {state}: {why}")));
        }
    }
}

/// `Restart` (RECO-4): a fresh budget and a fresh connection — refused
/// while the server is off or stopping, or while a previous process of it
/// is not confirmed gone (its kill is sent again first).
async fn on_restart(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
) -> Result<(), String> {
    match st.phase {
        Phase::Off => return Err("the server is turned off (TRUST-1)".into()),
        Phase::Disposing { .. } | Phase::Stopped => {
            return Err("the runtime is shutting down".into());
        }
        _ => {}
    }
    let still = st.barrier.retry_unconfirmed(myself);
    if !still.is_empty() {
        return Err(format!(
            "not restarted: {} did not confirm its exit; its group was sent SIGKILL again, restart once it is gone",
            still.join(", ")
        ));
    }
    st.failures = 0;
    st.status.error = None;
    match st.phase.take_conn() {
        Some(conn) => {
            conn.cell.stop(Some("restart requested".into()));
            st.enter(Phase::Stopping {
                conn,
                why: StopFor::Restart,
            });
        }
        None => connect_when_clear(myself, st, 0).await,
    }
    Ok(())
}

/// `ShutdownDeadline`: the quiescent stop took too long; say what did not
/// confirm.
fn on_shutdown_deadline(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let open: Vec<u64> = st.barrier.open.iter().copied().collect();
    let Phase::Disposing { conn, disposal } = &mut st.phase else {
        return;
    };
    disposal.deadline = None;
    for conn_gen in open {
        disposal.report.unconfirmed.push(format!(
            "{}/{}: connection {conn_gen} did not confirm its close within {} s",
            st.scope,
            st.config.server_name,
            SHUTDOWN_DEADLINE.as_secs()
        ));
    }
    if conn.take().is_some() {
        disposal.report.unconfirmed.push(format!(
            "{}/{}: connection actor did not stop",
            st.scope, st.config.server_name
        ));
    }
    // They did not confirm: they stay unconfirmed, never forgotten.
    for conn_gen in std::mem::take(&mut st.barrier.open) {
        st.barrier.unconfirmed.insert(
            conn_gen,
            Unconfirmed {
                pid: None,
                reaped_later: None,
            },
        );
    }
    st.barrier.abort_timers();
    finish_if_done(myself, st);
}

/// Start a connection now, or as soon as every previous transport confirmed
/// its close (RECO-3).
async fn connect_when_clear(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    attempt: u32,
) {
    if st.barrier.is_clear() || st.chaos.skip_close_barrier() {
        start_connection(myself, st, attempt).await;
    } else {
        st.enter(Phase::AwaitingClose { attempt });
    }
}

/// Spawn `Connection(next_gen)`; the transport counts as open until it confirms its close.
async fn start_connection(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    attempt: u32,
) {
    let conn_gen = st.next_gen;
    st.next_gen += 1;
    st.open.set_next_gen(st.next_gen);
    st.diag = Arc::new(Diagnostics::default());
    if let Ok(mut slot) = st.output.lock() {
        *slot = Some(st.diag.clone());
    }
    st.status.pid = None;
    let args = ConnectionArgs {
        conn_gen,
        config: st.config.clone(),
        supervisor: myself.clone(),
        diag: st.diag.clone(),
        handlers: st.handlers.clone(),
        open: st.open.clone(),
        chaos: st.chaos,
    };
    st.barrier.open.insert(conn_gen);
    match Actor::spawn_linked(None, Connection, args, myself.get_cell()).await {
        Ok((cell, _)) => {
            let conn = ConnSlot {
                cell,
                conn_gen,
                up_since: None,
                resync_pending: false,
                pending_since: None,
                last_notice: None,
                last_seen: None,
            };
            st.enter(Phase::Connecting { conn, attempt });
        }
        Err(e) => {
            // Nothing was spawned, so there is nothing to close.
            st.barrier.close(conn_gen);
            let why = format!("could not start the connection actor: {e}");
            register_failure(myself, st, None, why);
        }
    }
}

/// The current connection exited: decide between idle stop, restart, shutdown and failure.
async fn on_connection_exit(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    reason: String,
) {
    if let Phase::Disposing { conn, .. } = &mut st.phase {
        *conn = None;
        finish_if_done(myself, st);
        return;
    }
    let stopping = match &st.phase {
        Phase::Stopping { why, .. } => Some(*why),
        _ => None,
    };
    let Some(slot) = st.phase.take_conn() else {
        return;
    };
    if st.barrier.open.contains(&slot.conn_gen) {
        let conn_gen = slot.conn_gen;
        let timer = myself.send_after(CLOSE_BARRIER, move || ServerSupervisorMsg::CloseDeadline {
            conn_gen,
        });
        st.barrier.timers.push((conn_gen, timer));
    }
    st.status.pid = None;
    match decide::after_exit(stopping, !st.waiters.is_empty()) {
        // A Wake that arrived while it closed is answered by a new
        // connection; a restart's too. A clean stop ends the outage
        // (RECO-2): the next failure is the first of a new one.
        AfterExit::Connect { reset_failures } => {
            if reset_failures {
                st.failures = 0;
            }
            connect_when_clear(myself, st, 0).await;
        }
        AfterExit::IdleStopped => {
            st.failures = 0;
            st.enter(Phase::IdleStopped);
        }
        AfterExit::Failure => register_failure(myself, st, slot.up_since, reason),
    }
}

/// Count a failure against the outage's budget and schedule the next attempt (RECO-1/2/4/5).
fn register_failure(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    up_since: Option<Instant>,
    cause: String,
) {
    let failure = decide::Failure {
        failures: st.failures,
        up_for: up_since.map(|t| t.elapsed()),
    };
    let (failures, next) = decide::after_failure(
        &st.config.reconnect,
        st.config.on_disconnect,
        failure,
        |range| st.rng.random_range(range),
        st.chaos.no_backoff(),
    );
    st.failures = failures;
    st.status.pid = None;
    st.status.error = Some(cause.clone());
    st.status.last_failure_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok());
    st.answer_waiters(Err(cause));
    match next {
        AfterFailure::Failed { remove_tools } => {
            if remove_tools {
                st.remove_tools();
            }
            st.enter(Phase::Failed);
        }
        AfterFailure::Exhausted => {
            st.remove_tools(); // RECO-4
            st.enter(Phase::Exhausted);
        }
        AfterFailure::Reconnect { attempt, delay } => {
            let timer =
                myself.send_after(delay, move || ServerSupervisorMsg::Reconnect { attempt });
            st.enter(Phase::BackingOff { attempt, timer });
        }
    }
}

/// RECO-3: the previous transport could not be confirmed closed; never overlap.
fn barrier_failed(st: &mut ServerSupervisorState, conn_gen: u64, pid: Option<u32>) {
    // Only a test switch (skip_close_barrier) lets a connection run now:
    // it is stopped, it overlapped.
    if let Some(conn) = st.phase.take_conn() {
        conn.cell.stop(Some("the close barrier failed".into()));
    }
    let what = pid
        .map(|p| format!("process {p}"))
        .unwrap_or_else(|| format!("connection {conn_gen}"));
    st.status.error = Some(format!(
        "could not confirm that the previous process exited ({what} did not confirm its close within {} s); \
         not reconnecting, so that two processes of this server never overlap",
        CLOSE_BARRIER.as_secs()
    ));
    st.answer_waiters(Err(
        "the previous process could not be confirmed gone".into()
    ));
    st.enter(Phase::Failed);
}

/// Build a catalog generation from raw entries and swap it in (SYNC-3,
/// SYNC-4); a connection's `first` catalog carries its live handle.
async fn apply_catalog(
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    entries: Vec<serde_json::Value>,
    first: bool,
) {
    let generation = st.catalog_gen + 1;
    let built = build_catalog_redacted(
        &st.scope,
        st.name(),
        generation,
        entries,
        &st.diag.redactions(),
    );
    match built {
        Ok(mut catalog) => {
            if st.chaos.half_catalogs() {
                catalog.tools.pop();
            }
            if let Some(note) = &st.config.tool_note {
                for t in &mut catalog.tools {
                    let t = std::sync::Arc::make_mut(t);
                    t.description = Some(match t.description.take() {
                        Some(d) if d.trim_end().ends_with(['.', '!', '?']) => {
                            format!("{} {note}", d.trim_end())
                        }
                        Some(d) if !d.trim().is_empty() => format!("{}. {note}", d.trim_end()),
                        _ => note.clone(),
                    });
                }
            }
            st.catalog_warnings = catalog.warnings;
            // The status goes out with the tools: one publish per sync.
            let state = st.phase.state(st.config.reconnect.max_attempts);
            let then = Box::new(st.published(state));
            let swap = ractor::call_t!(
                st.registry,
                |reply| RegistryMsg::Swap {
                    server: st.config.server_name.clone(),
                    conn_gen,
                    generation,
                    tools: catalog.tools,
                    live: first.then(|| st.phase.live().cloned()).flatten(),
                    then,
                    reply,
                },
                5000
            );
            st.catalog_gen = generation;
            // The registry published the status with the swap; the
            // supervisor's copy follows it.
            match swap {
                Ok(Ok(n)) => {
                    st.status.tools = n;
                    st.status.generation = generation;
                }
                Ok(Err(e)) => {
                    // SYNC-4: zero tools; RES-5: instructions go with them.
                    st.status.tools = 0;
                    st.status.error = Some(e.to_string());
                    st.instructions = None;
                }
                Err(e) => {
                    st.status.error = Some(format!("registry did not answer: {e}"));
                    st.publish();
                }
            }
        }
        Err(e) => {
            st.catalog_warnings = vec![format!("catalog rejected, previous generation kept: {e}")];
            st.publish();
        }
    }
}

/// Start the one follow-up sync a list_changed asked for (SYNC-5), if any,
/// once no notification arrived for [`SYNC_QUIET`] (at most [`SYNC_MAX_WAIT`]
/// after the first); until then the status keeps showing `syncing`. Taken
/// only after the catalog was published, so the status never shows a pause
/// between two syncs.
async fn sync_if_pending(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let Phase::Ready { conn, live, .. } = &mut st.phase else {
        return;
    };
    if !conn.resync_pending {
        return;
    }
    if let Some(wait) = conn.quiet_left() {
        let conn_gen = live.conn_gen;
        myself.send_after(wait, move || ServerSupervisorMsg::ResyncDue { conn_gen });
        return;
    }
    conn.take_pending();
    start_sync(myself, st).await;
}

/// Start `CatalogSync(conn_gen, n)`, a linked child (ADR 0011). One that
/// cannot be started leaves the catalog as it is, with a warning.
async fn start_sync(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let Phase::Ready { live, .. } = &st.phase else {
        return;
    };
    let n = st.syncs + 1;
    let args = CatalogSyncArgs {
        conn_gen: live.conn_gen,
        n,
        client: live.client.clone(),
        timeout: st.config.request_timeout,
        diag: st.diag.clone(),
        supervisor: myself.clone(),
    };
    let started = Actor::spawn_linked(None, CatalogSync, args, myself.get_cell()).await;
    match started {
        Ok((actor, _)) => {
            st.syncs = n;
            if let Phase::Ready { sync, .. } = &mut st.phase {
                *sync = Some(RunningSync { actor, n });
            }
        }
        Err(e) => st
            .catalog_warnings
            .push(format!("the catalog re-sync could not start: {e}")),
    }
    st.publish(); // status shows syncing
}

fn idle_limit(st: &ServerSupervisorState) -> Option<Duration> {
    match st.config.transport {
        TransportConfig::StreamableHttp(_) => None, // RECO-6 applies to processes only.
        _ => st.config.idle_stop_after,
    }
}

fn arm_idle(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    after: Option<Duration>,
) {
    let Some(limit) = idle_limit(st) else {
        return;
    };
    let Phase::Ready { idle, .. } = &mut st.phase else {
        return;
    };
    if let Some(t) = idle.take() {
        t.abort();
    }
    *idle = Some(myself.send_after(after.unwrap_or(limit), || ServerSupervisorMsg::IdleCheck));
}

/// `IdleCheck` (RECO-6): stop a connection idle for its limit, or check again later.
fn check_idle(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let Some(limit) = idle_limit(st) else {
        return;
    };
    let Phase::Ready { idle, live, .. } = &mut st.phase else {
        return;
    };
    *idle = None;
    let conn_gen = live.conn_gen;
    match st.activity.idle_for() {
        // A call that starts right now either is counted by the claim (no
        // stop) or sees it and wakes the server instead of sending.
        Some(idle) if idle >= limit && !st.activity.claim_idle_stop(conn_gen, limit) => {
            arm_idle(myself, st, Some(limit));
        }
        Some(idle) if idle >= limit => {
            if let Some(conn) = st.phase.take_conn() {
                conn.cell.stop(Some("idle stop".into()));
                st.failures = 0; // a clean stop ends the outage (RECO-2)
                st.enter(Phase::Stopping {
                    conn,
                    why: StopFor::Idle,
                });
            }
        }
        Some(idle) => arm_idle(myself, st, Some(limit - idle)),
        None => arm_idle(myself, st, Some(limit)),
    }
}

/// A quiescent stop is complete once the connection is gone and every
/// transport confirmed its close (or the deadline said which did not).
fn finish_if_done(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    // Closes reported unconfirmed before are in the report already; only
    // the ones still in flight are waited for.
    let done =
        matches!(&st.phase, Phase::Disposing { conn: None, .. }) && st.barrier.open.is_empty();
    if !done {
        return;
    }
    let Phase::Disposing { mut disposal, .. } = std::mem::replace(&mut st.phase, Phase::Stopped)
    else {
        return;
    };
    if let Some(t) = disposal.deadline.take() {
        t.abort();
    }
    disposal
        .report
        .servers_stopped
        .push(format!("{}/{}", st.scope, st.config.server_name));
    disposal.report.duration_ms =
        u64::try_from(disposal.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    st.status.pid = None;
    match disposal.then {
        Then::Off => {
            st.status.error = Some("turned off".into());
            st.enter(Phase::Off);
        }
        Then::Stop => st.enter(Phase::Stopped),
    }
    if let Some(reply) = disposal.reply.take() {
        let _ = reply.send(disposal.report);
    }
    if disposal.then == Then::Stop {
        myself.stop(Some("shutdown".into()));
    }
}

/// Stop the connection and everything pending, and answer `reply` with the
/// report once every transport confirmed its close (RECO-7, TRUST-1).
fn quiesce(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    reply: RpcReplyPort<ShutdownReport>,
    then: Then,
) {
    if matches!(st.phase, Phase::Disposing { .. } | Phase::Stopped) {
        let _ = reply.send(ShutdownReport::default());
        return;
    }
    let shown = st.phase.state(st.config.reconnect.max_attempts);
    st.barrier.abort_timers();
    let why = match then {
        Then::Stop => "the runtime is shutting down",
        Then::Off => "the server was turned off",
    };
    st.answer_waiters(Err(why.into()));
    let conn = st.phase.take_conn();
    if let Some(conn) = &conn {
        conn.cell.stop(Some(why.into()));
    }
    let deadline = myself.send_after(SHUTDOWN_DEADLINE, || ServerSupervisorMsg::ShutdownDeadline);
    let earlier: Vec<String> = st
        .barrier
        .unconfirmed
        .iter()
        .map(|(conn_gen, u)| {
            format!(
                "{}/{}: connection {conn_gen}{} did not confirm its close",
                st.scope,
                st.config.server_name,
                u.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            )
        })
        .collect();
    st.phase = Phase::Disposing {
        conn,
        disposal: Disposal {
            reply: Some(reply),
            then,
            report: ShutdownReport {
                calls_cancelled: st.activity.in_flight() as u64,
                unconfirmed: earlier,
                ..Default::default()
            },
            started: Instant::now(),
            deadline: Some(deadline),
            shown,
        },
    };
    finish_if_done(myself, st);
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
