//! The server's catalog: a fetched catalog swapped in (CONN-10) and the
//! catalog syncs serialised, one running and at most one pending (SYNC-5/6).

use super::*;

/// Build a catalog generation from raw entries and swap it in (SYNC-3,
/// SYNC-4); a connection's `first` catalog carries its live handle.
pub(super) async fn apply_catalog(
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
pub(super) async fn sync_if_pending(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
) {
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

/// The shortest freshness honoured: a list that says it is fresh for less
/// is fetched again after this long.
pub(super) const MIN_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// Fetch the tool list of connection `conn_gen` again once it is past the
/// freshness its server gave (`ttlMs`, SEP-2549; at least [`MIN_FRESH`]),
/// through the list-change path (coalesced with notifications, one sync at
/// a time, SYNC-5). `ttlMs` 0 ("stale at once") and none arm nothing: such
/// a list is fetched again on a change notification only. Each arming
/// voids the last.
pub(super) fn arm_expiry(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
    conn_gen: u64,
    fresh_for: Option<std::time::Duration>,
) {
    st.expiry_arms += 1;
    let Some(fresh) = fresh_for.filter(|d| !d.is_zero()) else {
        return;
    };
    let arm = st.expiry_arms;
    myself.send_after(fresh.max(MIN_FRESH), move || {
        ServerSupervisorMsg::CatalogExpired { conn_gen, arm }
    });
}

/// Start `CatalogSync(conn_gen, n)`, a linked child (ADR 0011). One that
/// cannot be started leaves the catalog as it is, with a warning.
pub(super) async fn start_sync(
    myself: &ActorRef<ServerSupervisorMsg>,
    st: &mut ServerSupervisorState,
) {
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
