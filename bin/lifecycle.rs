//! A runtime for one command: start it and wait until its servers settled,
//! then shut it down.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use mcpvisor::{
    FileConfig, Runtime, Scope, ServerConfig, ServerState, ServerStatus, ShutdownReport,
};

use crate::config::builder_for;
use crate::render::errln;

/// How long a read-only command (`tools`, `status`, `check`) waits for
/// servers to answer unless `--wait` is given: a server that has not
/// answered by then is reported as still connecting, and the others are
/// shown. A server that hangs costs this, not its whole startup timeout.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// How long a command waits for its servers to settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Until every server settled, at most the longest startup timeout
    /// (and 2 s): commands that call a server.
    All,
    /// At most [`ANSWER_WAIT`]: read-only commands without `--wait`.
    Answered,
}

impl Wait {
    /// `--wait` given or not.
    pub(crate) fn from_flag(wait: bool) -> Self {
        if wait { Wait::All } else { Wait::Answered }
    }
}

/// Start a runtime with the servers of `cfg` and wait until they settled
/// (or as `wait` says); `quiet` keeps the progress line off stderr.
pub(crate) async fn start(cfg: FileConfig, quiet: bool, wait: Wait) -> anyhow::Result<Runtime> {
    start_showing(cfg, quiet, wait, |_, _| {}).await
}

/// [`start`], where `each` sees every server as it settles (its status), in
/// the order they do: a command that shows servers shows the fast ones at
/// once, not after the slowest.
pub(crate) async fn start_showing(
    cfg: FileConfig,
    quiet: bool,
    wait: Wait,
    each: impl FnMut(&Runtime, &ServerStatus),
) -> anyhow::Result<Runtime> {
    start_each(builder_for(&cfg, false)?, cfg.servers, quiet, wait, each).await
}

/// What a read-only command says of a server it did not wait for: still
/// connecting, with no error yet. `None` for any other status.
pub(crate) fn not_waited_for(s: &ServerStatus) -> Option<String> {
    (s.state == ServerState::Connecting && s.error.is_none()).then(|| {
        format!(
            "still connecting after {} s, not waited for (`--wait` waits for every server, up to its startup_timeout_ms; a first `npx`/`uvx` run downloads the package first)",
            ANSWER_WAIT.as_secs()
        )
    })
}

/// Start `b` with `servers` and wait until they settled.
pub(crate) async fn start_with(
    b: mcpvisor::RuntimeBuilder,
    servers: Vec<ServerConfig>,
    quiet: bool,
) -> anyhow::Result<Runtime> {
    start_each(b, servers, quiet, Wait::All, |_, _| {}).await
}

/// [`start_with`], calling `each` as each server settles.
async fn start_each(
    mut b: mcpvisor::RuntimeBuilder,
    servers: Vec<ServerConfig>,
    quiet: bool,
    wait: Wait,
    mut each: impl FnMut(&Runtime, &ServerStatus),
) -> anyhow::Result<Runtime> {
    let configured: Vec<String> = servers.iter().map(|s| s.server_name.clone()).collect();
    let names: Vec<String> = servers
        .iter()
        .filter(|s| s.enabled)
        .map(|s| s.server_name.clone())
        .collect();
    let trust_keys: Vec<(String, Vec<String>)> = servers
        .iter()
        .filter(|s| !s.tool_trust.is_empty())
        .map(|s| {
            (
                s.server_name.clone(),
                s.tool_trust.keys().cloned().collect(),
            )
        })
        .collect();
    let limit = servers
        .iter()
        .map(|s| s.startup_timeout)
        .max()
        .unwrap_or_default()
        + Duration::from_secs(2);
    let limit = match wait {
        Wait::All => limit,
        Wait::Answered => limit.min(ANSWER_WAIT),
    };
    for s in servers {
        b = b.server(Scope::Global, s);
    }
    let runtime = b.start().await?;
    // The providers' tools, mounted in the run's activation, settle too
    // (disabled servers are not waited for).
    let mut names = names;
    for st in runtime.status() {
        if !names.contains(&st.server) && !configured.contains(&st.server) {
            names.push(st.server);
        }
    }
    let mut line = Progress::new(!quiet && !names.is_empty(), &names);
    line.draw(&runtime);
    settle_each(&runtime, &names, limit, |st| {
        line.clear();
        each(&runtime, st);
        line.settled(&runtime, st);
    })
    .await;
    line.finish(&runtime);
    warn_tool_trust_typos(&runtime, &trust_keys);
    Ok(runtime)
}

/// A `tool_trust` key that names no tool of its (ready) server is a typo
/// until shown otherwise: say so once, with the closest name.
fn warn_tool_trust_typos(runtime: &Runtime, keys: &[(String, Vec<String>)]) {
    let tools = runtime.tools(&Scope::Global);
    let statuses = runtime.status();
    for (server, names) in keys {
        let ready = statuses
            .iter()
            .any(|s| &s.server == server && s.state == ServerState::Ready);
        if !ready {
            continue;
        }
        let raw: Vec<&str> = tools
            .iter()
            .filter(|t| &t.server == server)
            .map(|t| t.raw_name.as_str())
            .collect();
        for n in names.iter().filter(|n| !raw.contains(&n.as_str())) {
            let hint = mcpvisor::closest(n, raw.iter().copied())
                .map(|c| format!(" (did you mean {c:?}?)"))
                .unwrap_or_default();
            errln!(
                "mcpvisor: warning: [servers.{server}] tool_trust names {n:?}, which the server does not list{hint}"
            );
        }
    }
}

/// "2 ready", or "1 ready, 1 failed: x (failed), y (reconnecting)" — what
/// the progress line ends with, never a bare "done".
pub(crate) fn settled_summary(runtime: &Runtime, names: &[String]) -> String {
    let statuses = runtime.status();
    let mut ready = 0;
    let mut not_ready = Vec::new();
    for n in names {
        match statuses.iter().find(|s| &s.server == n) {
            Some(s) if s.state == ServerState::Ready => ready += 1,
            Some(s) => not_ready.push(format!("{n} ({})", s.state)),
            None => not_ready.push(format!("{n} (gone)")),
        }
    }
    if not_ready.is_empty() {
        format!("{ready} ready")
    } else {
        format!(
            "{ready} ready, {} not ready: {}",
            not_ready.len(),
            not_ready.join(", ")
        )
    }
}

/// The progress line on stderr while servers start. On a terminal it is
/// redrawn as each server settles ("1/3 ready · waiting for b, c"); on a
/// pipe each settled server is appended to one line, so a log shows the
/// order without a redraw's escapes. It always ends with the summary.
struct Progress<'a> {
    on: bool,
    tty: bool,
    names: &'a [String],
    settled: Vec<String>,
}

impl<'a> Progress<'a> {
    fn new(on: bool, names: &'a [String]) -> Self {
        let tty = std::io::stderr().is_terminal();
        Self {
            on,
            tty,
            names,
            settled: Vec::new(),
        }
    }

    fn head(&self) -> String {
        format!(
            "connecting to {} server(s): {}",
            self.names.len(),
            self.names.join(", ")
        )
    }

    fn draw(&self, runtime: &Runtime) {
        if !self.on {
            return;
        }
        let head = self.head();
        if self.tty {
            let waiting: Vec<&str> = self
                .names
                .iter()
                .filter(|n| !self.settled.contains(n))
                .map(String::as_str)
                .collect();
            let mut line = format!("\r\x1b[2K{head}");
            if !self.settled.is_empty() {
                line.push_str(&format!(" · {}", settled_summary(runtime, &self.settled)));
            }
            if !waiting.is_empty() {
                line.push_str(&format!(" · waiting for {} …", waiting.join(", ")));
            }
            eprint!("{line}");
        } else if self.settled.is_empty() {
            eprint!("{head} …");
        }
        let _ = std::io::stderr().flush();
    }

    /// Clear a terminal's line before other output.
    fn clear(&self) {
        if self.on && self.tty {
            eprint!("\r\x1b[2K");
        }
    }

    fn settled(&mut self, runtime: &Runtime, st: &ServerStatus) {
        self.settled.push(st.server.clone());
        if !self.on {
            return;
        }
        if self.tty {
            self.draw(runtime);
        } else {
            let tools = runtime
                .tools(&Scope::Global)
                .iter()
                .filter(|t| t.server == st.server)
                .count();
            match st.state {
                ServerState::Ready => eprint!(" {} ready ({tools} tools) …", st.server),
                _ => eprint!(" {} {} …", st.server, st.state),
            }
            let _ = std::io::stderr().flush();
        }
    }

    fn finish(&self, runtime: &Runtime) {
        if !self.on {
            return;
        }
        let summary = settled_summary(runtime, self.names);
        if self.tty {
            eprintln!("\r\x1b[2K{} … {summary}", self.head());
        } else {
            eprintln!(" {summary}");
        }
    }
}

/// Wait until every named server has left `connecting` for the first time
/// (ready, failed, reconnecting, exhausted…), bounded by the longest startup timeout.
pub(crate) async fn settle(runtime: &Runtime, names: &[String], limit: Duration) {
    settle_each(runtime, names, limit, |_| {}).await;
}

/// [`settle`], calling `each` once per server as it settles.
async fn settle_each(
    runtime: &Runtime,
    names: &[String],
    limit: Duration,
    mut each: impl FnMut(&ServerStatus),
) {
    let mut events = runtime.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    let mut done: Vec<&str> = Vec::new();
    loop {
        let statuses = runtime.status();
        // Settled: past connecting, and no re-sync a list_changed asked for
        // still running (SYNC-5) — waited for by its event, not a sleep.
        let mut pending = false;
        for n in names {
            if done.contains(&n.as_str()) {
                continue;
            }
            match statuses.iter().find(|s| &s.server == n) {
                Some(s)
                    if !((matches!(s.state, ServerState::Connecting | ServerState::Stopped)
                        && s.error.is_none())
                        || s.syncing) =>
                {
                    done.push(n);
                    each(s);
                }
                _ => pending = true,
            }
        }
        if !pending {
            return;
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
            Ok(_) => {}
        }
    }
}

/// Shut `runtime` down, listing on stderr what it could not confirm.
pub(crate) async fn finish(runtime: Runtime) -> ShutdownReport {
    let report = runtime.shutdown(Duration::from_secs(20)).await;
    if !report.is_clean() {
        eprintln!("shutdown did not confirm everything:");
        for u in &report.unconfirmed {
            eprintln!("  - {u}");
        }
    }
    report
}
