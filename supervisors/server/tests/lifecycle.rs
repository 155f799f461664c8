//! The switches and restarts: off and on, restart intensity, jitter, an
//! unconfirmed close that is never forgotten, a restarted supervisor, the
//! catalog syncs across generations.

#![allow(deprecated, clippy::field_reassign_with_default)]

use super::*;

#[tokio::test(start_paused = true)]
async fn off_means_off_and_on_starts_the_servers_again() {
    // TRUST-1: turning the runtime off stops every server quiescently; while
    // off no connection is made and no tool is exposed.
    let h = Harness::new(Mode::Serve);
    let rt = ready_runtime(Runtime::builder(), &h).await;
    let mut events = rt.subscribe();
    assert!(echo(&rt).await.is_ok());
    let report = rt.set_enabled(false).await;
    assert_eq!(
        report.servers_stopped,
        vec!["global/srv".to_owned()],
        "{report:?}"
    );
    assert!(report.is_clean());
    assert!(rt.tools(&Scope::Global).is_empty(), "no tool is exposed");
    let out = echo(&rt).await;
    assert_eq!(out.kind, OutcomeKind::UnknownTool);
    let st = &rt.status()[0];
    assert_eq!(st.state, ServerState::Stopped);
    assert_eq!(st.pid, None);
    let err = rt
        .add_server(
            Scope::Global,
            named_config("late", &h, policy(100, 1000, 2)),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("turned off"), "{err}");
    assert_eq!(h.attempts().len(), 1, "no connection while off");
    rt.set_enabled(true).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    assert!(echo(&rt).await.is_ok());
    assert_eq!(h.attempts().len(), 2);
    // One server alone: it stays off across a global off and on, and
    // cannot be turned on while the runtime is off.
    rt.set_server_enabled(&Scope::Global, "srv", false)
        .await
        .unwrap();
    assert!(rt.tools(&Scope::Global).is_empty());
    rt.set_enabled(false).await;
    let err = rt
        .set_server_enabled(&Scope::Global, "srv", true)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("turned off"), "{err}");
    rt.set_enabled(true).await;
    assert_eq!(rt.status()[0].state, ServerState::Stopped);
    assert_eq!(
        h.attempts().len(),
        2,
        "the server turned off alone stayed off"
    );
    rt.set_server_enabled(&Scope::Global, "srv", true)
        .await
        .unwrap();
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    assert_eq!(h.attempts().len(), 3);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_server_set_to_never_provides_no_resources() {
    // TRUST-4 for the shared resource tools, which are not gated per call:
    // a `never` server is not a resource provider at all.
    let mut a = Harness::new(Mode::Serve);
    a.resources = true;
    let mut b = Harness::new(Mode::Serve);
    b.resources = true;
    let rt = Runtime::builder().start().await.unwrap();
    for (name, h, trust) in [
        ("a", &a, crate::TrustMode::Always),
        ("b", &b, crate::TrustMode::Never),
    ] {
        let mut cfg = named_config(name, h, policy(100, 1000, 1));
        cfg.trust = trust;
        rt.add_server(Scope::Global, cfg).await.unwrap();
        rt.wait_ready(&Scope::Global, name, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let call = |server: &'static str| {
        rt.call(
            &Scope::Global,
            "list_mcp_resources",
            Some(serde_json::json!({ "server": server })),
            CallOptions::default(),
        )
    };
    assert_eq!(call("a").await.kind, OutcomeKind::Ok);
    let refused = call("b").await;
    assert_eq!(refused.kind, OutcomeKind::InvalidArguments, "{refused:?}");
    assert!(
        refused.projection.contains("known: a"),
        "{}",
        refused.projection
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[cfg(feature = "chaos")]
#[tokio::test(start_paused = true)]
async fn restart_intensity_is_per_server_so_a_fourth_failing_server_is_still_restarted() {
    // Scope intensity is 3 restarts / 5 s per child: with one window shared by
    // the scope, the fourth failure within 5 s would abandon its server.
    let h = Harness::new(Mode::Serve);
    let rt = Runtime::builder().start().await.unwrap();
    let names = ["s1", "s2", "s3", "s4"];
    for name in names {
        rt.add_server(Scope::Global, named_config(name, &h, policy(100, 1000, 2)))
            .await
            .unwrap();
        rt.wait_ready(&Scope::Global, name, Duration::from_secs(5))
            .await
            .unwrap();
    }
    for name in names {
        let mut events = rt.subscribe();
        rt.fail_server_supervisor_for_chaos(&Scope::Global, name)
            .unwrap();
        let settled = wait_status(&mut events, |s| {
            s.server == name && (s.state == ServerState::Ready || s.state == ServerState::Failed)
        })
        .await;
        assert_eq!(
            (settled.state, settled.error),
            (ServerState::Ready, None),
            "{name} was restarted by its scope"
        );
    }
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

/// The gaps between the connection attempts of a server that never comes
/// up, under `seed`, with jitter on.
async fn jittered_gaps(seed: u64) -> Vec<u128> {
    let h = Harness::new(Mode::Refuse);
    let mut cfg = config(&h, policy(400, 3200, 4));
    cfg.reconnect.jitter = true;
    let rt = Runtime::builder().seed(seed).start().await.unwrap();
    let mut events = rt.subscribe();
    rt.add_server(Scope::Global, cfg).await.unwrap();
    wait_status(&mut events, |s| s.state == ServerState::Exhausted).await;
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let t = h.attempts();
    t.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect()
}

#[tokio::test(start_paused = true)]
async fn jittered_delays_stay_within_half_to_all_of_the_schedule_and_a_seed_repeats_them() {
    // RECO-1 with jitter: attempt k waits uniformly in [delay(k)/2, delay(k)];
    // the runtime's seed makes the draw reproducible (RuntimeBuilder::seed).
    let schedule = [400u128, 800, 1600, 3200];
    let first = jittered_gaps(7).await;
    assert_eq!(first.len(), schedule.len());
    for (gap, d) in first.iter().zip(schedule) {
        assert!(
            (d / 2..=d).contains(gap),
            "gap {gap} ms outside [{}, {d}]",
            d / 2
        );
    }
    assert_eq!(jittered_gaps(7).await, first, "same seed, same delays");
    let mut differ = false;
    for seed in [8, 9, 10] {
        differ |= jittered_gaps(seed).await != first;
    }
    assert!(differ, "the jitter draws depend on the seed");
}

#[tokio::test(start_paused = true)]
async fn a_clean_idle_stop_ends_the_outage_so_one_failed_wake_is_not_exhaustion() {
    // RECO-2: a brief connection after a crash leaves the
    // outage's count at 1; the idle stop that follows is clean and ends the
    // outage, so a wake that fails is attempt 1 of a new one, not exhaustion.
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 1));
    cfg.idle_stop_after = Some(Duration::from_secs(10));
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    h.crash();
    wait_status(&mut events, |s| {
        matches!(s.state, ServerState::Reconnecting { .. })
    })
    .await;
    let s = wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    assert_eq!(
        s.consecutive_failures, 1,
        "a brief connection keeps the count"
    );
    let s = wait_status(&mut events, |s| s.state == ServerState::IdleStopped).await;
    assert_eq!(s.consecutive_failures, 0, "the clean stop ended the outage");
    *h.mode.lock().unwrap() = Mode::Refuse;
    let out = echo(&rt).await;
    assert_eq!(out.kind, OutcomeKind::ServerNotReady, "{out:?}");
    let st = rt.status();
    assert_eq!(
        st[0].state,
        ServerState::Reconnecting { attempt: 1, of: 1 },
        "{st:?}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_backoff_timer_that_fires_after_the_switch_off_starts_nothing() {
    // TRUST-1: off means off. A Reconnect that was
    // already on its way when the server was turned off is stale.
    let h = Harness::new(Mode::Refuse);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 5))).await;
    wait_status(&mut events, |s| {
        matches!(s.state, ServerState::Reconnecting { attempt: 1, .. })
    })
    .await;
    let supervisor = rt.supervisor_of(&Scope::Global, "srv").unwrap();
    rt.set_server_enabled(&Scope::Global, "srv", false)
        .await
        .unwrap();
    let attempts = h.attempts().len();
    *h.mode.lock().unwrap() = Mode::Serve;
    supervisor
        .cast(crate::messages::server::ServerSupervisorMsg::Reconnect { attempt: 1 })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await; // paused: every timer fires
    assert_eq!(h.attempts().len(), attempts, "no connection after off");
    let st = rt.status();
    assert_eq!(st[0].state, ServerState::Stopped, "{st:?}");
    assert!(rt.tools(&Scope::Global).is_empty());
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_secret_store_that_never_answers_fails_the_connect_within_the_startup_timeout() {
    // TRUST-2: the lookups have the startup deadline;
    // the server's supervisor is never wedged by its store.
    struct Never;
    impl crate::SecretStore for Never {
        fn get<'a>(
            &'a self,
            _: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<crate::Secret, crate::StoreError>> {
            Box::pin(futures::future::pending())
        }
    }
    let mut cfg = ServerConfig::stdio("sec", "no-such-mcp-server-xyz", vec![]).trusted();
    if let TransportConfig::Stdio(s) = &mut cfg.transport {
        s.env_secrets.insert("TOKEN".into(), "token".into());
    }
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(2);
    let rt = Runtime::builder()
        .secrets(Arc::new(Never))
        .start()
        .await
        .unwrap();
    let mut events = rt.subscribe();
    let started = Instant::now();
    rt.add_server(Scope::Global, cfg).await.unwrap();
    let failed = wait_status(&mut events, |s| s.state == ServerState::Failed);
    let s = tokio::time::timeout(Duration::from_secs(60), failed)
        .await
        .expect("the connect failed instead of waiting on the store forever");
    assert!(started.elapsed() <= Duration::from_secs(3));
    let error = s.error.unwrap_or_default();
    assert!(
        error.contains("did not answer within startup_timeout_ms = 2000"),
        "{error}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn the_expected_generation_is_checked_again_after_the_policy_chain() {
    // SYNC-6 / CALL-1: a catalog swap while a policy
    // waits (here the policy itself restarts the server, which registers a
    // new generation) makes the call stale; it is not sent to the new tool.
    struct RestartFirst(Arc<std::sync::OnceLock<Runtime>>);
    impl crate::CallPolicy for RestartFirst {
        fn before<'a>(
            &'a self,
            call: &'a crate::PolicyCall,
        ) -> futures::future::BoxFuture<'a, crate::PolicyVerdict> {
            Box::pin(async move {
                let rt = self.0.get().unwrap();
                let mut events = rt.subscribe();
                rt.restart_server(&Scope::Global, "srv").await.unwrap();
                while !rt
                    .tools(&Scope::Global)
                    .iter()
                    .any(|t| t.name == call.tool.name && t.generation > call.tool.generation)
                {
                    let _ = events.recv().await;
                }
                crate::PolicyVerdict::Proceed
            })
        }
    }
    let h = Harness::new(Mode::Serve);
    let cell = Arc::new(std::sync::OnceLock::new());
    let rt = ready_runtime(
        Runtime::builder().policy(Arc::new(RestartFirst(cell.clone()))),
        &h,
    )
    .await;
    let _ = cell.set(rt.clone());
    let generation = rt.tools(&Scope::Global)[0].generation;
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__echo",
            None,
            CallOptions {
                expected_generation: Some(generation),
                ..CallOptions::default()
            },
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::StaleGeneration, "{out:?}");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn resource_traffic_keeps_a_server_awake_and_wakes_it_when_idle_stopped() {
    // RECO-6, RES-2: resource requests are activity,
    // and an idle-stopped provider stays a provider that a resource call wakes.
    let mut h = Harness::new(Mode::Serve);
    h.resources = true;
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.idle_stop_after = Some(Duration::from_secs(10));
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let list = |rt: &Runtime| {
        let rt = rt.clone();
        async move {
            rt.call(
                &Scope::Global,
                "list_mcp_resources",
                Some(serde_json::json!({"server": "srv"})),
                CallOptions::default(),
            )
            .await
        }
    };
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let out = list(&rt).await;
        assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    }
    assert_eq!(
        rt.status()[0].state,
        ServerState::Ready,
        "used, so not idle"
    );
    assert_eq!(h.attempts().len(), 1);
    wait_status(&mut events, |s| s.state == ServerState::IdleStopped).await;
    let out = list(&rt).await;
    assert_eq!(
        out.kind,
        OutcomeKind::Ok,
        "a resource call wakes it: {out:?}"
    );
    assert_eq!(h.attempts().len(), 2);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_close_is_never_forgotten_so_a_restart_is_refused_while_it_stands() {
    // RECO-3, SEAT-10: the close reported as not
    // confirmed stays open; restart (and switching on) refuse, with a
    // sentence, instead of starting a second process beside the old one.
    let h = Harness::new(Mode::ServeNeverConfirm);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 5))).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    h.crash();
    wait_status(&mut events, |s| s.state == ServerState::Failed).await;
    // Past the in-process close wait: ConnectionEnded { reaped: false } arrived.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let err = rt.restart_server(&Scope::Global, "srv").await.unwrap_err();
    assert!(
        err.to_string().contains("did not confirm its exit"),
        "{err}"
    );
    rt.set_server_enabled(&Scope::Global, "srv", false)
        .await
        .unwrap();
    let on = rt
        .set_server_enabled(&Scope::Global, "srv", true)
        .await
        .unwrap();
    assert!(!on.is_clean(), "switching on is refused too: {on:?}");
    assert_eq!(h.attempts().len(), 1, "no second instance was started");
    let report = rt.shutdown(Duration::from_secs(30)).await;
    assert!(!report.is_clean(), "{report:?}");
}

#[cfg(feature = "chaos")]
#[tokio::test(start_paused = true)]
async fn a_restarted_server_supervisor_waits_for_its_predecessors_transport() {
    // RECO-3 across a restart: the open transports live
    // with the scope, so the replacement supervisor waits for the failed
    // one's connection to confirm its close — here it never does, so no
    // second instance starts and the server fails with the barrier's reason.
    let h = Harness::new(Mode::ServeNeverConfirm);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 5))).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let generation = rt.status()[0].connection_generation;
    rt.fail_server_supervisor_for_chaos(&Scope::Global, "srv")
        .unwrap();
    let failed = wait_status(&mut events, |s| s.state == ServerState::Failed);
    let s = tokio::time::timeout(Duration::from_secs(60), failed)
        .await
        .expect("the replacement waited for the old transport and failed");
    assert!(
        s.error
            .unwrap_or_default()
            .contains("could not confirm that the previous process exited")
    );
    assert_eq!(
        h.attempts().len(),
        1,
        "no instance beside the unconfirmed one"
    );
    assert!(
        s.connection_generation >= generation,
        "generations continue"
    );
    let report = rt.shutdown(Duration::from_secs(30)).await;
    assert!(!report.is_clean(), "{report:?}");
}

#[cfg(feature = "chaos")]
#[tokio::test(start_paused = true)]
async fn a_restarted_server_supervisor_reconnects_once_the_old_transport_closed() {
    // The same with a transport that does confirm: the replacement connects.
    let h = Harness::new(Mode::Serve);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 5))).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    rt.fail_server_supervisor_for_chaos(&Scope::Global, "srv")
        .unwrap();
    let s = wait_status(&mut events, |s| {
        s.state == ServerState::Ready && s.connection_generation >= 2
    })
    .await;
    assert_eq!(s.connection_generation, 2, "the count continues: {s:?}");
    assert_eq!(h.attempts().len(), 2);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_arrives_while_an_idle_stop_closes_waits_for_the_wake() {
    // RECO-6: from the moment the idle stop begins the
    // server shows idle_stopped; a call in that window wakes it instead of
    // failing "not connected" against the closing connection.
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.idle_stop_after = Some(Duration::from_secs(10));
    let (rt, mut events) = start(cfg).await;
    wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    // The first status change after the idle deadline is the stop beginning.
    let ready_at = Instant::now();
    let s = wait_status(&mut events, |_| {
        ready_at.elapsed() >= Duration::from_secs(10)
    })
    .await;
    assert_eq!(s.state, ServerState::IdleStopped, "{s:?}");
    let out = echo(&rt).await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert_eq!(h.attempts().len(), 2);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn with_reconnect_off_on_disconnect_decides_whether_the_tools_stay() {
    // RECO-5: keep (the default) leaves the tools registered, calls fail
    // server_not_ready; remove withdraws them.
    for (on_disconnect, tools_left) in [
        (crate::OnDisconnect::Keep, 2usize),
        (crate::OnDisconnect::Remove, 0),
    ] {
        let h = Harness::new(Mode::Serve);
        let mut cfg = config(&h, policy(100, 1000, 2));
        cfg.reconnect.enabled = false;
        cfg.on_disconnect = on_disconnect;
        let (rt, mut events) = start(cfg).await;
        wait_status(&mut events, |s| s.state == ServerState::Ready).await;
        h.crash();
        wait_status(&mut events, |s| s.state == ServerState::Failed).await;
        assert_eq!(
            rt.tools(&Scope::Global).len(),
            tools_left,
            "{on_disconnect:?}"
        );
        assert_eq!(h.attempts().len(), 1, "never retried");
        assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    }
}

#[tokio::test(start_paused = true)]
async fn a_sync_result_of_another_connection_generation_is_dropped() {
    // SYNC-6: a late SyncDone from an older generation never replaces the
    // catalog of the live one.
    let h = Harness::new(Mode::Serve);
    let rt = ready_runtime(Runtime::builder(), &h).await;
    let before = rt.tools(&Scope::Global);
    let live = rt.status()[0].connection_generation;
    let supervisor = rt.supervisor_of(&Scope::Global, "srv").unwrap();
    // Another connection's result, and one of this connection from a sync
    // that is not the one running (none runs): both dropped.
    for (conn_gen, n) in [(live + 7, 1), (live, 42)] {
        supervisor
            .cast(crate::messages::server::ServerSupervisorMsg::SyncDone {
                conn_gen,
                n,
                result: Ok(crate::messages::catalog::ToolPages {
                    entries: Vec::new(),
                    fresh_for: None,
                }),
            })
            .unwrap();
    }
    // A barrier: switching an enabled server on is a no-op the supervisor
    // answers after the SyncDone it already has in its mailbox.
    rt.set_server_enabled(&Scope::Global, "srv", true)
        .await
        .unwrap();
    let after: Vec<String> = rt
        .tools(&Scope::Global)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let names: Vec<String> = before.iter().map(|t| t.name.clone()).collect();
    assert_eq!(after, names, "the stale (empty) catalog was dropped");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_sync_killed_mid_page_goes_with_its_connection_and_reports_nothing() {
    // A re-sync is a CatalogSync actor, a child of the
    // server's supervisor, shown in the status while it runs. Its page is
    // held; the server crashes: the sync is stopped with its connection
    // (no longer a child), its page is never answered, and the reconnected
    // server's catalog is the new connection's own.
    let h = Harness::with_tool(Mode::Serve, "storm");
    let (rt, mut events) = start(config(&h, policy(100, 1000, 3))).await;
    let ready = wait_status(&mut events, |s| s.state == ServerState::Ready).await;
    let before = children(&rt);
    let lists = h.lists();
    let _held = h.hold_next_list();
    storm(&rt).await;
    let syncing = wait_status(&mut events, |s| s.catalog_sync.is_some()).await;
    assert_eq!(syncing.catalog_sync, Some(1), "{syncing:?}");
    let during = children(&rt);
    let sync: Vec<_> = during.iter().filter(|c| !before.contains(c)).collect();
    assert_eq!(
        sync.len(),
        1,
        "one CatalogSync child: {before:?} → {during:?}"
    );
    let sync = *sync[0];
    // SYNC-6: a result of the live connection that is not from the sync
    // running now (another n) is dropped, even while that sync runs.
    let tools = rt.tools(&Scope::Global).len();
    rt.supervisor_of(&Scope::Global, "srv")
        .unwrap()
        .cast(crate::messages::server::ServerSupervisorMsg::SyncDone {
            conn_gen: syncing.connection_generation,
            n: 7,
            result: Ok(crate::messages::catalog::ToolPages {
                entries: Vec::new(),
                fresh_for: None,
            }),
        })
        .unwrap();
    rt.set_server_enabled(&Scope::Global, "srv", true)
        .await
        .unwrap();
    assert_eq!(
        rt.tools(&Scope::Global).len(),
        tools,
        "a stale sync's catalog"
    );
    assert_eq!(rt.status()[0].catalog_sync, Some(1));
    h.crash();
    let again = wait_status(&mut events, |s| {
        s.state == ServerState::Ready && s.connection_generation > ready.connection_generation
    })
    .await;
    assert_eq!(again.catalog_sync, None, "{again:?}");
    assert!(
        !children(&rt).contains(&sync),
        "the sync outlived its connection"
    );
    // The held page was never answered; the new connection fetched its own.
    assert_eq!(h.lists(), lists + 1, "only the new connection's tools/list");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

/// SEAT-6: a seat provider's guidance (`tool_note`) ends every tool
/// description of its server, joined as a sentence.
#[tokio::test(start_paused = true)]
async fn a_tool_note_ends_every_description_of_the_server() {
    let h = Harness::new(Mode::Serve);
    let mut cfg = config(&h, policy(100, 1000, 2));
    cfg.tool_note = Some("Snapshot first.".into());
    let (rt, _events) = start(cfg).await;
    rt.wait_ready(&Scope::Global, "srv", Duration::from_secs(5))
        .await
        .unwrap();
    let tools = rt.tools(&Scope::Global);
    assert!(!tools.is_empty());
    for t in &tools {
        let d = t.description.as_deref().unwrap_or_default();
        assert!(d.ends_with("Snapshot first."), "{d:?}");
        assert!(!d.contains("  "), "{d:?}");
    }
    rt.shutdown(Duration::from_secs(5)).await;
}
