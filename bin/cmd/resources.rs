//! `mcpvisor resources list|templates|read`: resources of the configured
//! servers, through the shared resource tools.

use mcpvisor::{CallOptions, Scope};
use serde_json::{Value, json};

use crate::cli::{Cli, ResourcesCommand};
use crate::config::load_config;
use crate::lifecycle::{finish, start};

/// Run `resources` `what`; exit 1 unless the call was ok.
pub(crate) async fn run(cli: &Cli, what: &ResourcesCommand) -> anyhow::Result<u8> {
    let (tool, args) = match what {
        ResourcesCommand::List { server, cursor } => (
            "list_mcp_resources",
            json!({"server": server, "cursor": cursor}),
        ),
        ResourcesCommand::Templates { server, cursor } => (
            "list_mcp_resource_templates",
            json!({"server": server, "cursor": cursor}),
        ),
        ResourcesCommand::Read { server, uri } => {
            ("read_mcp_resource", json!({"server": server, "uri": uri}))
        }
    };
    // Absent options are absent, not null.
    let args = match args {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    };
    let runtime = start(load_config(cli, true)?, cli.json).await?;
    let outcome = runtime
        .call(&Scope::Global, tool, Some(args), CallOptions::default())
        .await;
    let _ = finish(runtime).await;
    if cli.json {
        let body = if outcome.is_ok() {
            outcome.canonical.clone().unwrap_or(Value::Null)
        } else {
            json!({"outcome": outcome.kind.name(), "error": outcome.error})
        };
        println!("{body}");
    } else {
        println!("{}", outcome.projection);
    }
    Ok(u8::from(!outcome.is_ok()))
}
