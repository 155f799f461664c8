//! What the server supervisor does on each message and supervision event:
//! the rows of the phase table in `mod.rs`, one handler per event.

use super::*;

/// A supervision event: the connection or the running CatalogSync stopped.
pub(super) async fn on_supervision_event(
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
pub(super) async fn on_conn_up(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    client: crate::messages::registry::McpClient,
    info: crate::messages::server::ConnInfo,
    catalog: crate::messages::catalog::ToolPages,
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
    st.era = Some(info.era());
    st.was_up = true;
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
            era: info.era(),
            progress: st.diag.progress.clone(),
            handlers: Arc::new(st.handlers.clone()),
        },
        idle: None,
        sync: None,
    };
    // The live handle goes out with the first catalog, in one registry
    // snapshot: never callable under the previous connection's definitions;
    // `ready` only once the catalog is registered (CONN-10).
    apply_catalog(st, conn_gen, catalog.entries, true).await;
    arm_expiry(myself, st, conn_gen, catalog.fresh_for);
    st.answer_waiters(Ok(()));
    arm_idle(myself, st, None);
    // A list_changed during the handshake: the first catalog may be old.
    sync_if_pending(myself, st).await;
}

/// `ConnectionEnded`: a transport confirmed its close, or could not.
pub(super) async fn on_connection_ended(
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
pub(super) async fn on_tools_list_changed(
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
pub(super) async fn on_sync_done(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    n: u64,
    result: Result<crate::messages::catalog::ToolPages, String>,
) {
    let Phase::Ready { live, sync, .. } = &mut st.phase else {
        return;
    };
    if live.conn_gen != conn_gen || sync.as_ref().is_none_or(|s| s.n != n) {
        return; // SYNC-6
    }
    *sync = None;
    match result {
        Ok(pages) => {
            apply_catalog(st, conn_gen, pages.entries, false).await;
            arm_expiry(myself, st, conn_gen, pages.fresh_for);
        }
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
pub(super) async fn on_reconnect(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    attempt: u32,
) {
    let backing_off = match st.phase {
        Phase::BackingOff { attempt: a, .. } => Some(a),
        _ => None,
    };
    let clear = st.barrier.is_clear() || st.chaos.skip_close_barrier();
    match decide::on_reconnect(backing_off, attempt, clear) {
        WhenDue::Connect => {
            st.status.restarts += 1;
            start_connection(myself, st, attempt).await;
        }
        WhenDue::AwaitClose => st.enter(Phase::AwaitingClose { attempt }),
        WhenDue::Stale => {}
    }
}

/// `Wake` (RECO-6): a call found the server not connected.
pub(super) async fn on_wake(
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
pub(super) async fn on_restart(
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
pub(super) fn on_shutdown_deadline(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
) {
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
