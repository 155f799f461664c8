//! Stopping: the idle stop (RECO-6), and the quiescent disposal that ends
//! an off switch or a shutdown with its report (TRUST-1, RECO-7).

use super::*;

pub(super) fn idle_limit(st: &ServerSupervisorState) -> Option<Duration> {
    match st.config.transport {
        TransportConfig::StreamableHttp(_) => None, // RECO-6 applies to processes only.
        _ => st.config.idle_stop_after,
    }
}

pub(super) fn arm_idle(
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
pub(super) fn check_idle(myself: &ActorRef<ServerSupervisorMsg>, st: &mut ServerSupervisorState) {
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
pub(super) fn finish_if_done(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
) {
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
pub(super) fn quiesce(
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
