//! The reconnect schedule and budget (RECO-1/2/4), the close barrier's
//! deadline (RECO-3), the idle stop and wake (RECO-6), and calls while a
//! server is away.

#![allow(deprecated, clippy::field_reassign_with_default)]

use super::*;

#[tokio::test(start_paused = true)]
async fn reconnect_delays_follow_the_schedule_and_the_budget_exhausts() {
    // RECO-1: delay(k) = min(max, initial * 2^(k-1)); the failed initial connect is attempt 1
    // of the outage, so a server that never comes up is tried 1 + max_attempts times.
    // RECO-4: exhausted after that.
    let h = Harness::new(Mode::Refuse);
    let (rt, mut events) = start(config(&h, policy(500, 1500, 3))).await;
    let s = wait_status(&mut events, |s| s.state == ServerState::Exhausted).await;
    assert!(s.error.unwrap().contains("connection refused (test)"));
    let t = h.attempts();
    assert_eq!(t.len(), 4, "1 initial + 3 reconnect attempts");
    let gaps: Vec<u128> = t.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    assert_eq!(gaps, vec![500, 1000, 1500]);
    assert_eq!(s.budget_left, 0);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_brief_connection_does_not_reset_the_outage_budget() {
    // RECO-2: one consecutive-failure budget per outage; a connection that comes up
    // briefly and crashes again does not reset it.
    let h = Harness::new(Mode::Serve);
    let (rt, mut events) = start(config(&h, policy(100, 10_000, 2))).await;
    for expected_failures in 1..=2 {
        wait_status(&mut events, |s| s.state == ServerState::Ready).await;
        h.crash();
        let s = wait_status(&mut events, |s| {
            matches!(s.state, ServerState::Reconnecting { .. })
        })
        .await;
        assert_eq!(s.consecutive_failures, expected_failures);
    }
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    h.crash();
    let s = wait_status(&mut events, |s| s.state == ServerState::Exhausted).await;
    assert_eq!(s.consecutive_failures, 3);
    assert_eq!(s.tools, 0, "RECO-4: tools removed");
    assert!(rt.tools(&Scope::Global).is_empty());
    assert_eq!(h.attempts().len(), 3);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn staying_up_for_the_stability_window_ends_the_outage() {
    // RECO-2: the outage ends when the connection stayed up for max_delay.
    let h = Harness::new(Mode::Serve);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 2))).await;
    for _ in 0..4 {
        wait_status(&mut events, |s| s.state == ServerState::Ready).await;
        tokio::time::sleep(Duration::from_millis(1000)).await; // exactly the stability window
        h.crash();
        let s = wait_status(&mut events, |s| {
            matches!(s.state, ServerState::Reconnecting { .. })
        })
        .await;
        assert_eq!(s.consecutive_failures, 1, "every crash starts a new outage");
    }
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_close_stops_reconnecting_after_the_barrier_deadline() {
    // RECO-3: the replacement never starts while the old transport has not confirmed
    // its close; after 5 s the server fails with a message saying why.
    let h = Harness::new(Mode::ServeNeverConfirm);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 5))).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let crashed_at = Instant::now();
    h.crash();
    let s = wait_status(&mut events, |s| s.state == ServerState::Failed).await;
    let waited = crashed_at.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert!(
        s.error
            .unwrap()
            .contains("could not confirm that the previous process exited")
    );
    assert_eq!(h.attempts().len(), 1, "no replacement was started");
    let report = rt.shutdown(Duration::from_secs(30)).await;
    assert!(
        !report.is_clean(),
        "the unconfirmed close is reported: {report:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_server_is_stopped_and_the_next_call_starts_it_again() {
    // RECO-6: idle stop keeps the catalog; the next call restarts transparently
    // and does not count as a failure.
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.idle_stop_after = Some(Duration::from_secs(10));
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let ready_at = Instant::now();
    let s = wait_status(&mut events, |s| s.state == ServerState::IdleStopped).await;
    // The configured 10 s, not the 600 s default (the paused clock would
    // reach either): at it, and well before 11 s.
    let idle = ready_at.elapsed();
    assert!(
        idle >= Duration::from_secs(10) && idle < Duration::from_secs(11),
        "{idle:?}"
    );
    assert_eq!(s.tools, 2, "the last catalog stays registered");
    assert_eq!(rt.tools(&Scope::Global).len(), 2);
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__echo",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert_eq!(out.projection, "pong");
    assert_eq!(h.attempts().len(), 2);
    let st = rt.status();
    assert_eq!(st[0].consecutive_failures, 0);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn notifications_during_a_sync_coalesce_into_exactly_one_more_sync() {
    // SYNC-5: the first list_changed starts a sync; the four that arrive
    // while it runs (its tools/list is held) ask for one follow-up sync
    // between them, not four. The status shows `syncing` meanwhile.
    let h = Harness::with_tool(Mode::Serve, "storm");
    let (rt, mut events) = start(config(&h, policy(100, 1000, 2))).await;
    let ready = wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let before = h.lists();
    let open = h.hold_next_list();
    storm(&rt).await;
    wait_status(&mut events, |s| s.syncing).await;
    // Let every notification reach the supervisor: the paused clock moves
    // only once every task is idle, and the held sync cannot finish.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(h.lists(), before, "the first sync is held");
    open.send(()).unwrap();
    let done = wait_status(&mut events, |s| {
        !s.syncing && s.generation >= ready.generation + 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        h.lists(),
        before + 2,
        "{STORM} notifications: the running sync and exactly one more"
    );
    assert_eq!(done.generation, ready.generation + 2);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_finds_another_calls_wake_under_way_waits_for_the_same_connection() {
    // RECO-6:
    // after an idle stop, call A wakes the server; call B, arriving while
    // that connection is still coming up, waits for it too instead of
    // failing as "connecting". One connection serves both.
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.idle_stop_after = Some(Duration::from_secs(10));
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    wait_status(&mut events, |s| s.state == ServerState::IdleStopped).await;
    let open = h.hold_next_connection();
    let first = tokio::spawn({
        let rt = rt.clone();
        async move { echo(&rt).await }
    });
    let waking = wait_status(&mut events, |s| s.waking).await;
    assert_ne!(waking.state, ServerState::Ready);
    let second = tokio::spawn({
        let rt = rt.clone();
        async move { echo(&rt).await }
    });
    // Both are waiting on the held connection; neither has failed.
    tokio::task::yield_now().await;
    assert!(!first.is_finished() && !second.is_finished());
    open.send(()).unwrap();
    let (a, b) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(
        (a.kind, b.kind),
        (OutcomeKind::Ok, OutcomeKind::Ok),
        "{a:?} {b:?}"
    );
    assert_eq!(h.attempts().len(), 2, "one connection for both wakes");
    let ready = wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    assert!(!ready.waking, "nobody waits once it is ready");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn calls_to_a_reconnecting_server_fail_fast_with_server_not_ready() {
    // RECO-5 / CALL-4: registrations stay; calls fail with server-not-ready, never hang.
    let h = Harness::new(Mode::Serve);
    let (rt, mut events) = start(config(&h, policy(60_000, 60_000, 2))).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    h.crash();
    wait_status(&mut events, |s| {
        matches!(s.state, ServerState::Reconnecting { .. })
    })
    .await;
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__echo",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::ServerNotReady, "{out:?}");
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__nope",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::UnknownTool);
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__echo",
            Some(serde_json::json!([1])),
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::InvalidArguments);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn server_to_client_requests_are_refused_with_method_not_found() {
    // CONN-11: empty client capabilities; roots/list (and sampling, elicitation)
    // get JSON-RPC -32601 saying the client exposes no MCP capabilities.
    // Server-to-client requests exist in the session era only.
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.protocol = crate::messages::config::ProtocolChoice::Session;
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__ask_roots",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert!(out.projection.contains("-32601"), "{}", out.projection);
    assert!(
        out.projection
            .contains("this client exposes no MCP capabilities"),
        "{}",
        out.projection
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}
