//! Catalogs and names: public-name conflicts and slugs, the shared
//! resource tools, the event log, a value changed after projection.

#![allow(deprecated, clippy::field_reassign_with_default)]

use super::*;

#[tokio::test(start_paused = true)]
async fn a_public_name_conflict_leaves_the_second_server_with_zero_tools() {
    // SYNC-4: server "s" with tool "t__echo" and server "s__t" with tool "echo"
    // both map to mcp__s__t__echo. The later catalog is rolled back whole: that
    // server ends with zero tools and reports the conflict; in strict initial
    // mode (fail_on_startup_error) adding it is an error.
    let first = Harness::with_tool(Mode::Serve, "t__echo");
    let (rt, mut events) = start(named_config("s", &first, policy(100, 1000, 2))).await;
    wait_status(&mut events, |s| {
        s.server == "s" && s.state == ServerState::Ready
    })
    .await;
    let second = Harness::new(Mode::Serve);
    let mut strict = named_config("s__t", &second, policy(100, 1000, 2));
    strict.fail_on_startup_error = true;
    let err = rt.add_server(Scope::Global, strict).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("already registered by server \"s\""),
        "{err}"
    );
    let status = rt.status();
    let conflicted = status.iter().find(|s| s.server == "s__t").unwrap();
    assert_eq!(conflicted.tools, 0);
    let names: Vec<String> = rt
        .tools(&Scope::Global)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, vec!["mcp__s__t__echo", "mcp__s__ask_roots"]);
    let out = rt
        .call(
            &Scope::Global,
            "mcp__s__t__echo",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(
        out.server.as_deref(),
        Some("s"),
        "the first owner keeps the name"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn the_hundredth_clashing_display_name_gets_a_random_hex_suffix() {
    // SYNC-2 through add_server: -2 … -99, then the production random
    // suffix (not a test's string). Disabled servers: only the names matter.
    let rt = Runtime::builder().start().await.unwrap();
    let h = Harness::new(Mode::Serve);
    let mut names = Vec::new();
    for _ in 0..100 {
        let mut cfg =
            ServerConfig::with_display_name("Same", TransportConfig::InProcess(h.connector()));
        cfg.enabled = false;
        names.push(rt.add_server(Scope::Global, cfg).await.unwrap());
    }
    assert_eq!(names[0], "same");
    assert_eq!(names[1], "same-2");
    assert_eq!(names[98], "same-99");
    let last = &names[99];
    let suffix = last.strip_prefix("same-").unwrap_or_default();
    assert!(
        suffix.len() == 8
            && suffix
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{last}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn display_names_get_unique_slugs_within_a_scope() {
    // SYNC-2: derived on add, a clash in the same scope gets -2; another scope
    // derives independently.
    let rt = Runtime::builder().start().await.unwrap();
    let h = Harness::new(Mode::Serve);
    let mut names = Vec::new();
    for scope in [Scope::Global, Scope::Global, Scope::Agent("a".into())] {
        let cfg =
            ServerConfig::with_display_name("My Files!", TransportConfig::InProcess(h.connector()))
                .trusted();
        names.push(rt.add_server(scope, cfg).await.unwrap());
    }
    assert_eq!(names, vec!["my-files", "my-files-2", "my-files"]);
    for (scope, name) in [
        (Scope::Global, "my-files-2"),
        (Scope::Agent("a".into()), "my-files"),
    ] {
        rt.wait_ready(&scope, name, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let global: Vec<String> = rt
        .tools(&Scope::Global)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(
        global.contains(&"mcp__my-files-2__echo".to_owned()),
        "{global:?}"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn the_shared_resource_tools_stay_while_any_provider_is_live() {
    // RES-2: the first provider installs the three tools; one server leaving
    // never removes a sibling's access; the last one to leave removes them.
    let mut a = Harness::new(Mode::Serve);
    a.resources = true;
    let mut b = Harness::new(Mode::Serve);
    b.resources = true;
    let rt = Runtime::builder().start().await.unwrap();
    let mut events = rt.subscribe();
    for (name, h) in [("a", &a), ("b", &b)] {
        let mut cfg = named_config(name, h, policy(100, 1000, 1));
        cfg.reconnect.enabled = false;
        rt.add_server(Scope::Global, cfg).await.unwrap();
        rt.wait_ready(&Scope::Global, name, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let shared = |rt: &Runtime| {
        rt.tools(&Scope::Global)
            .iter()
            .filter(|t| t.server.is_empty())
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shared(&rt),
        vec![
            "list_mcp_resources",
            "list_mcp_resource_templates",
            "read_mcp_resource"
        ]
    );
    let out = rt
        .call(
            &Scope::Global,
            "list_mcp_resources",
            Some(serde_json::json!({"server": "b"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert!(
        out.projection.starts_with("[MCP server \"b\"]"),
        "{}",
        out.projection
    );
    assert!(out.projection.contains("mem://note"), "{}", out.projection);
    // RES-3: a server that is not visible gets the unknown-server error.
    let out = rt
        .call(
            &Scope::Global,
            "read_mcp_resource",
            Some(serde_json::json!({"server": "zzz", "uri": "x"})),
            CallOptions::default(),
        )
        .await;
    assert!(
        out.error
            .unwrap()
            .contains("unknown resource server \"zzz\"")
    );
    b.crash(); // b's transport ends first: the tools stay for a
    wait_status(&mut events, |s| {
        s.server == "b" && s.state == ServerState::Failed
    })
    .await;
    assert_eq!(shared(&rt).len(), 3, "a sibling leaving keeps the tools");
    a.crash();
    wait_status(&mut events, |s| {
        s.server == "a" && s.state == ServerState::Failed
    })
    .await;
    assert!(shared(&rt).is_empty(), "the last provider removed them");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}

#[tokio::test(start_paused = true)]
async fn the_event_log_records_states_catalogs_calls_and_model_visible_text() {
    // OBS-2: a durable JSONL log; every line an event with a timestamp.
    let path = std::env::temp_dir().join(format!(
        "mcpvisor-events-{}-{}.jsonl",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_file(&path);
    let h = Harness::new(Mode::Serve);
    let rt = ready_runtime(Runtime::builder().event_log(&path), &h).await;
    let out = echo(&rt).await;
    assert!(out.is_ok());
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert!(
        lines.iter().all(|l| l["ts_ms"].as_u64().is_some()),
        "{text}"
    );
    for want in [
        "server_status",
        "catalog_changed",
        "call_started",
        "call_finished",
    ] {
        assert!(kinds.contains(&want), "{want} missing: {kinds:?}");
    }
    let finished = lines
        .iter()
        .find(|l| l["event"] == "call_finished")
        .unwrap();
    assert_eq!(
        finished["projection"], "pong",
        "model-visible text is logged"
    );
    assert_eq!(finished["outcome"], "ok");
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "server_status")
        .filter_map(|l| l["state"].as_str())
        .collect();
    assert_eq!(states.first(), Some(&"connecting"));
    assert!(states.contains(&"ready"));
    assert_eq!(
        states.last(),
        Some(&"stopped"),
        "the shutdown's own events are in the file"
    );
}

#[tokio::test(start_paused = true)]
async fn a_policy_that_changes_the_value_after_projection_is_detected_and_reprojected() {
    // CALL-7: the prepared projection no longer matches; never silently kept.
    struct Rewrite;
    impl crate::CallPolicy for Rewrite {
        fn before<'a>(
            &'a self,
            _: &'a crate::PolicyCall,
        ) -> futures::future::BoxFuture<'a, crate::PolicyVerdict> {
            Box::pin(async { crate::PolicyVerdict::Proceed })
        }
        fn after<'a>(
            &'a self,
            _: &'a crate::PolicyCall,
            outcome: &'a mut crate::ToolOutcome,
        ) -> futures::future::BoxFuture<'a, ()> {
            Box::pin(async move {
                outcome.canonical =
                    Some(serde_json::json!({"content": [{"type": "text", "text": "rewritten"}]}));
            })
        }
    }
    let h = Harness::new(Mode::Serve);
    let rt = ready_runtime(Runtime::builder().policy(Arc::new(Rewrite)), &h).await;
    let out = echo(&rt).await;
    assert!(
        out.projection.starts_with("rewritten"),
        "{}",
        out.projection
    );
    assert!(
        out.projection
            .contains("a policy changed this result after it was projected"),
        "{}",
        out.projection
    );
    assert!(!out.projection.contains("pong"));
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
}
