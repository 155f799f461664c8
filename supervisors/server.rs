//! `ServerSupervisor(server)`: one per server instance (CONN-1).
//!
//! Owns: the server's connection generations, its reconnect budget (RECO-1/2/4),
//! the close barrier (RECO-3), catalog sync serialization (SYNC-5/6), idle stop
//! (RECO-6) and its part of the quiescent shutdown (RECO-7). Supervisor:
//! `ScopeSupervisor`. Child: at most one `Connection(conn_gen)` at a time
//! (restart type temporary: a lost connection is replaced by a *new*
//! generation only after the old one confirmed its close).
//!
//! ```text
//! | State        | Event                          | Actions                                   | Next          |
//! |--------------|--------------------------------|-------------------------------------------|---------------|
//! | connecting   | ConnUp(conn_gen)                    | publish live, build+swap catalog          | ready         |
//! | ready        | conn exit (abnormal)           | failures+=1 (0 first if up ≥ window)      | reconnecting  |
//! | reconnecting | Reconnect(k), all closes done  | spawn Connection(conn_gen+1)                   | connecting    |
//! | reconnecting | Reconnect(k), close pending    | wait for ConnectionEnded                  | reconnecting  |
//! | any          | CloseDeadline(conn_gen), unconfirmed| stop reconnecting                         | failed        |
//! | any          | failures > max_attempts        | remove tools                              | exhausted     |
//! | ready        | IdleCheck, idle ≥ limit        | stop connection (not a failure)           | idle_stopped  |
//! | idle_stopped | Wake                           | spawn Connection(conn_gen+1), reply when ready | connecting    |
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use rand::Rng;
use tokio::task::JoinHandle;

/// A `send_after` timer; aborting it cancels the message.
type Timer = JoinHandle<Result<(), ractor::MessagingErr<ServerSupervisorMsg>>>;
use tokio::time::Instant;

use crate::actors::connection::ConnectionMsg;
use crate::actors::connection::{Connection, ConnectionArgs, fetch_catalog};
use crate::actors::stdio::Diagnostics;
use crate::messages::capabilities::ClientHandlers;
use crate::messages::catalog::build_catalog;
use crate::messages::config::{OnDisconnect, Scope, ServerConfig, TransportConfig};
use crate::messages::registry::{Activity, LiveConn, RegistryMsg, ServerEntry};
use crate::messages::server::ServerSupervisorMsg;
use crate::messages::status::{ServerState, ServerStatus, ShutdownReport};

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
    pub skip_close_barrier: bool,
    /// Opt-in client capabilities (CONN-11).
    pub handlers: ClientHandlers,
}

/// Why the current connection is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopIntent {
    /// Not stopping: an exit is a failure.
    None,
    /// Idle stop (RECO-6).
    Idle,
    /// Explicit restart (RECO-4).
    Restart,
    /// Runtime/scope shutdown (RECO-7).
    Shutdown,
}

/// The current connection.
#[derive(Debug)]
struct ConnSlot {
    cell: ActorRef<ConnectionMsg>,
    conn_gen: u64,
    up_since: Option<Instant>,
    intent: StopIntent,
}

/// A shutdown in progress.
#[derive(Debug)]
struct Disposal {
    reply: Option<RpcReplyPort<ShutdownReport>>,
    /// Stop the supervisor afterwards (shutdown) or stay, turned off (TRUST-1).
    then_stop: bool,
    report: ShutdownReport,
    started: Instant,
    deadline: Option<Timer>,
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
    skip_close_barrier: bool,
    handlers: ClientHandlers,
    /// Diagnostics of the current (or last) connection.
    diag: Arc<Diagnostics>,
    status: ServerStatus,
    conn: Option<ConnSlot>,
    /// Next connection generation.
    next_gen: u64,
    /// Current catalog generation.
    catalog_gen: u64,
    live: Option<LiveConn>,
    instructions: Option<String>,
    catalog_warnings: Vec<String>,
    /// Consecutive failures in the current outage (RECO-2).
    failures: u32,
    /// Connection generations whose transport has not confirmed its close.
    open: BTreeSet<u64>,
    /// Close-deadline timers by generation.
    close_timers: Vec<(u64, Timer)>,
    /// A reconnect waiting for the close barrier.
    pending_attempt: Option<u32>,
    backoff: Option<Timer>,
    idle_timer: Option<Timer>,
    sync: Option<JoinHandle<()>>,
    resync_pending: bool,
    waiters: Vec<RpcReplyPort<Result<(), String>>>,
    disposing: Option<Disposal>,
    /// Turned off at run time (TRUST-1): no connection, no tools.
    off: bool,
}

impl ServerSupervisorState {
    fn name(&self) -> &str {
        &self.config.server_name
    }

    fn publish(&mut self) {
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
        let _ = self.registry.cast(RegistryMsg::Publish {
            status: Box::new(self.status.clone()),
            live: self.live.clone(),
            instructions: self.instructions.clone(),
        });
    }

    fn set_state(&mut self, state: ServerState) {
        self.status.state = state;
        self.publish();
    }

    fn cancel_timers(&mut self) {
        for t in [self.backoff.take(), self.idle_timer.take()]
            .into_iter()
            .flatten()
        {
            t.abort();
        }
        if let Some(t) = self.sync.take() {
            t.abort();
        }
        self.pending_attempt = None;
        self.resync_pending = false;
    }

    fn answer_waiters(&mut self, result: Result<(), String>) {
        for w in self.waiters.drain(..) {
            let _ = w.send(result.clone());
        }
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
            }),
        })?;
        Ok(ServerSupervisorState {
            status,
            scope: args.scope,
            config: args.config,
            registry: args.registry,
            activity: args.activity,
            skip_close_barrier: args.skip_close_barrier,
            handlers: args.handlers,
            diag: Arc::new(Diagnostics::default()),
            conn: None,
            next_gen: 1,
            catalog_gen: 0,
            live: None,
            instructions: None,
            catalog_warnings: Vec::new(),
            failures: 0,
            open: BTreeSet::new(),
            close_timers: Vec::new(),
            pending_attempt: None,
            backoff: None,
            idle_timer: None,
            sync: None,
            resync_pending: false,
            waiters: Vec::new(),
            disposing: None,
            off: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if st.config.enabled {
            start_connection(&myself, st).await;
        } else {
            st.status.error = Some("disabled in configuration".into());
            st.publish();
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
        async move {
            tracing::debug!("handling a message");
            match msg {
                ServerSupervisorMsg::ConnUp {
                    conn_gen,
                    peer,
                    info,
                    catalog,
                } => {
                    let current = st.conn.as_ref().map(|c| c.conn_gen) == Some(conn_gen);
                    if !current || st.disposing.is_some() {
                        return Ok(()); // SYNC-6: a late result from an older connection is dropped.
                    }
                    if let Some(slot) = st.conn.as_mut() {
                        slot.up_since = Some(Instant::now());
                    }
                    st.activity.reset();
                    st.live = Some(LiveConn { conn_gen, peer });
                    st.instructions = info.instructions.clone();
                    st.status.pid = info.pid;
                    st.status.protocol_version = Some(info.protocol_version.clone());
                    st.status.server_info = info.server_info.clone();
                    st.status.resources = info.has_resources;
                    st.status.error = None;
                    // Publish the live handle first (the registry's Swap checks it, SYNC-6),
                    // and report `ready` only once the catalog is registered (CONN-10).
                    st.publish();
                    apply_catalog(st, conn_gen, catalog).await;
                    st.set_state(ServerState::Ready);
                    st.answer_waiters(Ok(()));
                    arm_idle(&myself, st, None);
                    if std::mem::take(&mut st.resync_pending) {
                        start_sync(&myself, st);
                    }
                }
                ServerSupervisorMsg::ConnectionEnded { conn_gen, reaped, pid } => {
                    st.open.remove(&conn_gen);
                    st.close_timers.retain(|(g, t)| {
                        if *g == conn_gen {
                            t.abort();
                        }
                        *g != conn_gen
                    });
                    if let Some(d) = st.disposing.as_mut() {
                        match (reaped, pid) {
                            (true, Some(pid)) => d.report.processes_reaped.push(pid),
                            (false, _) => d.report.unconfirmed.push(format!(
                                "{}/{}: connection {conn_gen} did not confirm its close{}",
                                st.scope,
                                st.config.server_name,
                                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
                            )),
                            _ => {}
                        }
                        finish_if_done(&myself, st);
                        return Ok(());
                    }
                    if !reaped {
                        barrier_failed(st, conn_gen, pid);
                    } else if st.open.is_empty()
                        && let Some(attempt) = st.pending_attempt.take() {
                            if attempt > 0 {
                                st.status.restarts += 1;
                            }
                            start_connection(&myself, st).await;
                        }
                }
                ServerSupervisorMsg::ToolsListChanged { conn_gen } => {
                    if st.disposing.is_some() {
                        return Ok(());
                    }
                    match &st.live {
                        Some(live) if live.conn_gen == conn_gen => {
                            if st.sync.is_some() {
                                st.resync_pending = true; // SYNC-5: coalesce into one follow-up sync.
                            } else {
                                start_sync(&myself, st);
                            }
                        }
                        _ if st.conn.as_ref().map(|c| c.conn_gen) == Some(conn_gen) => {
                            st.resync_pending = true
                        }
                        _ => {}
                    }
                }
                ServerSupervisorMsg::SyncDone { conn_gen, result } => {
                    st.sync = None;
                    let live = st.live.as_ref().map(|l| l.conn_gen) == Some(conn_gen);
                    if !live || st.disposing.is_some() {
                        return Ok(()); // SYNC-6
                    }
                    match result {
                        Ok(entries) => apply_catalog(st, conn_gen, entries).await,
                        Err(e) => {
                            st.catalog_warnings = vec![format!(
                                "catalog re-sync failed, previous generation kept: {e}"
                            )];
                            st.publish();
                        }
                    }
                    if std::mem::take(&mut st.resync_pending) {
                        start_sync(&myself, st);
                    }
                }
                ServerSupervisorMsg::Reconnect { attempt } => {
                    st.backoff = None;
                    if st.disposing.is_some() || st.conn.is_some() {
                        return Ok(());
                    }
                    if st.open.is_empty() || st.skip_close_barrier {
                        st.status.restarts += 1;
                        start_connection(&myself, st).await;
                    } else {
                        st.pending_attempt = Some(attempt); // RECO-3: wait for the close confirmation.
                    }
                }
                ServerSupervisorMsg::CloseDeadline { conn_gen } => {
                    if st.open.contains(&conn_gen) && st.disposing.is_none() {
                        barrier_failed(st, conn_gen, None);
                    }
                }
                ServerSupervisorMsg::IdleCheck => {
                    st.idle_timer = None;
                    check_idle(&myself, st);
                }
                ServerSupervisorMsg::Wake { reply } => {
                    if st.disposing.is_some() {
                        let _ = reply.send(Err("the runtime is shutting down".into()));
                    } else if st.off {
                        let _ = reply.send(Err("the server is turned off".into()));
                    } else if st.live.is_some() {
                        let _ = reply.send(Ok(()));
                    } else if st.conn.is_some() {
                        st.waiters.push(reply);
                    } else {
                        match st.status.state {
                            ServerState::IdleStopped | ServerState::Stopped
                                if st.config.enabled =>
                            {
                                st.waiters.push(reply);
                                if st.open.is_empty() {
                                    start_connection(&myself, st).await;
                                } else {
                                    st.pending_attempt = Some(0);
                                }
                            }
                            _ => {
                                let why = st
                                    .status
                                    .error
                                    .clone()
                                    .unwrap_or_else(|| st.status.state.to_string());
                                let _ = reply
                                    .send(Err(format!("server is {}: {why}", st.status.state)));
                            }
                        }
                    }
                }
                ServerSupervisorMsg::Restart { reply } => {
                    if st.disposing.is_none() && !st.off {
                        st.cancel_timers();
                        st.failures = 0;
                        st.status.error = None;
                        st.status.state = ServerState::Connecting;
                        if let Some(slot) = st.conn.as_mut() {
                            slot.intent = StopIntent::Restart;
                            slot.cell.stop(Some("restart requested".into()));
                            st.pending_attempt = Some(0);
                        } else if st.open.is_empty() {
                            start_connection(&myself, st).await;
                        } else {
                            st.pending_attempt = Some(0);
                        }
                    }
                    let _ = reply.send(());
                }
                ServerSupervisorMsg::Shutdown { reply } => {
                    quiesce(&myself, st, reply, true);
                }
                ServerSupervisorMsg::SetEnabled {
                    enabled: false,
                    reply,
                } => {
                    if st.off || st.disposing.is_some() {
                        let _ = reply.send(ShutdownReport::default());
                        return Ok(());
                    }
                    st.off = true;
                    let _ = st.registry.cast(RegistryMsg::RemoveTools {
                        server: st.config.server_name.clone(),
                    });
                    st.instructions = None;
                    quiesce(&myself, st, reply, false);
                }
                ServerSupervisorMsg::SetEnabled {
                    enabled: true,
                    reply,
                } => {
                    if st.off && st.disposing.is_none() {
                        st.off = false;
                        st.failures = 0;
                        st.status.error = None;
                        if st.open.is_empty() {
                            start_connection(&myself, st).await;
                        } else {
                            st.pending_attempt = Some(0);
                        }
                    }
                    let _ = reply.send(ShutdownReport::default());
                }
                #[cfg(feature = "chaos")]
                ServerSupervisorMsg::FailForChaos => {
                    return Err("a failure injected by the chaos runner".into());
                }
                ServerSupervisorMsg::ShutdownDeadline => {
                    let open: Vec<u64> = st.open.iter().copied().collect();
                    if let Some(d) = st.disposing.as_mut() {
                        d.deadline = None;
                        for conn_gen in open {
                            d.report.unconfirmed.push(format!(
                                "{}/{}: connection {conn_gen} did not confirm its close within {} s",
                                st.scope,
                                st.config.server_name,
                                SHUTDOWN_DEADLINE.as_secs()
                            ));
                        }
                        if st.conn.is_some() {
                            d.report.unconfirmed.push(format!(
                                "{}/{}: connection actor did not stop",
                                st.scope, st.config.server_name
                            ));
                        }
                    }
                    st.open.clear();
                    st.conn = None;
                    finish_if_done(&myself, st);
                }
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        evt: SupervisionEvent,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason): (ActorCell, String) = match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (
                cell,
                reason.unwrap_or_else(|| "the connection stopped".into()),
            ),
            SupervisionEvent::ActorFailed(cell, err) => {
                (cell, format!("the connection actor failed: {err}"))
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {
                return Ok(());
            }
        };
        let is_current = st.conn.as_ref().map(|c| c.cell.get_id()) == Some(cell.get_id());
        if !is_current {
            return Ok(());
        }
        if let Some(slot) = st.conn.take() {
            on_connection_exit(&myself, st, slot, reason).await;
        }
        Ok(())
    }
}

/// Spawn `Connection(next_gen)`; the transport counts as open until it confirms its close.
async fn start_connection(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let conn_gen = st.next_gen;
    st.next_gen += 1;
    st.diag = Arc::new(Diagnostics::default());
    if !matches!(st.status.state, ServerState::Reconnecting { .. }) {
        st.status.state = ServerState::Connecting;
    }
    st.status.pid = None;
    let args = ConnectionArgs {
        conn_gen,
        config: st.config.clone(),
        supervisor: myself.clone(),
        diag: st.diag.clone(),
        handlers: st.handlers.clone(),
    };
    st.open.insert(conn_gen);
    match Actor::spawn_linked(None, Connection, args, myself.get_cell()).await {
        Ok((cell, _)) => {
            st.conn = Some(ConnSlot {
                cell,
                conn_gen,
                up_since: None,
                intent: StopIntent::None,
            });
            st.publish();
        }
        Err(e) => {
            // Nothing was spawned, so there is nothing to close.
            st.open.remove(&conn_gen);
            let slot_less = format!("could not start the connection actor: {e}");
            register_failure(myself, st, None, slot_less);
        }
    }
}

/// The current connection exited: decide between idle stop, restart, shutdown and failure.
async fn on_connection_exit(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    slot: ConnSlot,
    reason: String,
) {
    st.live = None;
    if let Some(t) = st.idle_timer.take() {
        t.abort();
    }
    if let Some(t) = st.sync.take() {
        t.abort();
    }
    if st.open.contains(&slot.conn_gen) {
        let conn_gen = slot.conn_gen;
        let timer = myself.send_after(CLOSE_BARRIER, move || ServerSupervisorMsg::CloseDeadline {
            conn_gen,
        });
        st.close_timers.push((conn_gen, timer));
    }
    match slot.intent {
        StopIntent::Shutdown => finish_if_done(myself, st),
        StopIntent::Idle => {
            st.status.pid = None;
            st.set_state(ServerState::IdleStopped);
        }
        StopIntent::Restart => {
            st.status.pid = None;
            st.set_state(ServerState::Connecting);
            if st.open.is_empty() {
                st.pending_attempt = None;
                start_connection(myself, st).await;
            }
        }
        StopIntent::None => register_failure(myself, st, slot.up_since, reason),
    }
}

/// Count a failure against the outage's budget and schedule the next attempt (RECO-1/2/4/5).
fn register_failure(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    up_since: Option<Instant>,
    cause: String,
) {
    let policy = st.config.reconnect.clone();
    if up_since.is_some_and(|t| t.elapsed() >= policy.stability_window()) {
        st.failures = 0; // RECO-2: the connection stayed up for the window; the outage ended.
    }
    st.failures += 1;
    st.status.pid = None;
    st.status.error = Some(cause.clone());
    st.answer_waiters(Err(cause));
    if !policy.enabled {
        if st.config.on_disconnect == OnDisconnect::Remove {
            let _ = st.registry.cast(RegistryMsg::RemoveTools {
                server: st.config.server_name.clone(),
            });
            st.instructions = None; // RES-5: withdrawn together with the tools.
        }
        st.set_state(ServerState::Failed);
        return;
    }
    if st.failures > policy.max_attempts {
        // RECO-4
        let _ = st.registry.cast(RegistryMsg::RemoveTools {
            server: st.config.server_name.clone(),
        });
        st.instructions = None;
        st.set_state(ServerState::Exhausted);
        return;
    }
    let attempt = st.failures;
    let mut delay = policy.delay_for_attempt(attempt);
    if policy.jitter {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        delay = Duration::from_millis(rand::rng().random_range(ms / 2..=ms));
    }
    st.backoff = Some(myself.send_after(delay, move || ServerSupervisorMsg::Reconnect { attempt }));
    st.set_state(ServerState::Reconnecting {
        attempt,
        of: policy.max_attempts,
    });
}

/// RECO-3: the previous transport could not be confirmed closed; never overlap.
fn barrier_failed(st: &mut ServerSupervisorState, conn_gen: u64, pid: Option<u32>) {
    st.cancel_timers();
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
    st.set_state(ServerState::Failed);
}

/// Build a catalog generation from raw entries and swap it in (SYNC-3, SYNC-4).
async fn apply_catalog(
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    entries: Vec<serde_json::Value>,
) {
    let generation = st.catalog_gen + 1;
    let built = build_catalog(
        &st.scope,
        st.name(),
        generation,
        entries,
        &st.diag.task_required(),
    );
    match built {
        Ok(catalog) => {
            st.catalog_warnings = catalog.warnings;
            let swap = ractor::call_t!(
                st.registry,
                |reply| RegistryMsg::Swap {
                    server: st.config.server_name.clone(),
                    conn_gen,
                    generation,
                    tools: catalog.tools,
                    reply,
                },
                5000
            );
            st.catalog_gen = generation;
            match swap {
                Ok(Ok(n)) => {
                    st.status.tools = n;
                    st.status.generation = generation;
                }
                Ok(Err(e)) => {
                    // SYNC-4: zero tools; RES-5: instructions go with them.
                    st.status.tools = 0;
                    st.status.error = Some(e);
                    st.instructions = None;
                }
                Err(e) => st.status.error = Some(format!("registry did not answer: {e}")),
            }
        }
        Err(e) => {
            st.catalog_warnings = vec![format!("catalog rejected, previous generation kept: {e}")];
        }
    }
    st.publish();
}

fn start_sync(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let Some(live) = st.live.clone() else {
        return;
    };
    let me = myself.clone();
    let timeout = st.config.request_timeout;
    let diag = st.diag.clone();
    st.sync = Some(tokio::spawn(async move {
        let result = fetch_catalog(&live.peer, timeout, &diag).await;
        let _ = me.cast(ServerSupervisorMsg::SyncDone {
            conn_gen: live.conn_gen,
            result,
        });
    }));
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
    if let Some(t) = st.idle_timer.take() {
        t.abort();
    }
    st.idle_timer =
        Some(myself.send_after(after.unwrap_or(limit), || ServerSupervisorMsg::IdleCheck));
}

fn check_idle(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    let Some(limit) = idle_limit(st) else {
        return;
    };
    if st.live.is_none() || st.disposing.is_some() {
        return;
    }
    match st.activity.idle_for() {
        Some(idle) if idle >= limit => {
            if let Some(slot) = st.conn.as_mut() {
                slot.intent = StopIntent::Idle;
                slot.cell.stop(Some("idle stop".into()));
            }
        }
        Some(idle) => arm_idle(myself, st, Some(limit - idle)),
        None => arm_idle(myself, st, Some(limit)),
    }
}

fn finish_if_done(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
    if st.conn.is_some() || !st.open.is_empty() {
        return;
    }
    let Some(mut d) = st.disposing.take() else {
        return;
    };
    if let Some(t) = d.deadline.take() {
        t.abort();
    }
    d.report
        .servers_stopped
        .push(format!("{}/{}", st.scope, st.config.server_name));
    d.report.duration_ms = u64::try_from(d.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    st.live = None;
    st.status.pid = None;
    if !d.then_stop {
        st.status.error = Some("turned off".into());
    }
    st.set_state(ServerState::Stopped);
    if let Some(reply) = d.reply.take() {
        let _ = reply.send(d.report);
    }
    if d.then_stop {
        myself.stop(Some("shutdown".into()));
    }
}

/// Stop the connection and everything pending, and answer `reply` with the
/// report once every transport confirmed its close (RECO-7, TRUST-1).
fn quiesce(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    reply: RpcReplyPort<ShutdownReport>,
    then_stop: bool,
) {
    st.cancel_timers();
    for (_, t) in st.close_timers.drain(..) {
        t.abort();
    }
    let why = if then_stop {
        "the runtime is shutting down"
    } else {
        "the server was turned off"
    };
    st.answer_waiters(Err(why.into()));
    let deadline = myself.send_after(SHUTDOWN_DEADLINE, || ServerSupervisorMsg::ShutdownDeadline);
    st.disposing = Some(Disposal {
        reply: Some(reply),
        then_stop,
        report: ShutdownReport {
            calls_cancelled: st.activity.in_flight() as u64,
            ..Default::default()
        },
        started: Instant::now(),
        deadline: Some(deadline),
    });
    if let Some(slot) = st.conn.as_mut() {
        slot.intent = StopIntent::Shutdown;
        slot.cell.stop(Some(why.into()));
    }
    finish_if_done(myself, st);
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
