//! `mcpvisor prompts list|get`: the MCP prompts of the configured servers
//! (`Runtime::list_prompts`, `Runtime::get_prompt`).

use anyhow::Context;
use mcpvisor::Scope;
use serde_json::{Map, Value, json};

use crate::cli::{Cli, PromptsCommand};
use crate::config::load_config;
use crate::lifecycle::{finish, start};
use crate::render::{errln, outln};

/// Run `prompts` `what`; exit 1 when a server could not answer.
pub(crate) async fn run(cli: &Cli, what: &PromptsCommand) -> anyhow::Result<u8> {
    let args: Option<Map<String, Value>> = match what {
        PromptsCommand::Get {
            args: Some(text), ..
        } => Some(
            serde_json::from_str(text)
                .with_context(|| format!("--args is not a JSON object: {text}"))?,
        ),
        _ => None,
    };
    let runtime = start(
        load_config(cli, true)?,
        cli.json,
        crate::lifecycle::Wait::All,
    )
    .await?;
    let code = match what {
        PromptsCommand::List => {
            let listed = runtime.list_prompts(&Scope::Global).await;
            let failed = listed.iter().any(|(_, r)| r.is_err());
            if cli.json {
                let out: Vec<Value> = listed
                    .iter()
                    .map(|(server, r)| match r {
                        Ok(prompts) => json!({"server": server, "prompts": prompts}),
                        Err(e) => json!({"server": server, "error": e}),
                    })
                    .collect();
                outln!("{}", Value::Array(out));
            } else if listed.is_empty() {
                outln!("No server offers prompts.");
            } else {
                for (server, r) in &listed {
                    match r {
                        Ok(prompts) => {
                            for p in prompts {
                                let name = p["name"].as_str().unwrap_or("?");
                                let args: Vec<String> = p["arguments"]
                                    .as_array()
                                    .map(|a| {
                                        a.iter()
                                            .map(|x| {
                                                let n = x["name"].as_str().unwrap_or("?");
                                                if x["required"] == true {
                                                    n.to_owned()
                                                } else {
                                                    format!("[{n}]")
                                                }
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default();
                                let desc = p["description"].as_str().unwrap_or("");
                                outln!(
                                    "{:<16} {:<32} {:<24} {}",
                                    server,
                                    name,
                                    args.join(" "),
                                    desc.lines().next().unwrap_or("")
                                );
                            }
                        }
                        Err(e) => errln!("mcpvisor: server {server:?}: {e}"),
                    }
                }
            }
            u8::from(failed)
        }
        PromptsCommand::Get { server, name, .. } => {
            match runtime.get_prompt(&Scope::Global, server, name, args).await {
                Ok(v) if cli.json => {
                    outln!("{v}");
                    0
                }
                Ok(v) => {
                    for m in v["messages"].as_array().into_iter().flatten() {
                        let role = m["role"].as_str().unwrap_or("?");
                        let content = &m["content"];
                        let text = content["text"]
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| content.to_string());
                        outln!("[{role}] {text}");
                    }
                    0
                }
                Err(e) => {
                    errln!("mcpvisor: {e}");
                    1
                }
            }
        }
    };
    let _ = finish(runtime).await;
    Ok(code)
}
