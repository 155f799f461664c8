//! The seat providers mcpvisor ships (SEAT-4), feature `browser`.
//!
//! Each implements [`crate::SeatProvider`]: its tools are an
//! in-process MCP server mounted in every live activation's scope, and what
//! an activation uses (its browser) is a session resource opened on first
//! use and owned by the seat's `SessionResources` actor.
//!
//! - [`browser_native`]: Chromium over CDP (chromiumoxide), launched per
//!   activation in a process group of its own.
//! - [`mcp_browser`]: `@playwright/mcp` and `chrome-devtools-mcp`, pinned,
//!   run through the MCP client as a stdio server per activation.

pub mod browser_native;
#[cfg(feature = "computer")]
pub mod computer_native;
pub mod mcp_browser;
mod snapshot;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::messages::call::{OUTCOME_META, OutcomeKind, SIDE_EFFECTS_META, SideEffects};
use crate::messages::seat::ActivationId;

use crate::messages::config::file::RawProvider;
use crate::messages::seat::SeatProvider;
use crate::messages::transport::{InProcessConnection, InProcessConnector};

/// Why an activation could not take an [`Exclusive`] resource.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimError {
    /// Another live activation owns it.
    #[error(
        "{what} is in use by activation {owner}: its tools are masked until that activation ends or closes it"
    )]
    InUse {
        /// What it is ("the attached browser").
        what: &'static str,
        /// The activation that owns it.
        owner: ActivationId,
    },
    /// A thread panicked while holding the owner's lock.
    #[error("the attach state is poisoned")]
    Poisoned,
}

/// A resource with one live owner at a time (SEAT-9: an attached browser,
/// an X display), and the tool servers of every activation, told when the
/// owner changes so that their tools are masked (absent) while another
/// activation owns it.
pub(crate) struct Exclusive {
    /// What it is, for errors ("the attached browser").
    what: &'static str,
    owner: Mutex<Option<ActivationId>>,
    peers: Mutex<Vec<(ActivationId, rmcp::Peer<rmcp::RoleServer>)>>,
}

impl std::fmt::Debug for Exclusive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exclusive")
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

impl Exclusive {
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            owner: Mutex::default(),
            peers: Mutex::default(),
        }
    }

    fn owner(&self) -> Option<ActivationId> {
        self.owner.lock().ok().and_then(|o| o.clone())
    }

    /// Whether `activation`'s tools are masked: another activation owns it.
    pub(crate) fn masked_for(&self, activation: &ActivationId) -> bool {
        self.owner().is_some_and(|o| &o != activation)
    }

    pub(crate) fn claim(&self, activation: &ActivationId) -> Result<(), ClaimError> {
        let mut owner = self.owner.lock().map_err(|_| ClaimError::Poisoned)?;
        match owner.as_ref() {
            Some(o) if o != activation => Err(ClaimError::InUse {
                what: self.what,
                owner: o.clone(),
            }),
            _ => {
                *owner = Some(activation.clone());
                Ok(())
            }
        }
    }

    pub(crate) fn release(&self, activation: &ActivationId) {
        let released = self.owner.lock().is_ok_and(|mut o| {
            if o.as_ref() == Some(activation) {
                *o = None;
                true
            } else {
                false
            }
        });
        if released {
            self.changed(activation);
        }
    }

    pub(crate) fn register(&self, activation: ActivationId, peer: rmcp::Peer<rmcp::RoleServer>) {
        if let Ok(mut peers) = self.peers.lock() {
            peers.retain(|(_, p)| !p.is_transport_closed());
            peers.push((activation, peer));
        }
    }

    /// Tell every other activation's tool server that its list changed.
    pub(crate) fn changed(&self, by: &ActivationId) {
        let peers: Vec<rmcp::Peer<rmcp::RoleServer>> = self
            .peers
            .lock()
            .map(|p| {
                p.iter()
                    .filter(|(a, p)| a != by && !p.is_transport_closed())
                    .map(|(_, p)| p.clone())
                    .collect()
            })
            .unwrap_or_default();
        for peer in peers {
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
            });
        }
    }
}

/// The server a native provider mounts in an activation's scope: its tools
/// served in process by a fresh `make()` handler per connection, with the
/// provider's trust, no idle stop, and this call timeout.
pub(crate) fn in_process_mount<H>(
    name: &str,
    trust: crate::messages::trust::TrustMode,
    call_timeout: Duration,
    make: impl Fn() -> H + Send + Sync + 'static,
) -> crate::messages::config::ServerConfig
where
    H: rmcp::ServerHandler,
{
    let mut server = crate::messages::config::ServerConfig::with_transport(
        name,
        crate::messages::config::TransportConfig::InProcess(in_process_server(make)),
    );
    server.trust = trust;
    server.idle_stop_after = None;
    server.tool_call_timeout = call_timeout;
    server
}

/// A native provider's tool: an object schema with these properties (no
/// others), and the provider's guidance after the description (SEAT-6).
pub(crate) fn tool(
    name: &str,
    description: &str,
    guidance: &str,
    props: serde_json::Value,
    required: &[&str],
) -> rmcp::model::Tool {
    let schema = serde_json::json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});
    rmcp::model::Tool::new(
        name.to_owned(),
        format!("{description} {guidance}"),
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    )
}

/// How a native tool failed, in the call taxonomy (CALL-4, SEAT-11): the
/// outcome kind the runtime reports and whether the action took effect.
/// Carried to the call pipeline in the error result's `_meta`
/// ([`OUTCOME_META`], [`SIDE_EFFECTS_META`]).
#[derive(Debug)]
pub(crate) struct ToolFailure {
    pub(crate) kind: OutcomeKind,
    side_effects: SideEffects,
    pub(crate) text: String,
}

impl ToolFailure {
    fn new(kind: OutcomeKind, side_effects: SideEffects, text: impl Into<String>) -> Self {
        Self {
            kind,
            side_effects,
            text: text.into(),
        }
    }

    /// Refused before acting (a bad argument, a stale token): nothing was done.
    pub(crate) fn refused(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::InvalidArguments, SideEffects::None, text)
    }

    /// The caller gave up before the action started: it was not run.
    pub(crate) fn skipped(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::Cancelled, SideEffects::None, text)
    }

    /// Cancelled or interrupted while it ran: whether it took effect is unknown.
    pub(crate) fn cancelled(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::Cancelled, SideEffects::Unknown, text)
    }

    /// Not finished within its timeout: whether it took effect is unknown.
    pub(crate) fn timed_out(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::Timeout, SideEffects::Unknown, text)
    }

    /// The browser or display went away during the action.
    pub(crate) fn lost(text: impl Into<String>) -> Self {
        Self::new(
            OutcomeKind::TransportLostDuringCall,
            SideEffects::Unknown,
            text,
        )
    }

    /// The action could not start (no session, the element is gone):
    /// a tool error with nothing done.
    pub(crate) fn not_done(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::ServerError, SideEffects::None, text)
    }

    /// The action failed part way: a tool error, effect unknown.
    pub(crate) fn failed(text: impl Into<String>) -> Self {
        Self::new(OutcomeKind::ServerError, SideEffects::Unknown, text)
    }

    /// This failure with `more` after its text.
    pub(crate) fn and(mut self, more: &str) -> Self {
        self.text.push_str(more);
        self
    }
}

/// The string argument `key` of a call of `tool`, or the refusal saying so.
pub(crate) fn text_arg(
    args: &serde_json::Map<String, serde_json::Value>,
    tool: &str,
    key: &str,
) -> Result<String, ToolFailure> {
    args.get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolFailure::refused(format!("{tool} needs the string argument {key:?}")))
}

/// A native tool's result: its blocks, or its error as an `isError` text
/// whose `_meta` names its kind and side effects.
pub(crate) fn tool_result(
    result: Result<Vec<rmcp::model::ContentBlock>, ToolFailure>,
) -> rmcp::model::CallToolResponse {
    match result {
        Ok(blocks) => rmcp::model::CallToolResult::success(blocks),
        Err(f) => {
            let mut meta = serde_json::Map::new();
            meta.insert(OUTCOME_META.into(), f.kind.name().into());
            meta.insert(SIDE_EFFECTS_META.into(), f.side_effects.name().into());
            rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(f.text)])
                .with_meta(Some(rmcp::model::MetaObject(meta)))
        }
    }
    .into()
}

/// A connector that serves a fresh `make()` handler over an in-process
/// stream for each connection: how a provider mounts its tools as an MCP
/// server without a process. The close is confirmed when the handler's
/// service task has ended.
pub fn in_process_server<H>(make: impl Fn() -> H + Send + Sync + 'static) -> InProcessConnector
where
    H: rmcp::ServerHandler,
{
    InProcessConnector(Arc::new(move || {
        let (client, server) = tokio::io::duplex(1 << 20);
        let handler = make();
        let task = tokio::spawn(async move {
            if let Ok(running) = rmcp::ServiceExt::serve(handler, server).await {
                let _ = running.waiting().await;
            }
        });
        Ok(InProcessConnection {
            stream: client,
            closed: Box::pin(async move { task.await.is_ok() }),
        })
    }))
}

/// Why a provider could not be made from its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// A setting of `[providers.NAME]` cannot be used (the text names the
    /// table and the key), or its kind is not built in this version.
    #[error("{0}")]
    Config(String),
    /// The pinned package of an MCP browser server is missing, or another
    /// version is installed (the text says how to install the pinned one).
    #[error("{0}")]
    Package(String),
}

/// The provider a `[providers.<name>]` table describes (checked by the
/// config parser: a kind this build does not have is refused there).
/// `None`: the seat stays empty (`computer-native` with no display
/// configured and no `$DISPLAY`).
pub fn from_config(
    name: &str,
    raw: &RawProvider,
) -> Result<Option<Arc<dyn SeatProvider>>, ProviderError> {
    let provider: Arc<dyn SeatProvider> = match raw.kind.as_str() {
        #[cfg(feature = "computer")]
        "computer-native" => {
            let display = raw
                .display
                .clone()
                .or_else(|| std::env::var("DISPLAY").ok().filter(|d| !d.is_empty()));
            let Some(display) = display else {
                return Ok(None);
            };
            let mut c = computer_native::ComputerNativeConfig::new(name, display);
            if let Some(t) = raw.trust {
                c.trust = t;
            }
            if let Some(ms) = raw.action_timeout_ms {
                c.action_timeout = Duration::from_millis(ms);
            }
            Arc::new(computer_native::ComputerNative::new(c))
        }
        _ => browser_from_config(name, raw)?,
    };
    Ok(Some(provider))
}

fn browser_from_config(
    name: &str,
    raw: &RawProvider,
) -> Result<Arc<dyn SeatProvider>, ProviderError> {
    match raw.kind.as_str() {
        "browser-native" => {
            let mut c = browser_native::BrowserNativeConfig::new(name);
            c.executable = raw.executable.clone();
            c.evaluate = raw.evaluate.unwrap_or(false);
            if let Some(t) = raw.trust {
                c.trust = t;
            }
            if let Some([w, h]) = raw.window {
                c.window = (w, h);
            }
            if let Some(ms) = raw.action_timeout_ms {
                c.action_timeout = Duration::from_millis(ms);
            }
            if let Some(ms) = raw.launch_timeout_ms {
                c.launch_timeout = Duration::from_millis(ms);
            }
            if raw.mode.as_deref() == Some("attach") {
                c.attach = raw.cdp_endpoint.clone();
            }
            Ok(Arc::new(browser_native::BrowserNative::new(c)?))
        }
        "browser-playwright-mcp" | "browser-devtools-mcp" => {
            let kind = if raw.kind == "browser-playwright-mcp" {
                mcp_browser::McpBrowserKind::Playwright
            } else {
                mcp_browser::McpBrowserKind::DevTools
            };
            let mut c = mcp_browser::McpBrowserConfig::new(name, kind);
            if let Some(v) = &raw.version {
                c.version = v.clone();
            }
            c.package_dir = raw.package_dir.clone();
            if raw.mode.as_deref() == Some("attach") {
                c.attach = raw.cdp_endpoint.clone();
            }
            c.executable = raw.executable.clone();
            if let Some(t) = raw.trust {
                c.trust = t;
            }
            if let Some(ms) = raw.launch_timeout_ms {
                c.startup_timeout = Duration::from_millis(ms);
            }
            if let Some(ms) = raw.action_timeout_ms {
                c.tool_call_timeout = Duration::from_millis(ms);
            }
            Ok(Arc::new(mcp_browser::McpBrowser::new(c)?))
        }
        other => Err(ProviderError::Config(format!(
            "[providers.{name}] kind = {other:?} is not built in this version"
        ))),
    }
}
