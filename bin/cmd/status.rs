//! `mcpvisor status`: the supervision tree with each server's status, or
//! (`--watch`) every state change until SIGINT/SIGTERM.

use std::io::Write;

use mcpvisor::{RuntimeEvent, Scope, ServerState};
use serde_json::{Value, json};

use crate::cli::Cli;
use crate::config::{builder_for, load_config};
use crate::lifecycle::{finish, start};
use crate::render::{errln, outln};
use crate::render::{status_json, status_line};

/// Run `status`, once or (`watch`) until interrupted.
pub(crate) async fn run(cli: &Cli, watch: bool, wait: bool) -> anyhow::Result<u8> {
    let cfg = load_config(cli, true)?;
    if cfg.servers.is_empty() && crate::config::provider_names(&cfg).is_empty() {
        errln!("mcpvisor: the config defines no servers");
        return Ok(1);
    }
    if !watch {
        let has_providers = !crate::config::provider_names(&cfg).is_empty();
        let runtime = start(cfg, cli.json, crate::lifecycle::Wait::from_flag(wait)).await?;
        let statuses = runtime.status();
        let seats = if has_providers {
            runtime.seats().await
        } else {
            Vec::new()
        };
        let _ = finish(runtime).await;
        let not_ready = statuses
            .iter()
            .filter(|s| s.state != ServerState::Ready && s.state != ServerState::Stopped)
            .count();
        if cli.json {
            // The seats (when providers are configured) follow the servers,
            // each an object with a "seat" key.
            let mut all: Vec<Value> = statuses.iter().map(status_json).collect();
            all.extend(seats.iter().filter_map(|s| serde_json::to_value(s).ok()));
            outln!("{}", Value::Array(all));
        } else {
            outln!(
                "Runtime\n└── RootSupervisor\n    └── ScopeSupervisor(global)\n        ├── ToolRegistry(global)"
            );
            let n = statuses.len();
            for (i, s) in statuses.iter().enumerate() {
                let branch = if i + 1 == n { "└──" } else { "├──" };
                outln!("        {branch} ServerSupervisor {}", status_line(s));
                let bar = if i + 1 == n { " " } else { "│" };
                if let Some(e) = &s.error {
                    outln!("        {bar}       error: {e}");
                } else if let Some(note) = crate::lifecycle::not_waited_for(s) {
                    outln!("        {bar}       {note}");
                }
            }
            for s in &seats {
                outln!("    Seat({}) {}", s.seat, seat_line(s));
            }
        }
        return Ok(u8::from(not_ready > 0));
    }
    let runtime = builder_for(&cfg, false)?.start().await?;
    let mut events = runtime.subscribe();
    for s in cfg.servers {
        runtime.add_server(Scope::Global, s).await?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut out = std::io::stdout();
    // One line per change: a status equal to the last one shown is skipped.
    let mut last: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            ev = events.recv() => match ev {
                Ok(RuntimeEvent::ServerStatus(s)) => {
                    let mut human = status_line(&s);
                    // Why a server is not ready, in the line itself.
                    if s.state != ServerState::Ready
                        && let Some(e) = &s.error
                    {
                        human.push_str(&format!(" — {e}"));
                    }
                    if last.get(&s.server) == Some(&human) {
                        continue;
                    }
                    last.insert(s.server.clone(), human.clone());
                    let line = if cli.json {
                        let mut v = status_json(&s);
                        v["ts_ms"] = json!(unix_ms());
                        v.to_string()
                    } else {
                        crate::render::term(&human).into_owned()
                    };
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    let report = finish(runtime).await;
    if cli.json {
        let _ = writeln!(out, "{}", json!({"shutdown": report, "ts_ms": unix_ms()}));
    } else {
        let _ = writeln!(
            out,
            "shutdown: {} server(s) stopped, processes reaped {:?}, {} ms{}",
            report.servers_stopped.len(),
            report.processes_reaped,
            report.duration_ms,
            if report.is_clean() { ", clean" } else { "" }
        );
    }
    Ok(u8::from(!report.is_clean()))
}

/// Milliseconds since the Unix epoch (the timestamp of `--watch` JSON lines).
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// `holder browser (browser-native), 1 activation(s), pids 123` or `empty`.
fn seat_line(s: &mcpvisor::SeatStatus) -> String {
    let Some(holder) = &s.holder else {
        return "empty".into();
    };
    let mut line = format!(
        "holder {holder} ({}), {} live activation(s): {}",
        s.kind.as_deref().unwrap_or("?"),
        s.activations.len(),
        s.activations.join(", ")
    );
    if !s.pids.is_empty() {
        line.push_str(&format!(
            ", pids {}",
            s.pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if s.releasing {
        line.push_str(", releasing");
    }
    if !s.still_open.is_empty() {
        line.push_str(&format!(", still open: {}", s.still_open.join("; ")));
    }
    line
}
