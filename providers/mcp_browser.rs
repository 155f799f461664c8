//! `browser-playwright-mcp` and `browser-devtools-mcp` (SEAT-4, SEAT-5):
//! `@playwright/mcp` and `chrome-devtools-mcp` run through the runtime's own
//! MCP client, as a stdio server mounted per live activation.
//!
//! Each activation gets its own server process (and so its own browser,
//! with an isolated in-memory profile), mounted in the activation's scope
//! with strict startup and reconnect disabled: a server that fails to
//! start fails `open_activation`, and one that dies is not restarted under
//! the activation (a new activation starts fresh). The server process and
//! the browser it starts are the activation's: the stdio close sequence
//! reaps them when the activation ends (its group, and by `MCPVISOR_TAG`
//! whatever left it). The mounted server is the whole resource, so the
//! provider has no opener.
//!
//! The environment is the runtime's scrubbed stdio environment (no
//! `PLAYWRIGHT_MCP_*` variable of the host can reach the server and bypass
//! the config), and chrome-devtools-mcp's usage statistics, update checks
//! and CrUX lookups are turned off.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::messages::config::{ServerConfig, TransportConfig};
use crate::messages::seat::{
    ActivationId, Opener, ProviderInfo, SeatKind, SeatProvider, SessionsHandle,
};
use crate::messages::trust::TrustMode;

/// The pinned `@playwright/mcp` version (the one the tests run).
pub const PLAYWRIGHT_MCP_VERSION: &str = "0.0.83";
/// The pinned `chrome-devtools-mcp` version.
pub const DEVTOOLS_MCP_VERSION: &str = "1.11.0";

/// The longest TMPDIR Chromium can live with: it makes
/// `$TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket` (45 bytes more),
/// and a Unix socket path has at most 107.
const MAX_TMPDIR: usize = 60;

/// A server's command line: program, arguments, extra environment.
type Launch = (String, Vec<String>, Vec<(String, String)>);

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpBrowserKind {
    /// `@playwright/mcp` (`browser-playwright-mcp`).
    Playwright,
    /// `chrome-devtools-mcp` (`browser-devtools-mcp`).
    DevTools,
}

impl McpBrowserKind {
    /// The provider kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            McpBrowserKind::Playwright => "browser-playwright-mcp",
            McpBrowserKind::DevTools => "browser-devtools-mcp",
        }
    }

    /// The npm package.
    pub fn package(self) -> &'static str {
        match self {
            McpBrowserKind::Playwright => "@playwright/mcp",
            McpBrowserKind::DevTools => "chrome-devtools-mcp",
        }
    }

    /// The pinned version.
    pub fn pinned(self) -> &'static str {
        match self {
            McpBrowserKind::Playwright => PLAYWRIGHT_MCP_VERSION,
            McpBrowserKind::DevTools => DEVTOOLS_MCP_VERSION,
        }
    }

    /// The package's entry script, relative to its directory.
    fn entry(self) -> &'static str {
        match self {
            McpBrowserKind::Playwright => "cli.js",
            McpBrowserKind::DevTools => "build/src/bin/chrome-devtools-mcp.js",
        }
    }
}

/// The settings of an MCP-backed browser provider.
#[derive(Debug, Clone)]
pub struct McpBrowserConfig {
    /// The provider's name (the mounted server's name).
    pub name: String,
    /// Which server.
    pub kind: McpBrowserKind,
    /// The pinned package version: the installed one must be it.
    pub version: String,
    /// A directory whose `node_modules` has the package installed; `None`:
    /// `npx --yes <package>@<version>` (needs the npm registry).
    pub package_dir: Option<PathBuf>,
    /// The Chromium the server drives (default: as for browser-native).
    pub executable: Option<PathBuf>,
    /// Trust of the server's tools.
    pub trust: TrustMode,
    /// Startup timeout of the server (strict: a failure fails the activation).
    pub startup_timeout: Duration,
    /// Per-call timeout.
    pub tool_call_timeout: Duration,
    /// Where each activation's working directory is made (default: the
    /// temp dir).
    pub work_root: PathBuf,
    /// `attach`: the CDP endpoint of a browser started elsewhere; the
    /// server connects to it (`--cdp-endpoint` / `--browserUrl`) and one
    /// activation at a time has it (SEAT-9). `None`: launch.
    pub attach: Option<String>,
}

impl McpBrowserConfig {
    /// Defaults for a provider of `kind` named `name`, at the pinned version.
    pub fn new(name: impl Into<String>, kind: McpBrowserKind) -> Self {
        Self {
            name: name.into(),
            kind,
            version: kind.pinned().to_owned(),
            package_dir: None,
            executable: None,
            trust: TrustMode::Ask,
            startup_timeout: Duration::from_secs(30),
            tool_call_timeout: Duration::from_secs(60),
            work_root: std::env::temp_dir(),
            attach: None,
        }
    }
}

/// The provider.
#[derive(Debug, Clone)]
pub struct McpBrowser {
    config: McpBrowserConfig,
    /// `attach`: the one activation whose server is mounted.
    owner: Arc<super::Exclusive>,
}

impl McpBrowser {
    /// A provider with these settings; refused when the installed package
    /// is not the pinned version.
    pub fn new(config: McpBrowserConfig) -> Result<Self, super::ProviderError> {
        let swept = super::browser_native::sweep_orphans(&config.work_root);
        if !swept.is_empty() {
            tracing::warn!(pids = ?swept, "killed browsers left behind by a runtime that is gone");
        }
        if let Some(dir) = &config.package_dir {
            let pj = dir
                .join("node_modules")
                .join(config.kind.package())
                .join("package.json");
            let text = std::fs::read_to_string(&pj).map_err(|e| {
                super::ProviderError::Package(format!(
                    "{}: cannot read {} ({e}); install it with `npm install {}@{}` in {}",
                    config.kind.kind(),
                    pj.display(),
                    config.kind.package(),
                    config.version,
                    dir.display()
                ))
            })?;
            let got = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("version")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            if got != config.version {
                return Err(super::ProviderError::Package(format!(
                    "{}: {} is version {got:?} in {}, but the config pins {:?}",
                    config.kind.kind(),
                    config.kind.package(),
                    dir.display(),
                    config.version
                )));
            }
        }
        if let Some(endpoint) = &config.attach {
            crate::messages::trust::validate_endpoint(&endpoint.replacen("ws://", "http://", 1))
                .map_err(|e| {
                    super::ProviderError::Config(format!(
                        "[providers.{}] cdp_endpoint: {e}",
                        config.name
                    ))
                })?;
        }
        Ok(Self {
            config,
            owner: Arc::new(super::Exclusive::new("the attached browser")),
        })
    }

    /// One activation's working directory.
    fn work_dir(&self, activation: &ActivationId) -> PathBuf {
        self.config
            .work_root
            .join(super::browser_native::profile_name(activation))
    }

    /// The command line of one activation's server.
    fn command(&self) -> Result<Launch, super::browser_native::BrowserError> {
        let c = &self.config;
        let (program, mut args) = match &c.package_dir {
            Some(dir) => {
                let entry = dir
                    .join("node_modules")
                    .join(c.kind.package())
                    .join(c.kind.entry());
                ("node".to_owned(), vec![entry.display().to_string()])
            }
            None => (
                "npx".to_owned(),
                vec![
                    "--yes".to_owned(),
                    format!("{}@{}", c.kind.package(), c.version),
                ],
            ),
        };
        let mut env = Vec::new();
        let chrome = match &c.attach {
            Some(_) => String::new(),
            None => super::browser_native::chromium_for(c.executable.as_deref())?
                .display()
                .to_string(),
        };
        match (c.kind, &c.attach) {
            (McpBrowserKind::Playwright, Some(endpoint)) => {
                args.push("--cdp-endpoint".into());
                args.push(endpoint.clone());
            }
            (McpBrowserKind::DevTools, Some(endpoint)) => {
                args.push(format!("--browserUrl={endpoint}"));
                args.extend(["--no-usage-statistics", "--no-performance-crux"].map(str::to_owned));
                env.push(("CHROME_DEVTOOLS_MCP_NO_USAGE_STATISTICS".into(), "1".into()));
                env.push(("CHROME_DEVTOOLS_MCP_NO_UPDATE_CHECKS".into(), "1".into()));
            }
            (McpBrowserKind::Playwright, None) => {
                args.extend(
                    [
                        "--headless",
                        "--isolated",
                        "--no-sandbox",
                        "--executable-path",
                    ]
                    .map(str::to_owned),
                );
                args.push(chrome);
            }
            (McpBrowserKind::DevTools, None) => {
                args.extend(["--headless", "--isolated", "--executablePath"].map(str::to_owned));
                args.push(chrome);
                args.extend(
                    [
                        "--chromeArg=--no-sandbox",
                        "--chromeArg=--disable-background-networking",
                        "--no-usage-statistics",
                        "--no-performance-crux",
                    ]
                    .map(str::to_owned),
                );
                env.push(("CHROME_DEVTOOLS_MCP_NO_USAGE_STATISTICS".into(), "1".into()));
                env.push(("CHROME_DEVTOOLS_MCP_NO_UPDATE_CHECKS".into(), "1".into()));
            }
        }
        Ok((program, args, env))
    }
}

impl SeatProvider for McpBrowser {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: self.config.name.clone(),
            kind: self.config.kind.kind().into(),
            seat: SeatKind::BrowserUse,
        }
    }

    fn mount(&self, activation: &ActivationId, _: SessionsHandle) -> Result<ServerConfig, String> {
        let (program, mut args, env) = self.command().map_err(|e| e.to_string())?;
        // The server's working directory, where it writes its snapshots,
        // console logs and screenshots: the activation's own, removed at
        // its end (and swept like a profile when a runtime was killed).
        let work = self.work_dir(activation);
        std::fs::create_dir_all(&work)
            .map_err(|e| format!("cannot make {}: {e}", work.display()))?;
        if self.config.kind == McpBrowserKind::Playwright {
            args.push("--output-dir".into());
            args.push(work.display().to_string());
        }
        let mut server = ServerConfig::stdio(self.config.name.clone(), program, args);
        if let TransportConfig::Stdio(stdio) = &mut server.transport {
            // The scrubbed environment, plus only what is set here: no
            // PLAYWRIGHT_MCP_* of the host reaches the server.
            stdio.env_passthrough.clear();
            stdio.env.extend(env);
        }
        // SEAT-5: strict startup, no reconnect under the activation.
        server.tool_note = Some(super::browser_native::GUIDANCE.to_owned());
        server.fail_on_startup_error = true;
        server.reconnect.enabled = false;
        server.idle_stop_after = None;
        server.trust = self.config.trust;
        server.startup_timeout = self.config.startup_timeout;
        server.tool_call_timeout = self.config.tool_call_timeout;
        if let TransportConfig::Stdio(stdio) = &mut server.transport {
            // Its temp files (the browser's profile, playwright's
            // artifacts) go there too, so the removal takes them all,
            // also those of a browser killed before it cleaned up. Not
            // when the path is too long for the socket Chromium makes in
            // its temp dir (a Unix socket path has at most 107 bytes).
            if work.as_os_str().len() <= MAX_TMPDIR {
                stdio
                    .env
                    .insert("TMPDIR".into(), work.display().to_string());
            }
            stdio.cwd = Some(work);
        }
        Ok(server)
    }

    fn admit(&self, activation: &ActivationId) -> bool {
        self.config.attach.is_none() || self.owner.claim(activation).is_ok()
    }

    fn unmounted(&self, activation: &ActivationId) {
        self.owner.release(activation);
        let work = self.work_dir(activation);
        if let Err(e) = std::fs::remove_dir_all(&work)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %work.display(), "cannot remove the provider's working directory: {e}");
        }
    }

    fn opener(&self) -> Option<Opener> {
        None
    }
}
