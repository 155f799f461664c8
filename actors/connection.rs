//! `Connection(conn_gen)`: one rmcp session with one server instance.
//!
//! Owns exclusively: the transport of one generation — for stdio the child
//! process group (via [`ProcessHandle`]), for HTTP the rmcp session, for
//! in-process servers the stream. Supervisor: `ServerSupervisor`, restart type
//! temporary (the supervisor decides about a *new* generation under its budget).
//!
//! ```text
//!  Connecting ──handshake+catalog ok──▶ Up ──transport closed / pings fail──▶ stop(cause)
//!      └──error/timeout──▶ stop(cause)          Up ──stop──▶ post_stop: close
//! ```
//! Every exit path runs the close sequence in a detached task that reports
//! `ConnectionEnded { conn_gen, reaped }` to the supervisor: the close barrier
//! (RECO-3) waits for that message, never for this actor. Messages:
//! [`ConnectionMsg`], private (only its own handshake and watcher tasks send).

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use futures::TryFutureExt as _;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::messages::capabilities::ClientHandlers;
use crate::messages::config::{ServerConfig, TransportConfig};
use crate::messages::server::{ServerSupervisorMsg, Unreaped};
use crate::messages::trust::redact;
use crate::transport::client::{
    Established, SupervisedClient, handshake, listen_for_changes, ping_until_dead,
    without_type_names,
};
use crate::transport::open::OpenTransports;
use crate::transport::stdio::{self, Diagnostics, ProcessHandle};

/// How long a crash error waits for the exit status and stderr (CONN-7).
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long closing waits for rmcp's service loop to end.
const SERVICE_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// How long an in-process server may take to confirm its close.
const IN_PROCESS_CLOSE_WAIT: Duration = Duration::from_secs(10);

// ===== The actor =====

/// Arguments of one connection generation.
pub struct ConnectionArgs {
    /// Generation.
    pub conn_gen: u64,
    /// The server's config.
    pub config: Arc<ServerConfig>,
    /// Where to report.
    pub supervisor: ActorRef<ServerSupervisorMsg>,
    /// Shared with the status.
    pub diag: Arc<Diagnostics>,
    /// Opt-in client capabilities (CONN-11).
    pub handlers: ClientHandlers,
    /// Where this generation's transport registers its close confirmation.
    pub open: Arc<OpenTransports>,
    /// Test-only break switches.
    pub chaos: crate::messages::config::ChaosSwitches,
    /// The era the previous connection of this config spoke (ERA-1).
    pub era: Option<crate::messages::server::Era>,
}

/// Messages of the `Connection` actor: private self-messages, sent only by
/// the actor's own tasks (the handshake, the transport watcher, the pinger).
pub enum ConnectionMsg {
    /// The handshake task finished.
    Established(Result<Box<Established>, String>),
    /// The transport ended, or liveness failed (CONN-14).
    Lost(String),
}

/// How this generation's transport is closed and confirmed.
enum Closer {
    Process(ProcessHandle),
    /// Turns `true` once the in-process server confirmed its close.
    InProcess(tokio::sync::watch::Receiver<bool>),
    Network,
}

/// The `Connection` actor.
#[derive(Debug, Default)]
pub struct Connection;

/// State of one connection.
pub struct ConnectionState {
    /// Generation.
    conn_gen: u64,
    /// Config.
    config: Arc<ServerConfig>,
    /// Supervisor.
    supervisor: ActorRef<ServerSupervisorMsg>,
    /// Output diagnostics.
    diag: Arc<Diagnostics>,
    /// The close half of the transport; taken by the close task.
    closer: Option<Closer>,
    /// Child pid (stdio).
    pid: Option<u32>,
    /// The handshake task while connecting.
    connect_task: Option<JoinHandle<()>>,
    /// Cancels rmcp's service loop.
    service_ct: Option<rmcp::service::RunningServiceCancellationToken>,
    /// Ends when the service loop ends.
    watcher: Option<JoinHandle<()>>,
    /// HTTP liveness pings (CONN-14).
    pinger: Option<JoinHandle<()>>,
    /// Stateless era: the `subscriptions/listen` stream (ERA-4).
    listener: Option<JoinHandle<()>>,
    /// HTTP: ends the connection when the server drops its session (CALL-5).
    session_watch: Option<JoinHandle<()>>,
    /// `ConnectionEnded` is sent exactly once.
    ended_sent: bool,
    /// The client handlers (where the listen stream's other list changes go).
    handlers: ClientHandlers,
}

/// A killed actor (or one whose parent failed) skips `post_stop`: its tasks
/// must not outlive it. The close sequence, when it ran, took them already.
impl Drop for ConnectionState {
    fn drop(&mut self) {
        for task in [
            self.connect_task.take(),
            self.pinger.take(),
            self.listener.take(),
            self.session_watch.take(),
            self.watcher.take(),
        ]
        .into_iter()
        .flatten()
        {
            task.abort();
        }
        if let Some(ct) = self.service_ct.take() {
            ct.cancel();
        }
    }
}

impl Actor for Connection {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConnectionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = ConnectionState {
            conn_gen: args.conn_gen,
            config: args.config,
            supervisor: args.supervisor,
            diag: args.diag,
            closer: None,
            pid: None,
            connect_task: None,
            service_ct: None,
            watcher: None,
            pinger: None,
            listener: None,
            session_watch: None,
            ended_sent: false,
            handlers: args.handlers.clone(),
        };
        let handler = SupervisedClient {
            conn_gen: state.conn_gen,
            server: state.config.server_name.clone(),
            supervisor: state.supervisor.clone(),
            handlers: args.handlers.clone(),
            diag: state.diag.clone(),
        };
        let cfg = state.config.clone();
        let diag = state.diag.clone();
        let me = myself.clone();
        let remembered = args.era;
        // Start the transport synchronously so the process is owned from the first instant.
        // TRUST-2: values of env_secrets / header_secrets, fetched now, redacted everywhere.
        let wanted = match &cfg.transport {
            TransportConfig::Stdio(c) => c.env_secrets.clone(),
            TransportConfig::StreamableHttp(c) => c.header_secrets.clone(),
            TransportConfig::InProcess(_) => Default::default(),
        };
        // A store that does not answer must not wedge this actor's parent:
        // the lookups share the startup deadline.
        let lookups = resolve_secrets(&cfg.server_name, &wanted, args.handlers.secrets.as_deref());
        let secrets = match tokio::time::timeout(cfg.startup_timeout, lookups).await {
            Ok(found) => found.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "the secrets of server {} could not be had: the secret store did not answer within startup_timeout_ms = {}",
                cfg.server_name,
                cfg.startup_timeout.as_millis()
            )),
        };
        if args.chaos.no_redaction() {
            diag.break_redaction();
        }
        let secrets = secrets.map(|(values, also_redacted)| {
            diag.add_redactions(
                values
                    .iter()
                    .map(|(_, v)| v.expose().to_owned())
                    .chain(also_redacted),
            );
            values
        });
        let connect: BoxFuture<'static, Result<Box<Established>, String>> =
            match (&cfg.transport, secrets) {
                (_, Err(e)) => Box::pin(futures::future::ready(Err(e))),
                (TransportConfig::Stdio(stdio_cfg), Ok(secret_env)) => {
                    // RECO-7: this generation's processes carry its own tag.
                    let generation_cfg;
                    let stdio_cfg = match stdio_cfg.env.get(crate::process::TAG_VAR) {
                        Some(server_tag) => {
                            let mut c = stdio_cfg.clone();
                            c.env.insert(
                                crate::process::TAG_VAR.to_owned(),
                                crate::process::generation_tag(server_tag, state.conn_gen),
                            );
                            generation_cfg = c;
                            &generation_cfg
                        }
                        None => stdio_cfg,
                    };
                    match stdio::spawn(stdio_cfg, secret_env, diag.clone(), args.chaos) {
                        Ok(child) => {
                            state.pid = Some(child.process.pid);
                            args.open.register(state.conn_gen, child.process.unreaped());
                            state.closer = Some(Closer::Process(child.process));
                            let pid = state.pid;
                            Box::pin(
                                handshake(
                                    handler,
                                    child.transport,
                                    cfg.clone(),
                                    diag.clone(),
                                    pid,
                                    remembered,
                                )
                                .map_err(|e| e.to_string()),
                            )
                        }
                        Err(e) => Box::pin(futures::future::ready(Err(e.to_string()))),
                    }
                }
                (TransportConfig::StreamableHttp(http_cfg), Ok(secret_headers)) => {
                    state.closer = Some(Closer::Network);
                    let session_lost = CancellationToken::new();
                    let (lost, me) = (session_lost.clone(), myself.clone());
                    state.session_watch = Some(tokio::spawn(async move {
                        lost.cancelled().await;
                        let _ = me.cast(ConnectionMsg::Lost(
                            "the session is gone; a new connection opens a new one".into(),
                        ));
                    }));
                    let parts = crate::transport::http::HttpParts {
                        secret_headers,
                        diag: diag.clone(),
                        session_lost,
                        replay_for_chaos: args.chaos.replay_expired_sessions(),
                        server: cfg.server_name.clone(),
                        secrets: args.handlers.secrets.clone(),
                    };
                    let (http_cfg, cfg, diag) = (http_cfg.clone(), cfg.clone(), diag.clone());
                    Box::pin(async move {
                        let t = crate::transport::http::connect(&http_cfg, parts)
                            .await
                            .map_err(|e| e.to_string())?;
                        handshake(handler, t, cfg, diag, None, remembered)
                            .await
                            .map_err(|e| e.to_string())
                    })
                }
                (TransportConfig::InProcess(factory), Ok(_)) => match (factory.0)() {
                    Ok(conn) => {
                        let (confirmed, closed) = tokio::sync::watch::channel(false);
                        let confirm = conn.closed;
                        tokio::spawn(async move {
                            if confirm.await {
                                let _ = confirmed.send(true);
                            }
                        });
                        // Nothing to kill in process: the close is only watched.
                        let unreaped = Unreaped {
                            reaped: closed.clone(),
                            kill_again: std::sync::Arc::new(|| {}),
                        };
                        args.open.register(state.conn_gen, unreaped);
                        state.closer = Some(Closer::InProcess(closed));
                        Box::pin(
                            handshake(
                                handler,
                                conn.stream,
                                cfg.clone(),
                                diag.clone(),
                                None,
                                remembered,
                            )
                            .map_err(|e| e.to_string()),
                        )
                    }
                    Err(e) => Box::pin(futures::future::ready(Err(e))),
                },
            };
        let startup = cfg.startup_timeout;
        let name = cfg.server_name.clone();
        // A package runner's first start downloads the package: say so.
        let download = match &cfg.transport {
            TransportConfig::Stdio(c) => crate::transport::stdio::package_runner(c).map(|r| {
                format!(
                    "; `{r}` downloads the package on its first run, which can take longer: run the command once by hand first, or raise `startup_timeout_ms` (`mcpvisor add` writes 120000 for such a command)"
                )
            }),
            _ => None,
        }
        .unwrap_or_default();
        state.connect_task = Some(tokio::spawn(async move {
            let result = match tokio::time::timeout(startup, connect).await {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "startup timed out after {} ms (spawn/connect through initialize and the first tools/list); a server that needs longer: raise `startup_timeout_ms` in [servers.{}]{download}",
                    startup.as_millis(),
                    name
                )),
            };
            let _ = me.cast(ConnectionMsg::Established(result));
        }));
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("connection", server = %state.config.server_name, conn_gen = state.conn_gen);
        // Boxed: ractor keeps the message loop's future for the actor's
        // whole life, sized for the largest handler (PERF-1, memory per
        // idle connection); a connection handles a message or two.
        Box::pin(
            async move {
                tracing::debug!("handling a message");
                match msg {
                    ConnectionMsg::Established(Ok(est)) => {
                        state.connect_task = None;
                        let Established {
                            running,
                            info,
                            catalog,
                            listen,
                        } = *est;
                        let client = crate::messages::registry::McpClient::of(&running);
                        state.service_ct = Some(running.cancellation_token());
                        let me = myself.clone();
                        state.watcher = Some(tokio::spawn(async move {
                            let reason = match running.waiting().await {
                                Ok(rmcp::service::QuitReason::Cancelled) => return,
                                Ok(r) => format!("the transport closed ({r:?})"),
                                Err(e) => format!("the service task failed: {e}"),
                            };
                            let _ = me.cast(ConnectionMsg::Lost(reason));
                        }));
                        if let TransportConfig::StreamableHttp(h) = &state.config.transport {
                            let (client, h, me) = (client.clone(), h.clone(), myself.clone());
                            let era = info.era();
                            state.pinger = Some(tokio::spawn(async move {
                                let why = ping_until_dead(client, &h, era).await;
                                let _ = me.cast(ConnectionMsg::Lost(why));
                            }));
                        }
                        if let Some(first) = listen {
                            let (client, supervisor) = (client.clone(), state.supervisor.clone());
                            let (conn_gen, server) =
                                (state.conn_gen, state.config.server_name.clone());
                            let limit = state.config.request_timeout;
                            let events = state.handlers.notifications.clone();
                            let name = server.clone();
                            state.listener = Some(tokio::spawn(async move {
                                let tools = || {
                                    let _ = supervisor
                                        .cast(ServerSupervisorMsg::ToolsListChanged { conn_gen });
                                };
                                // Prompts and resources: for those that keep such lists.
                                let other = |list| {
                                    if let Some((scope, events)) = &events {
                                        let _ = events.send(
                                            crate::messages::status::RuntimeEvent::ListChanged {
                                                scope: scope.clone(),
                                                server: name.clone(),
                                                list,
                                            },
                                        );
                                    }
                                };
                                let why =
                                    listen_for_changes(client, first, limit, tools, other).await;
                                tracing::debug!(server = %server, "the listen stream ended: {why}");
                            }));
                        }
                        state.supervisor.cast(ServerSupervisorMsg::ConnUp {
                            conn_gen: state.conn_gen,
                            client,
                            info,
                            catalog,
                        })?;
                    }
                    ConnectionMsg::Established(Err(e)) => {
                        state.connect_task = None;
                        let cause = compose_cause(state, &e, false).await;
                        myself.stop(Some(cause));
                    }
                    ConnectionMsg::Lost(reason) => {
                        let cause = compose_cause(state, &reason, true).await;
                        myself.stop(Some(cause));
                    }
                }
                Ok(())
            }
            .instrument(span),
        )
        .await
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        start_close(state);
        Ok(())
    }
}

/// The error text of a failed connection: the real cause, with exit status,
/// stderr tail and non-JSON hints (CONN-6, CONN-7, CONN-8).
async fn compose_cause(
    state: &mut ConnectionState,
    reason: &str,
    exit_is_the_cause: bool,
) -> String {
    let exit = match &mut state.closer {
        Some(Closer::Process(p)) => p.wait_exit(EXIT_WAIT).await,
        _ => None,
    };
    // A handshake that failed because the pipe broke or closed under it
    // (the two ways a race with an exiting server shows): the exit is the
    // cause, and the words are the same whichever side noticed first.
    let handshake_lost = reason.starts_with("initialize failed")
        && (reason.contains("Broken pipe")
            || reason.contains(crate::transport::stdio::NOTHING_WRITTEN)
            || reason.contains("connection closed")
            || reason.contains("error: Transport"));
    let mut cause = match exit {
        // The transport closed: the exit is the real cause (CONN-8).
        Some(status) if exit_is_the_cause => format!("server {status}"),
        Some(status) if handshake_lost => {
            format!("initialize failed: the server {status} before answering")
        }
        // The attempt failed for its own reason; the exit is a consequence.
        Some(status) => format!("{reason} (server {status})"),
        None => reason.to_owned(),
    };
    if let Some(fatal) = state.diag.fatal() {
        cause = format!("{fatal} ({cause})");
    }
    // TRUST-2: the reason may quote what the server sent (an error of its
    // `initialize` answer); the stderr tail is redacted already.
    let mut cause = without_type_names(&redact(&cause, &state.diag.redactions()));
    cause.push_str(&state.diag.explain());
    if let TransportConfig::Stdio(c) = &state.config.transport
        && let Some(hint) =
            crate::transport::stdio::package_runner_hint(c, &state.diag.stderr_tail())
    {
        cause.push_str(hint);
    }
    cause
}

/// Run the close sequence in a detached task that reports `ConnectionEnded`.
/// Safe to call more than once: the closer is taken.
fn start_close(state: &mut ConnectionState) {
    if let Some(t) = state.connect_task.take() {
        t.abort();
    }
    if let Some(t) = state.pinger.take() {
        t.abort();
    }
    if let Some(t) = state.listener.take() {
        t.abort();
    }
    if let Some(t) = state.session_watch.take() {
        t.abort();
    }
    if state.ended_sent {
        return;
    }
    state.ended_sent = true;
    // Nothing was opened (spawn or connector failed): there is nothing to close.
    let closer = state.closer.take().unwrap_or(Closer::Network);
    let ct = state.service_ct.take();
    let watcher = state.watcher.take();
    let supervisor = state.supervisor.clone();
    let conn_gen = state.conn_gen;
    let pid = state.pid;
    let tag = match &state.config.transport {
        TransportConfig::Stdio(s) => s
            .env
            .get(crate::process::TAG_VAR)
            .map(|server_tag| crate::process::generation_tag(server_tag, conn_gen)),
        _ => None,
    };
    tokio::spawn(async move {
        if let Some(ct) = ct {
            ct.cancel();
        }
        if let Some(w) = watcher {
            let _ = tokio::time::timeout(SERVICE_CLOSE_WAIT, w).await;
        }
        let mut escaped = Vec::new();
        let (reaped, reaped_later) = match closer {
            Closer::Process(mut p) => {
                let later = p.unreaped();
                let reaped = p.close().await;
                // RECO-7: what left the group (setsid) dies with the
                // connection too, found by the server's tag, and goes into
                // the shutdown report.
                // Once the close returns nothing of the server runs: every
                // process killed here (the escaped ones and the group's
                // members still dying) is waited for, bounded; one still
                // running is the shutdown sweep's to report.
                if let Some(tag) = &tag {
                    // The group is the server's pid (its own group leader).
                    let swept = crate::process::kill_tagged(tag, false, pid);
                    if !swept.escaped.is_empty() {
                        tracing::warn!(
                            escaped = ?swept.escaped,
                            "killed processes that had left the server's process group"
                        );
                    }
                    let left = crate::process::still_running(
                        &swept.killed,
                        crate::process::SWEPT_EXIT_WAIT,
                    )
                    .await;
                    if !left.is_empty() {
                        tracing::warn!(
                            ?left,
                            "processes of a closed server still run after SIGKILL"
                        );
                    }
                    escaped = swept.escaped;
                }
                (reaped, (!reaped).then_some(later))
            }
            Closer::InProcess(mut closed) => {
                let confirmed =
                    tokio::time::timeout(IN_PROCESS_CLOSE_WAIT, closed.wait_for(|c| *c))
                        .await
                        .is_ok_and(|r| r.is_ok());
                (confirmed, None)
            }
            Closer::Network => (true, None),
        };
        let _ = supervisor.cast(ServerSupervisorMsg::ConnectionEnded {
            conn_gen,
            reaped,
            pid,
            reaped_later,
            escaped,
        });
    });
}

/// Fetch every secret a transport needs (TRUST-2). A missing one fails the
/// connect with "secret NAME for server SERVER is not available".
async fn resolve_secrets(
    server: &str,
    wanted: &std::collections::BTreeMap<String, String>,
    store: Option<&dyn crate::messages::trust::SecretStore>,
) -> Result<
    (Vec<(String, crate::messages::trust::Secret)>, Vec<String>),
    crate::messages::trust::SecretsError,
> {
    use crate::messages::trust::SecretsError;
    if wanted.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    // The runtime's builder always installs one (the environment by default).
    let Some(store) = store else {
        return Err(SecretsError::NoStore {
            server: server.to_owned(),
        });
    };
    let mut out = Vec::with_capacity(wanted.len());
    let mut also_redacted = Vec::new();
    for (target, reference) in wanted {
        // A malformed reference was refused with the config; here it can only
        // come from a config built in code, and is taken as a whole name.
        let (before, secret_name, after) =
            crate::messages::trust::secret_reference(reference).unwrap_or(("", reference, ""));
        match store.get(secret_name).await {
            Ok(value) if before.is_empty() && after.is_empty() => out.push((target.clone(), value)),
            Ok(value) => {
                let sent = crate::messages::trust::Secret::new(format!(
                    "{before}{}{after}",
                    value.expose()
                ));
                // The secret alone is redacted too, not only the text holding it.
                also_redacted.push(value.expose().to_owned());
                out.push((target.clone(), sent));
            }
            Err(source) => {
                return Err(SecretsError::Unavailable {
                    name: secret_name.to_owned(),
                    server: server.to_owned(),
                    source,
                });
            }
        }
    }
    Ok((out, also_redacted))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::resolve_secrets;
    use crate::messages::trust::{Secret, SecretStore as _};

    // TRUST-2 and issue 37, item 3: `Bearer ${NAME}` sends the scheme with
    // the secret in place, and both the whole value and the secret alone
    // are redacted; a plain name sends the secret as it is.
    #[tokio::test]
    async fn a_reference_in_a_text_sends_the_text_with_the_secret_in_place() {
        let store = crate::runtime::stores::secrets::MemorySecretStore::new();
        store.put("TOKEN", Secret::new("sk-1")).await.unwrap();
        let wanted = [
            ("Authorization".to_owned(), "Bearer ${TOKEN}".to_owned()),
            ("X-Key".to_owned(), "TOKEN".to_owned()),
        ]
        .into_iter()
        .collect();
        let (values, also) = resolve_secrets("s", &wanted, Some(&store)).await.unwrap();
        let sent: Vec<(&str, &str)> = values
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(sent, [("Authorization", "Bearer sk-1"), ("X-Key", "sk-1")]);
        assert_eq!(also, ["sk-1"]);
    }
}
