//! Real-process tests against `fault-server`: every test starts its own
//! runtime and its own child processes, and ends with a checked shutdown (the
//! report is clean and no process of the server's tree survives).
//!
//! Requirement ids (CONN, SYNC, CALL, RECO) refer to shared/spec/mcp.md.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mcpvisor::{
    CallOptions, CancellationToken, OutcomeKind, ReconnectPolicy, Runtime, RuntimeEvent, Scope,
    ServerConfig, ServerState, ServerStatus,
};
use mcpvisor_chaos::{
    HttpFaultServer, RequestLog, ShutdownCheck, alive, call, descendants_of, fault_server_config,
    next_event, process_alive, shutdown_checked, unique_temp_path, wait_catalog_ready,
    wait_file_contains, wait_for_status,
};
use serde_json::json;
use tokio::sync::broadcast;

const READY: Duration = Duration::from_secs(20);
const G: Scope = Scope::Global;

/// The ten tools every fault-server has.
const FIXED_TOOLS: [&str; 10] = [
    "echo",
    "hang",
    "slow",
    "crash",
    "is_error",
    "structured_ok",
    "structured_bad",
    "audio",
    "add_tool",
    "garbage",
];

/// A fault-server config with a fast reconnect policy and no idle stop.
fn fault(name: &str, args: &[&str]) -> ServerConfig {
    let mut cfg = fault_server_config(name, args.iter().copied()).trusted();
    cfg.reconnect = ReconnectPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_attempts: 3,
        jitter: false,
    };
    cfg.idle_stop_after = None;
    cfg
}

/// A runtime with one server added after subscribing, so no event is missed.
async fn start(scope: Scope, cfg: ServerConfig) -> (Runtime, broadcast::Receiver<RuntimeEvent>) {
    let runtime = Runtime::builder().start().await.unwrap();
    let events = runtime.subscribe();
    runtime.add_server(scope, cfg).await.unwrap();
    (runtime, events)
}

/// Start one server and wait until it is ready.
async fn start_ready(
    name: &str,
    args: &[&str],
) -> (Runtime, broadcast::Receiver<RuntimeEvent>, ServerStatus) {
    let (runtime, mut events) = start(G, fault(name, args)).await;
    let status = ready(&runtime, &mut events, &G, name, 0).await;
    assert!(
        status.pid.is_some(),
        "a ready stdio server has a pid: {status:?}"
    );
    (runtime, events, status)
}

/// Ready with its catalog registered, on a connection newer than `after_gen`.
async fn ready(
    runtime: &Runtime,
    events: &mut broadcast::Receiver<RuntimeEvent>,
    scope: &Scope,
    name: &str,
    after_gen: u64,
) -> ServerStatus {
    wait_catalog_ready(runtime, events, scope, name, after_gen, READY)
        .await
        .unwrap()
}

/// Shutdown must be clean and leave no process of any server's tree alive.
async fn finish(runtime: &Runtime, extra: &[u32]) -> ShutdownCheck {
    let check = shutdown_checked(runtime, extra).await;
    check.assert_clean();
    assert!(
        runtime.status().is_empty(),
        "no server remains after shutdown"
    );
    check
}

// ===== Startup failures =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_crashing_at_start_reports_exit_status_and_stderr_then_exhausts_its_budget() {
    // CONN-7: the error carries the exit status and the stderr tail.
    // RECO-1: a failed initial connect is attempt 1, so 1 + max_attempts tries.
    // RECO-4: exhausted; no tools registered.
    let mut cfg = fault("boom", &["--crash-at-start", "7"]);
    cfg.reconnect.max_attempts = 2;
    let (runtime, mut events) = start(G, cfg).await;
    let mut attempts_seen = std::collections::BTreeSet::new();
    let status = loop {
        let ev = next_event(
            &mut events,
            READY,
            |e| matches!(e, RuntimeEvent::ServerStatus(s) if s.server == "boom"),
        )
        .await
        .expect("status events until exhausted");
        let RuntimeEvent::ServerStatus(s) = ev else {
            unreachable!()
        };
        if let ServerState::Reconnecting { attempt, of } = s.state {
            assert_eq!(of, 2);
            attempts_seen.insert(attempt);
        }
        if s.state == ServerState::Exhausted {
            break s;
        }
    };
    assert_eq!(
        status.connection_generation, 3,
        "exactly 1 + max_attempts connection attempts: {status:?}"
    );
    assert_eq!(attempts_seen, [1, 2].into());
    assert_eq!(status.budget_left, 0);
    let error = status.error.clone().unwrap_or_default();
    assert!(error.contains("exited with status 7"), "{error}");
    assert!(error.contains("boom at start"), "{error}");
    assert!(
        status.stderr_tail.contains("fatal: boom at start"),
        "{status:?}"
    );
    assert_eq!(status.tools, 0);
    assert!(runtime.tools(&G).is_empty());
    // The budget stays used up: no further attempt starts on its own.
    assert_eq!(runtime.status()[0].state, ServerState::Exhausted);
    let outcome = call(&runtime, "mcp__boom__echo", json!({"message": "x"})).await;
    // The server is known and out of budget: not an unknown tool.
    assert_eq!(outcome.kind, OutcomeKind::ServerNotReady);
    assert!(
        outcome
            .projection
            .contains("\"boom\" is not ready (exhausted)")
            && outcome.projection.contains("fatal: boom at start"),
        "{}",
        outcome.projection
    );
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausting_the_budget_removes_the_tools_of_a_server_that_was_ready_until_an_explicit_restart()
 {
    // RECO-4: budget exhausted → tools removed, state exhausted; only an explicit
    // restart starts it again (with a fresh budget).
    let marker = unique_temp_path("crash-marker");
    let marker_arg = marker.to_string_lossy().into_owned();
    let mut cfg = fault("flaky", &["--crash-at-start-if-exists", &marker_arg]);
    cfg.reconnect.max_attempts = 2;
    let (runtime, mut events) = start(G, cfg).await;
    let up = ready(&runtime, &mut events, &G, "flaky", 0).await;
    assert_eq!(up.tools, FIXED_TOOLS.len());
    let first_pid = up.pid.unwrap();
    std::fs::write(&marker, b"crash from now on").unwrap();

    let outcome = call(&runtime, "mcp__flaky__crash", json!({})).await;
    assert_eq!(
        outcome.kind,
        OutcomeKind::TransportLostDuringCall,
        "{outcome:?}"
    );
    let removed = next_event(
        &mut events,
        READY,
        |e| matches!(e, RuntimeEvent::CatalogChanged { server, tools: 0, .. } if server == "flaky"),
    )
    .await;
    assert!(removed.is_some(), "a CatalogChanged event with zero tools");
    let exhausted = wait_for_status(&runtime, &mut events, "flaky", READY, |s| {
        s.state == ServerState::Exhausted
    })
    .await
    .unwrap();
    assert_eq!(exhausted.tools, 0);
    assert!(runtime.tools(&G).is_empty(), "{:?}", runtime.tools(&G));
    assert!(
        exhausted
            .error
            .as_deref()
            .unwrap_or("")
            .contains("boom at start"),
        "{exhausted:?}"
    );
    assert!(!process_alive(first_pid));

    std::fs::remove_file(&marker).unwrap();
    runtime.restart_server(&G, "flaky").await.unwrap();
    let back = ready(
        &runtime,
        &mut events,
        &G,
        "flaky",
        exhausted.connection_generation,
    )
    .await;
    assert_eq!(back.tools, FIXED_TOOLS.len());
    assert_eq!(back.budget_left, 2, "restart resets the budget: {back:?}");
    let echo = call(&runtime, "mcp__flaky__echo", json!({"message": "again"})).await;
    assert_eq!(echo.projection, "Echo: again");
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn banner_lines_before_the_handshake_are_counted_and_the_first_is_kept_as_a_warning() {
    // CONN-6: non-JSON lines are skipped, counted, and the first one is kept.
    let (runtime, _events, status) =
        start_ready("banner", &["--garbage-before-handshake", "3"]).await;
    assert_eq!(status.state, ServerState::Ready);
    assert_eq!(status.non_json_lines, 3, "{status:?}");
    assert!(
        status
            .warnings
            .iter()
            .any(|w| w.contains("starting fault-server v1") && w.contains("banner line 1 of 3")),
        "{:?}",
        status.warnings
    );
    let echo = call(&runtime, "mcp__banner__echo", json!({"message": "hi"})).await;
    assert_eq!(echo.kind, OutcomeKind::Ok);
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_writes_to_stderr_and_exits_on_tools_list_fails_naming_the_message() {
    // CONN-7 + CONN-12: strict startup fails with the server's own words.
    let message = "database is locked: cannot open /var/lib/fault.db";
    let mut cfg = fault("dies", &["--stderr-then-exit", message]);
    cfg.fail_on_startup_error = true;
    cfg.reconnect.enabled = false;
    let runtime = Runtime::builder().start().await.unwrap();
    let mut events = runtime.subscribe();
    let err = runtime.add_server(G, cfg).await.unwrap_err().to_string();
    assert!(err.contains(message), "{err}");
    assert!(err.contains("exited with status 3"), "{err}");
    let failed = wait_for_status(&runtime, &mut events, "dies", READY, |s| {
        s.state == ServerState::Failed
    })
    .await
    .unwrap();
    assert!(failed.error.unwrap_or_default().contains(message));
    finish(&runtime, &[]).await;
}

// ===== Calls =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_call_times_out_and_the_server_stays_usable() {
    // CALL-2/CALL-4: tool_call_timeout_ms → timeout outcome; cancellation sent.
    let mut cfg = fault("hangs", &[]);
    cfg.tool_call_timeout = Duration::from_millis(300);
    let (runtime, mut events) = start(G, cfg).await;
    let ready = ready(&runtime, &mut events, &G, "hangs", 0).await;
    let started = std::time::Instant::now();
    let outcome = call(&runtime, "mcp__hangs__hang", json!({})).await;
    assert_eq!(outcome.kind, OutcomeKind::Timeout, "{outcome:?}");
    // The configured 300 ms, not a default: at it, and within the cancel
    // notice's 1 s margin plus slack for a loaded machine (CALL-4).
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(300 + 1000 + 1500), "{took:?}");
    let error = outcome.error.unwrap_or_default();
    assert!(error.contains("tool_call_timeout_ms = 300;"), "{error}");
    assert!(error.contains("side effects unknown"), "{error}");
    let echo = call(
        &runtime,
        "mcp__hangs__echo",
        json!({"message": "still here"}),
    )
    .await;
    assert_eq!(echo.kind, OutcomeKind::Ok);
    assert_eq!(echo.projection, "Echo: still here");
    assert_eq!(
        runtime.status()[0].pid,
        ready.pid,
        "same process, no reconnect"
    );
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_ends_as_cancelled_and_the_server_stays_usable() {
    // CALL-2: a caller cancellation handle; CALL-4: the cancelled outcome.
    let log = RequestLog::new("cancels.log");
    let log_arg = log.path().to_string_lossy().into_owned();
    let (runtime, _events, ready) = start_ready("cancels", &["--log-requests", &log_arg]).await;
    let token = CancellationToken::new();
    let options = CallOptions {
        cancel: Some(token.clone()),
        ..Default::default()
    };
    let rt = runtime.clone();
    let pending = tokio::spawn(async move {
        rt.call(&G, "mcp__cancels__hang", Some(json!({})), options)
            .await
    });
    // Cancel once the call is in flight (the server logged it), and check
    // the server got notifications/cancelled for it.
    assert!(
        wait_file_contains(log.path(), "tools/call", Duration::from_secs(10)).await,
        "the call never reached the server"
    );
    token.cancel();
    let outcome = pending.await.unwrap();
    assert_eq!(outcome.kind, OutcomeKind::Cancelled, "{outcome:?}");
    assert!(
        wait_file_contains(log.path(), "cancelled ", Duration::from_secs(10)).await,
        "the server never got notifications/cancelled: {}",
        std::fs::read_to_string(log.path()).unwrap_or_default()
    );
    let echo = call(&runtime, "mcp__cancels__echo", json!({"message": "ok"})).await;
    assert_eq!(echo.kind, OutcomeKind::Ok);
    assert_eq!(runtime.status()[0].pid, ready.pid);
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_with_a_call_in_flight_counts_it_and_the_call_gets_one_outcome() {
    // RECO-7: the report counts the calls that were cancelled by the shutdown;
    // CALL-4/5: the call itself ends once, as lost in flight (side effects unknown).
    let log = RequestLog::new("inflight.log");
    let log_arg = log.path().to_string_lossy().into_owned();
    let (runtime, _events, _ready) = start_ready("inflight", &["--log-requests", &log_arg]).await;
    let rt = runtime.clone();
    let pending = tokio::spawn(async move { call(&rt, "mcp__inflight__hang", json!({})).await });
    // Wait (bounded) until the server has logged the call: then it is in flight.
    assert!(
        wait_file_contains(log.path(), "tools/call", Duration::from_secs(10)).await,
        "the call never reached the server"
    );
    let check = finish(&runtime, &[]).await;
    assert_eq!(check.report.calls_cancelled, 1, "{:?}", check.report);
    let outcome = pending.await.unwrap();
    assert_eq!(
        outcome.kind,
        OutcomeKind::TransportLostDuringCall,
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_is_transport_lost_naming_the_exit_and_the_server_reconnects() {
    // CALL-4/CALL-5: transport-lost-during-call, side effects unknown.
    // CONN-8: the outcome names the real cause (the exit), not "not running".
    let (runtime, mut events, up) = start_ready("crashy", &[]).await;
    let old_pid = up.pid.unwrap();
    let outcome = call(&runtime, "mcp__crashy__crash", json!({})).await;
    assert_eq!(
        outcome.kind,
        OutcomeKind::TransportLostDuringCall,
        "{outcome:?}"
    );
    let error = outcome.error.unwrap_or_default();
    assert!(error.contains("exited"), "{error}");
    assert!(error.contains("status 5"), "{error}");
    assert!(error.contains("side effects unknown"), "{error}");
    let back = ready(
        &runtime,
        &mut events,
        &G,
        "crashy",
        up.connection_generation,
    )
    .await;
    assert_ne!(back.pid, Some(old_pid));
    assert_eq!(back.connection_generation, 2);
    assert!(!process_alive(old_pid), "the crashed process was reaped");
    let echo = call(&runtime, "mcp__crashy__echo", json!({"message": "back"})).await;
    assert_eq!(echo.kind, OutcomeKind::Ok);
    assert_eq!(echo.projection, "Echo: back");
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_error_results_are_server_errors_whose_text_reaches_the_projection() {
    // CALL-3: isError is a failed outcome; its text is still given to the model.
    let (runtime, _events, _) = start_ready("errs", &[]).await;
    let outcome = call(&runtime, "mcp__errs__is_error", json!({})).await;
    assert_eq!(outcome.kind, OutcomeKind::ServerError, "{outcome:?}");
    assert!(
        outcome.projection.contains("tool failed on purpose"),
        "{outcome:?}"
    );
    assert!(outcome.canonical.is_some());
    finish(&runtime, &[]).await;
}

/// A server's `notifications/progress` come out as `CallProgress` events
/// of the call they belong to, in order, with the server's total and
/// message: in both protocol eras, and for a second call of the same
/// connection (rmcp gives each request a progress token of its own, which
/// the runtime routes to its call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_progress_notifications_are_events_of_the_call_they_belong_to() {
    for era in ["session", "both"] {
        let (runtime, mut events, _) =
            start_ready("prog", &["--progress", "3", "--era", era]).await;
        for _ in 0..2 {
            let outcome = call(&runtime, "mcp__prog__echo", json!({"message": "hi"})).await;
            assert!(outcome.is_ok(), "{outcome:?}");
            let started = next_event(
                &mut events,
                READY,
                |e| matches!(e, RuntimeEvent::CallStarted { tool, .. } if tool == "mcp__prog__echo"),
            )
            .await;
            let Some(RuntimeEvent::CallStarted { call_id: id, .. }) = started else {
                panic!("no CallStarted: {started:?}");
            };
            let mut seen = Vec::new();
            while seen.len() < 3 {
                match next_event(&mut events, READY, |e| {
                    matches!(e, RuntimeEvent::CallProgress { .. })
                })
                .await
                {
                    Some(RuntimeEvent::CallProgress {
                        call_id,
                        server,
                        progress,
                        total,
                        message,
                        ..
                    }) => {
                        assert_eq!((call_id, server.as_str()), (id, "prog"), "era {era}");
                        seen.push((progress, total, message));
                    }
                    other => panic!("progress {} of 3 never came: {other:?}", seen.len() + 1),
                }
            }
            assert_eq!(
                seen,
                (1..=3)
                    .map(|i| (f64::from(i), Some(3.0), Some(format!("step {i} of 3"))))
                    .collect::<Vec<_>>()
            );
        }
        finish(&runtime, &[]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_last_progress_is_published_before_the_call_finishes() {
    // A server's last progress notification is followed at once by the
    // result (fault-server --progress 2 --progress-burst). rmcp hands notifications to the
    // handler on tasks of their own, so one read before the result could
    // be published after the call ended (and a forwarder of the call's
    // progress that stops at CallFinished would lose it): the runtime
    // routes progress as it reads it. Every call of 25 has both of its
    // notes among its events before its CallFinished.
    let (runtime, mut events, _) =
        start_ready("last", &["--progress", "2", "--progress-burst"]).await;
    for n in 0..25 {
        let outcome = call(&runtime, "mcp__last__echo", json!({"message": "hi"})).await;
        assert!(outcome.is_ok(), "{outcome:?}");
        let mut notes = 0;
        loop {
            match tokio::time::timeout(READY, events.recv()).await {
                Ok(Ok(RuntimeEvent::CallProgress { .. })) => notes += 1,
                Ok(Ok(RuntimeEvent::CallFinished { .. })) => break,
                Ok(Ok(_)) => {}
                other => panic!("call {n}: no CallFinished: {other:?}"),
            }
        }
        assert_eq!(notes, 2, "call {n}: progress after its CallFinished");
    }
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_is_validated_against_the_output_schema_naming_the_failing_path() {
    // CALL-3: a kept output schema requires and validates structuredContent.
    let (runtime, _events, _) = start_ready("temps", &[]).await;
    let good = call(&runtime, "mcp__temps__structured_ok", json!({})).await;
    assert_eq!(good.kind, OutcomeKind::Ok, "{good:?}");
    assert_eq!(
        good.canonical
            .as_ref()
            .and_then(|c| c.get("structuredContent")),
        Some(&json!({"temp": 21.5}))
    );
    let bad = call(&runtime, "mcp__temps__structured_bad", json!({})).await;
    assert_eq!(bad.kind, OutcomeKind::OutputSchemaViolation, "{bad:?}");
    let error = bad.error.unwrap_or_default();
    assert!(error.contains("/temp"), "{error}");
    assert!(bad.projection.contains("/temp"), "{}", bad.projection);
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_content_is_ok_with_a_placeholder_naming_audio() {
    // CALL-6: audio → an explicit placeholder naming type and size; raw data kept.
    let (runtime, _events, _) = start_ready("sounds", &[]).await;
    let outcome = call(&runtime, "mcp__sounds__audio", json!({})).await;
    assert_eq!(outcome.kind, OutcomeKind::Ok, "{outcome:?}");
    assert!(
        outcome.projection.contains("audio"),
        "{}",
        outcome.projection
    );
    assert!(
        outcome.projection.contains("audio/wav"),
        "{}",
        outcome.projection
    );
    let raw = outcome.canonical.unwrap();
    assert_eq!(raw.pointer("/content/0/type"), Some(&json!("audio")));
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_written_mid_session_is_skipped_and_calls_keep_working() {
    // CONN-6: a non-JSON line on stdout is not fatal.
    let (runtime, _events, ready) = start_ready("noisy", &["--garbage-on-call"]).await;
    let outcome = call(&runtime, "mcp__noisy__garbage", json!({})).await;
    assert_eq!(outcome.kind, OutcomeKind::Ok, "{outcome:?}");
    assert_eq!(outcome.projection, "sent garbage");
    let echo = call(&runtime, "mcp__noisy__echo", json!({"message": "after"})).await;
    assert_eq!(echo.projection, "Echo: after");
    let now = runtime.status();
    assert_eq!(now[0].state, ServerState::Ready);
    assert_eq!(now[0].pid, ready.pid);
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_lost_in_flight_reached_the_server_once_and_is_never_retried() {
    // CALL-5: no automatic retry of a tool call, ever.
    let log = RequestLog::new("requests.log");
    let log_arg = log.path().to_string_lossy().into_owned();
    let (runtime, mut events, up) = start_ready(
        "once",
        &["--crash-after-calls", "2", "--log-requests", &log_arg],
    )
    .await;
    let first = call(&runtime, "mcp__once__echo", json!({"message": "first"})).await;
    assert_eq!(first.kind, OutcomeKind::Ok);
    let lost = call(&runtime, "mcp__once__echo", json!({"message": "lost-call"})).await;
    assert_eq!(lost.kind, OutcomeKind::TransportLostDuringCall, "{lost:?}");
    assert!(
        lost.error
            .unwrap_or_default()
            .contains("exited with status 4")
    );
    ready(&runtime, &mut events, &G, "once", up.connection_generation).await;
    let after = call(&runtime, "mcp__once__echo", json!({"message": "after"})).await;
    assert_eq!(after.kind, OutcomeKind::Ok);
    let shut = finish(&runtime, &[]).await;
    assert!(!shut.tracked.is_empty());
    let text = log.text();
    let lost_lines = text.lines().filter(|l| l.contains("lost-call")).count();
    assert_eq!(lost_lines, 1, "the lost call arrived exactly once:\n{text}");
    let calls = text
        .lines()
        .filter(|l| l.starts_with("tools/call "))
        .count();
    assert_eq!(calls, 3, "first, lost-call, after — nothing else:\n{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("initialize "))
            .count(),
        2,
        "two connections:\n{text}"
    );
}

// ===== Catalogs =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paginated_catalog_is_registered_whole() {
    // SYNC-3: all pages are fetched before the catalog is registered.
    let (runtime, _events, status) =
        start_ready("paged", &["--tools", "25", "--page-size", "10"]).await;
    assert_eq!(status.tools, 35, "{status:?}");
    let tools = runtime.tools(&G);
    assert_eq!(tools.len(), 35);
    for raw in FIXED_TOOLS {
        let name = format!("mcp__paged__{raw}");
        assert!(tools.iter().any(|t| t.name == name), "missing {name}");
    }
    for i in 0..25 {
        let name = format!("mcp__paged__gen_{i:05}");
        assert!(tools.iter().any(|t| t.name == name), "missing {name}");
    }
    assert!(tools.iter().all(|t| t.generation == status.generation));
    let out = call(&runtime, "mcp__paged__gen_00024", json!({})).await;
    assert_eq!(out.projection, "gen_00024 ran");
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_added_at_run_time_arrives_through_list_changed_as_a_new_generation() {
    // SYNC-5: tools/list_changed triggers a serialized re-sync.
    // SYNC-8: every definition carries its generation; callers see the change.
    let (runtime, mut events, ready) = start_ready("grows", &[]).await;
    let before = ready.generation;
    assert!(
        runtime
            .tools(&G)
            .iter()
            .all(|t| t.name != "mcp__grows__dyn_0")
    );
    let outcome = call(&runtime, "mcp__grows__add_tool", json!({})).await;
    assert_eq!(outcome.projection, "added dyn_0");
    let changed = next_event(&mut events, READY, |e| {
        matches!(e, RuntimeEvent::CatalogChanged { server, generation, .. }
            if server == "grows" && *generation > before)
    })
    .await
    .expect("a CatalogChanged event");
    let RuntimeEvent::CatalogChanged {
        generation, tools, ..
    } = changed
    else {
        unreachable!()
    };
    assert_eq!(tools, FIXED_TOOLS.len() + 1);
    let all = runtime.tools(&G);
    let dyn0 = all
        .iter()
        .find(|t| t.name == "mcp__grows__dyn_0")
        .expect("the new tool is listed");
    assert_eq!(dyn0.generation, generation);
    assert_eq!(dyn0.raw_name, "dyn_0");
    assert_eq!(dyn0.server, "grows");
    assert!(all.iter().all(|t| t.generation == generation));
    let ran = call(&runtime, "mcp__grows__dyn_0", json!({})).await;
    assert_eq!(ran.projection, "dyn_0 ran");
    finish(&runtime, &[]).await;
}

// ===== Processes =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_ignoring_sigterm_and_stdin_eof_is_killed_and_reaped_at_shutdown() {
    // CONN-8: close stdin, SIGTERM, then SIGKILL; RECO-7: the report lists the pid.
    let (runtime, _events, ready) = start_ready("stubborn", &["--ignore-sigterm"]).await;
    let pid = ready.pid.unwrap();
    let check = finish(&runtime, &[]).await;
    assert!(
        check.report.processes_reaped.contains(&pid),
        "{:?}",
        check.report
    );
    assert_eq!(
        check.report.servers_stopped,
        vec!["global/stubborn".to_owned()]
    );
    assert!(!process_alive(pid));
}

/// The `--log-lifecycle` lines: (what, unix ms), in order.
fn lifecycle(path: &std::path::Path) -> Vec<(String, u128)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (what, ms) = l.split_once(' ')?;
            Some((what.to_owned(), ms.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stubborn_server_sees_stdin_close_then_sigterm_a_second_later_then_dies() {
    // CONN-8's order, seen by the server: stdin closes, 1 s later SIGTERM
    // (which it ignores), then SIGKILL; it is reaped.
    let log = mcpvisor_chaos::unique_temp_path("lifecycle");
    let path = log.to_string_lossy().into_owned();
    let (runtime, _events, ready) =
        start_ready("stubborn", &["--ignore-sigterm", "--log-lifecycle", &path]).await;
    let pid = ready.pid.unwrap();
    let check = finish(&runtime, &[]).await;
    assert!(check.report.processes_reaped.contains(&pid));
    assert!(!process_alive(pid));
    let seen = lifecycle(&log);
    let _ = std::fs::remove_file(&log);
    let names: Vec<&str> = seen.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(names, ["stdin-eof", "sigterm"], "{seen:?}");
    let gap = seen[1].1 - seen[0].1;
    // About the 1 s CONN-8 gives a server to exit on EOF. The server may
    // notice EOF late on a loaded machine (the gap then looks shorter), so
    // the bound is loose; a runtime that signals at once shows a gap of a
    // few ms.
    assert!(
        (500..4000).contains(&gap),
        "SIGTERM {gap} ms after stdin closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_on_stdin_close_is_never_signalled() {
    // CONN-8: a well-behaved server ends on stdin EOF within the first
    // second; no SIGTERM follows.
    let log = mcpvisor_chaos::unique_temp_path("lifecycle");
    let path = log.to_string_lossy().into_owned();
    let (runtime, _events, ready) = start_ready("polite", &["--log-lifecycle", &path]).await;
    let pid = ready.pid.unwrap();
    let check = finish(&runtime, &[]).await;
    assert!(check.report.processes_reaped.contains(&pid));
    let seen = lifecycle(&log);
    let _ = std::fs::remove_file(&log);
    let names: Vec<&str> = seen.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(names, ["stdin-eof"], "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandchild_in_the_servers_process_group_dies_with_it_at_shutdown() {
    // CONN-5: the child gets its own process group; the group is killed.
    let (runtime, _events, ready) = start_ready("parent", &["--grandchild"]).await;
    let pid = ready.pid.unwrap();
    let grandchildren = descendants_of(pid);
    assert_eq!(
        grandchildren.len(),
        1,
        "the sleep grandchild: {grandchildren:?}"
    );
    let grandchild = grandchildren[0];
    assert!(process_alive(grandchild));
    let check = finish(&runtime, &[]).await;
    assert!(check.tracked.contains(&grandchild));
    assert!(
        !process_alive(grandchild),
        "grandchild {grandchild} survived"
    );
    assert!(check.report.processes_reaped.contains(&pid));
}

// ===== Isolation =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_in_one_process_each_run_a_server_of_the_same_name() {
    // No global state: actor names, registries and events are per runtime.
    let (a, _ea, sa) = start_ready("same", &[]).await;
    let (b, _eb, sb) = start_ready("same", &[]).await;
    assert_ne!(sa.pid, sb.pid);
    let oa = call(&a, "mcp__same__echo", json!({"message": "a"})).await;
    let ob = call(&b, "mcp__same__echo", json!({"message": "b"})).await;
    assert_eq!(oa.projection, "Echo: a");
    assert_eq!(ob.projection, "Echo: b");
    finish(&a, &[]).await;
    // b is untouched by a's shutdown.
    let still = call(&b, "mcp__same__echo", json!({"message": "b2"})).await;
    assert_eq!(still.projection, "Echo: b2");
    finish(&b, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_name_is_unique_per_scope_but_another_scope_may_reuse_it() {
    // CONN-4: rejected twice in one scope; accepted in another, fully isolated.
    let agent = Scope::Agent("a1".into());
    let runtime = Runtime::builder().start().await.unwrap();
    let mut events = runtime.subscribe();
    runtime.add_server(G, fault("dup", &[])).await.unwrap();
    let err = runtime
        .add_server(G, fault("dup", &[]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already registered"), "{err}");
    runtime
        .add_server(agent.clone(), fault("dup", &[]))
        .await
        .unwrap();
    let g = ready(&runtime, &mut events, &G, "dup", 0).await;
    let a = ready(&runtime, &mut events, &agent, "dup", 0).await;
    assert_ne!(g.pid, a.pid, "own process per scope");
    assert_eq!(runtime.status().len(), 2);
    assert_eq!(runtime.tools(&G).len(), FIXED_TOOLS.len());
    assert_eq!(runtime.tools(&agent).len(), FIXED_TOOLS.len());
    assert!(runtime.tools(&agent).iter().all(|t| t.scope == agent));
    // Own tools: a dynamic tool added in the agent scope stays there.
    let added = runtime
        .call(&agent, "mcp__dup__add_tool", None, CallOptions::default())
        .await;
    assert_eq!(added.kind, OutcomeKind::Ok);
    let changed = next_event(&mut events, READY, |e| {
        matches!(e, RuntimeEvent::CatalogChanged { scope, tools, .. }
            if *scope == Scope::Agent("a1".into()) && *tools == FIXED_TOOLS.len() + 1)
    })
    .await;
    assert!(changed.is_some());
    assert_eq!(runtime.tools(&agent).len(), FIXED_TOOLS.len() + 1);
    assert_eq!(runtime.tools(&G).len(), FIXED_TOOLS.len());
    let from_global = call(&runtime, "mcp__dup__dyn_0", json!({})).await;
    assert_eq!(from_global.kind, OutcomeKind::UnknownTool);
    let check = finish(&runtime, &[]).await;
    assert_eq!(check.report.servers_stopped.len(), 2);
    assert!(alive(&check.tracked).is_empty());
}

// ===== Readiness contract =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_returns_with_the_catalog_registered() {
    // CONN-10: ready(tools: N) — `ServerState::Ready` is documented as
    // "connected, catalog registered", and CONN-12's first_ready wait is what a
    // caller uses before calling tools. Calling right after wait_ready must work.
    let (runtime, _events) = start(G, fault("eager", &["--tools", "200"])).await;
    let status = runtime.wait_ready(&G, "eager", READY).await.unwrap();
    let tools = runtime.tools(&G).len();
    let echo = call(&runtime, "mcp__eager__echo", json!({"message": "now"})).await;
    finish(&runtime, &[]).await;
    assert_eq!(status.tools, FIXED_TOOLS.len() + 200, "{status:?}");
    assert_eq!(tools, FIXED_TOOLS.len() + 200);
    assert_eq!(echo.kind, OutcomeKind::Ok, "{echo:?}");
}

// ===== Streamable HTTP =====

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_server_over_streamable_http_answers_calls_and_announces_new_tools() {
    // CONN-9: streamable HTTP; SYNC-5: list_changed over the GET stream.
    let HttpFaultServer {
        child: mut server,
        url,
    } = HttpFaultServer::start(&[], READY).await.unwrap();
    let server_pid = server.id().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );

    let (runtime, mut events) = start(G, ServerConfig::http("web", url).trusted()).await;
    let up = ready(&runtime, &mut events, &G, "web", 0).await;
    assert_eq!(up.transport, "streamable-http");
    assert_eq!(up.tools, FIXED_TOOLS.len());
    let echo = call(&runtime, "mcp__web__echo", json!({"message": "over http"})).await;
    assert_eq!(echo.projection, "Echo: over http");
    let bad = call(&runtime, "mcp__web__structured_bad", json!({})).await;
    assert_eq!(bad.kind, OutcomeKind::OutputSchemaViolation);
    let added = call(&runtime, "mcp__web__add_tool", json!({})).await;
    assert_eq!(added.kind, OutcomeKind::Ok, "{added:?}");
    let grown = wait_for_status(&runtime, &mut events, "web", READY, |s| {
        s.tools == FIXED_TOOLS.len() + 1
    })
    .await
    .unwrap();
    assert!(grown.generation > up.generation);
    finish(&runtime, &[]).await;

    // SAFETY: kill(2) on our own, not yet reaped, child.
    unsafe {
        libc::kill(server_pid as libc::pid_t, libc::SIGTERM);
    }
    let exited = tokio::time::timeout(Duration::from_secs(5), server.wait()).await;
    if exited.is_err() {
        server.kill().await.unwrap();
        panic!("fault-server --http did not stop on SIGTERM");
    }
    assert!(!process_alive(server_pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_once_gets_the_same_words_whichever_side_noticed_first() {
    // No racy "Broken pipe" variant of "exited at once".
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..5 {
        let mut cfg = ServerConfig::stdio("quick", "sh", vec!["-c".into(), "exit 3".into()]);
        cfg.reconnect.enabled = false;
        let runtime = Runtime::builder().start().await.unwrap();
        runtime.add_server(G, cfg).await.unwrap();
        let err = runtime
            .wait_ready(&G, "quick", Duration::from_secs(10))
            .await
            .unwrap_err()
            .to_string();
        seen.insert(err);
        finish(&runtime, &[]).await;
    }
    assert_eq!(seen.len(), 1, "{seen:?}");
    let only = seen.into_iter().next().unwrap();
    assert!(
        only.contains("the server exited with status 3 before answering"),
        "{only}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_http_endpoint_is_found_dead_by_its_liveness_pings_without_a_call() {
    // CONN-14: HTTP death is not signalled by the transport. The endpoint's
    // process is stopped (SIGSTOP: its socket stays open, nothing answers)
    // while the connection is idle; the pings time out, and past the
    // threshold the connection is lost and RECO takes over. No call is made,
    // so only the pinger can notice (without it the server stays ready).
    let HttpFaultServer {
        child: mut server,
        url,
    } = HttpFaultServer::start(&[], READY).await.unwrap();
    let server_pid = server.id().unwrap() as libc::pid_t;
    let mut cfg = ServerConfig::http("frozen", url).trusted();
    if let mcpvisor::TransportConfig::StreamableHttp(h) = &mut cfg.transport {
        h.ping_interval = Duration::from_millis(100);
        h.ping_timeout = Duration::from_millis(200);
        h.ping_failure_threshold = 2;
    }
    cfg.reconnect.enabled = false;
    let (runtime, mut events) = start(G, cfg).await;
    let up = ready(&runtime, &mut events, &G, "frozen", 0).await;
    // SAFETY: kill(2) on our own, not yet reaped, child.
    unsafe {
        libc::kill(server_pid, libc::SIGSTOP);
    }
    let lost = wait_for_status(&runtime, &mut events, "frozen", READY, |s| {
        s.state != ServerState::Ready
    })
    .await;
    // SAFETY: as above; the endpoint is let go before any assertion.
    unsafe {
        libc::kill(server_pid, libc::SIGCONT);
        libc::kill(server_pid, libc::SIGKILL);
    }
    let _ = server.wait().await;
    let lost = lost.unwrap();
    assert_eq!(lost.connection_generation, up.connection_generation);
    let error = lost.error.clone().unwrap_or_default();
    assert!(error.contains("consecutive liveness pings"), "{lost:#?}");
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_written_after_ready_shows_in_status_without_another_publish() {
    // OBS-1: the status's stderr tail is the connection's output as it is
    // when read, not as it was at the last publish. Each call writes a line
    // to stderr while the server stays ready: nothing is published, and a
    // tail frozen at `ready` would never show it.
    let (runtime, _events, _) = start_ready("talky", &["--stderr-on-echo"]).await;
    for i in 0..3 {
        let msg = format!("line {i} after ready");
        let echo = call(&runtime, "mcp__talky__echo", json!({ "message": msg })).await;
        assert_eq!(echo.kind, OutcomeKind::Ok, "{echo:?}");
        // The line went to stderr before the reply to stdout; the stderr
        // reader takes it a moment later: wait for it, bounded.
        let shown = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let tail = runtime.status()[0].stderr_tail.clone();
                if tail.contains(&format!("echo: {msg}")) {
                    return tail;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(shown.is_ok(), "{:?}", runtime.status()[0]);
    }
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_to_client_request_gets_32601_saying_the_client_exposes_no_capabilities() {
    // CONN-11: the methods MCP names and any other one
    // alike get -32601 and the sentence, not a bare method name.
    let (runtime, _events, _) = start_ready("ask", &["--ask-client"]).await;
    for method in ["x/unknown", "roots/list", "sampling/createMessage"] {
        let out = runtime
            .call(
                &G,
                "mcp__ask__ask_client",
                Some(json!({ "method": method })),
                CallOptions::default(),
            )
            .await;
        assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
        assert!(
            out.projection.starts_with("error -32601: ")
                && out
                    .projection
                    .contains("this client exposes no MCP capabilities"),
            "{method}: {}",
            out.projection
        );
    }
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_version_this_client_does_not_speak_is_refused_naming_both() {
    // CONN-10, mcp.md "Protocol": a server that answers
    // initialize with a version this client does not speak is not ready,
    // and its error names the server's version and the client's.
    let (runtime, mut events) = start(G, fault("odd", &["--protocol-version", "1999-01-01"])).await;
    let failed = wait_for_status(&runtime, &mut events, "odd", READY, |s| {
        s.error.as_deref().is_some_and(|e| e.contains("1999-01-01"))
    })
    .await
    .unwrap();
    assert_ne!(failed.state, ServerState::Ready, "{failed:?}");
    let error = failed.error.unwrap_or_default();
    assert!(
        error.contains(
            "the server answered with protocol version \"1999-01-01\", which this client does not speak: it offered 2025-11-25"
        ),
        "{error}"
    );
    assert!(runtime.tools(&G).is_empty());
    finish(&runtime, &[]).await;
    // A version it speaks is taken and shown.
    let (runtime, _events, status) =
        start_ready("older", &["--protocol-version", "2025-06-18"]).await;
    assert_eq!(status.protocol_version.as_deref(), Some("2025-06-18"));
    finish(&runtime, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_http_session_says_not_sent_for_every_call_the_server_never_received() {
    // CALL-5: the server ends the session under a
    // concurrent batch larger than the client's 16 concurrent POSTs. The
    // call it answered 404 never ran; the calls still queued in the client
    // never left it: both end server_not_ready, side effects none. A call
    // handed to the wire may have arrived: side effects unknown. No call
    // that ran says "none", and no text names a Rust type.
    let log = RequestLog::new("session-kinds");
    let mut args = log.args();
    args.extend(["--http-fault", "session-loss:1", "--slow-ms", "300"].map(String::from));
    let HttpFaultServer {
        child: _server,
        url,
    } = HttpFaultServer::start(&args, READY).await.unwrap();
    let (runtime, mut events) = start(G, ServerConfig::http("web", url).trusted()).await;
    ready(&runtime, &mut events, &G, "web", 0).await;
    let first = call(&runtime, "mcp__web__echo", json!({"message": "first"})).await;
    assert_eq!(first.kind, OutcomeKind::Ok, "{first:?}");
    let batch: Vec<_> = (0..24)
        .map(|i| {
            let runtime = runtime.clone();
            async move {
                let nonce = format!("batch-{i}");
                let out = call(&runtime, "mcp__web__echo", json!({ "message": nonce })).await;
                (nonce, out)
            }
        })
        .collect();
    let outcomes = futures::future::join_all(batch).await;
    let logged = log.text();
    // The handler's own lines (`tools/call ID {args}`): the calls that ran.
    let ran = |nonce: &str| {
        logged
            .lines()
            .any(|l| l.starts_with("tools/call") && l.contains(&format!("\"{nonce}\"")))
    };
    let (mut refused, mut never_left) = (0, 0);
    for (nonce, out) in &outcomes {
        let text = format!("{} {}", out.projection, out.error.as_deref().unwrap_or(""));
        assert!(!text.contains("::"), "{nonce}: a type name: {text}");
        if text.contains("and refused the request") {
            refused += 1;
        }
        if text.contains("before the request left") {
            never_left += 1;
        }
        if out.side_effects == mcpvisor::SideEffects::None {
            assert_eq!(out.kind, OutcomeKind::ServerNotReady, "{nonce}: {out:?}");
            assert!(text.contains("not sent, nothing ran"), "{nonce}: {text}");
            assert!(!ran(nonce), "{nonce} ran, yet says nothing ran");
        }
        if ran(nonce) {
            assert_ne!(out.side_effects, mcpvisor::SideEffects::None, "{nonce}");
        }
    }
    assert_eq!(refused, 1, "{outcomes:#?}\n{logged}");
    assert!(never_left >= 1, "{outcomes:#?}\n{logged}");
    // The next connection serves again.
    ready(&runtime, &mut events, &G, "web", 1).await;
    let again = call(&runtime, "mcp__web__echo", json!({"message": "again"})).await;
    assert_eq!(again.kind, OutcomeKind::Ok, "{again:?}");
    finish(&runtime, &[]).await;
}
