//! What the gateway tells its clients unasked: the scope's catalog changes
//! as `notifications/tools/list_changed`, coalesced, and resource updates
//! to the sessions that subscribed.

use super::*;

/// Sends `notifications/tools/list_changed` to every client after a burst
/// of catalog changes in the gateway's scope (coalesced), until the gateway
/// stops.
pub(super) async fn notifier(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    let (scope, quiet, max_wait) = match shared.upgrade() {
        Some(s) => (
            s.options.scope.clone(),
            s.options.notify_quiet,
            s.options.notify_max_wait,
        ),
        None => return,
    };
    let relevant = |ev: &Result<RuntimeEvent, RecvError>| match ev {
        Ok(RuntimeEvent::CatalogChanged { scope: s, .. }) => *s == scope,
        // Missed events may have been catalog changes.
        Err(RecvError::Lagged(_)) => true,
        _ => false,
    };
    // The catalog the clients were last told of (or first listed).
    let mut told: Option<u64> = None;
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            ev = events.recv() => ev,
        };
        if matches!(first, Err(RecvError::Closed)) {
            return;
        }
        if !relevant(&first) {
            continue;
        }
        // Coalesce: wait until `quiet` passed without another change, at
        // most `max_wait` after the first.
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut last = tokio::time::Instant::now();
        loop {
            let until = (last + quiet).min(deadline);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(until) => break,
                ev = events.recv() => {
                    if matches!(ev, Err(RecvError::Closed)) {
                        break;
                    }
                    if relevant(&ev) {
                        last = tokio::time::Instant::now();
                    }
                }
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // A reload in progress: wait for it, then count what it changed
        // in this one notification.
        let hold = shared.hold.clone();
        let _released = tokio::select! {
            _ = stop.cancelled() => return,
            r = hold.read_owned() => r,
        };
        while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
            events.try_recv()
        {}
        // Changes the clients' lists already hold (the servers that came up
        // while the first list waited for them) are owed no notification.
        let now = shared.catalog_fingerprint();
        if told.or_else(|| shared.settled_catalog.get().copied()) == Some(now) {
            continue;
        }
        told = Some(now);
        let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
            Ok(mut clients) => {
                clients.retain(|_, p| !p.is_transport_closed());
                clients.values().cloned().collect()
            }
            Err(_) => Vec::new(),
        };
        // Stateless clients hear it on their listen streams.
        let _ = shared
            .listens
            .send(rmcp::model::ServerNotification::ToolListChangedNotification(Default::default()));
        for peer in peers {
            shared.notified.fetch_add(1, Ordering::Relaxed);
            // A client that stopped reading holds up nobody else.
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), peer.notify_tool_list_changed())
                        .await;
            });
        }
    }
}

/// Which task gets which runtime events ([`dispatch`]).
#[derive(Default)]
pub(super) struct Routes {
    routes: Vec<Route>,
}

/// Which events a task wants, and where they go.
type Route = (
    fn(&RuntimeEvent) -> bool,
    tokio::sync::broadcast::Sender<RuntimeEvent>,
);

impl Routes {
    /// The events `wants` accepts, on a channel of their own.
    pub(super) fn add(
        &mut self,
        wants: fn(&RuntimeEvent) -> bool,
    ) -> tokio::sync::broadcast::Receiver<RuntimeEvent> {
        let (to, from) = tokio::sync::broadcast::channel(256);
        self.routes.push((wants, to));
        from
    }
}

/// Reads the runtime's events once for all the gateway's tasks: each goes
/// to the tasks whose route accepts it; the calls' own events (most of
/// them) go nowhere. Missed events may have been catalog changes of
/// `scope`: the catalog route is told one happened.
pub(super) async fn dispatch(
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    routes: Routes,
    metrics: std::sync::Arc<super::metrics::Metrics>,
    scope: Scope,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    while let Some(ev) = next(&mut events, &stop).await {
        let ev = match ev {
            Ok(ev) => {
                if matches!(&ev, RuntimeEvent::CallFinished { scope: s, .. } if *s == scope) {
                    metrics.observe(&ev);
                }
                ev
            }
            Err(RecvError::Lagged(n)) => {
                metrics.missed(n);
                RuntimeEvent::CatalogChanged {
                    scope: scope.clone(),
                    server: String::new(),
                    generation: 0,
                    tools: 0,
                }
            }
            Err(RecvError::Closed) => return,
        };
        for (wants, to) in &routes.routes {
            if wants(&ev) {
                let _ = to.send(ev.clone());
            }
        }
    }
}

/// Forwards the backends' `notifications/resources/updated` to the sessions
/// that subscribed to the URI, until the gateway stops.
pub(super) async fn resource_updates(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    while let Some(ev) = next(&mut events, &stop).await {
        let (scope, uri) = match ev {
            Ok(RuntimeEvent::ResourceUpdated { scope, uri, .. }) => (scope, uri),
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if scope != shared.options.scope {
            continue;
        }
        updated(&shared, uri);
    }
}

/// A backend that came back (a new connection, after a crash, a restart
/// or an idle stop) has forgotten what it was asked to follow: it is asked
/// again for every resource the gateway's clients follow there, and the
/// clients are told each may have changed meanwhile.
pub(super) async fn resubscribe(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    // Each server's connection when the gateway started: only a newer one
    // has lost subscriptions.
    let mut seen: HashMap<String, u64> = match shared.upgrade() {
        Some(s) => s
            .runtime
            .status()
            .into_iter()
            .filter(|st| st.scope == s.options.scope)
            .map(|st| (st.server, st.connection_generation))
            .collect(),
        None => return,
    };
    while let Some(ev) = next(&mut events, &stop).await {
        let status = match ev {
            Ok(RuntimeEvent::ServerStatus(status)) if status.state == crate::ServerState::Ready => {
                status
            }
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if status.scope != shared.options.scope {
            continue;
        }
        let before = seen.insert(status.server.clone(), status.connection_generation);
        if before.is_none_or(|g| g >= status.connection_generation) {
            continue;
        }
        let uris: Vec<String> = shared
            .followed
            .lock()
            .map(|f| {
                f.iter()
                    .filter(|(_, server)| **server == status.server)
                    .map(|(uri, _)| uri.clone())
                    .collect()
            })
            .unwrap_or_default();
        for uri in uris {
            match shared
                .runtime
                .subscribe_resource(&status.scope, &status.server, &uri)
                .await
            {
                Ok(()) => updated(&shared, uri),
                Err(e) => tracing::warn!(
                    server = %status.server,
                    uri = %uri,
                    error = %e,
                    "gateway: a resource could not be followed again after the server came back"
                ),
            }
        }
    }
}

/// Tell every client that follows `uri` that it was updated.
fn updated(shared: &Shared, uri: String) {
    // Stateless clients: each listen stream passes on the URIs its
    // filter names.
    let _ = shared.listens.send(
        rmcp::model::ServerNotification::ResourceUpdatedNotification(
            rmcp::model::ResourceUpdatedNotification::new(
                rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone()),
            ),
        ),
    );
    let ids: Vec<u64> = shared
        .subscriptions
        .lock()
        .ok()
        .and_then(|s| s.get(&uri).map(|ids| ids.iter().copied().collect()))
        .unwrap_or_default();
    let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
        Ok(c) => ids.iter().filter_map(|id| c.get(id).cloned()).collect(),
        Err(_) => Vec::new(),
    };
    for peer in peers {
        let params = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), peer.notify_resource_updated(params))
                    .await;
        });
    }
}

/// Run `work` (a request that follows a call) while the call's progress
/// goes to the client that made the request (GW-2): `sink` is pointed at
/// this request, and each note is sent as `notifications/progress` under
/// the client's own `token`, in the handler's own task. Once `work` is
/// done (a result, or a round that pauses the call for the client's
/// answer: its retry takes the call's progress over) the sink points
/// nowhere, and what came before goes out first. Without a token, `work`
/// alone.
pub(super) async fn with_progress<T>(
    sink: &crate::ProgressSink,
    token: Option<rmcp::model::ProgressToken>,
    peer: &Peer<RoleServer>,
    work: impl std::future::Future<Output = T>,
) -> T {
    let Some(token) = token else {
        return work.await;
    };
    let (to, mut notes) = tokio::sync::mpsc::unbounded_channel::<crate::ProgressNote>();
    sink.to(Some(to));
    // A client that stopped reading holds its own request up 5 s at
    // most: once a note could not be sent in that time, the rest are
    // dropped.
    let mut stalled = false;
    let mut send = async |note: crate::ProgressNote| {
        if stalled {
            return;
        }
        let mut param = rmcp::model::ProgressNotificationParam::new(token.clone(), note.progress);
        param.total = note.total;
        param.message = note.message;
        let sent = tokio::time::timeout(Duration::from_secs(5), peer.notify_progress(param));
        stalled = sent.await.is_err();
    };
    let mut work = std::pin::pin!(work);
    let out = loop {
        tokio::select! {
            biased;
            Some(note) = notes.recv() => send(note).await,
            out = &mut work => break out,
        }
    };
    sink.to(None);
    while let Ok(note) = notes.try_recv() {
        send(note).await;
    }
    out
}

/// Passes the backends' prompt and resource list changes on to every
/// client (GW-2): session clients as notifications, stateless ones on
/// their listen streams; until the gateway stops.
pub(super) async fn list_changes(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    use rmcp::model::ServerNotification as N;
    while let Some(ev) = next(&mut events, &stop).await {
        let (scope, prompts) = match ev {
            Ok(RuntimeEvent::ListChanged { scope, list, .. }) => (scope, list == "prompts"),
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if scope != shared.options.scope {
            continue;
        }
        let _ = shared.listens.send(if prompts {
            N::PromptListChangedNotification(Default::default())
        } else {
            N::ResourceListChangedNotification(Default::default())
        });
        let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
            Ok(c) => c.values().cloned().collect(),
            Err(_) => Vec::new(),
        };
        for peer in peers {
            tokio::spawn(async move {
                let sent = async {
                    if prompts {
                        peer.notify_prompt_list_changed().await
                    } else {
                        peer.notify_resource_list_changed().await
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), sent).await;
            });
        }
    }
}

/// Passes the backends' log messages (`notifications/message`) on to the
/// session clients whose level (`logging/setLevel`; all, before one is
/// set) they reach (GW-2), the logger named `<server>` or
/// `<server>/<logger>`; until the gateway stops. Logging is deprecated by
/// SEP-2577, so stateless clients are not sent any.
#[allow(deprecated)]
pub(super) async fn server_logs(
    shared: std::sync::Weak<Shared>,
    mut events: tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: CancellationToken,
) {
    while let Some(ev) = next(&mut events, &stop).await {
        let (scope, server, level, logger, data) = match ev {
            Ok(RuntimeEvent::ServerLog {
                scope,
                server,
                level,
                logger,
                data,
            }) => (scope, server, level, logger, data),
            _ => continue,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if scope != shared.options.scope {
            continue;
        }
        let Ok(level_value) = serde_json::from_value::<rmcp::model::LoggingLevel>(
            serde_json::Value::String(level.clone()),
        ) else {
            continue;
        };
        let rank = log_rank(&level);
        let levels = shared
            .log_levels
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        let peers: Vec<Peer<RoleServer>> = match shared.clients.lock() {
            Ok(c) => c
                .iter()
                .filter(|(id, _)| levels.get(id).is_none_or(|min| rank >= *min))
                .map(|(_, p)| p.clone())
                .collect(),
            Err(_) => Vec::new(),
        };
        let logger = match &logger {
            Some(l) => format!("{server}/{l}"),
            None => server.clone(),
        };
        for peer in peers {
            let note = rmcp::model::LoggingMessageNotificationParam::new(level_value, data.clone())
                .with_logger(logger.clone());
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), peer.notify_logging_message(note))
                        .await;
            });
        }
    }
}

/// The next runtime event (a lagged receiver's lag included), or `None`
/// once the gateway stops or the runtime's events end.
async fn next(
    events: &mut tokio::sync::broadcast::Receiver<RuntimeEvent>,
    stop: &CancellationToken,
) -> Option<Result<RuntimeEvent, tokio::sync::broadcast::error::RecvError>> {
    use tokio::sync::broadcast::error::RecvError;
    tokio::select! {
        _ = stop.cancelled() => None,
        ev = events.recv() => match ev {
            Err(RecvError::Closed) => None,
            ev => Some(ev),
        },
    }
}
