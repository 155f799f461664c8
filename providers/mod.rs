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
pub mod mcp_browser;
mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use crate::messages::config_file::RawProvider;
use crate::messages::seat::SeatProvider;
use crate::messages::transport::{InProcessConnection, InProcessConnector};

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

/// The provider a `[providers.<name>]` table describes (checked by the
/// config parser: a kind this build does not have is refused there).
pub fn from_config(name: &str, raw: &RawProvider) -> Result<Arc<dyn SeatProvider>, String> {
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
        other => Err(format!(
            "[providers.{name}] kind = {other:?} is not built in this version"
        )),
    }
}
