//! The task half of a call (ERA-6, the tasks extension
//! `io.modelcontextprotocol/tasks`): a stateless server that answers a
//! `tools/call` with a task handle is polled with `tasks/get` at its
//! `pollIntervalMs` hint until the task ends, inside the call's one
//! deadline and its cancellation; its input requests are answered with
//! `tasks/update`. A call that ends before its task does (the deadline, the
//! caller's cancel, a poll that failed, the runtime's shutdown) sends
//! `tasks/cancel`, best effort and bounded by [`CANCEL_NOTICE_WAIT`].
//!
//! [`LiveTasks`] holds the tasks being followed, so that a shutdown can
//! cancel each on the wire before the connections close, and name them in
//! its report.

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::Mutex;

use rmcp::model::{CreateTaskResult, RequestMetaObject, TaskPayload};
use tokio_util::sync::CancellationToken;

use super::send::Lost;
use super::*;
use crate::messages::registry::McpClient;
use crate::messages::status::CancelledTask;

/// The shortest wait between two polls, whatever the server's hint.
pub const TASK_POLL_MIN: Duration = Duration::from_millis(50);
/// The longest wait between two polls, whatever the server's hint: a hint
/// of minutes must not make a finished task wait that long for its call.
pub const TASK_POLL_MAX: Duration = Duration::from_secs(5);
/// The wait between two polls when the server gives no hint.
pub const TASK_POLL_DEFAULT: Duration = Duration::from_secs(1);

/// The wait before the next `tasks/get`: the server's hint, clamped to
/// [`TASK_POLL_MIN`]..=[`TASK_POLL_MAX`].
pub fn poll_interval(hint_ms: Option<u64>) -> Duration {
    hint_ms
        .map_or(TASK_POLL_DEFAULT, Duration::from_millis)
        .clamp(TASK_POLL_MIN, TASK_POLL_MAX)
}

/// One task a call follows.
struct LiveTask {
    scope: Scope,
    server: String,
    tool: String,
    task_id: String,
    client: McpClient,
    /// The `_meta` that declares the tasks extension.
    meta: RequestMetaObject,
    /// Cancelled by the shutdown once it sent `tasks/cancel` itself.
    stop: CancellationToken,
}

/// The tasks this runtime's calls follow, by call id.
#[derive(Default)]
pub(crate) struct LiveTasks {
    tasks: Mutex<HashMap<u64, LiveTask>>,
}

impl LiveTasks {
    /// Hold `task` while call `call_id` follows it; the entry leaves with
    /// the returned guard.
    fn enter(&self, call_id: u64, task: LiveTask) -> Entered<'_> {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.insert(call_id, task);
        }
        Entered {
            tasks: self,
            call_id,
        }
    }

    /// Cancel every task followed now (the runtime's shutdown): each
    /// call is told to end, and each task is sent `tasks/cancel`, side by
    /// side, each bounded by `wait`.
    pub(crate) async fn cancel_all(&self, wait: Duration) -> Vec<CancelledTask> {
        let mut taken: Vec<(u64, LiveTask)> = match self.tasks.lock() {
            Ok(mut tasks) => tasks.drain().collect(),
            Err(_) => Vec::new(),
        };
        taken.sort_by_key(|(call_id, _)| *call_id);
        for (_, task) in &taken {
            task.stop.cancel();
        }
        let acks = futures::future::join_all(
            taken
                .iter()
                .map(|(_, t)| cancel_on_wire(&t.client, &t.task_id, &t.meta, wait)),
        )
        .await;
        taken
            .into_iter()
            .zip(acks)
            .map(|((_, t), acknowledged)| CancelledTask {
                scope: t.scope.to_string(),
                server: t.server,
                tool: t.tool,
                task_id: t.task_id,
                acknowledged,
            })
            .collect()
    }
}

/// A call's entry in [`LiveTasks`], removed on drop.
struct Entered<'a> {
    tasks: &'a LiveTasks,
    call_id: u64,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Ok(mut tasks) = self.tasks.tasks.lock() {
            tasks.remove(&self.call_id);
        }
    }
}

/// Send `tasks/cancel` of `task_id`, waiting at most `wait` for the
/// server's acknowledgement; whether it came.
async fn cancel_on_wire(
    client: &McpClient,
    task_id: &str,
    meta: &RequestMetaObject,
    wait: Duration,
) -> bool {
    matches!(
        tokio::time::timeout(wait, client.cancel_task(task_id, meta.clone())).await,
        Ok(Ok(_))
    )
}

/// What the task half needs of its call.
pub(super) struct TaskCall<'a> {
    pub(super) scope: &'a Scope,
    pub(super) def: &'a ToolDefinition,
    pub(super) live: &'a LiveConn,
    pub(super) options: &'a CallOptions,
    /// `tool_call_timeout_ms`, for the words of a timeout.
    pub(super) timeout: Duration,
    /// `max_input_rounds`: how many times the task may ask for input.
    pub(super) max_rounds: u32,
    /// The `_meta` that declares the tasks extension.
    pub(super) meta: RequestMetaObject,
    pub(super) call_id: u64,
}

/// How a call stopped following its task before the task ended.
enum Stop {
    Timeout,
    Cancelled,
    Shutdown,
}

impl Runtime {
    /// Follow the task `created` until it ends; its `CallToolResult` as
    /// JSON, or the call's outcome when it ends otherwise.
    pub(super) async fn follow_task(
        &self,
        call: TaskCall<'_>,
        created: CreateTaskResult,
        mut deadline: Pin<&mut tokio::time::Sleep>,
    ) -> Result<Value, ToolOutcome> {
        let TaskCall {
            scope,
            def,
            live,
            options,
            timeout,
            max_rounds,
            meta,
            call_id,
        } = call;
        let server = def.server.as_str();
        let task_id = created.task.task_id;
        if task_id.is_empty() {
            return Err(ToolOutcome::failure(
                OutcomeKind::InvalidResult,
                format!(
                    "server \"{server}\" answered tools/call with a task whose taskId is empty; side effects unknown"
                ),
            ));
        }
        let said = |text: String| redact(&text, &live.redactions);
        let stop = CancellationToken::new();
        let _entered = self.inner.tasks.enter(
            call_id,
            LiveTask {
                scope: scope.clone(),
                server: server.to_owned(),
                tool: def.raw_name.clone(),
                task_id: task_id.clone(),
                client: live.client.clone(),
                meta: meta.clone(),
                stop: stop.clone(),
            },
        );
        // Cancel the task on the wire (unless the shutdown did) and end the
        // call with `kind` and `why`.
        let give_up = |kind: OutcomeKind, why: String| {
            let (client, task_id, meta, stop) = (&live.client, &task_id, &meta, &stop);
            async move {
                let told = if stop.is_cancelled() {
                    "the shutdown sent it tasks/cancel".to_owned()
                } else if cancel_on_wire(client, task_id, meta, CANCEL_NOTICE_WAIT).await {
                    "the server was sent tasks/cancel".to_owned()
                } else {
                    "the server was sent tasks/cancel (not acknowledged)".to_owned()
                };
                ToolOutcome::failure(kind, format!("{why}; {told}; side effects unknown"))
            }
        };
        let stopped = |how: Stop| match how {
            Stop::Timeout => (
                OutcomeKind::Timeout,
                format!(
                    "task {task_id} of server \"{server}\" did not end within tool_call_timeout_ms = {}",
                    timeout.as_millis()
                ),
            ),
            Stop::Cancelled => (
                OutcomeKind::Cancelled,
                format!("cancelled by the caller while server \"{server}\" ran task {task_id}"),
            ),
            Stop::Shutdown => (
                OutcomeKind::Cancelled,
                format!("the runtime shut down while server \"{server}\" ran task {task_id}"),
            ),
        };
        let mut wait = poll_interval(created.task.poll_interval_ms);
        let mut answered: BTreeSet<String> = BTreeSet::new();
        let mut rounds: u32 = 0;
        loop {
            let poll = async {
                tokio::time::sleep(wait).await;
                live.client.get_task(&task_id, meta.clone()).await
            };
            let cancelled = cancelled_by(options);
            // The shutdown's word first: the report lists the task as cancelled.
            let polled = tokio::select! {
                biased;
                () = stop.cancelled() => Err(Stop::Shutdown),
                r = poll => Ok(r),
                () = &mut deadline => Err(Stop::Timeout),
                _ = cancelled => Err(Stop::Cancelled),
            };
            let polled = match polled {
                Ok(p) => p,
                Err(how) => {
                    if matches!(how, Stop::Timeout) && self.inner.chaos.late_timeouts() {
                        tokio::time::sleep(Duration::from_secs(4)).await;
                    }
                    let (kind, why) = stopped(how);
                    return Err(give_up(kind, why).await);
                }
            };
            let detailed = match polled {
                Ok(ServerResult::GetTaskResult(r)) => r.task,
                // A handle again: readable while the task works, not once it ended
                // (a handle has no room for the result).
                Ok(ServerResult::CreateTaskResult(again)) if !again.task.status.is_terminal() => {
                    wait = poll_interval(again.task.poll_interval_ms);
                    continue;
                }
                Ok(_) => {
                    let why = format!(
                        "server \"{server}\" answered tasks/get of task {task_id} with a result that is not a task (or not a readable one)"
                    );
                    return Err(give_up(OutcomeKind::InvalidResult, why).await);
                }
                Err(ServiceError::McpError(e)) => {
                    let why = said(format!(
                        "server \"{server}\" answered tasks/get of task {task_id} with JSON-RPC error {}: {}",
                        e.code.0, e.message
                    ));
                    return Err(give_up(OutcomeKind::ServerError, why).await);
                }
                Err(e) if live.client.is_closed() => {
                    return Err(self
                        .lost(
                            scope,
                            def,
                            live.conn_gen,
                            crate::transport::client::service_words(&e),
                            Lost::InFlight,
                        )
                        .await);
                }
                Err(e) => {
                    let why = format!(
                        "tasks/get of task {task_id} failed in transport: {}",
                        crate::transport::client::service_words(&e)
                    );
                    return Err(give_up(OutcomeKind::TransportLostDuringCall, why).await);
                }
            };
            if detailed.task.task_id != task_id {
                let why = said(format!(
                    "server \"{server}\" answered tasks/get of task {task_id} with task {}",
                    detailed.task.task_id
                ));
                return Err(give_up(OutcomeKind::InvalidResult, why).await);
            }
            wait = poll_interval(detailed.task.poll_interval_ms);
            let status_message = detailed
                .task
                .status_message
                .as_deref()
                .map(|m| said(format!(": {m}")))
                .unwrap_or_default();
            match detailed.payload {
                TaskPayload::Working => {}
                TaskPayload::Completed { result } => return Ok(Value::Object(result)),
                TaskPayload::Failed { error } => {
                    let code = error.get("code").and_then(Value::as_i64);
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                    return Err(ToolOutcome::failure(
                        OutcomeKind::ServerError,
                        said(format!(
                            "task {task_id} failed with JSON-RPC error {}: {message}; side effects unknown",
                            code.map_or_else(|| "(no code)".to_owned(), |c| c.to_string())
                        )),
                    ));
                }
                TaskPayload::Cancelled => {
                    return Err(ToolOutcome::failure(
                        OutcomeKind::ServerError,
                        format!(
                            "server \"{server}\" cancelled task {task_id}{status_message}; side effects unknown"
                        ),
                    ));
                }
                TaskPayload::InputRequired { input_requests } => {
                    // The same requests come back on every poll until the
                    // server took the answers: each key is answered once.
                    let fresh: rmcp::model::InputRequests = input_requests
                        .into_iter()
                        .filter(|(key, _)| !answered.contains(key))
                        .collect();
                    if fresh.is_empty() {
                        continue;
                    }
                    rounds += 1;
                    if rounds > max_rounds {
                        let why = crate::transport::WireError::Rounds {
                            rounds,
                            max: max_rounds,
                        }
                        .to_string();
                        return Err(give_up(OutcomeKind::InvalidResult, why).await);
                    }
                    let keys: Vec<String> = fresh.keys().cloned().collect();
                    let exchange = async {
                        let (responses, _) = crate::transport::client::answer_input_required(
                            &live.handlers,
                            options.relay.as_deref(),
                            server,
                            &live.redactions,
                            rmcp::model::InputRequiredResult::from_input_requests(fresh),
                        )
                        .await
                        .map_err(|why| (OutcomeKind::ServerError, said(why.to_string())))?;
                        let Some(responses) = responses else {
                            return Ok(());
                        };
                        live.client
                            .update_task(&task_id, responses, meta.clone())
                            .await
                            .map(|_| ())
                            .map_err(|e| {
                                (
                                    OutcomeKind::ServerError,
                                    said(format!(
                                        "tasks/update of task {task_id} failed: {}",
                                        crate::transport::client::service_words(&e)
                                    )),
                                )
                            })
                    };
                    let cancelled = cancelled_by(options);
                    let exchanged = tokio::select! {
                        biased;
                        () = stop.cancelled() => Err(stopped(Stop::Shutdown)),
                        r = exchange => r,
                        () = &mut deadline => Err(stopped(Stop::Timeout)),
                        _ = cancelled => Err(stopped(Stop::Cancelled)),
                    };
                    if let Err((kind, why)) = exchanged {
                        return Err(give_up(kind, why).await);
                    }
                    answered.extend(keys);
                }
                _ => {
                    let why = format!(
                        "server \"{server}\" reported task {task_id} in a status this client does not know"
                    );
                    return Err(give_up(OutcomeKind::InvalidResult, why).await);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_interval_follows_the_hint_within_bounds() {
        assert_eq!(poll_interval(None), TASK_POLL_DEFAULT);
        assert_eq!(poll_interval(Some(0)), TASK_POLL_MIN);
        assert_eq!(poll_interval(Some(200)), Duration::from_millis(200));
        assert_eq!(poll_interval(Some(3_600_000)), TASK_POLL_MAX);
    }
}
