//! A runtime for one command: start it and wait until its servers settled,
//! then shut it down.

use std::time::Duration;

use mcpvisor::{FileConfig, Runtime, Scope, ServerConfig, ServerState, ShutdownReport};

use crate::config::builder_for;

/// Start a runtime with the servers of `cfg` and wait until they settled;
/// `quiet` keeps the progress line off stderr.
pub(crate) async fn start(cfg: FileConfig, quiet: bool) -> anyhow::Result<Runtime> {
    start_with(builder_for(&cfg, false)?, cfg.servers, quiet).await
}

/// Start `b` with `servers` and wait until they settled.
pub(crate) async fn start_with(
    mut b: mcpvisor::RuntimeBuilder,
    servers: Vec<ServerConfig>,
    quiet: bool,
) -> anyhow::Result<Runtime> {
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
    for s in servers {
        b = b.server(Scope::Global, s);
    }
    let runtime = b.start().await?;
    // The providers' tools, mounted in the run's activation, settle too.
    let mut names = names;
    for st in runtime.status() {
        if !names.contains(&st.server) {
            names.push(st.server);
        }
    }
    if !quiet && !names.is_empty() {
        eprint!(
            "connecting to {} server(s): {} …",
            names.len(),
            names.join(", ")
        );
    }
    settle(&runtime, &names, limit).await;
    if !quiet && !names.is_empty() {
        eprintln!(" {}", settled_summary(&runtime, &names));
    }
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
            eprintln!(
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

/// Wait until every named server has left `connecting` for the first time
/// (ready, failed, reconnecting, exhausted…), bounded by the longest startup timeout.
pub(crate) async fn settle(runtime: &Runtime, names: &[String], limit: Duration) {
    let mut events = runtime.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let statuses = runtime.status();
        // Settled: past connecting, and no re-sync a list_changed asked for
        // still running (SYNC-5) — waited for by its event, not a sleep.
        let pending = names.iter().any(|n| {
            statuses.iter().find(|s| &s.server == n).is_none_or(|s| {
                (matches!(s.state, ServerState::Connecting | ServerState::Stopped)
                    && s.error.is_none())
                    || s.syncing
            })
        });
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
