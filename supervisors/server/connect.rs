//! Connections: the next generation started once the close barrier is
//! clear (RECO-3), a connection's exit judged, and a failure counted
//! against the reconnect budget (RECO-1/2/4).

use super::*;

/// Start a connection now, or as soon as every previous transport confirmed
/// its close (RECO-3).
pub(super) async fn connect_when_clear(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    attempt: u32,
) {
    match decide::when_due(st.barrier.is_clear() || st.chaos.skip_close_barrier()) {
        WhenDue::Connect => start_connection(myself, st, attempt).await,
        WhenDue::AwaitClose | WhenDue::Stale => st.enter(Phase::AwaitingClose { attempt }),
    }
}

/// Spawn `Connection(next_gen)`; the transport counts as open until it confirms its close.
pub(super) async fn start_connection(
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
        era: st.era,
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
pub(super) async fn on_connection_exit(
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
        AfterExit::Failure => {
            if slot.up_since.is_none() {
                st.era = None;
            }
            register_failure(myself, st, slot.up_since, reason)
        }
    }
}

/// Count a failure against the outage's budget and schedule the next attempt (RECO-1/2/4/5).
pub(super) fn register_failure(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    up_since: Option<Instant>,
    cause: String,
) {
    // A missing executable is not transient: a server that never came up
    // fails at once, naming the directories searched. One that ran before
    // keeps its budget (its executable may be mid-upgrade).
    let permanent = up_since.is_none()
        && !st.was_up
        && match &st.config.transport {
            crate::messages::config::TransportConfig::Stdio(c) => {
                crate::transport::stdio::missing_executable(c)
            }
            _ => false,
        };
    let failure = decide::Failure {
        failures: st.failures,
        up_for: up_since.map(|t| t.elapsed()),
        permanent,
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
pub(super) fn barrier_failed(st: &mut ServerSupervisorState, conn_gen: u64, pid: Option<u32>) {
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
