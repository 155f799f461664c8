//! `mcpvisor status`: the supervision tree with each server's status, or
//! (`--watch`) every state change until SIGINT/SIGTERM.

use std::io::Write;

use mcpvisor::{RuntimeEvent, Scope};
use serde_json::{Value, json};

use crate::cli::Cli;
use crate::config::{builder_for, load_config};
use crate::lifecycle::{finish, start};
use crate::render::{status_json, status_line};

/// Run `status`, once or (`watch`) until interrupted.
pub(crate) async fn run(cli: &Cli, watch: bool) -> anyhow::Result<u8> {
    let cfg = load_config(cli, true)?;
    if !watch {
        let runtime = start(cfg, cli.json).await?;
        let statuses = runtime.status();
        let _ = finish(runtime).await;
        if cli.json {
            println!(
                "{}",
                Value::Array(statuses.iter().map(status_json).collect())
            );
        } else {
            println!(
                "Runtime\n└── RootSupervisor\n    └── ScopeSupervisor(global)\n        ├── ToolRegistry(global)"
            );
            let n = statuses.len();
            for (i, s) in statuses.iter().enumerate() {
                let branch = if i + 1 == n { "└──" } else { "├──" };
                println!("        {branch} ServerSupervisor {}", status_line(s));
                if let Some(e) = &s.error {
                    println!(
                        "        {}       error: {e}",
                        if i + 1 == n { " " } else { "│" }
                    );
                }
            }
        }
        return Ok(0);
    }
    let runtime = builder_for(&cfg, false)?.start().await?;
    let mut events = runtime.subscribe();
    for s in cfg.servers {
        runtime.add_server(Scope::Global, s).await?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut out = std::io::stdout();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            ev = events.recv() => match ev {
                Ok(RuntimeEvent::ServerStatus(s)) => {
                    let line = if cli.json { status_json(&s).to_string() } else { status_line(&s) };
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
        let _ = writeln!(out, "{}", json!({"shutdown": report}));
    }
    Ok(u8::from(!report.is_clean()))
}
