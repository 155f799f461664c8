//! `mcpvisor demo`: the built-in demo server under supervision: list its
//! tools, call two, shut down.

use mcpvisor::{CallOptions, Runtime, Scope};
use serde_json::json;

use crate::cli::Cli;
use crate::config::demo_config;
use crate::lifecycle::{finish, start_with};
use crate::render::{outcome_json, status_line};

/// Run `demo`; exit 0 when both calls and the shutdown were clean.
pub(crate) async fn run(cli: &Cli) -> anyhow::Result<u8> {
    let runtime = start_with(Runtime::builder(), vec![demo_config("demo", 0)?], cli.json).await?;
    let scope = Scope::Global;
    let tools = runtime.tools(&scope);
    let echo = runtime
        .call(
            &scope,
            "mcp__demo__echo",
            Some(json!({"message": "hello from mcpvisor"})),
            CallOptions::default(),
        )
        .await;
    let add = runtime
        .call(
            &scope,
            "mcp__demo__add",
            Some(json!({"a": 2, "b": 40})),
            CallOptions::default(),
        )
        .await;
    let status = runtime.status();
    let report = finish(runtime).await;
    if cli.json {
        println!(
            "{}",
            json!({
                "tools": tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
                "calls": [outcome_json(&echo), outcome_json(&add)],
                "status": status,
                "shutdown": report,
            })
        );
    } else {
        println!("demo server started under supervision:");
        for s in &status {
            println!("  {}", status_line(s));
        }
        println!("tools ({}):", tools.len());
        for t in &tools {
            println!(
                "  {:<24} {}",
                t.name,
                t.description.as_deref().unwrap_or("")
            );
        }
        println!(
            "call mcp__demo__echo → {}: {}",
            echo.kind.name(),
            echo.projection
        );
        println!(
            "call mcp__demo__add  → {}: {}",
            add.kind.name(),
            add.projection
        );
        println!(
            "shutdown: {} server(s) stopped, processes reaped {:?}, {} ms, {}",
            report.servers_stopped.len(),
            report.processes_reaped,
            report.duration_ms,
            if report.is_clean() {
                "clean"
            } else {
                "NOT CLEAN"
            }
        );
    }
    Ok(if echo.is_ok() && add.is_ok() && report.is_clean() {
        0
    } else {
        1
    })
}
