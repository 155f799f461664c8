//! The wire half of a call: the request sent on the live connection, and
//! what came back (a result, an error, a lost connection, a timeout)
//! turned into the outcome, with what is known of its side effects.

use super::*;

/// A request's progress token routed to its call while the request is
/// under way: notes that came first are passed on at once (to the call's
/// sink by the route itself); the route is dropped with the guard.
fn routed<'a>(
    live: &'a crate::messages::registry::LiveConn,
    server: &str,
    token: &rmcp::model::ProgressToken,
    route: crate::messages::registry::CallRoute,
) -> crate::messages::registry::RouteHeld<'a> {
    let key = crate::transport::client::progress_key(token);
    let call_id = route.call_id;
    for note in live.progress.route(key.clone(), route) {
        if let Some(call_id) = call_id {
            crate::transport::client::emit_progress(&live.handlers, server, call_id, note);
        }
    }
    live.progress.held(key)
}

/// Ends when the caller cancels the call; never when it gave no token of
/// its own (then nothing can cancel it).
pub(super) async fn cancelled_by(options: &CallOptions) {
    match &options.cancel {
        Some(cancel) => cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

impl Runtime {
    /// Send `out` on `live` and turn what comes back into the outcome.
    pub(super) async fn send_call(
        &self,
        scope: &Scope,
        def: &ToolDefinition,
        live: &crate::messages::registry::LiveConn,
        out: Outgoing,
        entry: &ServerEntry,
        options: &CallOptions,
    ) -> ToolOutcome {
        let timeout = entry.config.tool_call_timeout;
        if self.inner.chaos.no_recovery() && live.conn_gen > 1 {
            return ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!("server \"{}\" never came back (chaos)", def.server),
            );
        }
        // Handing the request to rmcp's service loop is inside the call's
        // deadline too: a loop stuck on a blocked transport must not hold
        // the caller (CALL-4).
        // One deadline for both halves: a timer is registered only if the
        // hand-over does not finish at once.
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut arguments = out.arguments;
        let mut answers = None;
        // A tool that requires a task gets the tasks extension declared on
        // its requests (ERA-6), in the stateless era only: the extension
        // is of 2026-07-28 (the call path refuses such a tool in the
        // session era before it gets here). Every other call stays
        // synchronous: the server may not answer it with a task.
        let tasks_meta = (def.task_support_required
            && live.era == crate::messages::server::Era::Stateless)
            .then(|| crate::transport::client::tasks_meta(&live.handlers));
        // A call made for a relaying client tells a stateless server what
        // that client can answer (GW-2).
        let mut call_meta = match (&options.relay, live.era) {
            (Some(relay), crate::messages::server::Era::Stateless) => Some(
                crate::transport::client::relay_meta(relay.offers(), tasks_meta.is_some()),
            ),
            _ => tasks_meta.clone(),
        };
        // The trace the call continues reaches the server (SEP-414), this
        // call's span as the parent.
        if let Some(t) = &options.trace {
            let meta = call_meta.get_or_insert_with(Default::default);
            meta.set_traceparent(t.traceparent());
            if let Some(state) = &t.state {
                meta.set_tracestate(state.clone());
            }
        }
        let mut rounds: u32 = 0;
        let (response, lost_as) = loop {
            // A stateless server may answer `input_required` (ERA-5): the
            // request is then sent again with the same arguments, so a copy
            // is kept where that can happen, and only there.
            let again =
                (live.era == crate::messages::server::Era::Stateless).then(|| arguments.clone());
            // A session-era server's request that comes before the route
            // below is made goes to the call's client too (GW-2); a
            // stateless one asks in its result instead.
            let handing = live.progress.sending(
                options
                    .relay
                    .as_ref()
                    .filter(|_| live.era != crate::messages::server::Era::Stateless),
            );
            let sending =
                live.client
                    .send_call(&def.raw_name, arguments, answers.take(), call_meta.clone());
            let handed = tokio::select! {
                biased;
                handed = sending => Ok(handed),
                () = &mut deadline => Err(()),
            };
            let mut handle = match handed {
                Ok(Ok(h)) => h,
                Ok(Err(e)) => {
                    return self
                        .lost(
                            scope,
                            def,
                            live.conn_gen,
                            crate::transport::client::service_words(&e),
                            Lost::NotSent,
                        )
                        .await;
                }
                Err(_) => {
                    return ToolOutcome::failure(
                        OutcomeKind::Timeout,
                        format!(
                            "the request could not be handed to the transport within tool_call_timeout_ms = {}; side effects unknown",
                            timeout.as_millis()
                        ),
                    );
                }
            };
            // The server's `notifications/progress` for this request's
            // token become this very call's events, until it is over.
            // A server's requests meanwhile go to the call's client (GW-2).
            let _routed = routed(
                live,
                &def.server,
                &handle.progress_token,
                crate::messages::registry::CallRoute {
                    call_id: Some(out.call_id),
                    relay: options.relay.clone(),
                    progress: options.progress.clone(),
                },
            );
            drop(handing);
            #[allow(clippy::large_enum_variant)] // a local, moved once
            enum Ended {
                Response(
                    Result<
                        Result<ServerResult, ServiceError>,
                        tokio::sync::oneshot::error::RecvError,
                    >,
                ),
                Timeout,
                Cancelled,
            }
            let cancelled = cancelled_by(options);
            // A reply that is there wins over a deadline that passed with it.
            let ended = tokio::select! {
                biased;
                r = &mut handle.rx => Ended::Response(r),
                () = &mut deadline => Ended::Timeout,
                _ = cancelled => Ended::Cancelled,
            };
            // CALL-5: where the transport can tell, a failed call the server
            // never received says so (not sent, nothing ran), and only one it
            // may have received says "side effects unknown".
            let delivered = live.deliveries.as_ref().map(|d| {
                let id = crate::transport::stdio::request_id_key(&handle.id);
                let delivery = d.of(&id);
                d.forget(&id);
                delivery
            });
            let lost_as = match delivered {
                Some(Delivery::NotSent) => Lost::NotSent,
                Some(Delivery::Refused(why)) => Lost::Refused(why),
                Some(Delivery::MayHaveArrived) | None => Lost::InFlight,
            };
            let response: Result<ServerResult, ServiceError> = match ended {
                Ended::Response(Ok(r)) => r,
                Ended::Response(Err(_)) => Err(ServiceError::TransportClosed),
                Ended::Timeout => {
                    if self.inner.chaos.late_timeouts() {
                        tokio::time::sleep(Duration::from_secs(4)).await;
                    }
                    // The notice is best effort, within a bounded margin (CALL-4).
                    let notice = handle.cancel(Some("tool call timed out".into()));
                    let _ = tokio::time::timeout(CANCEL_NOTICE_WAIT, notice).await;
                    return ToolOutcome::failure(
                        OutcomeKind::Timeout,
                        format!(
                            "no result within tool_call_timeout_ms = {}; the server was told to cancel; side effects unknown",
                            timeout.as_millis()
                        ),
                    );
                }
                Ended::Cancelled => {
                    // The notice is best effort, within a bounded margin (CALL-4).
                    let notice = handle.cancel(Some("cancelled by the caller".into()));
                    let _ = tokio::time::timeout(CANCEL_NOTICE_WAIT, notice).await;
                    return ToolOutcome::failure(
                        OutcomeKind::Cancelled,
                        "cancelled by the caller; the server was told to cancel; side effects unknown",
                    );
                }
            };
            match response {
                Ok(ServerResult::InputRequiredResult(asked)) => {
                    rounds += 1;
                    let max = entry.config.max_input_rounds;
                    let Some(same) = again.filter(|_| rounds <= max) else {
                        return ToolOutcome::failure(
                            OutcomeKind::InvalidResult,
                            format!(
                                "{}; side effects unknown",
                                crate::transport::WireError::Rounds { rounds, max }
                            ),
                        );
                    };
                    // Answering is inside the call's deadline too (CALL-4).
                    let answering = crate::transport::client::answer_input_required(
                        &live.handlers,
                        options.relay.as_deref(),
                        &def.server,
                        &live.redactions,
                        asked,
                    );
                    let cancelled = cancelled_by(options);
                    let answered = tokio::select! {
                        biased;
                        a = answering => a,
                        () = &mut deadline => {
                            return ToolOutcome::failure(
                                OutcomeKind::Timeout,
                                format!(
                                    "the server asked for input, which was not answered within tool_call_timeout_ms = {}; side effects unknown",
                                    timeout.as_millis()
                                ),
                            );
                        }
                        _ = cancelled => {
                            return ToolOutcome::failure(
                                OutcomeKind::Cancelled,
                                "cancelled by the caller while the server's input request was answered; side effects unknown",
                            );
                        }
                    };
                    match answered {
                        Ok(a) => {
                            answers = Some(a);
                            arguments = same;
                        }
                        Err(why) => {
                            return ToolOutcome::failure(
                                OutcomeKind::ServerError,
                                redact(&format!("{why}; side effects unknown"), &live.redactions),
                            );
                        }
                    }
                }
                other => break (other, lost_as),
            }
        };
        let mut canonical = match response {
            Ok(ServerResult::CallToolResult(r)) => match serde_json::to_value(&r) {
                Ok(v) => v,
                Err(e) => return ToolOutcome::failure(OutcomeKind::InvalidResult, e.to_string()),
            },
            Ok(ServerResult::CustomResult(v)) => v.0,
            Ok(ServerResult::CreateTaskResult(created)) => {
                let Some(meta) = tasks_meta else {
                    return ToolOutcome::failure(
                        OutcomeKind::InvalidResult,
                        format!(
                            "server \"{}\" made the call a task (the tasks extension), although the request did not declare the extension; side effects unknown",
                            def.server
                        ),
                    );
                };
                let call = super::task::TaskCall {
                    scope,
                    def,
                    live,
                    options,
                    timeout,
                    max_rounds: entry.config.max_input_rounds,
                    meta,
                    call_id: out.call_id,
                };
                match self.follow_task(call, created, deadline.as_mut()).await {
                    Ok(result) => result,
                    Err(outcome) => return outcome,
                }
            }
            Ok(_) => {
                return ToolOutcome::failure(
                    OutcomeKind::InvalidResult,
                    "the server answered tools/call with another result type",
                );
            }
            // The stdio reader's answer for a reply it could not read
            // (not JSON-RPC, nested past serde_json's limit): the server
            // did answer.
            Err(ServiceError::McpError(e))
                if e.code.0 == crate::transport::stdio::UNREADABLE_REPLY_CODE
                    && e.message
                        .starts_with(crate::transport::stdio::UNREADABLE_REPLY_PREFIX) =>
            {
                return ToolOutcome::failure(OutcomeKind::InvalidResult, e.message.to_string());
            }
            Err(ServiceError::McpError(e)) => {
                let mut outcome = ToolOutcome::failure(
                    OutcomeKind::ServerError,
                    redact(
                        &format!(
                            "the server answered with JSON-RPC error {}: {}",
                            e.code.0, e.message
                        ),
                        &live.redactions,
                    ),
                );
                outcome.rpc_error = Some(crate::messages::call::RpcErrorReply {
                    code: e.code.0,
                    message: redact(&e.message, &live.redactions),
                    data: e.data.map(|mut d| {
                        crate::messages::trust::redact_value(&mut d, &live.redactions);
                        d
                    }),
                });
                return outcome;
            }
            Err(ServiceError::TransportClosed) => {
                return self
                    .lost(
                        scope,
                        def,
                        live.conn_gen,
                        "the transport closed".into(),
                        lost_as,
                    )
                    .await;
            }
            // 401/403 on this request (CONN-13): the server refused it
            // before running it.
            Err(e) if e.auth_challenge().is_some() => {
                let challenge = e.auth_challenge().unwrap_or_default();
                let oauth = matches!(
                    &entry.config.transport,
                    crate::messages::config::TransportConfig::StreamableHttp(h) if h.oauth.is_some()
                );
                return ToolOutcome::failure(
                    OutcomeKind::ServerError,
                    authorization_refused(&def.server, oauth, challenge),
                )
                .not_sent();
            }
            // The connection is gone, or not one byte of the request reached
            // the server (CALL-5: then it is not sent, whatever else holds).
            Err(e) if live.client.is_closed() || crate::transport::client::nothing_written(&e) => {
                let how = if crate::transport::client::nothing_written(&e) {
                    Lost::NotSent
                } else {
                    lost_as
                };
                return self
                    .lost(
                        scope,
                        def,
                        live.conn_gen,
                        crate::transport::client::service_words(&e),
                        how,
                    )
                    .await;
            }
            // The transport is still up (e.g. HTTP 500 on this one request): no
            // connection-level cause to wait for.
            Err(e) => {
                return match lost_as {
                    Lost::Refused(why) => not_sent(def, &why),
                    Lost::NotSent | Lost::InFlight => ToolOutcome::failure(
                        OutcomeKind::TransportLostDuringCall,
                        format!(
                            "the request failed in transport, side effects unknown: {}",
                            crate::transport::client::service_words(&e)
                        ),
                    ),
                };
            }
        };
        // TRUST-2: a server that echoes its own secret shows "[redacted]",
        // in the value itself, before anything is projected or cut from it.
        if !live.redactions.is_empty() {
            redact_value(&mut canonical, &live.redactions);
        }
        let ctx = ResultContext {
            def,
            images: options.images,
            store: self.inner.attachments.as_ref(),
            limits: self.inner.limits,
            in_process: matches!(
                entry.config.transport,
                crate::messages::config::TransportConfig::InProcess(_)
            ),
        };
        judge_result(&ctx, canonical).await
    }

    /// The connection was lost (or a send failed): wait briefly for the
    /// connection's real cause so the outcome names it (CONN-8).
    pub(super) async fn lost(
        &self,
        scope: &Scope,
        def: &ToolDefinition,
        conn_gen: u64,
        fallback: String,
        how: Lost,
    ) -> ToolOutcome {
        if let Lost::Refused(why) = how {
            return not_sent(def, &why);
        }
        let mut cause = fallback;
        if let Some(h) = self.cached_scope(scope) {
            let mut rx = h.snapshot.clone();
            let server = def.server.clone();
            let waited = tokio::time::timeout(CAUSE_WAIT, async move {
                loop {
                    let found = rx.borrow_and_update().servers.get(&server).and_then(|e| {
                        let moved_on = e.live.as_ref().map(|l| l.conn_gen) != Some(conn_gen);
                        (moved_on && e.status.error.is_some())
                            .then(|| e.status.error.clone())
                            .flatten()
                    });
                    if found.is_some() || rx.changed().await.is_err() {
                        return found;
                    }
                }
            })
            .await;
            if let Ok(Some(real)) = waited {
                cause = real;
            }
        }
        match how {
            Lost::InFlight => ToolOutcome::failure(
                OutcomeKind::TransportLostDuringCall,
                format!("connection lost during the call, side effects unknown: {cause}"),
            ),
            Lost::NotSent | Lost::Refused(_) => ToolOutcome::failure(
                OutcomeKind::ServerNotReady,
                format!(
                    "server \"{}\": not sent, nothing ran: the connection ended before the request left ({cause})",
                    def.server
                ),
            ),
        }
    }
}

/// What goes on the wire of one call.
pub(super) struct Outgoing {
    /// The arguments, an object (CALL-2).
    pub(super) arguments: Map<String, Value>,
    /// The call's id, also its progress token.
    pub(super) call_id: u64,
}

/// How a call's connection was lost, as far as the request goes.
pub(super) enum Lost {
    /// The request was never handed to the wire.
    NotSent,
    /// The server refused it unrun (why, in words).
    Refused(String),
    /// The server may have received it.
    InFlight,
}

/// A call the server never ran: `server_not_ready`, side effects none,
/// with `why` (CALL-5; docs/runtime-semantics.md "Outcomes of a lost
/// connection").
pub(super) fn not_sent(def: &ToolDefinition, why: &str) -> ToolOutcome {
    ToolOutcome::failure(
        OutcomeKind::ServerNotReady,
        format!(
            "server \"{}\": not sent, nothing ran: {why}; the next call reconnects",
            def.server
        ),
    )
}

/// The text of a call the server refused for its authorization (CONN-13):
/// nothing was executed; what scope it wants, and how to get it.
pub(super) fn authorization_refused(server: &str, oauth: bool, challenge: &str) -> String {
    let scope = challenge
        .split_once("scope=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(s, _)| s.to_owned())
        .filter(|s| !s.is_empty());
    let (status, needs) = if challenge.contains("insufficient_scope") {
        ("HTTP 403 insufficient_scope", "more authorization")
    } else {
        ("HTTP 401/403", "authorization")
    };
    let wanted = scope
        .as_deref()
        .map(|s| format!(", scope \"{s}\""))
        .unwrap_or_default();
    let fix = if oauth {
        format!(
            "run `mcpvisor auth login {server}{}`, then call again",
            scope
                .as_deref()
                .map(|s| format!(" --scope \"{s}\""))
                .unwrap_or_default()
        )
    } else {
        format!(
            "check the credentials in [servers.{server}] (`headers`, `header_secrets`), or add a [servers.{server}.oauth] table if it uses OAuth"
        )
    };
    format!(
        "the server requires {needs} for this call ({status}{wanted}); nothing was executed: {fix}"
    )
}
