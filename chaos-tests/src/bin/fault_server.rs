//! `fault-server`: an MCP server whose misbehaviour is scripted by flags, for
//! the real-process integration tests of mcpvisor.
//!
//! Serves stdio (the default) or, with `--http PORT`, streamable HTTP on
//! 127.0.0.1 (`--http 0` picks a free port; the real one is printed to stderr
//! as `listening on http://127.0.0.1:PORT/mcp`).
//!
//! Tools always present: `echo {message}`, `hang` (never answers, honours
//! cancellation), `slow {ms}`, `crash` (exit 5 mid-call), `is_error`,
//! `structured_ok` / `structured_bad` (both declare an output schema requiring
//! a numeric `temp`), `audio`, `add_tool` (adds `dyn_N` and sends
//! `notifications/tools/list_changed`) and `garbage` (with `--garbage-on-call`,
//! writes a raw non-JSON line to stdout first).
//!
//! With `--task-tools` (the stateless era's tasks extension, SEP-2663) it
//! declares `io.modelcontextprotocol/tasks` and lists four tools with
//! `execution.taskSupport: "required"`: `task_echo {message, ms, poll_ms}`
//! (a task that completes `ms` after it was created), `task_forever` (a
//! task that never ends), `task_ask` (a task that asks for a name by
//! elicitation, then completes with "Hello, NAME") and `task_plain`
//! (answered at once with a plain result, no task). `tasks/get`,
//! `tasks/update` and `tasks/cancel` are logged as `METHOD ID TASK`. Over stdio only: the
//! tools' `execution` is added to `tools/list` by a wrapper that rmcp's
//! HTTP service does not take.

#![allow(deprecated)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientRequest,
    ContentBlock, CreateTaskResult, DetailedTask, GetTaskParams, GetTaskResult, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig, ServerResult, Task, TaskPayload,
    TaskStatus, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Fault-injecting MCP server for mcpvisor's integration tests.
#[derive(Parser, Debug, Clone)]
#[command(name = "fault-server", about, long_about = None)]
struct Args {
    /// Serve streamable HTTP on 127.0.0.1:PORT instead of stdio (0 = any free port).
    #[arg(long, value_name = "PORT")]
    http: Option<u16>,
    /// Write "fatal: boom at start" to stderr, then exit with CODE before reading stdin.
    #[arg(long, value_name = "CODE")]
    crash_at_start: Option<i32>,
    /// Like --crash-at-start 6, but only when FILE exists (lets a test make the
    /// *next* start fail after a first good one).
    #[arg(long, value_name = "FILE")]
    crash_at_start_if_exists: Option<PathBuf>,
    /// Answer initialize, then on the first tools/list write MSG to stderr and exit(3).
    #[arg(long, value_name = "MSG")]
    stderr_then_exit: Option<String>,
    /// Print N non-JSON banner lines on stdout before serving.
    #[arg(long, value_name = "N", default_value_t = 0)]
    garbage_before_handshake: usize,
    /// The `garbage` tool writes a raw non-JSON line to stdout before answering.
    #[arg(long)]
    garbage_on_call: bool,
    /// exit(4) when the N-th tools/call arrives, before answering it.
    #[arg(long, value_name = "N")]
    crash_after_calls: Option<usize>,
    /// Ignore SIGTERM and stdin EOF: only SIGKILL ends the process.
    #[arg(long)]
    ignore_sigterm: bool,
    /// Spawn `sleep 1000` at start (same process group, never waited for) and
    /// print "grandchild pid N" to stderr.
    #[arg(long)]
    grandchild: bool,
    /// Add N generated tools gen_00000….
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools: usize,
    /// Paginate tools/list with K tools per page (default: one page).
    #[arg(long, value_name = "K")]
    page_size: Option<usize>,
    /// Append one line per received request: `method id [tool arguments]`.
    #[arg(long, value_name = "FILE")]
    log_requests: Option<PathBuf>,
    /// Never answer `initialize`.
    #[arg(long)]
    hang_on_initialize: bool,
    /// Delay every tools/call by MS milliseconds.
    #[arg(long, value_name = "MS")]
    slow_ms: Option<u64>,
    /// List a tool `overlong` that writes a 9 MiB stdout line without a newline.
    #[arg(long)]
    overlong_line: bool,
    /// List a tool `storm` that sends N tools/list_changed notifications at once.
    #[arg(long, value_name = "N")]
    storm: Option<usize>,
    /// List a tool `invalid` that answers with `content` that is not an array
    /// (stdio only: the reply is written raw).
    #[arg(long)]
    invalid_result: bool,
    /// List a tool `unreadable` (stdio only) whose reply is written raw and
    /// cannot be read as JSON-RPC as it stands, by its argument `kind`:
    /// `surrogate` (a lone UTF-16 surrogate escape in its text, as Node
    /// writes when it cuts text mid-emoji), `utf8` (a byte that is not
    /// UTF-8), `both` (`result` and `error`).
    #[arg(long)]
    unreadable_replies: bool,
    /// List a tool `ask_client` that sends the client a request of its
    /// argument `method` (default `x/unknown`) and answers with what came
    /// back: "error CODE: MESSAGE" or "answered: RESULT".
    #[arg(long)]
    ask_client: bool,
    /// Put a terminal escape sequence (an OSC 52 clipboard write, then a
    /// colour) in the `echo` tool's description, the server's version,
    /// every `echo` result and stderr: text a client must not print raw.
    #[arg(long)]
    terminal_escapes: bool,
    /// stdio only: concurrent `echo` calls answer out of order (each waits
    /// 60, 45, 30 or 15 ms by its arrival, so a later one answers first),
    /// each after a raw server→client `ping` whose id is the call's id as a
    /// string (`"3"` for 3), which the client must not take for the reply.
    #[arg(long)]
    reorder_replies: bool,
    /// The protocol era spoken: `session` (the default: `server/discover`
    /// answers -32601, as a server of 2025-11-25 does), `both` (rmcp's
    /// default: `server/discover` lists 2026-07-28 and `initialize` works
    /// too) or `stateless` (`initialize` answers -32022 naming 2026-07-28).
    #[arg(long, value_name = "ERA", default_value = "session")]
    era: String,
    /// Change era at every start: the session era when the file
    /// `<--log-requests>.era` is absent (and create it), the stateless era
    /// when it is there (and remove it). A server upgraded between two
    /// restarts.
    #[arg(long)]
    era_flip: bool,
    /// List a tool `input_loop` that answers every round with
    /// `input_required` (a request state and no input requests), never
    /// with a result: a client must bound its rounds (stateless era).
    #[arg(long)]
    input_loop: bool,
    /// Answer `initialize` with this protocol version, whatever the client
    /// asked for.
    #[arg(long, value_name = "VERSION")]
    protocol_version: Option<String>,
    /// List a tool `huge` that returns a text block of BYTES bytes.
    #[arg(long, value_name = "BYTES")]
    huge_result: Option<usize>,
    /// List a tool whose name is 80 characters long.
    #[arg(long)]
    long_names: bool,
    /// List a tool whose name has characters outside [A-Za-z0-9_-].
    #[arg(long)]
    bad_char_names: bool,
    /// List `echo` twice (a catalog with a duplicate name).
    #[arg(long)]
    duplicate_names: bool,
    /// List an extra tool with this exact name (e.g. to collide with another server).
    #[arg(long, value_name = "NAME")]
    extra_tool: Vec<String>,
    /// HTTP only: `401` (every request), `500` (every tools/call),
    /// `session-loss:N` (404 for the session after N tools/call), `stall`
    /// (tools/call replies open an SSE stream that never sends an event).
    #[arg(long, value_name = "FAULT")]
    http_fault: Option<String>,
    /// List the content zoo: `unknown_block`, `bad_base64_image`,
    /// `wrong_mime_image`, `mixed_images`, `blob_resource` (CALL-6/7 tests).
    #[arg(long)]
    content_zoo: bool,
    /// Print `env NAME=value` of this environment variable to stderr at start
    /// (to test that secret values are redacted from what the runtime shows).
    #[arg(long, value_name = "NAME")]
    print_env: Option<String>,
    /// Server instructions to send in `initialize` (default: a short sentence).
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,
    /// `echo` with the message "freeze" blocks the server's only thread for
    /// an hour: it stops reading stdin (a write to it blocks once the pipe
    /// is full) and answers nothing; signals still end it.
    #[arg(long)]
    freeze_on_echo: bool,
    /// `echo` answers with its text plus a structuredContent nested N arrays
    /// deep (valid JSON past serde_json's 128-level parse limit).
    #[arg(long, value_name = "N")]
    deep_echo: Option<usize>,
    /// stdio only: every `echo` reply is written raw, in three pieces MS
    /// milliseconds apart, after a server→client `ping` request and a
    /// `tools/list_changed` notification, so the client has events of its
    /// own (a ping to answer, a re-sync to send) while a reply is half read.
    #[arg(long, value_name = "MS")]
    split_replies: Option<u64>,
    /// Put the value of this environment variable into every `echo` result,
    /// the `is_error` result, stderr, the server's version and
    /// instructions, the `echo` tool's title, description and a schema
    /// default, and every progress message (a server that leaks its
    /// secrets).
    #[arg(long, value_name = "NAME")]
    leak_env: Option<String>,
    /// Append `stdin-eof <unix ms>` when stdin closes and `sigterm <unix ms>`
    /// when SIGTERM arrives (then exit 0, unless --ignore-sigterm): the
    /// order and gaps of the runtime's close sequence (CONN-8).
    #[arg(long, value_name = "FILE")]
    log_lifecycle: Option<PathBuf>,
    /// Serve resources only (no tools capability): `mem://note/...` URIs,
    /// each read answered with a text naming its URI.
    #[arg(long)]
    resources_only: bool,
    /// Start `sleep 1000` in a session of its own (`setsid`, its parent
    /// shell exits at once), out of reach of any group signal, and print
    /// "daemon pid N" to stderr.
    #[arg(long)]
    daemonize: bool,
    /// Start `sleep 1000` in a session of its own that keeps this server's
    /// stdout and stderr open (a background process that inherited them),
    /// and print "daemon pid N" to stderr: once the server exits, its
    /// stdout never reaches its end while the daemon lives.
    #[arg(long)]
    daemon_holds_stdout: bool,
    /// `echo` writes "echo: MESSAGE" to stderr before it answers.
    #[arg(long)]
    stderr_on_echo: bool,
    /// With `--daemonize`: the daemon clears its environment (`env -i`),
    /// so no tag finds it.
    #[arg(long)]
    daemon_env_clear: bool,
    /// Every tools/call that carries a progress token works in N steps of
    /// 100 ms, each announced by `notifications/progress` ("step i of N",
    /// total N), then answers.
    #[arg(long, value_name = "N")]
    progress: Option<u32>,
    /// With `--progress`: the answer follows the last notification at once
    /// (no step after it), as a server's last progress and result often do.
    #[arg(long)]
    progress_burst: bool,
    /// Serve the tasks extension: `task_echo`, `task_forever` and
    /// `task_plain` (taskSupport "required"), `tasks/get`, `tasks/cancel`.
    #[arg(long)]
    task_tools: bool,
    /// Serve `subscriptions/listen` for tool list changes (stateless era),
    /// and list tools `before_break` and `break_listen`, which replaces
    /// `before_break` with `after_break` and then ends every open listen
    /// stream (its final result) without a notification: only a client
    /// that opens the stream again and fetches the list sees the change.
    #[arg(long)]
    listen_break: bool,
    /// Ignored: lets a test runner find its processes by command line.
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
}

/// The opaque cursor of `--resources-only`'s first resource page: characters
/// a client might be tempted to encode or trim.
const RESOURCE_CURSOR: &str = " opaque/+=cursor?&é ";

/// A 1×1 PNG, canonical base64.
const TINY_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// The stderr tail a client keeps (mcpvisor's CONN-7 ring).
const STDERR_TAIL: usize = 8 * 1024;

/// What `--terminal-escapes` writes: an OSC 52 clipboard write and a
/// colour change.
const TERMINAL_ESCAPES: &str = "\x1b]52;c;ZXZpbA==\x07\x1b[31m";

/// The 80-character tool name of `--long-names` (shared with the runner).
const LONG_NAME: &str = mcpvisor_chaos::chaos::LONG_TOOL_NAME;
/// The tool name of `--bad-char-names`.
const BAD_NAME: &str = mcpvisor_chaos::chaos::BAD_TOOL_NAME;

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

fn temp_schema() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {"temp": {"type": "number"}},
        "required": ["temp"]
    }))
}

fn fixed_tools() -> Vec<Tool> {
    let empty = || schema(json!({"type": "object"}));
    let mut structured_ok = Tool::new(
        "structured_ok",
        "Structured result that matches the output schema",
        empty(),
    );
    structured_ok.output_schema = Some(temp_schema());
    let mut structured_bad = Tool::new(
        "structured_bad",
        "Structured result that violates the output schema (temp is a string)",
        empty(),
    );
    structured_bad.output_schema = Some(temp_schema());
    vec![
        Tool::new(
            "echo",
            "Echo the message back",
            schema(json!({
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"]
            })),
        ),
        Tool::new("hang", "Never answers (honours cancellation)", empty()),
        Tool::new(
            "slow",
            "Answers after ms milliseconds (honours cancellation)",
            schema(json!({"type": "object", "properties": {"ms": {"type": "integer"}}})),
        ),
        Tool::new("crash", "Exits the process (status 5) mid-call", empty()),
        Tool::new("is_error", "Returns an isError result", empty()),
        structured_ok,
        structured_bad,
        Tool::new("audio", "Returns an audio content block", empty()),
        Tool::new(
            "add_tool",
            "Adds a dynamic tool dyn_N and sends tools/list_changed",
            empty(),
        ),
        Tool::new(
            "garbage",
            "Writes a raw non-JSON line to stdout (with --garbage-on-call)",
            empty(),
        ),
    ]
}

/// The tools of `--task-tools`, all of taskSupport "required".
const TASK_TOOLS: [&str; 4] = ["task_echo", "task_forever", "task_ask", "task_plain"];

/// One task of `--task-tools`.
struct FaultTask {
    /// When it was created.
    created: std::time::Instant,
    /// How long it works before it completes; `None`: forever.
    runs_for: Option<Duration>,
    /// What it completes with.
    text: String,
    /// The poll interval it suggests.
    poll_ms: u64,
    /// `tasks/cancel` arrived.
    cancelled: bool,
    /// `task_ask`: it asks for a name; the name, once `tasks/update` gave it.
    asks: Option<Option<String>>,
    /// Polls after the answer that still show the question: the answer
    /// takes effect late, as the extension allows, so a client must not
    /// answer the same key twice.
    stale_polls: u8,
}

/// The creation time every task reports (the client reads none of it).
const TASK_TIME: &str = "2026-07-28T00:00:00Z";

/// The handler. Cloned per HTTP session; the state is shared.
#[derive(Clone)]
struct FaultServer {
    args: Arc<Args>,
    base_tools: Arc<Vec<Tool>>,
    dynamic: Arc<Mutex<Vec<Tool>>>,
    calls: Arc<AtomicUsize>,
    listed: Arc<AtomicUsize>,
    /// `--task-tools`: the tasks by id.
    tasks: Arc<Mutex<std::collections::HashMap<String, FaultTask>>>,
    /// `--listen-break`: ends the open listen streams.
    end_listens: Arc<tokio::sync::Notify>,
}

impl FaultServer {
    fn new(args: Args) -> Self {
        let mut tools = fixed_tools();
        let empty = || schema(json!({"type": "object"}));
        let mut fault_tool = |on: bool, name: &str, what: &str| {
            if on {
                tools.push(Tool::new(name.to_owned(), what.to_owned(), empty()));
            }
        };
        fault_tool(
            args.overlong_line,
            "overlong",
            "Writes a 9 MiB line without a newline",
        );
        fault_tool(
            args.storm.is_some(),
            "storm",
            "Sends a burst of tools/list_changed",
        );
        fault_tool(
            args.listen_break,
            "break_listen",
            "Adds a tool, then ends every listen stream without a notification",
        );
        fault_tool(
            args.invalid_result,
            "invalid",
            "Answers with an invalid CallToolResult",
        );
        fault_tool(
            args.unreadable_replies,
            "unreadable",
            "Answers with a reply that cannot be read as it stands (kind: surrogate, utf8, both)",
        );
        fault_tool(
            args.ask_client,
            "ask_client",
            "Sends the client a request of the given method and says what came back",
        );
        fault_tool(
            args.huge_result.is_some(),
            "huge",
            "Returns a very large text block",
        );
        fault_tool(
            args.long_names,
            LONG_NAME,
            "A tool with an 80-character name",
        );
        fault_tool(
            args.bad_char_names,
            BAD_NAME,
            "A tool with a name that needs replacing",
        );
        fault_tool(args.duplicate_names, "echo", "A second tool named echo");
        fault_tool(
            args.input_loop,
            "input_loop",
            "Asks for more input on every round, forever",
        );
        fault_tool(
            args.task_tools,
            "task_echo",
            "A task that completes after ms milliseconds with the message echoed",
        );
        fault_tool(args.task_tools, "task_forever", "A task that never ends");
        fault_tool(
            args.task_tools,
            "task_ask",
            "A task that asks for a name, then greets it",
        );
        fault_tool(
            args.task_tools,
            "task_plain",
            "Requires a task, yet answers at once with a plain result",
        );
        for (name, what) in [
            (
                "unknown_block",
                "A content block of a type the schema does not know",
            ),
            ("bad_base64_image", "An image whose base64 is not canonical"),
            ("wrong_mime_image", "An image with MIME type image/tiff"),
            ("mixed_images", "A valid image, text, then an invalid image"),
            ("blob_resource", "An embedded blob resource"),
        ] {
            fault_tool(args.content_zoo, name, what);
        }
        for name in &args.extra_tool {
            fault_tool(true, name, "An extra tool");
        }
        if args.terminal_escapes
            && let Some(echo) = tools.iter_mut().find(|t| t.name == "echo")
        {
            echo.description = Some(format!("Echo{TERMINAL_ESCAPES}").into());
        }
        if let Some(name) = &args.leak_env {
            // A server that puts its secret in its metadata too: the echo
            // tool's title, description and a schema default (TRUST-2).
            let value = std::env::var(name).unwrap_or_default();
            if let Some(echo) = tools.iter_mut().find(|t| t.name == "echo") {
                echo.title = Some(format!("Echo (key {value})"));
                echo.description = Some(format!("Echo the message back; key {value}").into());
                echo.input_schema = schema(json!({
                    "type": "object",
                    "properties": {"message": {"type": "string", "default": value}},
                    "required": ["message"]
                }));
            }
        }
        for i in 0..args.tools {
            tools.push(Tool::new(
                format!("gen_{i:05}"),
                format!("Generated tool number {i}"),
                schema(json!({"type": "object", "properties": {"x": {"type": "string"}}})),
            ));
        }
        let before_break = args.listen_break.then(|| {
            Tool::new(
                "before_break",
                "Replaced by after_break when break_listen is called",
                schema(json!({"type": "object"})),
            )
        });
        Self {
            args: Arc::new(args),
            base_tools: Arc::new(tools),
            dynamic: Arc::new(Mutex::new(before_break.into_iter().collect())),
            calls: Arc::new(AtomicUsize::new(0)),
            listed: Arc::new(AtomicUsize::new(0)),
            tasks: Arc::default(),
            end_listens: Arc::default(),
        }
    }

    fn all_tools(&self) -> Vec<Tool> {
        let mut all = self.base_tools.as_ref().clone();
        let dynamic = self.dynamic.lock().unwrap_or_else(|p| p.into_inner());
        all.extend(dynamic.iter().cloned());
        all
    }

    /// `--log-requests`: one line `method id [tool arguments]` per request.
    fn log_request(
        &self,
        method: &str,
        ctx: &RequestContext<RoleServer>,
        call: Option<&CallToolRequestParams>,
    ) {
        let Some(path) = &self.args.log_requests else {
            return;
        };
        let mut line = format!("{method} {}", ctx.id);
        if let Some(call) = call {
            let args = call
                .arguments
                .as_ref()
                .map(|a| Value::Object(a.clone()).to_string())
                .unwrap_or_else(|| "{}".into());
            line.push_str(&format!(" {} {args}", call.name));
            // A stateless-era round after `input_required` carries the
            // server's state: the same call's next round, not a re-send.
            if let Some(state) = &call.request_state {
                line.push_str(&format!(" state={state}"));
            }
            // The request declared the tasks extension: it may become a task.
            if ctx
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
            {
                line.push_str(" tasks");
            }
            // The W3C trace the call continues (SEP-414), as it arrived.
            if let Some(parent) = ctx.meta.get_traceparent() {
                line.push_str(&format!(" traceparent={parent}"));
            }
            if let Some(state) = ctx.meta.get_tracestate() {
                line.push_str(&format!(" tracestate={state}"));
            }
        }
        // One write per line on an O_APPEND file: lines of concurrent requests never interleave.
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

impl FaultServer {
    /// `--leak-env NAME`: " (NAME=value)" to append to what the server says.
    fn leaked(&self) -> String {
        match &self.args.leak_env {
            Some(name) => format!(" ({name}={})", std::env::var(name).unwrap_or_default()),
            None => String::new(),
        }
    }

    /// `--split-replies`: a ping request and a list_changed notification,
    /// then the reply to `ctx` in three pieces `pause` apart. The stdout
    /// lock is held throughout, so rmcp's own writer cannot cut in between
    /// the pieces; the client reads each piece as it comes.
    fn write_split(&self, ctx: &RequestContext<RoleServer>, text_out: &str, pause: Duration) {
        let n = self.calls.load(Ordering::SeqCst);
        let reply = json!({
            "jsonrpc": "2.0",
            "id": ctx.id,
            "result": {"content": [{"type": "text", "text": text_out}]}
        })
        .to_string();
        let mut bytes = format!(
            "{}\n{}\n",
            json!({"jsonrpc": "2.0", "id": format!("split-ping-{n}"), "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
        )
        .into_bytes();
        let head = bytes.len();
        bytes.extend(reply.into_bytes());
        bytes.push(b'\n');
        let third = (bytes.len() - head) / 3;
        let cuts = [head + third, head + 2 * third];
        let mut out = std::io::stdout().lock();
        let mut from = 0;
        for cut in cuts {
            let _ = out.write_all(&bytes[from..cut]);
            let _ = out.flush();
            std::thread::sleep(pause);
            from = cut;
        }
        let _ = out.write_all(&bytes[from..]);
        let _ = out.flush();
    }
}

fn die(code: i32, stderr_text: Option<&str>) -> ! {
    if let Some(text) = stderr_text {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{text}");
        let _ = err.flush();
    }
    std::process::exit(code)
}

fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::text(t.into())
}

impl FaultServer {
    /// `--protocol-version`, as rmcp's type.
    fn pinned_version(&self) -> Option<rmcp::model::ProtocolVersion> {
        let v = self.args.protocol_version.as_ref()?;
        serde_json::from_value(json!(v)).ok()
    }
}

impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.args.resources_only {
            ServerCapabilities::builder().enable_resources().build()
        } else if self.args.task_tools {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "fault-server",
                format!(
                    "{}{}{}",
                    env!("CARGO_PKG_VERSION"),
                    self.leaked(),
                    if self.args.terminal_escapes {
                        TERMINAL_ESCAPES
                    } else {
                        ""
                    }
                ),
            ))
            .with_instructions(format!(
                "{}{}",
                self.args
                    .instructions
                    .clone()
                    .unwrap_or_else(|| "Fault-injection test server for mcpvisor.".into()),
                self.leaked()
            ))
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        use rmcp::model::ProtocolVersion as V;
        match (self.pinned_version(), self.args.era.as_str()) {
            (Some(v), _) => std::borrow::Cow::Owned(vec![v]),
            (None, "stateless") => std::borrow::Cow::Owned(vec![V::V_2026_07_28]),
            // The session era lists every version so that rmcp hands
            // `server/discover` to `discover` below, which refuses it as a
            // server of 2025-11-25 would (-32601).
            (None, _) => std::borrow::Cow::Borrowed(V::KNOWN_VERSIONS),
        }
    }

    async fn discover(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        self.log_request("server/discover", &ctx, None);
        if self.args.era == "session" {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "Method not found: server/discover",
                None,
            ));
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.log_request("initialize", &ctx, None);
        if self.args.hang_on_initialize {
            std::future::pending::<()>().await;
        }
        if self.args.era == "stateless" {
            return Err(McpError::unsupported_protocol_version(
                request.protocol_version.clone(),
                &self.supported_protocol_versions(),
            ));
        }
        ctx.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if let Some(v) = self.pinned_version() {
            result.protocol_version = v;
        }
        Ok(result)
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        self.args.listen_break.then(|| {
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build()
        })
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        self.log_request("subscriptions/listen", context.request_context(), None);
        tokio::select! {
            () = context.cancelled() => {}
            () = self.end_listens.notified() => {}
        }
        Ok(())
    }

    async fn ping(&self, ctx: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.log_request("ping", &ctx, None);
        Ok(())
    }

    async fn on_initialized(&self, _ctx: NotificationContext<RoleServer>) {}

    async fn list_resources(
        &self,
        req: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.log_request("resources/list", &ctx, None);
        // Page 2 names the cursor it was given, so a test can see that the
        // client passed it through untouched (RES-4).
        Ok(match req.and_then(|r| r.cursor) {
            Some(cursor) => ListResourcesResult {
                resources: vec![Resource::new(
                    format!("mem://note/cursor/{cursor}"),
                    "page 2",
                )],
                ..Default::default()
            },
            None => ListResourcesResult {
                resources: vec![Resource::new("mem://note/readme", "readme")],
                next_cursor: Some(RESOURCE_CURSOR.into()),
                ..Default::default()
            },
        })
    }

    async fn read_resource(
        &self,
        req: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        // Logged like a call, URI as the argument: no_double_send reads it.
        if let Some(path) = &self.args.log_requests
            && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
        {
            let _ = f.write_all(
                format!("resources/read {} {{\"uri\":\"{}\"}}\n", ctx.id, req.uri).as_bytes(),
            );
        }
        if !req.uri.starts_with("mem://note/") {
            return Err(McpError::resource_not_found(
                format!("no resource {}", req.uri),
                None,
            ));
        }
        let text = format!("note at {}", req.uri);
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, req.uri)]).into())
    }

    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.log_request("tools/list", &ctx, None);
        if self.listed.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(msg) = &self.args.stderr_then_exit
        {
            die(3, Some(msg));
        }
        let all = self.all_tools();
        let start = match req.and_then(|r| r.cursor) {
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| McpError::invalid_params(format!("bad cursor {c:?}"), None))?,
            None => 0,
        };
        let page = self.args.page_size.unwrap_or(usize::MAX).max(1);
        let end = start.saturating_add(page).min(all.len());
        let result = ListToolsResult {
            tools: all
                .get(start..end)
                .map(<[Tool]>::to_vec)
                .unwrap_or_default(),
            next_cursor: (end < all.len()).then(|| end.to_string()),
            ..Default::default()
        };
        Ok(result)
    }

    async fn get_task(
        &self,
        req: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.log_task("tasks/get", &ctx, &req.task_id);
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let Some(task) = tasks.get_mut(&req.task_id) else {
            return Err(McpError::invalid_params(
                "Failed to retrieve task: Task not found",
                None,
            ));
        };
        let stale = task.stale_polls > 0;
        task.stale_polls = task.stale_polls.saturating_sub(1);
        let done = task.runs_for.is_some_and(|d| task.created.elapsed() >= d);
        let payload = if task.cancelled {
            TaskPayload::Cancelled
        } else if let Some(asks) = &task.asks {
            match asks {
                Some(name) if !stale => {
                    let greeting = CallToolResult::success(vec![text(format!("Hello, {name}"))]);
                    TaskPayload::Completed {
                        result: serde_json::to_value(greeting)
                            .ok()
                            .and_then(|v| v.as_object().cloned())
                            .unwrap_or_default(),
                    }
                }
                _ => {
                    let ask = json!({
                        "method": "elicitation/create",
                        "params": {
                            "mode": "form",
                            "message": "Your name?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"name": {"type": "string", "default": "otter"}},
                                "required": ["name"]
                            }
                        }
                    });
                    let ask = serde_json::from_value(ask)
                        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                    TaskPayload::InputRequired {
                        input_requests: [("name".to_owned(), ask)].into_iter().collect(),
                    }
                }
            }
        } else if done {
            let result = serde_json::to_value(CallToolResult::success(vec![text(&task.text)]))
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default();
            TaskPayload::Completed { result }
        } else {
            TaskPayload::Working
        };
        let base = Task::new(
            req.task_id.clone(),
            TaskStatus::Working,
            TASK_TIME,
            TASK_TIME,
        )
        .with_poll_interval_ms(task.poll_ms);
        Ok(GetTaskResult::new(DetailedTask::new(base, payload)))
    }

    async fn update_task(
        &self,
        req: rmcp::model::UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_task("tasks/update", &ctx, &req.task_id);
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let Some(task) = tasks.get_mut(&req.task_id) else {
            return Err(McpError::invalid_params(
                "Failed to update task: Task not found",
                None,
            ));
        };
        let name = req
            .input_responses
            .get("name")
            .and_then(|r| r.get("content"))
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str);
        if let (Some(asks), Some(name)) = (task.asks.as_mut(), name) {
            *asks = Some(name.to_owned());
            task.stale_polls = 2;
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        req: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_task("tasks/cancel", &ctx, &req.task_id);
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        match tasks.get_mut(&req.task_id) {
            Some(task) => {
                task.cancelled = true;
                Ok(())
            }
            None => Err(McpError::invalid_params(
                "Failed to cancel task: Task not found",
                None,
            )),
        }
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.log_request("tools/call", &ctx, Some(&req));
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.args.crash_after_calls == Some(n) {
            die(
                4,
                Some(&format!("fault-server: crashing at tools/call #{n}")),
            );
        }
        if let Some(ms) = self.args.slow_ms {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = ctx.ct.cancelled() => return Err(McpError::internal_error("cancelled", None)),
            }
        }
        if let (Some(n), Some(token)) = (self.args.progress, ctx.meta.get_progress_token()) {
            for i in 1..=n {
                let note = rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(i))
                    .with_total(f64::from(n))
                    .with_message(format!("step {i} of {n}{}", self.leaked()));
                let _ = ctx.peer.notify_progress(note).await;
                // With --progress-burst the last one is followed by the
                // result at once.
                if i < n || !self.args.progress_burst {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        if self.args.task_tools && TASK_TOOLS.contains(&req.name.as_ref()) {
            return self.start_task(&req, &ctx);
        }
        if req.name == "input_loop" {
            let round = req.request_state.as_deref().unwrap_or("round-0");
            let next = round
                .strip_prefix("round-")
                .and_then(|n| n.parse::<u64>().ok())
                .map_or(1, |n| n + 1);
            return Ok(CallToolResponse::InputRequired(
                rmcp::model::InputRequiredResult::from_request_state(format!("round-{next}")),
            ));
        }
        let args = req.arguments.unwrap_or_default();
        let result = match req.name.as_ref() {
            "overlong" => {
                {
                    let mut out = std::io::stdout().lock();
                    let chunk = vec![b'x'; 1024 * 1024];
                    for _ in 0..9 {
                        let _ = out.write_all(&chunk);
                    }
                    let _ = out.flush();
                }
                std::future::pending::<()>().await;
                unreachable!()
            }
            "break_listen" => {
                {
                    let mut dynamic = self.dynamic.lock().unwrap_or_else(|p| p.into_inner());
                    dynamic.retain(|t| t.name != "before_break");
                    dynamic.push(Tool::new(
                        "after_break",
                        "Listed in place of before_break once the listen streams ended",
                        schema(json!({"type": "object"})),
                    ));
                }
                self.end_listens.notify_waiters();
                CallToolResult::success(vec![text("listen streams ended")])
            }
            "storm" => {
                for _ in 0..self.args.storm.unwrap_or(0) {
                    let _ = ctx.peer.notify_tool_list_changed().await;
                }
                CallToolResult::success(vec![text("storm sent")])
            }
            "unknown_block" => {
                let raw = json!({
                    "jsonrpc": "2.0",
                    "id": ctx.id,
                    "result": {"content": [
                        {"type": "text", "text": "before"},
                        {"type": "hologram", "data": "AAAA"},
                        42,
                        {"type": "text", "text": "after"}
                    ]}
                });
                {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{raw}");
                    let _ = out.flush();
                }
                ctx.ct.cancelled().await;
                return Err(McpError::internal_error("cancelled", None));
            }
            "bad_base64_image" => {
                CallToolResult::success(vec![ContentBlock::image("AB==", "image/png")])
            }
            "wrong_mime_image" => {
                CallToolResult::success(vec![ContentBlock::image(TINY_PNG, "image/tiff")])
            }
            "mixed_images" => CallToolResult::success(vec![
                ContentBlock::image(TINY_PNG, "image/png"),
                text("between"),
                ContentBlock::image("not base64!", "image/png"),
            ]),
            "blob_resource" => CallToolResult::success(vec![ContentBlock::resource(
                rmcp::model::ResourceContents::BlobResourceContents {
                    uri: "mem://blob.bin".into(),
                    mime_type: Some("application/octet-stream".into()),
                    blob: "AAECAwQFBgc=".into(),
                    meta: None,
                },
            )]),
            "invalid" => {
                let raw = json!({
                    "jsonrpc": "2.0",
                    "id": ctx.id,
                    "result": {"content": "this is not an array"}
                });
                {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{raw}");
                    let _ = out.flush();
                }
                // The raw reply answered the request; never send a second one.
                ctx.ct.cancelled().await;
                return Err(McpError::internal_error("cancelled", None));
            }
            "unreadable" => {
                let kind = args.get("kind").and_then(Value::as_str).unwrap_or_default();
                let id = serde_json::to_string(&ctx.id).unwrap_or_default();
                let content = r#"{"content":[{"type":"text","text":"cut "#;
                let raw: Vec<u8> = match kind {
                    "surrogate" => format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{content}\ud83d"}}]}}}}"#
                    )
                    .into_bytes(),
                    "utf8" => {
                        let mut b = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{content}"#)
                            .into_bytes();
                        b.extend_from_slice(b"\xff\xfe\"}]}}");
                        b
                    }
                    _ => format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{content}both"}}]}},"error":{{"code":-32000,"message":"and an error"}}}}"#
                    )
                    .into_bytes(),
                };
                {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(&raw);
                    let _ = out.write_all(b"\n");
                    let _ = out.flush();
                }
                // The raw reply answered the request; never send a second one.
                ctx.ct.cancelled().await;
                return Err(McpError::internal_error("cancelled", None));
            }
            "ask_client" => {
                let method = args
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or("x/unknown");
                let request = rmcp::model::ServerRequest::CustomRequest(
                    rmcp::model::CustomRequest::new(method, Some(json!({}))),
                );
                let said = match ctx.peer.send_request(request).await {
                    Ok(r) => format!(
                        "answered: {}",
                        serde_json::to_string(&r).unwrap_or_default()
                    ),
                    Err(rmcp::service::ServiceError::McpError(e)) => {
                        format!("error {}: {}", e.code.0, e.message)
                    }
                    Err(e) => format!("failed: {e}"),
                };
                CallToolResult::success(vec![text(said)])
            }
            "huge" => {
                let n = self.args.huge_result.unwrap_or(0);
                CallToolResult::success(vec![text("h".repeat(n))])
            }
            "echo" => {
                let msg = args
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if self.args.stderr_on_echo {
                    eprintln!("echo: {msg}");
                }
                if self.args.freeze_on_echo && msg == "freeze" {
                    std::thread::sleep(Duration::from_secs(3600));
                }
                if self.args.reorder_replies {
                    let seq = self.calls.load(Ordering::SeqCst) as u64;
                    let id = match &ctx.id {
                        rmcp::model::NumberOrString::Number(n) => n.to_string(),
                        rmcp::model::NumberOrString::String(s) => s.to_string(),
                    };
                    let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
                    {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{ping}");
                        let _ = out.flush();
                    }
                    let wait = 60 - (seq % 4) * 15;
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
                let escapes = if self.args.terminal_escapes {
                    TERMINAL_ESCAPES
                } else {
                    ""
                };
                let echoed = format!("Echo: {msg}{}{escapes}", self.leaked());
                if let Some(ms) = self.args.split_replies {
                    self.write_split(&ctx, &echoed, Duration::from_millis(ms));
                    // The raw reply answered the request; never send a second one.
                    ctx.ct.cancelled().await;
                    return Err(McpError::internal_error("cancelled", None));
                }
                let mut r = CallToolResult::success(vec![text(echoed)]);
                if let Some(depth) = self.args.deep_echo {
                    let mut deep = json!([]);
                    for _ in 0..depth {
                        deep = json!([deep]);
                    }
                    r.structured_content = Some(json!({ "deep": deep }));
                }
                r
            }
            "hang" => {
                ctx.ct.cancelled().await;
                // `notifications/cancelled` arrived: the log says so (CALL-2).
                if let Some(path) = &self.args.log_requests
                    && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
                {
                    let _ = f.write_all(format!("cancelled {}\n", ctx.id).as_bytes());
                }
                return Err(McpError::internal_error("cancelled", None));
            }
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(1000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = ctx.ct.cancelled() => return Err(McpError::internal_error("cancelled", None)),
                }
                CallToolResult::success(vec![text(format!("slept {ms} ms"))])
            }
            "crash" => die(5, Some("fault-server: crash tool called, exiting 5")),
            "is_error" => CallToolResult::error(vec![text(format!(
                "tool failed on purpose{}",
                self.leaked()
            ))]),
            "structured_ok" => {
                let mut r = CallToolResult::structured(json!({"temp": 21.5}));
                r.content = vec![text("temperature is 21.5")];
                r
            }
            "structured_bad" => {
                let mut r = CallToolResult::structured(json!({"temp": "warm"}));
                r.content = vec![text("temperature is warm")];
                r
            }
            // 16 bytes of silence as a WAV-ish payload: the content does not matter.
            "audio" => CallToolResult::success(vec![ContentBlock::audio(
                "UklGRgAAAABXQVZFZm10IA==",
                "audio/wav",
            )]),
            "add_tool" => {
                let name = {
                    let mut dynamic = self.dynamic.lock().unwrap_or_else(|p| p.into_inner());
                    let name = format!("dyn_{}", dynamic.len());
                    dynamic.push(Tool::new(
                        name.clone(),
                        "A tool added at run time",
                        schema(json!({"type": "object"})),
                    ));
                    name
                };
                ctx.peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                CallToolResult::success(vec![text(format!("added {name}"))])
            }
            "garbage" => {
                if self.args.garbage_on_call {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(b"this is {not json, from the garbage tool\n");
                    let _ = out.flush();
                }
                CallToolResult::success(vec![text("sent garbage")])
            }
            other if self.all_tools().iter().any(|t| t.name == other) => {
                CallToolResult::success(vec![text(format!("{other} ran"))])
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

impl FaultServer {
    /// `--task-tools`: a call of one of [`TASK_TOOLS`]. A request that did
    /// not declare the tasks extension is refused with -32003, as the
    /// extension says.
    fn start_task(
        &self,
        req: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !ctx
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Err(McpError::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ));
        }
        let args = req.arguments.clone().unwrap_or_default();
        if req.name == "task_plain" {
            return Ok(CallToolResult::success(vec![text("plain, no task")]).into());
        }
        let poll_ms = args.get("poll_ms").and_then(Value::as_u64).unwrap_or(100);
        let message = args
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let task = FaultTask {
            created: std::time::Instant::now(),
            runs_for: (req.name == "task_echo").then(|| {
                Duration::from_millis(args.get("ms").and_then(Value::as_u64).unwrap_or(300))
            }),
            text: format!("Echo: {message}"),
            poll_ms,
            cancelled: false,
            asks: (req.name == "task_ask").then_some(None),
            stale_polls: 0,
        };
        let id = format!("task-{}-{}", std::process::id(), ctx.id);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), task);
        Ok(CreateTaskResult::new(
            Task::new(id, TaskStatus::Working, TASK_TIME, TASK_TIME).with_poll_interval_ms(poll_ms),
        )
        .into())
    }

    /// One line `METHOD ID TASK` in the request log.
    fn log_task(&self, method: &str, ctx: &RequestContext<RoleServer>, task_id: &str) {
        if let Some(path) = &self.args.log_requests
            && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
        {
            let _ = f.write_all(format!("{method} {} {task_id}\n", ctx.id).as_bytes());
        }
    }
}

/// What the fault server serves: its handler, with the `execution` of the
/// `--task-tools` tools added to `tools/list` (rmcp's `Tool` has no field
/// for it, so the list goes out as raw JSON).
#[derive(Clone)]
struct Served(FaultServer);

impl rmcp::Service<RoleServer> for Served {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let listing = matches!(request, ClientRequest::ListToolsRequest(_));
        let result =
            <FaultServer as rmcp::Service<RoleServer>>::handle_request(&self.0, request, context)
                .await?;
        if !(listing && self.0.args.task_tools) {
            return Ok(result);
        }
        let mut value = serde_json::to_value(&result)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if let Some(tools) = value.get_mut("tools").and_then(Value::as_array_mut) {
            for tool in tools {
                let named = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                if TASK_TOOLS.contains(&named)
                    && let Some(obj) = tool.as_object_mut()
                {
                    obj.insert("execution".into(), json!({"taskSupport": "required"}));
                }
            }
        }
        Ok(ServerResult::CustomResult(rmcp::model::CustomResult(value)))
    }

    async fn handle_notification(
        &self,
        notification: rmcp::model::ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        <FaultServer as rmcp::Service<RoleServer>>::handle_notification(
            &self.0,
            notification,
            context,
        )
        .await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.0)
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.0)
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// `--log-lifecycle`: append `what <unix ms>`.
fn log_lifecycle(path: Option<&Path>, what: &str) {
    if let Some(path) = path
        && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = f.write_all(format!("{what} {}\n", unix_ms()).as_bytes());
    }
}

fn ignore_sigterm() {
    // SAFETY: installing SIG_IGN for SIGTERM has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

fn daemonize(env_clear: bool) {
    // With `env_clear` the daemon carries no tag at all (`env -i`): only a
    // subreaper's walk below the runner can still find it.
    let env = if env_clear { "env -i " } else { "" };
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{env}setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!"
        ))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let pid = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(e) => {
            eprintln!("the daemon could not be started: {e}");
            return;
        }
    };
    // `sh` returns once the background job is forked, which may be before
    // that job has called setsid(2): announce the pid only once the daemon
    // leads a process group of its own, so whoever reads the line sees it
    // out of the server's group (up to 5 s; a slow machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline && !leads_own_group(&pid) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    eprintln!("daemon pid {pid}");
}

fn daemon_holding_stdout() {
    // setsid(1) execs at once here: the child is no group leader.
    match std::process::Command::new("setsid")
        .args(["sleep", "1000"])
        .stdin(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => {
            let pid = child.id().to_string();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::time::Instant::now() < deadline && !leads_own_group(&pid) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            eprintln!("daemon pid {pid}");
        }
        Err(e) => eprintln!("the daemon could not be started: {e}"),
    }
}

/// Whether `/proc/<pid>/stat` says the process leads its own group.
fn leads_own_group(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    rest.split_whitespace().nth(2) == Some(pid)
}

fn spawn_grandchild() {
    match std::process::Command::new("sleep")
        .arg("1000")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => eprintln!("grandchild pid {}", child.id()),
        Err(e) => eprintln!("grandchild could not be spawned: {e}"),
    }
}

async fn serve_stdio(
    server: FaultServer,
    keep_running: bool,
    lifecycle: Option<PathBuf>,
) -> anyhow::Result<()> {
    if let Some(path) = lifecycle.clone() {
        // A handler of our own replaces the default action (or SIG_IGN):
        // log, then exit as the default would, unless told to ignore it.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            while term.recv().await.is_some() {
                log_lifecycle(Some(&path), "sigterm");
                if !keep_running {
                    std::process::exit(0);
                }
            }
        });
    }
    // Hung in its handshake (rmcp reads no more while the handler runs),
    // the server still notices its stdin closing and exits at once: the
    // runtime's close is then quick, and its reconnect backoff, not the
    // close sequence's graces, decides when the next start comes
    // (budget_respected).
    if server.args.hang_on_initialize {
        std::thread::spawn(exit_when_stdin_hangs_up);
    }
    let running = Served(server).serve(rmcp::transport::stdio_pipes()).await;
    match running {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) if !keep_running => return Err(e.into()),
        Err(_) => {}
    }
    log_lifecycle(lifecycle.as_deref(), "stdin-eof");
    if keep_running {
        // --ignore-sigterm: stdin EOF does not end us either.
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// Wait, without reading, until the writer of stdin is gone (poll's
/// `POLLHUP`), then exit.
fn exit_when_stdin_hangs_up() {
    let mut fd = libc::pollfd {
        fd: 0,
        events: 0,
        revents: 0,
    };
    loop {
        // SAFETY: poll reads and writes the one pollfd it is given.
        let n = unsafe { libc::poll(&mut fd, 1, -1) };
        if n > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            std::process::exit(0);
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// `--http-fault`: what the HTTP layer does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpFault {
    None,
    Unauthorized,
    ServerError,
    SessionLoss(usize),
    Stall,
}

impl HttpFault {
    fn parse(s: Option<&str>) -> anyhow::Result<Self> {
        Ok(match s {
            None => Self::None,
            Some("401") => Self::Unauthorized,
            Some("500") => Self::ServerError,
            Some("stall") => Self::Stall,
            Some(other) => match other.strip_prefix("session-loss:") {
                Some(n) => Self::SessionLoss(n.parse()?),
                None => anyhow::bail!("unknown --http-fault {other:?}"),
            },
        })
    }
}

struct HttpFaultState {
    fault: HttpFault,
    calls: AtomicUsize,
    /// `--log-requests`: every tools/call POST is logged here too, before the
    /// fault decides its answer, as `post tools/call <body>` (a request the
    /// fault answers 404/401/500 is still a request that was sent).
    log: Option<PathBuf>,
}

async fn http_fault_layer(
    axum::extract::State(state): axum::extract::State<Arc<HttpFaultState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let is_call = bytes.windows(10).any(|w| w == b"tools/call");
    if is_call
        && let Some(path) = &state.log
        && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
    {
        let body = String::from_utf8_lossy(&bytes).replace('\n', " ");
        let _ = f.write_all(format!("post tools/call {body}\n").as_bytes());
    }
    let has_session = parts.headers.contains_key("mcp-session-id");
    let n = if is_call {
        state.calls.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        state.calls.load(Ordering::SeqCst)
    };
    match state.fault {
        HttpFault::Unauthorized => {
            return (
                axum::http::StatusCode::UNAUTHORIZED,
                [(
                    axum::http::header::WWW_AUTHENTICATE,
                    "Bearer realm=\"fault\"",
                )],
                "unauthorized",
            )
                .into_response();
        }
        HttpFault::ServerError if is_call => {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
        }
        // Once: the session is forgotten, as if the server restarted.
        HttpFault::SessionLoss(after) if is_call && has_session && n == after + 1 => {
            if let Some(path) = &state.log
                && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
            {
                let body = String::from_utf8_lossy(&bytes).replace('\n', " ");
                let _ = f.write_all(format!("refused-404 tools/call {body}\n").as_bytes());
            }
            return (axum::http::StatusCode::NOT_FOUND, "Session not found").into_response();
        }
        // The reply starts as an SSE stream and then never sends an event.
        HttpFault::Stall if is_call => {
            let never = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
            return (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(never),
            )
                .into_response();
        }
        _ => {}
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

async fn serve_http(server: FaultServer, port: u16) -> anyhow::Result<()> {
    let server_fault = server.args.http_fault.clone();
    let log = server.args.log_requests.clone();
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let fault = HttpFault::parse(server_fault.as_deref())?;
    let state = Arc::new(HttpFaultState {
        fault,
        calls: AtomicUsize::new(0),
        log,
    });
    let app = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(state, http_fault_layer),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let real = listener.local_addr()?.port();
    eprintln!("listening on http://127.0.0.1:{real}/mcp");
    axum::serve(mcpvisor::gateway::no_delay(listener), app)
        .with_graceful_shutdown(async {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(t) => t,
                    Err(_) => return std::future::pending().await,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    if args.era_flip
        && let Some(log) = &args.log_requests
    {
        let mut flag = log.clone().into_os_string();
        flag.push(".era");
        let flag = PathBuf::from(flag);
        args.era = if flag.exists() {
            let _ = std::fs::remove_file(&flag);
            "stateless".into()
        } else {
            let _ = std::fs::write(&flag, b"");
            "session".into()
        };
    }
    // `--log-requests`: one `start <tag> <pid> <unix ms>` line per process,
    // before any fault: the runner checks the reconnect schedule against
    // the server's own clock (`budget_respected`), not the runtime's word.
    if let Some(path) = &args.log_requests
        && let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path)
    {
        let tag = args.tag.as_deref().unwrap_or("-");
        let _ =
            f.write_all(format!("start {tag} {} {}\n", std::process::id(), unix_ms()).as_bytes());
    }
    if let Some(code) = args.crash_at_start {
        die(code, Some("fatal: boom at start"));
    }
    if let Some(marker) = &args.crash_at_start_if_exists
        && marker.exists()
    {
        die(
            6,
            Some(&format!(
                "fatal: boom at start ({} exists)",
                marker.display()
            )),
        );
    }
    for name in args.print_env.iter().chain(&args.leak_env) {
        eprintln!("env {name}={}", std::env::var(name).unwrap_or_default());
    }
    // A leaked secret of 16 bytes or more is then cut in two by the 8 KiB
    // stderr tail a client keeps: what follows it fills the tail but for
    // the secret's second half (TRUST-2: a cut secret is still a secret).
    if let Some(name) = &args.leak_env {
        let len = std::env::var(name).unwrap_or_default().len();
        if len >= 16 {
            let fill = STDERR_TAIL - len / 2 - 1;
            let line = "-".repeat(63);
            let mut err = std::io::stderr().lock();
            for _ in 0..fill / 64 {
                let _ = writeln!(err, "{line}");
            }
            if !fill.is_multiple_of(64) {
                let _ = writeln!(err, "{}", "-".repeat(fill % 64 - 1));
            }
            let _ = err.flush();
        }
    }
    if args.terminal_escapes {
        eprintln!("starting{TERMINAL_ESCAPES}");
    }
    if args.ignore_sigterm {
        ignore_sigterm();
    }
    if args.grandchild {
        spawn_grandchild();
    }
    if args.daemon_holds_stdout {
        daemon_holding_stdout();
    }
    if args.daemonize {
        daemonize(args.daemon_env_clear);
    }
    if args.garbage_before_handshake > 0 && args.http.is_none() {
        let mut out = std::io::stdout().lock();
        for i in 1..=args.garbage_before_handshake {
            let _ = writeln!(
                out,
                "starting fault-server v1 … (banner line {i} of {})",
                args.garbage_before_handshake
            );
        }
        let _ = out.flush();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fault-server: could not start tokio: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let keep_running = args.ignore_sigterm;
    let http = args.http;
    let lifecycle = args.log_lifecycle.clone();
    let server = FaultServer::new(args);
    let result = rt.block_on(async move {
        match http {
            Some(port) => serve_http(server, port).await,
            None => serve_stdio(server, keep_running, lifecycle).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fault-server: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
