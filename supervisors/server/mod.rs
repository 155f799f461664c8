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
//! | ready          | CatalogExpired(g, latest arm)       | as ToolsListChanged (ttlMs, ERA-4)           | ready          |
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

mod catalog;
mod connect;
mod decide;
mod events;
mod handle;
mod stop;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use catalog::*;
use connect::*;
use decide::{AfterExit, AfterFailure, StopFor, WhenDue};
use events::*;
use stop::*;

use crate::actors::catalog_sync::{CatalogSync, CatalogSyncArgs, CatalogSyncMsg};
use crate::actors::connection::{Connection, ConnectionArgs, ConnectionMsg};
use crate::messages::capabilities::ClientHandlers;
use crate::messages::catalog::build_catalog_redacted;
use crate::messages::config::{Scope, ServerConfig, TransportConfig};
use crate::messages::registry::{
    Activity, LiveConn, OutputSlot, Published, RegistryMsg, ServerEntry,
};
use crate::messages::server::{ServerHandle, ServerSupervisorMsg, Unreaped};
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
    /// The era the last connection that came up spoke: the next one of the
    /// same config skips the probe for it (ERA-1). Forgotten when a
    /// connection fails before it is up (the server may have changed era).
    era: Option<crate::messages::server::Era>,
    /// Freshness timers armed so far (`ttlMs`): only the latest counts.
    expiry_arms: u64,
    /// A connection of this server came up once in this runtime.
    was_up: bool,
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
                supervisor: ServerHandle { actor: myself },
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
            era: None,
            expiry_arms: 0,
            was_up: false,
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
                ServerSupervisorMsg::CatalogExpired { conn_gen, arm } => {
                    if arm == st.expiry_arms {
                        on_tools_list_changed(&myself, st, conn_gen).await
                    }
                }
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

#[cfg(test)]
mod tests;
