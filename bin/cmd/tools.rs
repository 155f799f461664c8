//! `mcpvisor tools`: the public tool names of every server, or of one.
//! Each server's tools are printed as soon as it is ready, fast servers
//! first, while the progress line waits for the others. Servers that are
//! not ready are named on stderr with their error, and make the exit
//! status 1: a listing never hides a failure. `--json` prints one array
//! when every server has settled.

use std::io::Write as _;

use anyhow::bail;
use mcpvisor::{Scope, ServerState};
use serde_json::Value;

use crate::cli::Cli;
use crate::config::load_for_target;
use crate::lifecycle::{finish, start_showing};
use crate::render::tool_json;
use crate::render::{errln, outln};

/// Run `tools` for every server, or `only` that one; exit 1 when a server
/// (of those listed) is not ready.
pub(crate) async fn run(
    cli: &Cli,
    only: Option<&str>,
    target: &crate::cli::Target,
    wait: crate::lifecycle::Wait,
) -> anyhow::Result<u8> {
    let (mut cfg, _) = load_for_target(cli, target)?;
    let providers = crate::config::provider_names(&cfg);
    if let Some(s) = only {
        let mut known: Vec<String> = cfg.servers.iter().map(|c| c.server_name.clone()).collect();
        known.extend(providers.iter().cloned());
        if !known.iter().any(|k| k == s) {
            bail!(
                "--server {s:?}: no such server in the config (configured: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
        }
        // Only the work this command needs: start that server alone.
        cfg.servers.retain(|c| c.server_name == s);
        if !providers.iter().any(|p| p == s) {
            cfg.providers = Default::default();
        }
    }
    let disabled: Vec<String> = cfg
        .servers
        .iter()
        .filter(|c| !c.enabled)
        .map(|c| c.server_name.clone())
        .collect();
    let enable_hint = || {
        format!(
            "`mcpvisor enable {}` switches {} on",
            disabled.join(" "),
            if disabled.len() == 1 { "it" } else { "them" }
        )
    };
    if cfg.servers.iter().all(|c| !c.enabled) && crate::config::provider_names(&cfg).is_empty() {
        if disabled.is_empty() {
            errln!("mcpvisor: the config enables no servers, so there are no tools to list");
        } else {
            errln!(
                "mcpvisor: the config enables no servers, so there are no tools to list: disabled: {} ({})",
                disabled.join(", "),
                enable_hint()
            );
        }
        return Ok(1);
    }
    // What `never` refuses, marked in the listing (the server's own trust,
    // or a tool's `tool_trust`).
    let cfg_never: Vec<(String, Vec<String>)> = cfg
        .servers
        .iter()
        .filter_map(|s| {
            if s.trust == mcpvisor::TrustMode::Never {
                return Some((s.server_name.clone(), Vec::new()));
            }
            let tools: Vec<String> = s
                .tool_trust
                .iter()
                .filter(|(_, m)| **m == mcpvisor::TrustMode::Never)
                .map(|(t, _)| t.clone())
                .collect();
            (!tools.is_empty()).then(|| (s.server_name.clone(), tools))
        })
        .collect();
    let json_out = cli.json;
    // The text listing prints each server's tools when it is ready, then
    // whatever it has not printed: the runtime's own tools (the shared
    // resource tools) and tools a server added since. Text and `--json`
    // list the same tools.
    let mut printed = std::collections::BTreeSet::new();
    let runtime = start_showing(cfg, json_out, wait, |runtime, st| {
        if json_out || st.state != ServerState::Ready {
            return;
        }
        let tools = runtime.tools(&Scope::Global);
        for t in tools.iter().filter(|t| t.server == st.server) {
            if printed.insert(t.name.clone()) {
                print_tool(t, &cfg_never);
            }
        }
        let _ = std::io::stdout().flush();
    })
    .await?;
    let tools = runtime.tools(&Scope::Global);
    if !json_out {
        for t in tools.iter().filter(|t| !printed.contains(&t.name)) {
            print_tool(t, &cfg_never);
        }
    }
    let not_ready: Vec<_> = runtime
        .status()
        .into_iter()
        .filter(|s| s.state != ServerState::Ready && s.state != ServerState::Stopped)
        .collect();
    let _ = finish(runtime).await;
    if json_out {
        let arr: Vec<Value> = tools.iter().map(|t| tool_json(t)).collect();
        outln!("{}", Value::Array(arr));
    }
    for s in &not_ready {
        if let Some(note) = crate::lifecycle::not_waited_for(s) {
            errln!("mcpvisor: server {:?}: {note}", s.server);
            continue;
        }
        errln!(
            "mcpvisor: server {:?} is not ready ({}): {}",
            s.server,
            s.state,
            s.error.as_deref().unwrap_or("no error recorded")
        );
        if !s.stderr_tail.trim().is_empty()
            && !s
                .error
                .as_deref()
                .unwrap_or("")
                .contains(s.stderr_tail.trim())
        {
            errln!("  stderr: {}", s.stderr_tail.trim());
        }
    }
    if !not_ready.is_empty() {
        errln!("  (`mcpvisor check SERVER` shows one server's handshake)");
    }
    if !disabled.is_empty() && !json_out {
        errln!(
            "mcpvisor: not listed, disabled in the config: {} ({})",
            disabled.join(", "),
            enable_hint()
        );
    }
    Ok(u8::from(!not_ready.is_empty()))
}

/// One tool's rows: its name, a mark when trust `never` refuses it (the
/// server's own trust, or the tool's `tool_trust`), the first line of its
/// description, then its arguments.
fn print_tool(t: &mcpvisor::ToolDefinition, never: &[(String, Vec<String>)]) {
    let refused = never.iter().any(|(server, tools)| {
        *server == t.server && (tools.is_empty() || tools.contains(&t.raw_name))
    });
    outln!(
        "{:<48} {}{}",
        t.name,
        if refused {
            "[refused: trust never] "
        } else {
            ""
        },
        t.description
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
    );
    let args = arguments(t);
    if !args.is_empty() {
        outln!("    {}", args.join("  "));
    }
}

/// Each argument of `t` as `name: type` (`name?: type` when optional).
fn arguments(t: &mcpvisor::ToolDefinition) -> Vec<String> {
    let required: Vec<&str> = t
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    t.input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, p)| {
                    let kind = p.get("type").and_then(Value::as_str).unwrap_or("any");
                    let opt = if required.contains(&name.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!("{name}{opt}: {kind}")
                })
                .collect()
        })
        .unwrap_or_default()
}
