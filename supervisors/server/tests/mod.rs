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

mod catalog;
mod lifecycle;
mod reconnect;

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
