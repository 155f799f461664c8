//! `mcpvisor resources list|templates|read`: resources of the configured
//! servers, through the shared resource tools.

use mcpvisor::{CallOptions, Scope};
use serde_json::{Value, json};

use crate::cli::{Cli, ResourcesCommand};
use crate::config::load_config;
use crate::lifecycle::{finish, start};
use crate::render::outln;

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
    let runtime = start(
        load_config(cli, true)?,
        cli.json,
        crate::lifecycle::Wait::All,
    )
    .await?;
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
        outln!("{body}");
    } else if !outcome.is_ok() {
        outln!("{}", outcome.projection);
    } else {
        print_human(what, outcome.canonical.as_ref().unwrap_or(&Value::Null));
    }
    Ok(u8::from(!outcome.is_ok()))
}

/// Lists as a table (server, uri, name, mime); a read's text contents as
/// text, binary ones as a size line.
fn print_human(what: &ResourcesCommand, per_server: &Value) {
    let Some(per_server) = per_server.as_object() else {
        return;
    };
    match what {
        ResourcesCommand::List { .. } | ResourcesCommand::Templates { .. } => {
            let (key, uri_key) = match what {
                ResourcesCommand::List { .. } => ("resources", "uri"),
                _ => ("resourceTemplates", "uriTemplate"),
            };
            outln!("{:<16} {:<40} {:<24} MIME", "SERVER", "URI", "NAME");
            for (server, page) in per_server {
                for r in page[key].as_array().into_iter().flatten() {
                    outln!(
                        "{:<16} {:<40} {:<24} {}",
                        server,
                        r[uri_key].as_str().unwrap_or("?"),
                        r["name"].as_str().unwrap_or(""),
                        r["mimeType"].as_str().unwrap_or("")
                    );
                }
                if let Some(c) = page["nextCursor"].as_str() {
                    outln!("{server}: more with --server {server} --cursor {c}");
                }
            }
        }
        ResourcesCommand::Read { .. } => {
            for (_, result) in per_server {
                for c in result["contents"].as_array().into_iter().flatten() {
                    match (c["text"].as_str(), c["blob"].as_str()) {
                        (Some(text), _) => outln!("{text}"),
                        (None, Some(blob)) => outln!(
                            "[{} binary, {} bytes of base64: use --json for the data]",
                            c["mimeType"].as_str().unwrap_or("content"),
                            blob.len()
                        ),
                        _ => {}
                    }
                }
            }
        }
    }
}
