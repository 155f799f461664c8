//! Deterministic tests of the server supervisor's timing rules with tokio's
//! paused clock (CHAOS-4): the reconnect schedule (RECO-1), the shared outage
//! budget and the stability window (RECO-2), the close barrier's deadline
//! (RECO-3), exhaustion (RECO-4) and idle stop (RECO-6).
//!
//! The server is a real rmcp server in the same process, reached over a
//! `tokio::io::duplex` stream (`TransportConfig::InProcess`), so the whole
//! actor tree and rmcp run for real; only the process is missing.

#![allow(deprecated, clippy::field_reassign_with_default)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig as RmcpServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::messages::config::{ReconnectPolicy, TransportConfig};
use crate::messages::transport::{InProcessConnection, InProcessConnector};
use crate::{
    CallOptions, OutcomeKind, Runtime, RuntimeEvent, Scope, ServerConfig, ServerState, ServerStatus,
};

/// The in-process server: one tool named `tool` that answers "pong", and
/// `ask_roots`, which sends a server→client `roots/list` request and returns
/// what the client answered (CONN-11).
#[derive(Clone)]
struct Echo {
    tool: &'static str,
    /// Declare the resources capability with one text resource (RES-1).
    resources: bool,
    /// tools/list requests answered, across every connection.
    lists: Arc<AtomicUsize>,
    /// When set, the next tools/list waits for it before answering.
    list_gate: Arc<Mutex<Option<oneshot::Receiver<()>>>>,
}

impl ServerHandler for Echo {
    fn get_info(&self) -> RmcpServerConfig {
        let caps = if self.resources {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        RmcpServerConfig::new(caps)
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let mut r = rmcp::model::ListResourcesResult::default();
        r.resources = vec![rmcp::model::Resource::new("mem://note", "note")];
        Ok(r)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let gate = self.list_gate.lock().unwrap().take();
        if let Some(gate) = gate {
            let _ = gate.await;
        }
        self.lists.fetch_add(1, Ordering::SeqCst);
        let mut r = ListToolsResult::default();
        let schema = serde_json::json!({"type": "object"});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        r.tools = vec![
            Tool::new(self.tool, "echo", schema.clone()),
            Tool::new("ask_roots", "asks the client for roots", schema),
        ];
        Ok(r)
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = match req.name.as_ref() {
            "ask_roots" => format!("{:?}", ctx.peer.list_roots().await),
            // SYNC-5: a burst of notifications before the answer.
            "storm" => {
                for _ in 0..STORM {
                    let _ = ctx.peer.notify_tool_list_changed().await;
                }
                "stormed".to_owned()
            }
            _ => "pong".to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// The `storm` tool's burst of `tools/list_changed`.
const STORM: usize = 5;

/// How the in-process "server" behaves on each connection attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Refuse to connect.
    Refuse,
    /// Serve until killed; confirm the close.
    Serve,
    /// Serve until killed; never confirm the close.
    ServeNeverConfirm,
}

#[derive(Clone)]
struct Harness {
    tool: &'static str,
    resources: bool,
    mode: Arc<Mutex<Mode>>,
    attempts: Arc<Mutex<Vec<Instant>>>,
    kills: Arc<Mutex<Vec<oneshot::Sender<()>>>>,
    /// When set, the next connection's server waits for it before serving.
    gate: Arc<Mutex<Option<oneshot::Receiver<()>>>>,
    /// tools/list requests answered, across every connection.
    lists: Arc<AtomicUsize>,
    /// When set, the next tools/list waits for it.
    list_gate: Arc<Mutex<Option<oneshot::Receiver<()>>>>,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        Self::with_tool(mode, "echo")
    }

    fn with_tool(mode: Mode, tool: &'static str) -> Self {
        Self {
            tool,
            resources: false,
            mode: Arc::new(Mutex::new(mode)),
            attempts: Arc::default(),
            kills: Arc::default(),
            gate: Arc::default(),
            lists: Arc::default(),
            list_gate: Arc::default(),
        }
    }

    /// Hold the next tools/list until the returned sender fires.
    fn hold_next_list(&self) -> oneshot::Sender<()> {
        let (open, gate) = oneshot::channel();
        *self.list_gate.lock().unwrap() = Some(gate);
        open
    }

    fn lists(&self) -> usize {
        self.lists.load(Ordering::SeqCst)
    }

    /// Hold the next connection's handshake until the returned sender fires.
    fn hold_next_connection(&self) -> oneshot::Sender<()> {
        let (open, gate) = oneshot::channel();
        *self.gate.lock().unwrap() = Some(gate);
        open
    }

    fn connector(&self) -> InProcessConnector {
        let h = self.clone();
        InProcessConnector(Arc::new(move || {
            h.attempts.lock().unwrap().push(Instant::now());
            let mode = *h.mode.lock().unwrap();
            if mode == Mode::Refuse {
                return Err("connection refused (test)".into());
            }
            let (client, server) = tokio::io::duplex(64 * 1024);
            let echo = Echo {
                tool: h.tool,
                resources: h.resources,
                lists: h.lists.clone(),
                list_gate: h.list_gate.clone(),
            };
            let (kill_tx, kill_rx) = oneshot::channel::<()>();
            h.kills.lock().unwrap().push(kill_tx);
            let gate = h.gate.lock().unwrap().take();
            let task = tokio::spawn(async move {
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                if let Ok(running) = echo.serve(server).await {
                    tokio::select! {
                        _ = running.waiting() => {}
                        _ = kill_rx => {}
                    }
                }
            });
            let closed: futures::future::BoxFuture<'static, bool> = match mode {
                Mode::ServeNeverConfirm => Box::pin(futures::future::pending()),
                _ => Box::pin(async move { task.await.is_ok() }),
            };
            Ok(InProcessConnection {
                stream: client,
                closed,
            })
        }))
    }

    /// "Crash" the most recent server.
    fn crash(&self) {
        if let Some(k) = self.kills.lock().unwrap().pop() {
            let _ = k.send(());
        }
    }

    fn attempts(&self) -> Vec<Instant> {
        self.attempts.lock().unwrap().clone()
    }
}

fn config(h: &Harness, policy: ReconnectPolicy) -> ServerConfig {
    named_config("srv", h, policy)
}

fn named_config(name: &str, h: &Harness, policy: ReconnectPolicy) -> ServerConfig {
    let mut c =
        ServerConfig::with_transport(name, TransportConfig::InProcess(h.connector())).trusted();
    c.reconnect = policy;
    c.idle_stop_after = None;
    c
}

fn policy(initial_ms: u64, max_ms: u64, attempts: u32) -> ReconnectPolicy {
    ReconnectPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(initial_ms),
        max_delay: Duration::from_millis(max_ms),
        max_attempts: attempts,
        jitter: false,
    }
}

/// A runtime from `builder` with the harness's server `srv`, ready.
async fn ready_runtime(builder: crate::RuntimeBuilder, h: &Harness) -> Runtime {
    let rt = builder.start().await.unwrap();
    rt.add_server(Scope::Global, config(h, policy(100, 1000, 2)))
        .await
        .unwrap();
    rt.wait_ready(&Scope::Global, "srv", Duration::from_secs(5))
        .await
        .unwrap();
    rt
}

/// Call `mcp__srv__echo` without arguments.
async fn echo(rt: &Runtime) -> crate::ToolOutcome {
    rt.call(
        &Scope::Global,
        "mcp__srv__echo",
        None,
        CallOptions::default(),
    )
    .await
}

/// A runtime with one server, subscribed before the server is added.
async fn start(cfg: ServerConfig) -> (Runtime, tokio::sync::broadcast::Receiver<RuntimeEvent>) {
    let rt = Runtime::builder().start().await.unwrap();
    let events = rt.subscribe();
    rt.add_server(Scope::Global, cfg).await.unwrap();
    (rt, events)
}

/// Wait for a status event of `srv` that satisfies `f` (time auto-advances while idle).
async fn wait_status(
    events: &mut tokio::sync::broadcast::Receiver<RuntimeEvent>,
    f: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    loop {
        match events.recv().await {
            Ok(RuntimeEvent::ServerStatus(s)) if f(&s) => return *s,
            Ok(_) => {}
            Err(e) => panic!("event stream ended: {e}"),
        }
    }
}

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
    let h = Harness::new(Mode::Serve);
    let (rt, mut events) = start(config(&h, policy(100, 1000, 2))).await;
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
                result: Ok(Vec::new()),
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

/// Call the `storm` tool: a burst of `tools/list_changed` before its
/// answer (SYNC-5).
async fn storm(rt: &Runtime) {
    let out = rt
        .call(
            &Scope::Global,
            "mcp__srv__storm",
            None,
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.projection, "stormed", "{out:?}");
}

/// The children of server `srv`'s supervisor (its connection, and its
/// CatalogSync while one runs), by actor id.
fn children(rt: &Runtime) -> Vec<ractor::ActorId> {
    rt.supervisor_of(&Scope::Global, "srv")
        .map(|s| {
            s.get_cell()
                .get_children()
                .iter()
                .map(|c| c.get_id())
                .collect()
        })
        .unwrap_or_default()
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
            result: Ok(Vec::new()),
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
