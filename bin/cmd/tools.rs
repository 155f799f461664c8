//! `mcpvisor tools`: the public tool names of every server, or of one.

use mcpvisor::Scope;
use serde_json::Value;

use crate::cli::Cli;
use crate::config::load_config;
use crate::lifecycle::{finish, start};
use crate::render::tool_json;

/// Run `tools` for every server, or `only` that one.
pub(crate) async fn run(cli: &Cli, only: Option<&str>) -> anyhow::Result<u8> {
    let runtime = start(load_config(cli, true)?, cli.json).await?;
    let mut tools = runtime.tools(&Scope::Global);
    let _ = finish(runtime).await;
    if let Some(s) = only {
        tools.retain(|t| t.server == s);
    }
    if cli.json {
        let arr: Vec<Value> = tools.iter().map(|t| tool_json(t)).collect();
        println!("{}", Value::Array(arr));
    } else {
        for t in &tools {
            println!(
                "{:<48} {}",
                t.name,
                t.description
                    .as_deref()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
    }
    Ok(0)
}
