//! The built-in demo MCP server (`mcpvisor serve-demo`, hidden): what
//! `mcpvisor demo` and `mcpvisor bench` run against, so nothing but Rust is needed.
//!
//! Tools: `echo {message}`, `add {a, b}` (structured output with an output
//! schema), `sleep {ms}` (honours cancellation), `fail` (isError), plus
//! `--tools N` generated tools `tool_00000…` for catalog benchmarks, listed in
//! pages of 500.

#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

const PAGE: usize = 500;

#[derive(Clone)]
struct Demo {
    tools: Arc<Vec<Tool>>,
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

impl Demo {
    fn new(extra: usize) -> Self {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echo the message back",
                schema(
                    json!({"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}),
                ),
            ),
            {
                let mut t = Tool::new(
                    "add",
                    "Add two numbers; structured output",
                    schema(
                        json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}),
                    ),
                );
                t.output_schema = Some(schema(
                    json!({"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]}),
                ));
                t
            },
            Tool::new(
                "sleep",
                "Sleep for ms milliseconds (honours cancellation)",
                schema(json!({"type":"object","properties":{"ms":{"type":"integer"}}})),
            ),
            Tool::new(
                "fail",
                "Always fails with isError",
                schema(json!({"type":"object"})),
            ),
        ];
        for i in 0..extra {
            tools.push(Tool::new(
                format!("tool_{i:05}"),
                format!("Generated tool number {i}"),
                schema(json!({"type":"object","properties":{"x":{"type":"string"}}})),
            ));
        }
        Self {
            tools: Arc::new(tools),
        }
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcpvisor-demo",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("A demo server built into mcpvisor.")
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let start = match req.and_then(|r| r.cursor) {
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| McpError::invalid_params(format!("bad cursor {c:?}"), None))?,
            None => 0,
        };
        let end = (start + PAGE).min(self.tools.len());
        let mut page = ListToolsResult::default();
        page.tools = self
            .tools
            .get(start..end)
            .map(<[Tool]>::to_vec)
            .unwrap_or_default();
        page.next_cursor = (end < self.tools.len()).then(|| end.to_string());
        Ok(page)
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = req.arguments.unwrap_or_default();
        let result = match req.name.as_ref() {
            "echo" => {
                let msg = args
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(format!("Echo: {msg}"))])
            }
            "add" => {
                let a = args.get("a").and_then(Value::as_f64).unwrap_or(0.0);
                let b = args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                let mut r = CallToolResult::structured(json!({"sum": a + b}));
                r.content = vec![ContentBlock::text(format!("{a} + {b} = {}", a + b))];
                r
            }
            "sleep" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(1000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = ctx.ct.cancelled() => return Err(McpError::internal_error("cancelled", None)),
                }
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("this tool always fails")]),
            other if other.starts_with("tool_") => {
                CallToolResult::success(vec![ContentBlock::text(format!("{other} ran"))])
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// Serve the demo on stdin/stdout until stdin closes.
pub async fn serve(extra_tools: usize) -> anyhow::Result<()> {
    let running = Demo::new(extra_tools)
        .serve(rmcp::transport::stdio_pipes())
        .await?;
    running.waiting().await?;
    Ok(())
}
