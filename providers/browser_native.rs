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

mod launch;
mod tools;

pub(crate) use launch::chromium_for;
pub use launch::sweep_orphans;
use launch::*;
use tools::*;

/// Why a browser could not be had (launched, attached, connected) or a
/// tool's argument is refused before it is used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BrowserError {
    /// No Chromium is configured and none is at the usual places.
    #[error(
        "no Chromium found (looked at {}); install it (Debian: apt-get install chromium) or set `executable` in [providers.browser] or $MCPVISOR_CHROMIUM",
        CHROMIUM_CANDIDATES.join(", ")
    )]
    NoChromium,
    /// The activation's profile directory could not be made.
    #[error("cannot make the profile directory {}: {source}", path.display())]
    Profile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The browser's home (inside its profile) could not be made.
    #[error("cannot make the browser's home {}: {source}", path.display())]
    Home {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The browser process could not be started.
    #[error("cannot start {}: {source}", exe.display())]
    Start {
        exe: PathBuf,
        source: std::io::Error,
    },
    /// The browser exited (or closed its stderr) before it was ready.
    #[error("{} {how} before it was ready", exe.display())]
    Exited { exe: PathBuf, how: String },
    /// The browser did not announce its DevTools endpoint in time.
    #[error(
        "{} did not announce its DevTools endpoint within {} ms",
        exe.display(),
        limit.as_millis()
    )]
    NotAnnounced { exe: PathBuf, limit: Duration },
    /// A launch step failed, and the browser had written to stderr.
    #[error("{why}; its stderr ends with:\n{tail}")]
    Stderr {
        why: Box<BrowserError>,
        tail: String,
    },
    /// The attached browser is another activation's (SEAT-9).
    #[error(transparent)]
    Claim(#[from] super::ClaimError),
    /// The CDP endpoint to attach to did not answer in time.
    #[error("the CDP endpoint {endpoint} did not answer in time")]
    EndpointTimeout { endpoint: String },
    /// The HTTP client for the endpoint's `/json/version` could not be made.
    #[error("cannot make an HTTP client: {0}")]
    HttpClient(reqwest::Error),
    /// The endpoint's `/json/version` could not be reached.
    #[error("cannot reach the CDP endpoint {url}: {source}")]
    Unreachable { url: String, source: reqwest::Error },
    /// The endpoint's `/json/version` is not JSON.
    #[error("{url} did not answer with JSON: {source}")]
    NotJson { url: String, source: reqwest::Error },
    /// The endpoint's `/json/version` names no WebSocket URL.
    #[error("{url} has no webSocketDebuggerUrl")]
    NoWebSocketUrl { url: String },
    /// The browser's DevTools did not answer in time.
    #[error("the browser's DevTools at {ws} did not answer in time")]
    DevToolsTimeout { ws: String },
    /// The CDP connection could not be made.
    #[error("cannot connect to the browser's DevTools at {ws}: {source}")]
    DevTools {
        ws: String,
        source: chromiumoxide::error::CdpError,
    },
    /// The browser did not open our page in time.
    #[error("the browser did not open a page in time")]
    PageTimeout,
    /// The browser did not open our page.
    #[error("the browser did not open a page: {0}")]
    Page(chromiumoxide::error::CdpError),
    /// The seat's session resource could not be had.
    #[error(transparent)]
    Seat(#[from] crate::messages::seat::SeatError),
    /// The activation's session resource is not a browser.
    #[error("the session resource is not a browser")]
    NotABrowser,
    /// `navigate`'s URL does not parse.
    #[error("{url:?} is not a URL: {source}")]
    NotAUrl {
        url: String,
        source: url::ParseError,
    },
    /// `navigate`'s URL has a scheme that is not opened.
    #[error("{url:?}: the scheme {scheme:?} is not opened (http, https, file, data and about are)")]
    Scheme { url: String, scheme: String },
}

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
    pub fn new(config: BrowserNativeConfig) -> Result<Self, super::ProviderError> {
        if let Some(endpoint) = &config.attach {
            let http = endpoint
                .replacen("ws://", "http://", 1)
                .replacen("wss://", "https://", 1);
            crate::messages::trust::validate_endpoint(&http).map_err(|e| {
                super::ProviderError::Config(format!(
                    "[providers.{}] cdp_endpoint: {e}",
                    config.name
                ))
            })?;
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
                session
                    .map(|s| Arc::new(s) as Arc<dyn SessionResource>)
                    .map_err(|e| e.to_string())
            }) as BoxFuture<'static, _>
        }))
    }
}

/// The name of an activation's profile (or working) directory:
/// `mcpvisor-browser-<runtime pid>-<activation>`, so the sweep knows whose.
pub(crate) fn profile_name(activation: &ActivationId) -> String {
    format!("{PROFILE_PREFIX}{}-{}", std::process::id(), activation)
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
