//! `mcpvisor check`: one real handshake with one or every server: state,
//! protocol version, tool count; exit 1 if any failed.

use anyhow::bail;
use mcpvisor::ServerState;
use serde_json::Value;

use crate::cli::Cli;
use crate::lifecycle::{finish, start};
use crate::render::outln;
use crate::render::{indent, status_json};

/// Run `check` for every server, or `only` that one.
pub(crate) async fn run(cli: &Cli, only: Option<&str>, wait: bool) -> anyhow::Result<u8> {
    run_at(cli, None, only, wait).await
}

/// [`run`] on the config at `at` instead of the usual file, when given.
pub(crate) async fn run_at(
    cli: &Cli,
    at: Option<&std::path::Path>,
    only: Option<&str>,
    wait: bool,
) -> anyhow::Result<u8> {
    let mut cfg = crate::config::load_config_at(cli, at, true)?;
    let servers = &mut cfg.servers;
    if let Some(name) = only {
        servers.retain(|s| s.server_name == name);
        if servers.is_empty() {
            bail!("no server named \"{name}\" in the config");
        }
    }
    for s in servers.iter_mut() {
        // A check is one real handshake: no reconnect loop, no idle timer.
        s.reconnect.enabled = false;
        s.enabled = true;
        // Every server is reported (exit 1 if any failed), strict or not.
        s.fail_on_startup_error = false;
    }
    // One named server is waited for in full: that handshake is the question.
    let wait = crate::lifecycle::Wait::from_flag(wait || only.is_some());
    let runtime = start(cfg, cli.json, wait).await?;
    let statuses = runtime.status();
    let _ = finish(runtime).await;
    let failed = statuses
        .iter()
        .filter(|s| s.state != ServerState::Ready)
        .count();
    if cli.json {
        outln!(
            "{}",
            Value::Array(statuses.iter().map(status_json).collect())
        );
    } else {
        for s in &statuses {
            if s.state == ServerState::Ready {
                outln!(
                    "ok     {:<16} protocol {}  {} tool(s){}",
                    s.server,
                    s.protocol_version.as_deref().unwrap_or("?"),
                    s.tools,
                    s.server_info
                        .as_deref()
                        .map(|i| format!("  ({i})"))
                        .unwrap_or_default()
                );
                for w in &s.warnings {
                    outln!("       warning: {w}");
                }
            } else if let Some(note) = crate::lifecycle::not_waited_for(s) {
                outln!("WAIT   {:<16} {note}", s.server);
            } else {
                outln!("FAILED {:<16} {}", s.server, s.state);
                if let Some(e) = &s.error {
                    outln!("       error: {e}");
                }
                if !s.stderr_tail.is_empty()
                    && !s.error.as_deref().unwrap_or("").contains(&s.stderr_tail)
                {
                    outln!(
                        "       stderr tail:\n{}",
                        indent(&s.stderr_tail, "         ")
                    );
                }
            }
        }
    }
    Ok(u8::from(failed > 0))
}
