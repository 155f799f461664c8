//! `mcpvisor conformance URL`: the client adapter for the official MCP
//! conformance suite (`conformance client --command "mcpvisor conformance"`).
//! It reads `MCP_CONFORMANCE_SCENARIO` and does what the scenario asks,
//! through the runtime (supervised connection, trust off for the suite's
//! server, elicitation answered with the schema's defaults). The OAuth
//! scenarios (`auth/*`) are not supported yet: the adapter says so and
//! exits 1.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use mcpvisor::{AcceptSchemaDefaults, CallOptions, Runtime, Scope, ServerConfig};
use serde_json::json;

/// Run the scenario against `url`; exit 0 when every step worked.
pub(crate) async fn run(url: &str) -> anyhow::Result<u8> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    if scenario.starts_with("auth/") {
        eprintln!("mcpvisor conformance: {scenario}: OAuth (CONN-13) is not supported yet");
        return Ok(1);
    }
    let mut cfg = ServerConfig::http("suite", url).trusted();
    cfg.reconnect.enabled = false;
    cfg.startup_timeout = Duration::from_secs(15);
    cfg.idle_stop_after = None;
    let runtime = Runtime::builder()
        .elicitation(Arc::new(AcceptSchemaDefaults))
        .start()
        .await?;
    runtime.add_server(Scope::Global, cfg).await?;
    let ready = runtime
        .wait_ready(&Scope::Global, "suite", Duration::from_secs(20))
        .await;
    let calls: Vec<(&str, serde_json::Value)> = match scenario.as_str() {
        "tools_call" => vec![("add_numbers", json!({"a": 2, "b": 3}))],
        "elicitation-sep1034-client-defaults" => {
            vec![("test_client_elicitation_defaults", json!({}))]
        }
        "sse-retry" => vec![("test_reconnection", json!({}))],
        _ => Vec::new(),
    };
    let mut failed = false;
    if let Err(e) = ready {
        eprintln!("mcpvisor conformance: {e}");
        failed = true;
    } else {
        for (tool, args) in calls {
            let name = mcpvisor::public_tool_name("suite", tool);
            let outcome = runtime
                .call(&Scope::Global, &name, Some(args), CallOptions::default())
                .await;
            println!("{tool}: {} {}", outcome.kind.name(), outcome.projection);
            failed |= !outcome.is_ok();
        }
    }
    let report = runtime.shutdown(Duration::from_secs(10)).await;
    if !report.is_clean() {
        bail!("the shutdown did not confirm: {:?}", report.unconfirmed);
    }
    Ok(u8::from(failed))
}
