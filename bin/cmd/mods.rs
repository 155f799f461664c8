//! `mcpvisor mods list|test`: the `[mods]` of the config, loaded in a mod
//! host of their own (no server is started).

use anyhow::{Context, bail};
use mcpvisor::mods::ModHost;
use serde_json::{Value, json};

use crate::cli::{Cli, ModsCommand};
use crate::config::load_config;
use crate::render::{errln, outln};

/// The mod host for the config's `[mods]`; an error when mods are off.
fn host(cli: &Cli) -> anyhow::Result<ModHost> {
    let cfg = load_config(cli, false)?;
    if !cfg.mods.enabled {
        bail!("mods are off: set [mods] enabled = true and list each mod in [[mods.load]]");
    }
    let settings = crate::config::mod_settings(&cfg);
    Ok(ModHost::start(settings)?)
}

/// Run `mods list` or `mods test`.
pub(crate) async fn run(cli: &Cli, what: &ModsCommand) -> anyhow::Result<u8> {
    let host = host(cli)?;
    match what {
        ModsCommand::List => {
            let (regs, reports) = tokio::task::spawn_blocking(move || {
                let listed = host.list();
                host.shutdown();
                listed
            })
            .await
            .context("the mod host failed")?;
            if cli.json {
                outln!("{}", json!({"registrations": regs, "reports": reports}));
            } else {
                for r in &regs {
                    outln!(
                        "{:<24} {:<16} {}{}",
                        r.mod_name,
                        r.event,
                        if r.served { "served" } else { "not served yet" },
                        if r.catch { ", with catch" } else { "" }
                    );
                }
                for r in &reports {
                    errln!("{}: {}: {}", r.mod_name, r.kind, r.message);
                }
            }
            let load_failed = reports.iter().any(|r| r.kind == "load_error");
            Ok(u8::from(load_failed))
        }
        ModsCommand::Test { event, payload } => {
            if !mcpvisor::mods::EVENTS.contains(&event.as_str()) {
                bail!(
                    "mods test --event {event:?}: not an event mods can register for; one of: {}",
                    mcpvisor::mods::EVENTS.join(", ")
                );
            }
            let payload: Value = match payload {
                None => json!({}),
                Some(p) => serde_json::from_str(p)
                    .with_context(|| format!("--payload is not valid JSON: {p}"))?,
            };
            if !payload.is_object() {
                bail!("--payload must be a JSON object");
            }
            let event = event.clone();
            let (outcome, load_reports) = tokio::task::spawn_blocking(move || {
                let (_, load) = host.list();
                let out = host.run(&event, payload);
                host.shutdown();
                (out, load)
            })
            .await
            .context("the mod host failed")?;
            let mut reports = load_reports;
            reports.extend(outcome.reports.iter().cloned());
            if cli.json {
                outln!(
                    "{}",
                    json!({
                        "event": outcome.event,
                        "prompt": outcome.prompt,
                        "context": outcome.context,
                        "payload": outcome.payload,
                        "ran": outcome.ran,
                        "stopped_by": outcome.stopped_by,
                        "reports": reports,
                    })
                );
            } else {
                if let Some(p) = &outcome.prompt {
                    outln!("prompt: {p}");
                }
                for c in &outcome.context {
                    outln!("context: {c}");
                }
                outln!("ran: {}", outcome.ran.join(", "));
                if let Some(s) = &outcome.stopped_by {
                    outln!("stopped by: {s}");
                }
                for r in &reports {
                    errln!("{}: {}: {}", r.mod_name, r.kind, r.message);
                }
            }
            Ok(0)
        }
    }
}
