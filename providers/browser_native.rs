//! `browser-native` (SEAT-4): Chromium driven over CDP with chromiumoxide,
//! in process, mode `launch`: one browser per live activation, a fresh
//! profile directory each, headless, in a process group of its own owned
//! through the runtime's process-group module and reaped on every path.
//!
//! The tools (navigate, snapshot, click, type, press, screenshot, close,
//! and evaluate when enabled) are an in-process MCP server mounted in the
//! activation's scope; each call acquires the activation's browser from the
//! seat's session resources (opened on first use) and holds it for the
//! call, so one activation's actions are serialised and other activations'
//! browsers are independent. Every CDP request has a timeout, and every
//! action also ends when the browser exits or the activation is disposed.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use super::snapshot::{SNAPSHOT_JS, Snapshot, check_token};
use super::{Exclusive, ToolFailure};
use crate::messages::call::OutcomeKind;
use crate::messages::config::ServerConfig;
use crate::messages::seat::{
    ActivationId, Opener, ProviderInfo, SeatKind, SeatProvider, SessionResource, SessionsHandle,
};
use crate::messages::status::ShutdownReport;
use crate::messages::trust::TrustMode;
use crate::process::{CloseGraces, ProcessGroup, TAG_VAR};

/// The guidance every tool description carries (SEAT-6).
pub const GUIDANCE: &str = "Take a snapshot before acting and act on the elements it lists; verify the result with a fresh snapshot after acting; a completed click or keypress cannot be undone.";

/// Where the profile directories go, and the prefix that marks them.
const PROFILE_PREFIX: &str = "mcpvisor-browser-";

/// `browser-native`'s settings (the `[providers.browser]` table).
#[derive(Debug, Clone)]
pub struct BrowserNativeConfig {
    /// The provider's name: the mounted server's name, so its tools are
    /// `mcp__<name>__navigate` and so on.
    pub name: String,
    /// The Chromium binary; `None`: `$MCPVISOR_CHROMIUM`, then the usual
    /// places (`/usr/bin/chromium`, …).
    pub executable: Option<PathBuf>,
    /// Offer `evaluate` (run JavaScript in the page). Off by default.
    pub evaluate: bool,
    /// Trust of the mounted tools (TRUST-4).
    pub trust: TrustMode,
    /// The window (and so the screenshot) size.
    pub window: (u32, u32),
    /// Every CDP request's and every action's timeout.
    pub action_timeout: Duration,
    /// How long Chromium may take to start.
    pub launch_timeout: Duration,
    /// Where profile directories are made (default: the temp dir).
    pub profile_root: PathBuf,
    /// Extra Chromium flags (with their leading `--`).
    pub extra_args: Vec<String>,
    /// `attach` mode: the CDP endpoint of a browser started elsewhere
    /// (`http://127.0.0.1:9222`); `None`: `launch`.
    pub attach: Option<String>,
}

impl BrowserNativeConfig {
    /// Defaults for a provider named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            executable: None,
            evaluate: false,
            trust: TrustMode::Ask,
            window: (1280, 800),
            action_timeout: Duration::from_secs(15),
            launch_timeout: Duration::from_secs(20),
            profile_root: std::env::temp_dir(),
            extra_args: Vec::new(),
            attach: None,
        }
    }
}

/// The provider.
#[derive(Debug, Clone)]
pub struct BrowserNative {
    config: Arc<BrowserNativeConfig>,
    /// `attach`: the one live owner of the configured browser.
    attach: Option<Arc<Exclusive>>,
}

impl BrowserNative {
    /// A provider with these settings. Sweeps the browsers a killed runtime
    /// left behind (found by their profile directory, whose name carries
    /// the pid of the runtime that made it).
    /// In `attach` mode the CDP endpoint must pass the one endpoint
    /// validator (TRUST-3): `http://` only to loopback.
    pub fn new(config: BrowserNativeConfig) -> Result<Self, String> {
        if let Some(endpoint) = &config.attach {
            let http = endpoint
                .replacen("ws://", "http://", 1)
                .replacen("wss://", "https://", 1);
            crate::messages::trust::validate_endpoint(&http)
                .map_err(|e| format!("[providers.{}] cdp_endpoint: {e}", config.name))?;
        }
        let swept = sweep_orphans(&config.profile_root);
        if !swept.is_empty() {
            tracing::warn!(pids = ?swept, "killed browsers left behind by a runtime that is gone");
        }
        Ok(Self {
            attach: config
                .attach
                .as_ref()
                .map(|_| Arc::new(Exclusive::new("the attached browser"))),
            config: Arc::new(config),
        })
    }

    /// Its settings.
    pub fn config(&self) -> &BrowserNativeConfig {
        &self.config
    }
}

impl SeatProvider for BrowserNative {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: self.config.name.clone(),
            kind: "browser-native".into(),
            seat: SeatKind::BrowserUse,
        }
    }

    fn mount(&self, _: &ActivationId, sessions: SessionsHandle) -> Result<ServerConfig, String> {
        let config = self.config.clone();
        let attach = self.attach.clone();
        // An action's own timeout ends it first; this covers a launch too.
        let timeout = self.config.action_timeout * 2 + self.config.launch_timeout;
        Ok(super::in_process_mount(
            &self.config.name,
            self.config.trust,
            timeout,
            move || BrowserTools {
                sessions: sessions.clone(),
                config: config.clone(),
                attach: attach.clone(),
            },
        ))
    }

    fn opener(&self) -> Option<Opener> {
        let config = self.config.clone();
        let state = self.attach.clone();
        Some(Arc::new(move |activation: ActivationId| {
            let config = config.clone();
            let state = state.clone();
            Box::pin(async move {
                let session = match (&config.attach, &state) {
                    (Some(endpoint), Some(state)) => {
                        attach(&config, endpoint, state, &activation).await
                    }
                    _ => launch(&config, &activation).await,
                };
                session.map(|s| Arc::new(s) as Arc<dyn SessionResource>)
            }) as BoxFuture<'static, _>
        }))
    }
}

/// The name of an activation's profile (or working) directory:
/// `mcpvisor-browser-<runtime pid>-<activation>`, so the sweep knows whose.
pub(crate) fn profile_name(activation: &ActivationId) -> String {
    format!("{PROFILE_PREFIX}{}-{}", std::process::id(), activation)
}

/// The places Chromium is looked for when no executable is configured.
const CHROMIUM_CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
];

fn chromium(config: &BrowserNativeConfig) -> Result<PathBuf, String> {
    chromium_for(config.executable.as_deref())
}

/// The configured Chromium, else `$MCPVISOR_CHROMIUM`, else the first of
/// the usual places that exists.
pub(crate) fn chromium_for(executable: Option<&std::path::Path>) -> Result<PathBuf, String> {
    if let Some(exe) = executable {
        return Ok(exe.to_path_buf());
    }
    if let Some(exe) = std::env::var_os("MCPVISOR_CHROMIUM") {
        return Ok(PathBuf::from(exe));
    }
    CHROMIUM_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| {
            format!(
                "no Chromium found (looked at {}); install it (Debian: apt-get install chromium) or set `executable` in [providers.browser] or $MCPVISOR_CHROMIUM",
                CHROMIUM_CANDIDATES.join(", ")
            )
        })
}

/// One activation's browser: the process group, the CDP connection, the
/// page, and the snapshot generation.
pub struct BrowserSession {
    pid: u32,
    /// The launched browser's `MCPVISOR_TAG`: what it started that left
    /// its process group dies with it (RECO-7).
    tag: Option<String>,
    profile: PathBuf,
    cancel: CancellationToken,
    reaped: tokio::sync::watch::Receiver<bool>,
    timeout: Duration,
    /// Held for the length of one action: actions are serialised.
    live: tokio::sync::Mutex<Option<Live>>,
    group: tokio::sync::Mutex<Option<ProcessGroup>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// `attach`: the owner state, and which activation this session is.
    attached: Option<(Arc<Exclusive>, ActivationId)>,
}

struct Live {
    browser: Browser,
    page: Page,
    handler: tokio::task::JoinHandle<()>,
    /// Snapshots taken so far.
    generation: u64,
    /// The generation whose tokens are valid (`None` after a navigation).
    valid: Option<u64>,
}

/// The stderr lines kept for errors.
const STDERR_TAIL: usize = 20;

async fn launch(
    config: &BrowserNativeConfig,
    activation: &ActivationId,
) -> Result<BrowserSession, String> {
    let exe = chromium(config)?;
    let profile = config.profile_root.join(profile_name(activation));
    std::fs::create_dir_all(&profile).map_err(|e| {
        format!(
            "cannot make the profile directory {}: {e}",
            profile.display()
        )
    })?;
    // One tag per launch: what this browser started is found, and killed,
    // when it exits, without touching a browser launched after it.
    let tag = format!(
        "{}/{:016x}",
        activation.process_tag("browser"),
        rand::random::<u64>()
    );
    let mut cmd = crate::process::command(&exe);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-breakpad",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
    ])
    .arg(format!(
        "--window-size={},{}",
        config.window.0, config.window.1
    ))
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(&config.extra_args)
    .arg("about:blank")
    .env(TAG_VAR, &tag);
    // Everything Chromium writes outside its profile (dconf's cache, a
    // crash database) goes inside it, and is removed with it.
    let home = profile.join("home");
    std::fs::create_dir_all(&home)
        .map_err(|e| format!("cannot make the browser's home {}: {e}", home.display()))?;
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_DATA_HOME", home.join(".local/share"));
    // Chromium's crash handlers run in sessions of their own (out of
    // reach of the group kill) and outlive a browser that dies: swept by
    // the tag when the leader has been reaped, however it ended.
    let sweep_tag = tag.clone();
    let on_exit = Box::new(move || {
        tokio::spawn(async move {
            let swept = crate::process::kill_tagged(&sweep_tag, false, None);
            let _ =
                crate::process::still_running(&swept.killed, crate::process::SWEPT_EXIT_WAIT).await;
        });
    });
    let (mut group, pipes) = ProcessGroup::spawn_notifying(&cmd, on_exit).map_err(|e| {
        let _ = std::fs::remove_dir_all(&profile);
        format!("cannot start {}: {e}", exe.display())
    })?;
    let pid = group.pid();
    drop(pipes.stdin);
    let mut stdout = pipes.stdout;
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
    });
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let (ws_tx, ws_rx) = tokio::sync::oneshot::channel::<String>();
    let tail = stderr.clone();
    let mut lines = tokio::io::BufReader::new(pipes.stderr).lines();
    tokio::spawn(async move {
        let mut ws_tx = Some(ws_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("DevTools listening on ")
                && let Some(tx) = ws_tx.take()
            {
                let _ = tx.send(url.trim().to_owned());
            }
            if let Ok(mut t) = tail.lock() {
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
    });
    let connected = connect(config, &exe, ws_rx, &mut group).await;
    let cdp = match connected {
        Ok(c) => c,
        Err(why) => {
            // One cleanup for every failed step: the group is killed and
            // reaped, the profile removed.
            group.kill_and_reap().await;
            let _ = std::fs::remove_dir_all(&profile);
            let tail = stderr
                .lock()
                .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            return Err(if tail.is_empty() {
                why
            } else {
                format!("{why}; its stderr ends with:\n{tail}")
            });
        }
    };
    let reaped = group.unreaped().reaped;
    Ok(BrowserSession {
        pid,
        tag: Some(tag),
        profile,
        cancel: CancellationToken::new(),
        reaped,
        timeout: config.action_timeout,
        live: tokio::sync::Mutex::new(Some(Live {
            browser: cdp.browser,
            page: cdp.page,
            handler: cdp.handler,
            generation: 0,
            valid: None,
        })),
        group: tokio::sync::Mutex::new(Some(group)),
        stderr,
        attached: None,
    })
}

/// `attach`: this activation's session on the configured browser, once it
/// is the one live owner (SEAT-9). Nothing is launched: the session is a
/// page of our own on the browser, closed at the end; the browser stays.
async fn attach(
    config: &BrowserNativeConfig,
    endpoint: &str,
    state: &Arc<Exclusive>,
    activation: &ActivationId,
) -> Result<BrowserSession, String> {
    state.claim(activation)?;
    let ws = match tokio::time::timeout(config.action_timeout, websocket_url(endpoint)).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            state.release(activation);
            return Err(e);
        }
        Err(_) => {
            state.release(activation);
            return Err(format!(
                "the CDP endpoint {endpoint} did not answer in time"
            ));
        }
    };
    let cdp = match cdp_session(config, &ws).await {
        Ok(c) => c,
        Err(e) => {
            state.release(activation);
            return Err(e);
        }
    };
    // The other activations' tools are masked now.
    state.changed(activation);
    Ok(BrowserSession {
        pid: 0,
        tag: None,
        profile: PathBuf::new(),
        cancel: CancellationToken::new(),
        reaped: cdp.gone,
        timeout: config.action_timeout,
        live: tokio::sync::Mutex::new(Some(Live {
            browser: cdp.browser,
            page: cdp.page,
            handler: cdp.handler,
            generation: 0,
            valid: None,
        })),
        group: tokio::sync::Mutex::new(None),
        stderr: Arc::default(),
        attached: Some((state.clone(), activation.clone())),
    })
}

/// The browser's WebSocket URL from `<endpoint>/json/version` (an
/// `http://` endpoint), or the endpoint itself (`ws://`).
async fn websocket_url(endpoint: &str) -> Result<String, String> {
    if endpoint.starts_with("ws://") || endpoint.starts_with("wss://") {
        return Ok(endpoint.to_owned());
    }
    let url = format!("{}/json/version", endpoint.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let answer = client
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("cannot reach the CDP endpoint {url}: {e}"))?;
    let v: Value = answer
        .json()
        .await
        .map_err(|e| format!("{url} did not answer with JSON: {e}"))?;
    v.get("webSocketDebuggerUrl")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("{url} has no webSocketDebuggerUrl"))
}

/// The launched browser's DevTools endpoint (announced on its stderr),
/// the CDP connection, its event loop, and a page: each step bounded.
async fn connect(
    config: &BrowserNativeConfig,
    exe: &std::path::Path,
    ws_rx: tokio::sync::oneshot::Receiver<String>,
    group: &mut ProcessGroup,
) -> Result<Cdp, String> {
    let ws = match tokio::time::timeout(config.launch_timeout, ws_rx).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(_)) => {
            let exit = group.wait(Some(Duration::from_secs(2))).await;
            let how = exit
                .map(|e| e.describe())
                .unwrap_or_else(|| "closed its stderr".into());
            return Err(format!("{} {how} before it was ready", exe.display()));
        }
        Err(_) => {
            return Err(format!(
                "{} did not announce its DevTools endpoint within {} ms",
                exe.display(),
                config.launch_timeout.as_millis()
            ));
        }
    };
    cdp_session(config, &ws).await
}

/// A CDP connection, its event loop (which flags `gone` when the
/// connection ends), and a fresh page of our own.
struct Cdp {
    browser: Browser,
    page: Page,
    handler: tokio::task::JoinHandle<()>,
    gone: tokio::sync::watch::Receiver<bool>,
}

async fn cdp_session(config: &BrowserNativeConfig, ws: &str) -> Result<Cdp, String> {
    let handler_config = chromiumoxide::handler::HandlerConfig {
        request_timeout: config.action_timeout,
        viewport: None,
        ..Default::default()
    };
    let (browser, mut handler) = tokio::time::timeout(
        config.action_timeout,
        Browser::connect_with_config(ws.to_owned(), handler_config),
    )
    .await
    .map_err(|_| format!("the browser's DevTools at {ws} did not answer in time"))?
    .map_err(|e| format!("cannot connect to the browser's DevTools at {ws}: {e}"))?;
    let (gone_tx, gone) = tokio::sync::watch::channel(false);
    let handler = tokio::spawn(async move {
        while let Some(event) = handler.next().await {
            if let Err(e) = event {
                tracing::debug!("cdp: {e}");
            }
        }
        let _ = gone_tx.send(true);
    });
    let page = tokio::time::timeout(config.action_timeout, browser.new_page("about:blank"))
        .await
        .map_err(|_| "the browser did not open a page in time".to_owned())
        .and_then(|p| p.map_err(|e| format!("the browser did not open a page: {e}")));
    match page {
        Ok(page) => Ok(Cdp {
            browser,
            page,
            handler,
            gone,
        }),
        Err(e) => {
            handler.abort();
            Err(e)
        }
    }
}

/// The close sequence of a browser: CDP `Browser.close`, then the group's
/// (SIGTERM, SIGKILL) with the reap confirmed.
const CLOSE_GRACES: CloseGraces = CloseGraces {
    after_stdin: Duration::from_secs(2),
    after_term: Duration::from_millis(1500),
    after_kill: Duration::from_millis(1500),
};

impl SessionResource for BrowserSession {
    fn pids(&self) -> Vec<u32> {
        if self.attached.is_some() || *self.reaped.borrow() {
            Vec::new()
        } else {
            vec![self.pid]
        }
    }

    fn interrupt(&self) {
        self.cancel.cancel();
    }

    fn close(self: Arc<Self>) -> BoxFuture<'static, ShutdownReport> {
        Box::pin(async move { self.shut().await })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl BrowserSession {
    /// Close the browser and confirm its reap (SEAT-10): never "closed"
    /// for a process that was not reaped.
    async fn shut(&self) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        // The running action (if any) ends at the interrupt; then the
        // connection is ours.
        let live = self.live.lock().await.take();
        if let Some((state, activation)) = &self.attached {
            // Not ours to close: only our page goes, then the connection.
            if let Some(live) = live {
                let _ = tokio::time::timeout(Duration::from_secs(2), live.page.close()).await;
                live.handler.abort();
            }
            state.release(activation);
            return report;
        }
        if let Some(mut live) = live {
            let _ = tokio::time::timeout(Duration::from_secs(2), live.browser.close()).await;
            live.handler.abort();
        }
        let mut group = self.group.lock().await;
        let Some(g) = group.as_mut() else {
            return report;
        };
        match g.close(CLOSE_GRACES).await {
            Some(_) => {
                report.processes_reaped.push(self.pid);
                *group = None;
                // A process the browser started that left its group goes
                // too: Chromium's crash handlers run in sessions of their
                // own and outlive the browser (they cannot be turned off
                // without breaking its network service).
                if let Some(tag) = &self.tag {
                    let swept = crate::process::kill_tagged(tag, false, Some(self.pid));
                    let left = crate::process::still_running(
                        &swept.killed,
                        crate::process::SWEPT_EXIT_WAIT,
                    )
                    .await;
                    report.escaped.extend(swept.escaped);
                    report.unconfirmed.extend(left.iter().map(|p| {
                        format!(
                            "process {p} of browser {} still runs after SIGKILL",
                            self.pid
                        )
                    }));
                }
                if let Err(e) = std::fs::remove_dir_all(&self.profile)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(profile = %self.profile.display(), "cannot remove the profile directory: {e}");
                }
            }
            None => report.unconfirmed.push(format!(
                "browser process {} (profile {}) was not reaped after SIGKILL",
                self.pid,
                self.profile.display()
            )),
        }
        report
    }

    fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|t| {
                t.iter()
                    .rev()
                    .take(5)
                    .rev()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// Run one CDP action: it ends at its timeout, when the browser exits,
    /// when the activation is disposed, or when the caller cancels.
    async fn guarded<T>(
        &self,
        what: &str,
        cancel: &CancellationToken,
        action: impl std::future::Future<Output = Result<T, ToolFailure>>,
    ) -> Result<T, ToolFailure> {
        tokio::select! {
            // The stops first: an action never starts after one of them.
            biased;
            () = self.cancel.cancelled() => Err(ToolFailure::cancelled(format!("{what} was interrupted: the activation ended; whether it took effect is unknown"))),
            () = cancel.cancelled() => Err(ToolFailure::cancelled(format!("{what} was cancelled by the caller; whether it took effect is unknown"))),
            r = tokio::time::timeout(self.timeout, action) => match r {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(f)) => {
                    // A failed request of a browser that is dying: say so.
                    if tokio::time::timeout(Duration::from_millis(300), exited(self.reaped.clone())).await.is_ok() {
                        return Err(self.crashed(what));
                    }
                    Err(ToolFailure { text: format!("{what} failed: {}", f.text), ..f })
                }
                Err(_) => Err(ToolFailure::timed_out(format!(
                    "{what} did not finish within {} ms (every browser request has a timeout); whether it took effect is unknown: take a snapshot to see",
                    self.timeout.as_millis()
                ))),
            },
            () = exited(self.reaped.clone()) => Err(self.crashed(what)),
        }
    }

    fn crashed(&self, what: &str) -> ToolFailure {
        if self.attached.is_some() {
            return ToolFailure::lost(format!(
                "the attached browser's connection ended during {what}; whether {what} took effect is unknown; the next call connects again"
            ));
        }
        let tail = self.stderr_tail();
        ToolFailure::lost(format!(
            "the browser exited during {what}; whether {what} took effect is unknown; the next call starts a new browser (its state is not restored){}",
            if tail.is_empty() {
                String::new()
            } else {
                format!("; its stderr ends with:\n{tail}")
            }
        ))
    }
}

/// Resolves once the browser's leader was reaped.
async fn exited(mut reaped: tokio::sync::watch::Receiver<bool>) {
    let _ = reaped.wait_for(|b| *b).await;
}

/// A CDP request's error: the action failed part way (effect unknown).
fn cdp<T>(r: Result<T, chromiumoxide::error::CdpError>) -> Result<T, ToolFailure> {
    r.map_err(|e| ToolFailure::failed(e.to_string()))
}

/// The tools of one activation: an MCP server over an in-process stream.
#[derive(Clone)]
struct BrowserTools {
    sessions: SessionsHandle,
    config: Arc<BrowserNativeConfig>,
    attach: Option<Arc<Exclusive>>,
}

fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Tool {
    super::tool(name, description, GUIDANCE, props, required)
}

impl BrowserTools {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "navigate",
                "Open a URL in this activation's browser (a fresh headless Chromium, started on first use). Returns the page's title and URL; tokens of earlier snapshots become stale.",
                json!({"url": {"type": "string", "description": "http(s), file, data or about URL"}}),
                &["url"],
            ),
            tool(
                "snapshot",
                "List the page's interactable elements, each with a token (like g3e17) next to its role and name, and the page's text. A new snapshot makes every earlier token stale.",
                json!({}),
                &[],
            ),
            tool(
                "click",
                "Click the element with this token from the latest snapshot.",
                json!({"token": {"type": "string"}}),
                &["token"],
            ),
            tool(
                "type",
                "Focus the element with this token from the latest snapshot and type the text into it.",
                json!({"token": {"type": "string"}, "text": {"type": "string"}}),
                &["token", "text"],
            ),
            tool(
                "press",
                "Press a key (Enter, Tab, Escape, ArrowDown, Backspace, a letter…) in the focused element.",
                json!({"key": {"type": "string"}}),
                &["key"],
            ),
            tool(
                "screenshot",
                "A PNG screenshot of the page's viewport.",
                json!({}),
                &[],
            ),
            tool(
                "close",
                "Close this activation's browser (its process is reaped); the next navigate starts a new one with a fresh profile.",
                json!({}),
                &[],
            ),
        ];
        if self.config.evaluate {
            tools.push(tool(
                "evaluate",
                "Evaluate a JavaScript expression in the page and return its JSON value.",
                json!({"expression": {"type": "string"}}),
                &["expression"],
            ));
        }
        tools
    }

    fn masked(&self) -> bool {
        self.attach
            .as_ref()
            .is_some_and(|a| a.masked_for(&self.sessions.activation))
    }

    async fn session(&self) -> Result<Arc<BrowserSession>, String> {
        let limit = self.config.launch_timeout + Duration::from_secs(5);
        let resource = self
            .sessions
            .acquire(limit)
            .await
            .map_err(|e| e.to_string())?;
        resource
            .as_any()
            .downcast::<BrowserSession>()
            .map_err(|_| "the session resource is not a browser".to_owned())
    }

    /// The browser is gone: close what is left of it and let the next call
    /// start a new one.
    async fn replace(&self) {
        if let Err(e) = self.sessions.reset().await {
            tracing::warn!(activation = %self.sessions.activation, "{e}");
        }
    }

    async fn run(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        // Arguments are checked before a browser is started.
        let known = self.tools().iter().any(|t| t.name == name);
        if !known {
            return Err(ToolFailure::refused(format!(
                "no tool {name:?} in this provider"
            )));
        }
        if name == "close" {
            let had = self
                .sessions
                .reset()
                .await
                .map_err(|e| ToolFailure::failed(e.to_string()))?;
            return Ok(vec![ContentBlock::text(
                if had.processes_reaped.is_empty() {
                    "no browser was open".to_owned()
                } else {
                    format!(
                        "the browser was closed (process {} reaped)",
                        had.processes_reaped
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            )]);
        }
        let session = self.session().await.map_err(ToolFailure::not_done)?;
        let result = session.act(name, args, cancel).await;
        if let Err(f) = &result
            && f.kind == OutcomeKind::TransportLostDuringCall
        {
            // The browser is gone: the next call starts a new one.
            drop(session);
            self.replace().await;
        }
        result
    }
}

impl BrowserSession {
    /// Run one action of this activation (SEAT-8: one at a time; one whose
    /// caller gave up while it queued is skipped, never sent). A tab that
    /// does not answer within the timeout (a page that never finishes
    /// loading holds every later action of the session) is replaced by a
    /// blank one, and the caller is told.
    async fn act(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        let mut guard = self.live.lock().await;
        if cancel.is_cancelled() || self.cancel.is_cancelled() {
            return Err(ToolFailure::skipped(format!(
                "{name} was cancelled while it waited for the activation's previous action; it was not run"
            )));
        }
        let Some(live) = guard.as_mut() else {
            return Err(ToolFailure::not_done(
                "the browser was closed; the next call starts a new one",
            ));
        };
        let result = self.act_on(live, name, args, cancel).await;
        match result {
            Err(f) if f.kind == OutcomeKind::Timeout => Err(self.replace_tab(live, f).await),
            other => other,
        }
    }

    /// Replace the tab that timed out by a blank one; `why` says so.
    async fn replace_tab(&self, live: &mut Live, why: ToolFailure) -> ToolFailure {
        live.valid = None;
        let fresh =
            tokio::time::timeout(Duration::from_secs(5), live.browser.new_page("about:blank"))
                .await;
        match fresh {
            Ok(Ok(fresh)) => {
                let old = std::mem::replace(&mut live.page, fresh);
                let _ = tokio::time::timeout(Duration::from_secs(2), old.close()).await;
                why.and(
                    "; the tab that did not answer was replaced by a blank one (its page state is gone): navigate again",
                )
            }
            _ => why.and("; replacing the tab that did not answer failed too"),
        }
    }

    async fn act_on(
        &self,
        live: &mut Live,
        name: &str,
        args: &serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        let text_arg = |key: &str| super::text_arg(args, name, key);
        let page = live.page.clone();
        match name {
            "navigate" => {
                let url = text_arg("url")?;
                check_url(&url).map_err(ToolFailure::refused)?;
                live.valid = None;
                let (title, at) = self
                    .guarded("navigate", cancel, async {
                        cdp(page.goto(url.as_str()).await)?;
                        let title = cdp(page.get_title().await)?.unwrap_or_default();
                        let at = cdp(page.url().await)?.unwrap_or_default();
                        Ok((title, at))
                    })
                    .await?;
                Ok(vec![ContentBlock::text(format!(
                    "navigated to {at} (title {title:?}); take a snapshot to act on it"
                ))])
            }
            "snapshot" => {
                live.generation += 1;
                let generation = live.generation;
                let script = SNAPSHOT_JS.replace("__GEN__", &generation.to_string());
                let raw: String = self
                    .guarded("snapshot", cancel, async {
                        cdp(page.evaluate(script.as_str()).await)?
                            .into_value::<String>()
                            .map_err(|e| ToolFailure::failed(e.to_string()))
                    })
                    .await?;
                let snap: Snapshot = serde_json::from_str(&raw).map_err(|e| {
                    ToolFailure::failed(format!("the snapshot script returned bad JSON: {e}"))
                })?;
                live.valid = Some(generation);
                Ok(vec![ContentBlock::text(snap.render(generation))])
            }
            "click" | "type" => {
                let token = text_arg("token")?;
                let text = if name == "type" {
                    Some(text_arg("text")?)
                } else {
                    None
                };
                check_token(&token, live.valid).map_err(|e| ToolFailure::refused(e.to_string()))?;
                let selector = format!("[data-mcpvisor-token=\"{token}\"]");
                self.guarded(name, cancel, async {
                    let el = page.find_element(selector.as_str()).await.map_err(|_| {
                        ToolFailure::not_done(format!(
                            "element {token} is no longer on the page; take a new snapshot"
                        ))
                    })?;
                    cdp(el.click().await)?;
                    if let Some(text) = &text {
                        cdp(el.type_str(text).await)?;
                    }
                    Ok(())
                })
                .await?;
                Ok(vec![ContentBlock::text(match &text {
                    Some(t) => format!(
                        "typed {} character(s) into {token}; take a snapshot to verify",
                        t.chars().count()
                    ),
                    None => format!(
                        "clicked {token}; take a snapshot to see the result (a click cannot be undone)"
                    ),
                })])
            }
            "press" => {
                let key = text_arg("key")?;
                self.guarded("press", cancel, async {
                    let el = match page.find_element(":focus").await {
                        Ok(el) => el,
                        Err(_) => cdp(page.find_element("body").await)?,
                    };
                    cdp(el.press_key(key.as_str()).await)?;
                    Ok(())
                })
                .await?;
                Ok(vec![ContentBlock::text(format!(
                    "pressed {key}; take a snapshot to see the result"
                ))])
            }
            "screenshot" => {
                let png = self
                    .guarded("screenshot", cancel, async {
                        let params = chromiumoxide::page::ScreenshotParams::builder()
                            .format(chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat::Png)
                            .build();
                        cdp(page.screenshot(params).await)
                    })
                    .await?;
                let data = base64::engine::general_purpose::STANDARD.encode(&png);
                Ok(vec![ContentBlock::image(data, "image/png")])
            }
            "evaluate" => {
                let expression = text_arg("expression")?;
                let value: Value = self
                    .guarded("evaluate", cancel, async {
                        let r = cdp(page.evaluate(expression.as_str()).await)?;
                        Ok(r.value().cloned().unwrap_or(Value::Null))
                    })
                    .await?;
                Ok(vec![ContentBlock::text(value.to_string())])
            }
            other => Err(ToolFailure::refused(format!(
                "no tool {other:?} in this provider"
            ))),
        }
    }
}

/// The URL schemes `navigate` opens.
fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match parsed.scheme() {
        "http" | "https" | "file" | "data" | "about" => Ok(()),
        other => Err(format!(
            "{url:?}: the scheme {other:?} is not opened (http, https, file, data and about are)"
        )),
    }
}

impl ServerHandler for BrowserTools {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        rmcp::model::ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                format!("mcpvisor {}", self.config.name),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "A headless Chromium of this activation's own (browser-native). {GUIDANCE}"
            ))
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut page = ListToolsResult::default();
        // SEAT-9: masked (absent), not failing, while another activation
        // owns the attached browser.
        if !self.masked() {
            page.tools = self.tools();
        }
        Ok(page)
    }

    async fn on_initialized(&self, ctx: rmcp::service::NotificationContext<RoleServer>) {
        if let Some(state) = &self.attach {
            state.register(self.sessions.activation.clone(), ctx.peer);
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        Ok(super::tool_result(
            self.run(&request.name, &args, &ctx.ct).await,
        ))
    }
}

/// Kill the browsers of runtimes that are gone: a profile directory
/// `mcpvisor-browser-<pid>-…` whose runtime pid no longer runs marks them.
/// Returns the killed pids; the stale directories are removed once the
/// killed browsers are gone (waiting up to 2 s for them).
pub fn sweep_orphans(profile_root: &std::path::Path) -> Vec<u32> {
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let owner_of = |name: &str| -> Option<u32> {
        name.strip_prefix(PROFILE_PREFIX)?
            .split('-')
            .next()?
            .parse()
            .ok()
    };
    let marker = format!(
        "--user-data-dir={}/{PROFILE_PREFIX}",
        profile_root.display()
    );
    let mut killed = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            for arg in cmdline.split(|b| *b == 0) {
                let arg = String::from_utf8_lossy(arg);
                if let Some(rest) = arg.strip_prefix(&marker)
                    && let Some(owner) = owner_of(&format!("{PROFILE_PREFIX}{rest}"))
                    && !alive(owner)
                    && let Ok(pid_t) = i32::try_from(pid)
                {
                    crate::process::kill_pid(pid_t);
                    killed.push(pid);
                    break;
                }
            }
        }
    }
    // A SIGKILLed browser may still write into its profile until it is
    // dead (seen in CI: the directory was recreated under the removal), so
    // its directory goes once the killed are gone, up to 2 s.
    let running = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
            })
            == Some(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while killed.iter().any(running) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if let Ok(dir) = std::fs::read_dir(profile_root) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(owner) = owner_of(&name)
                && !alive(owner)
                && std::fs::remove_dir_all(entry.path()).is_err()
            {
                // A file that appeared during the removal: once more.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    killed
}
