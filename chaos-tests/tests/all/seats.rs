//! The provider seats and session resources (SEAT-1, 2, 7, 8, 10), through
//! the public API with a scripted provider: its tools are a real in-process
//! MCP server mounted in the activation's scope, its "resource" records
//! when it was opened, interrupted and closed, and can be told to fail its
//! opening or its close.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use mcpvisor::{
    ActivationId, Opener, OutcomeKind, ProviderInfo, Runtime, RuntimeError, Scope, SeatError,
    SeatKind, SeatProvider, ServerConfig, SessionResource, SessionsHandle, ShutdownReport,
    TransportConfig,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::Notify;

/// What every resource of one provider did, in order.
struct Journal {
    events: Mutex<Vec<String>>,
    /// Bumped on every event, for waiting on one.
    changed: tokio::sync::watch::Sender<usize>,
    opened: AtomicUsize,
    fail_opens: AtomicUsize,
    unconfirmed_close: AtomicBool,
    /// Each opening waits for this when set.
    open_gate: Mutex<Option<Arc<Notify>>>,
    close_delay: Mutex<Duration>,
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            events: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            opened: AtomicUsize::default(),
            fail_opens: AtomicUsize::default(),
            unconfirmed_close: AtomicBool::default(),
            open_gate: Mutex::default(),
            close_delay: Mutex::default(),
        }
    }
}

impl Journal {
    fn log(&self, e: impl Into<String>) {
        self.events.lock().unwrap().push(e.into());
        self.changed.send_modify(|n| *n += 1);
    }

    /// Wait until `count` events equal to `event` were logged.
    async fn wait_for(&self, event: &str, count: usize) {
        let mut rx = self.changed.subscribe();
        loop {
            if self.events().iter().filter(|e| *e == event).count() >= count {
                return;
            }
            rx.changed().await.unwrap();
        }
    }
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

struct Res {
    n: usize,
    activation: ActivationId,
    journal: Arc<Journal>,
    interrupted: Arc<Notify>,
    was_interrupted: AtomicBool,
}

impl SessionResource for Res {
    fn pids(&self) -> Vec<u32> {
        vec![]
    }
    fn interrupt(&self) {
        self.was_interrupted.store(true, Ordering::SeqCst);
        self.interrupted.notify_waiters();
        self.journal.log(format!("interrupt {}", self.n));
    }
    fn close(self: Arc<Self>) -> BoxFuture<'static, ShutdownReport> {
        Box::pin(async move {
            let delay = *self.journal.close_delay.lock().unwrap();
            tokio::time::sleep(delay).await;
            if self.journal.unconfirmed_close.load(Ordering::SeqCst) {
                self.journal.log(format!("close-unconfirmed {}", self.n));
                // `ShutdownReport` is non-exhaustive: built from its default.
                let mut report = ShutdownReport::default();
                report.unconfirmed.push(format!(
                    "resource {} of {} did not close",
                    self.n, self.activation
                ));
                return report;
            }
            self.journal.log(format!("closed {}", self.n));
            let mut report = ShutdownReport::default();
            report.processes_reaped.push(self.n as u32);
            report
        })
    }
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

struct Scripted {
    name: String,
    seat: SeatKind,
    journal: Arc<Journal>,
}

impl Scripted {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            seat: SeatKind::BrowserUse,
            journal: Arc::default(),
        })
    }
}

#[derive(Clone)]
struct Tools {
    sessions: SessionsHandle,
    journal: Arc<Journal>,
}

impl ServerHandler for Tools {
    #[allow(clippy::field_reassign_with_default)]
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"wait": {"type": "boolean"}}});
        let mut page = ListToolsResult::default();
        page.tools = vec![Tool::new(
            "act",
            "acts on the activation's resource",
            Arc::new(schema.as_object().cloned().unwrap()),
        )];
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let wait = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("wait"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        self.journal.log("acquire");
        let r = match self.sessions.acquire(Duration::from_secs(10)).await {
            Ok(r) => r,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into());
            }
        };
        let r = r.as_any().downcast::<Res>().unwrap();
        if wait {
            // Runs until the activation's disposal interrupts it.
            let interrupted = r.interrupted.notified();
            if !r.was_interrupted.load(Ordering::SeqCst) {
                interrupted.await;
            }
            return Ok(CallToolResult::error(vec![ContentBlock::text("interrupted")]).into());
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "resource {} of {}",
            r.n, r.activation
        ))])
        .into())
    }

    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

impl SeatProvider for Scripted {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: self.name.clone(),
            kind: "scripted".into(),
            seat: self.seat,
        }
    }

    fn mount(&self, _: &ActivationId, sessions: SessionsHandle) -> Result<ServerConfig, String> {
        let journal = self.journal.clone();
        let connector = mcpvisor::providers::in_process_server(move || Tools {
            sessions: sessions.clone(),
            journal: journal.clone(),
        });
        Ok(
            ServerConfig::with_transport(self.name.clone(), TransportConfig::InProcess(connector))
                .trusted(),
        )
    }

    fn opener(&self) -> Option<Opener> {
        let journal = self.journal.clone();
        Some(Arc::new(move |activation: ActivationId| {
            let journal = journal.clone();
            Box::pin(async move {
                let gate = journal.open_gate.lock().unwrap().clone();
                if let Some(gate) = gate {
                    gate.notified().await;
                }
                let n = journal.opened.fetch_add(1, Ordering::SeqCst) + 1;
                if journal.fail_opens.load(Ordering::SeqCst) > 0 {
                    journal.fail_opens.fetch_sub(1, Ordering::SeqCst);
                    journal.log(format!("open-failed {n}"));
                    return Err(format!("opening {n} failed (scripted)"));
                }
                journal.log(format!("opened {n} for {activation}"));
                Ok(Arc::new(Res {
                    n,
                    activation,
                    journal: journal.clone(),
                    interrupted: Arc::new(Notify::new()),
                    was_interrupted: AtomicBool::new(false),
                }) as Arc<dyn SessionResource>)
            }) as BoxFuture<'static, _>
        }))
    }
}

async fn runtime() -> Runtime {
    Runtime::builder().start().await.unwrap()
}

async fn act(rt: &Runtime, scope: &Scope, name: &str, wait: bool) -> mcpvisor::ToolOutcome {
    let tool = format!("mcp__{name}__act");
    // The mounted server connects in the background: wait for it.
    rt.wait_ready(scope, name, Duration::from_secs(5))
        .await
        .unwrap();
    rt.call(
        scope,
        &tool,
        Some(serde_json::json!({"wait": wait})),
        Default::default(),
    )
    .await
}

fn agent(id: &str) -> Scope {
    Scope::Agent(id.into())
}

/// SEAT-1: one provider per seat; a second, even of the same name, is
/// refused with an error naming the holder.
#[tokio::test]
async fn a_seat_holds_one_provider_and_names_it_when_refusing_another() {
    let rt = runtime().await;
    rt.register_provider(Scripted::new("first")).await.unwrap();
    for name in ["second", "first"] {
        let err = rt.register_provider(Scripted::new(name)).await.unwrap_err();
        assert!(
            matches!(&err, RuntimeError::Seat(SeatError::Held { holder, seat: SeatKind::BrowserUse }) if holder == "first"),
            "{err}"
        );
        assert!(err.to_string().contains("\"first\""), "{err}");
    }
    // The other seat is independent.
    let other = Arc::new(Scripted {
        name: "desk".into(),
        seat: SeatKind::ComputerUse,
        journal: Arc::default(),
    });
    rt.register_provider(other).await.unwrap();
    let seats = rt.seats().await;
    let holders: Vec<_> = seats
        .iter()
        .map(|s| (s.seat.as_str(), s.holder.as_deref()))
        .collect();
    assert_eq!(
        holders,
        vec![
            ("browser_use", Some("first")),
            ("computer_use", Some("desk"))
        ]
    );
    rt.release_provider(SeatKind::BrowserUse).await.unwrap();
    rt.register_provider(Scripted::new("second")).await.unwrap();
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// SEAT-7 and SEAT-8: resources are keyed by the activation, opened once
/// even for concurrent callers; another activation gets its own; a new
/// activation of the same scope gets a fresh one.
#[tokio::test]
async fn each_activation_opens_its_own_resource_once_even_for_concurrent_callers() {
    let rt = runtime().await;
    let p = Scripted::new("res");
    let journal = p.journal.clone();
    rt.register_provider(p).await.unwrap();
    let gate = Arc::new(Notify::new());
    *journal.open_gate.lock().unwrap() = Some(gate.clone());
    let (a, b) = (agent("a"), agent("b"));
    let act_a = rt.open_activation(a.clone()).await.unwrap();
    let act_b = rt.open_activation(b.clone()).await.unwrap();
    assert_ne!(act_a.id(), act_b.id());
    // A second live activation of one scope is refused.
    let err = rt.open_activation(a.clone()).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::Seat(SeatError::ScopeTaken { .. })),
        "{err}"
    );
    rt.wait_ready(&a, "res", Duration::from_secs(5))
        .await
        .unwrap();
    // Three concurrent callers of `a` while its opening is held.
    let calls = (0..3).map(|_| act(&rt, &a, "res", false));
    let all = futures::future::join_all(calls);
    let opened_wait = async {
        // All three asked while the one opening waits on the gate.
        journal.wait_for("acquire", 3).await;
        gate.notify_one();
    };
    let (outs, ()) = tokio::join!(all, opened_wait);
    let texts: Vec<String> = outs.iter().map(|o| o.projection.clone()).collect();
    assert!(outs.iter().all(|o| o.is_ok()), "{texts:?}");
    assert!(
        texts.iter().all(|t| t == &texts[0]),
        "one resource for all: {texts:?}"
    );
    assert_eq!(journal.opened.load(Ordering::SeqCst), 1);
    *journal.open_gate.lock().unwrap() = None;
    let out_b = act(&rt, &b, "res", false).await;
    assert!(out_b.is_ok(), "{}", out_b.projection);
    assert_ne!(out_b.projection, texts[0]);
    assert!(
        out_b.projection.contains(act_b.id().as_str()),
        "{}",
        out_b.projection
    );
    // Closing `a` closes its resource only; a new activation of the scope
    // starts fresh.
    let report = act_a.close().await.unwrap();
    assert_eq!(report.processes_reaped, vec![1]);
    let act_a2 = rt.open_activation(a.clone()).await.unwrap();
    let again = act(&rt, &a, "res", false).await;
    assert!(
        again.projection.contains(act_a2.id().as_str()),
        "{}",
        again.projection
    );
    assert_eq!(journal.opened.load(Ordering::SeqCst), 3);
    drop(act_b);
    drop(act_a2);
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// SEAT-8: a caller that stops waiting cancels only its own wait; the
/// opening goes on and serves the others.
#[tokio::test]
async fn a_caller_that_gives_up_does_not_cancel_the_activations_opening() {
    let rt = runtime().await;
    let p = Scripted::new("res");
    let journal = p.journal.clone();
    rt.register_provider(p).await.unwrap();
    let gate = Arc::new(Notify::new());
    *journal.open_gate.lock().unwrap() = Some(gate.clone());
    let scope = agent("x");
    let _act = rt.open_activation(scope.clone()).await.unwrap();
    rt.wait_ready(&scope, "res", Duration::from_secs(5))
        .await
        .unwrap();
    let cancel = mcpvisor::CancellationToken::new();
    let quitter = {
        let (rt, scope, cancel) = (rt.clone(), scope.clone(), cancel.clone());
        tokio::spawn(async move {
            let options = mcpvisor::CallOptions {
                cancel: Some(cancel),
                ..Default::default()
            };
            rt.call(&scope, "mcp__res__act", None, options).await
        })
    };
    let stayer = {
        let (rt, scope) = (rt.clone(), scope.clone());
        tokio::spawn(async move { act(&rt, &scope, "res", false).await })
    };
    // Both wait for the one opening; one gives up; then it completes.
    journal.wait_for("acquire", 2).await;
    cancel.cancel();
    let q = quitter.await.unwrap();
    gate.notify_one();
    let s = stayer.await.unwrap();
    assert_eq!(q.kind, OutcomeKind::Cancelled, "{}", q.projection);
    assert!(s.is_ok(), "{}", s.projection);
    assert_eq!(journal.opened.load(Ordering::SeqCst), 1);
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// SEAT-8: a failed acquisition removes the entry: the next call opens again.
#[tokio::test]
async fn a_failed_opening_is_forgotten_and_the_next_call_tries_again() {
    let rt = runtime().await;
    let p = Scripted::new("res");
    let journal = p.journal.clone();
    journal.fail_opens.store(1, Ordering::SeqCst);
    rt.register_provider(p).await.unwrap();
    let scope = agent("f");
    let _act = rt.open_activation(scope.clone()).await.unwrap();
    let first = act(&rt, &scope, "res", false).await;
    assert!(!first.is_ok());
    assert!(
        first.projection.contains("opening 1 failed"),
        "{}",
        first.projection
    );
    let second = act(&rt, &scope, "res", false).await;
    assert!(second.is_ok(), "{}", second.projection);
    let events: Vec<String> = journal
        .events()
        .into_iter()
        .filter(|e| e != "acquire")
        .collect();
    assert_eq!(
        events[..2],
        [
            "open-failed 1".to_owned(),
            format!("opened 2 for {}", _act.id())
        ]
    );
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// SEAT-2 and SEAT-8: releasing withdraws the tools first, interrupts the
/// running action, awaits the close, and only then lets a new provider in.
#[tokio::test]
async fn release_withdraws_tools_interrupts_work_and_awaits_the_close_before_a_new_provider() {
    let rt = runtime().await;
    let p = Scripted::new("old");
    let journal = p.journal.clone();
    *journal.close_delay.lock().unwrap() = Duration::from_millis(300);
    rt.register_provider(p).await.unwrap();
    let scope = agent("r");
    let _act = rt.open_activation(scope.clone()).await.unwrap();
    rt.wait_ready(&scope, "old", Duration::from_secs(5))
        .await
        .unwrap();
    let running = {
        let rt = rt.clone();
        let scope = scope.clone();
        tokio::spawn(async move { act(&rt, &scope, "old", true).await })
    };
    // The action holds the resource.
    journal.wait_for("acquire", 1).await;
    let release = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.release_provider(SeatKind::BrowserUse).await })
    };
    // The release has reached the resources (its tools were withdrawn).
    journal.wait_for("interrupt 1", 1).await;
    let newcomer = Scripted::new("new");
    let new_journal = newcomer.journal.clone();
    // Registered while the release runs: it waits for the release to end.
    let registered = rt.register_provider(newcomer).await;
    assert!(registered.is_ok(), "{registered:?}");
    let events = journal.events();
    assert!(
        events.contains(&"closed 1".to_owned()),
        "the new provider entered before the old resource closed: {events:?}"
    );
    let report = release.await.unwrap().unwrap();
    assert_eq!(report.processes_reaped, vec![1]);
    assert!(
        report.servers_stopped.iter().any(|s| s.contains("old")),
        "{report:?}"
    );
    let out = running.await.unwrap();
    assert!(
        !out.is_ok(),
        "the running action was not ended: {}",
        out.projection
    );
    // The old tools are gone from the scope; the new provider's are mounted.
    let names: Vec<String> = rt.tools(&scope).iter().map(|t| t.name.clone()).collect();
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__old__")),
        "{names:?}"
    );
    let fresh = act(&rt, &scope, "new", false).await;
    assert!(fresh.is_ok(), "{}", fresh.projection);
    assert_eq!(new_journal.opened.load(Ordering::SeqCst), 1);
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// SEAT-10: a close that cannot be confirmed keeps the entry and the seat,
/// and the refusal says what is still open.
#[tokio::test]
async fn an_unconfirmed_close_keeps_the_seat_and_says_what_is_open() {
    let rt = runtime().await;
    let p = Scripted::new("sticky");
    let journal = p.journal.clone();
    rt.register_provider(p).await.unwrap();
    let scope = agent("s");
    let activation = rt.open_activation(scope.clone()).await.unwrap();
    assert!(act(&rt, &scope, "sticky", false).await.is_ok());
    journal.unconfirmed_close.store(true, Ordering::SeqCst);
    let err = rt.release_provider(SeatKind::BrowserUse).await.unwrap_err();
    assert!(err.to_string().contains("resource 1 of"), "{err}");
    assert!(err.to_string().contains("still open"), "{err}");
    // Still held: a new provider is refused while it releases.
    let refused = rt
        .register_provider(Scripted::new("next"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RuntimeError::Seat(SeatError::Releasing { .. })),
        "{refused}"
    );
    let seat = &rt.seats().await[0];
    assert_eq!(seat.holder.as_deref(), Some("sticky"));
    assert!(seat.releasing);
    assert!(
        seat.still_open.iter().any(|o| o.contains("resource 1")),
        "{seat:?}"
    );
    // Once the close can be confirmed, the release goes through.
    journal.unconfirmed_close.store(false, Ordering::SeqCst);
    let report = rt.release_provider(SeatKind::BrowserUse).await.unwrap();
    assert_eq!(report.processes_reaped, vec![1]);
    rt.register_provider(Scripted::new("next")).await.unwrap();
    drop(activation);
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

/// The shutdown releases the seats before the scopes: every resource is
/// closed, and one that cannot be confirmed makes the report unclean.
#[tokio::test]
async fn shutdown_closes_every_activations_resource_and_reports_an_unconfirmed_one() {
    let rt = runtime().await;
    let p = Scripted::new("res");
    let journal = p.journal.clone();
    rt.register_provider(p).await.unwrap();
    let mut held = Vec::new();
    for id in ["p", "q"] {
        let scope = agent(id);
        held.push(rt.open_activation(scope.clone()).await.unwrap());
        assert!(act(&rt, &scope, "res", false).await.is_ok());
    }
    let report = rt.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    let mut reaped = report.processes_reaped.clone();
    reaped.sort();
    assert_eq!(reaped, vec![1, 2]);
    assert_eq!(
        journal
            .events()
            .iter()
            .filter(|e| e.starts_with("closed"))
            .count(),
        2
    );

    let rt = runtime().await;
    let p = Scripted::new("res");
    p.journal.unconfirmed_close.store(true, Ordering::SeqCst);
    rt.register_provider(p).await.unwrap();
    let scope = agent("u");
    let _a = rt.open_activation(scope.clone()).await.unwrap();
    assert!(act(&rt, &scope, "res", false).await.is_ok());
    let report = rt.shutdown(Duration::from_secs(10)).await;
    assert!(!report.is_clean());
    assert!(
        report.unconfirmed.iter().any(|u| u.contains("resource 1")),
        "{report:?}"
    );
}
