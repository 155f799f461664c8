//! Real-process tests of the tasks extension (`io.modelcontextprotocol/tasks`,
//! ERA-6) against the fault server's `--task-tools` in the stateless era:
//! a task followed to its result, a task that outlives the call's timeout
//! (cancelled on the wire), a shutdown in the middle of a task (cancelled,
//! and named in the report), a caller's cancel, a plain result to a call
//! that declared the extension, and the session era's refusal. What the
//! server saw is read from its request log, never guessed from timing.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mcpvisor::{CallOptions, OutcomeKind, Runtime, Scope, ServerConfig};
use mcpvisor_chaos::{RequestLog, call, fault_server_config, wait_file_contains};
use serde_json::json;

const G: Scope = Scope::Global;
const READY: Duration = Duration::from_secs(20);

/// The fault server with `--task-tools` in `era`, logging to `log`, as
/// server `srv` with this call timeout.
fn task_server(log: &RequestLog, era: &str, timeout: Duration) -> ServerConfig {
    let mut args = log.args();
    args.extend(["--task-tools".into(), "--era".into(), era.into()]);
    let mut cfg = fault_server_config("srv", args).trusted();
    cfg.idle_stop_after = None;
    cfg.tool_call_timeout = timeout;
    cfg
}

async fn started(cfg: ServerConfig) -> Runtime {
    let runtime = Runtime::builder().start().await.unwrap();
    runtime.add_server(G, cfg).await.unwrap();
    runtime.wait_ready(&G, "srv", READY).await.unwrap();
    runtime
}

/// The task ids the server handed out, in the order `tasks/get` first
/// named them.
fn polled_tasks(log: &RequestLog) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for line in log.text().lines() {
        if let Some(rest) = line.strip_prefix("tasks/get ")
            && let Some(id) = rest.split_whitespace().nth(1)
            && !ids.iter().any(|i| i == id)
        {
            ids.push(id.to_owned());
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_polled_to_its_result_and_a_plain_answer_still_works() {
    let log = RequestLog::new("tasks-complete.log");
    let runtime = started(task_server(&log, "stateless", Duration::from_secs(20))).await;
    let tool = runtime
        .tools(&G)
        .into_iter()
        .find(|t| t.name == "mcp__srv__task_echo")
        .unwrap();
    assert!(tool.task_support_required, "{tool:?}");

    let out = call(
        &runtime,
        "mcp__srv__task_echo",
        json!({"message": "otters", "ms": 300, "poll_ms": 50}),
    )
    .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert_eq!(out.projection, "Echo: otters");
    let text = log.text();
    // The call declared the extension; the task was polled until it ended.
    assert!(
        text.lines().any(|l| l.starts_with("tools/call")
            && l.contains("task_echo")
            && l.ends_with(" tasks")),
        "{text}"
    );
    let tasks = polled_tasks(&log);
    assert_eq!(tasks.len(), 1, "{text}");
    assert!(!text.contains("tasks/cancel"), "{text}");

    // A server may answer a call that declared the extension with a plain result.
    let out = call(&runtime, "mcp__srv__task_plain", json!({})).await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert_eq!(out.projection, "plain, no task");
    // An ordinary tool's call does not declare it.
    let out = call(&runtime, "mcp__srv__echo", json!({"message": "hi"})).await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert!(
        log.text()
            .lines()
            .any(|l| l.starts_with("tools/call") && l.contains(" echo ") && !l.ends_with(" tasks")),
        "{}",
        log.text()
    );
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(report.tasks_cancelled.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_input_request_is_answered_once_by_tasks_update() {
    let log = RequestLog::new("tasks-input.log");
    let runtime = Runtime::builder()
        .elicitation(std::sync::Arc::new(mcpvisor::AcceptSchemaDefaults))
        .start()
        .await
        .unwrap();
    runtime
        .add_server(G, task_server(&log, "stateless", Duration::from_secs(20)))
        .await
        .unwrap();
    runtime.wait_ready(&G, "srv", READY).await.unwrap();
    let out = call(&runtime, "mcp__srv__task_ask", json!({"poll_ms": 50})).await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert_eq!(out.projection, "Hello, otter");
    let text = log.text();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("tasks/update "))
            .count(),
        1,
        "{text}"
    );
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");

    // Without a handler the request cannot be answered: the call ends and
    // the task is cancelled.
    let log = RequestLog::new("tasks-input-refused.log");
    let runtime = started(task_server(&log, "stateless", Duration::from_secs(20))).await;
    let out = call(&runtime, "mcp__srv__task_ask", json!({"poll_ms": 50})).await;
    assert_eq!(out.kind, OutcomeKind::ServerError, "{out:?}");
    assert!(
        out.projection.contains("could not be answered"),
        "{}",
        out.projection
    );
    let text = log.text();
    assert!(!text.contains("tasks/update"), "{text}");
    assert!(text.contains("tasks/cancel "), "{text}");
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_never_ends_times_out_and_is_cancelled_on_the_wire() {
    let log = RequestLog::new("tasks-timeout.log");
    let runtime = started(task_server(&log, "stateless", Duration::from_millis(700))).await;
    let started_at = std::time::Instant::now();
    let out = call(&runtime, "mcp__srv__task_forever", json!({"poll_ms": 50})).await;
    assert_eq!(out.kind, OutcomeKind::Timeout, "{out:?}");
    // Bounded: the timeout plus the cancel notice's margin.
    assert!(started_at.elapsed() < Duration::from_millis(700 + 1000 + 500));
    let tasks = polled_tasks(&log);
    assert_eq!(tasks.len(), 1, "{}", log.text());
    let task = &tasks[0];
    let error = out.error.clone().unwrap_or_default();
    assert!(error.contains(task.as_str()), "{error}");
    assert!(
        error.contains("the server was sent tasks/cancel;"),
        "{error}"
    );
    // The server saw the cancel of that very task (its ack came first).
    let text = log.text();
    assert!(
        text.lines()
            .any(|l| l.starts_with("tasks/cancel ") && l.ends_with(task.as_str())),
        "{text}"
    );
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(report.tasks_cancelled.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cancel_mid_task_cancels_the_task() {
    let log = RequestLog::new("tasks-caller-cancel.log");
    let runtime = started(task_server(&log, "stateless", Duration::from_secs(20))).await;
    let cancel = mcpvisor::CancellationToken::new();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        ..Default::default()
    };
    let running = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            runtime
                .call(
                    &G,
                    "mcp__srv__task_forever",
                    Some(json!({"poll_ms": 50})),
                    options,
                )
                .await
        })
    };
    // The task exists once the server was asked about it.
    assert!(wait_file_contains(log.path(), "tasks/get ", READY).await);
    cancel.cancel();
    let out = running.await.unwrap();
    assert_eq!(out.kind, OutcomeKind::Cancelled, "{out:?}");
    let task = polled_tasks(&log).remove(0);
    assert!(
        log.text()
            .lines()
            .any(|l| l.starts_with("tasks/cancel ") && l.ends_with(task.as_str())),
        "{}",
        log.text()
    );
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_mid_task_cancels_it_and_reports_it() {
    let log = RequestLog::new("tasks-shutdown.log");
    let runtime = started(task_server(&log, "stateless", Duration::from_secs(60))).await;
    let running = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            call(&runtime, "mcp__srv__task_forever", json!({"poll_ms": 50})).await
        })
    };
    assert!(wait_file_contains(log.path(), "tasks/get ", READY).await);
    let task = polled_tasks(&log).remove(0);
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.tasks_cancelled.len(), 1, "{report:?}");
    let cancelled = &report.tasks_cancelled[0];
    assert_eq!(
        (
            cancelled.scope.as_str(),
            cancelled.server.as_str(),
            cancelled.tool.as_str(),
            cancelled.task_id.as_str(),
            cancelled.acknowledged
        ),
        ("global", "srv", "task_forever", task.as_str(), true),
        "{report:?}"
    );
    let out = running.await.unwrap();
    assert_eq!(out.kind, OutcomeKind::Cancelled, "{out:?}");
    assert!(
        out.projection.contains("the runtime shut down"),
        "{}",
        out.projection
    );
    // The server saw the cancel before its connection closed.
    assert!(
        log.text()
            .lines()
            .any(|l| l.starts_with("tasks/cancel ") && l.ends_with(task.as_str())),
        "{}",
        log.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_requires_a_task_is_refused_unsent_in_the_session_era() {
    let log = RequestLog::new("tasks-session.log");
    let runtime = started(task_server(&log, "session", Duration::from_secs(20))).await;
    let out = call(&runtime, "mcp__srv__task_echo", json!({"message": "x"})).await;
    assert_eq!(out.kind, OutcomeKind::TaskSupportRequired, "{out:?}");
    assert!(
        out.projection.contains("speaks the session era"),
        "{}",
        out.projection
    );
    assert_eq!(log.tool_calls(), 0, "{}", log.text());
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
}
