//! `mcpvisor`: the reference binary. Thin: parse arguments, build the config,
//! call the library, render the output.

mod approver;
mod bench;
mod demo_server;
mod hooks;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use mcpvisor::FileAttachmentStore;
use mcpvisor::{
    CallOptions, FileConfig, Runtime, RuntimeEvent, Scope, ServerConfig, ServerState, ServerStatus,
    ShutdownReport, parse_config,
};
use serde_json::{Value, json};

/// A supervised runtime for MCP servers.
#[derive(Parser, Debug)]
#[command(name = "mcpvisor", version, about, long_about = None)]
struct Cli {
    /// Config file (else $MCPVISOR_CONFIG, else ./mcpvisor.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the built-in demo server under supervision: list tools, call two, shut down.
    Demo,
    /// Real handshake with one or all servers: state, protocol version, tool count.
    Check {
        /// Only this server.
        server: Option<String>,
    },
    /// List public tool names.
    Tools {
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
    },
    /// Call a tool by public name and print what the model would see.
    Call {
        /// Public tool name, e.g. mcp__everything__echo.
        name: String,
        /// Arguments as a JSON object.
        #[arg(long)]
        args: Option<String>,
        /// Declare image capability for this call's route: valid images are
        /// saved and attached instead of placeholders.
        #[arg(long)]
        images: bool,
        /// Directory of the file attachment store (admitted images, spilled results).
        #[arg(long, value_name = "DIR")]
        attachments: Option<PathBuf>,
        /// The chat this call belongs to (per-chat trust grants, TRUST-5).
        #[arg(long, value_name = "ID")]
        chat: Option<String>,
        /// Run only hooks whose command hash is in `[hooks] approved` (HOOK-12).
        #[arg(long)]
        strict_hooks: bool,
    },
    /// Command hooks of the `[hooks]` files.
    Hooks {
        #[command(subcommand)]
        what: HooksCommand,
    },
    /// Resources of the configured servers (through the shared resource tools).
    Resources {
        #[command(subcommand)]
        what: ResourcesCommand,
    },
    /// The supervision tree with each server's status.
    Status {
        /// Keep running and print every state change until SIGINT/SIGTERM.
        #[arg(long)]
        watch: bool,
    },
    /// Benchmarks: call latency vs a bare rmcp client, catalog sync of 1k/10k tools.
    Bench {
        /// Sequential calls per latency sample.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
    },
    /// Serve the built-in demo MCP server on stdio.
    #[command(hide = true)]
    ServeDemo {
        /// Extra generated tools.
        #[arg(long, default_value_t = 0)]
        tools: usize,
    },
}

#[derive(Subcommand, Debug)]
enum HooksCommand {
    /// Every configured hook with its event, matcher, timeout and hash.
    List,
    /// Run the configured hooks of one event on a payload and print the
    /// merged, neutral outcome.
    Test {
        /// The event: SessionStart, UserPromptSubmit, PreToolUse, PostToolUse,
        /// Stop, SubagentStart, SubagentStop.
        #[arg(long)]
        event: String,
        /// Only this dialect's hooks (default: every configured file).
        #[arg(long, value_enum)]
        dialect: Option<DialectArg>,
        /// Payload fields as a JSON object (tool_name, tool_input, prompt,
        /// source, session_id, cwd, …); the bridge fills the rest.
        #[arg(long)]
        payload: Option<String>,
        /// Run only hooks whose command hash is in `[hooks] approved` (HOOK-12).
        #[arg(long)]
        strict_hooks: bool,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DialectArg {
    Claude,
    Codex,
}

#[derive(Subcommand, Debug)]
enum ResourcesCommand {
    /// `resources/list` of one or every server.
    List {
        /// Only this server.
        #[arg(long)]
        server: Option<String>,
        /// A cursor from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// `resources/templates/list` of one or every server.
    Templates {
        /// Only this server.
        #[arg(long)]
        server: Option<String>,
        /// A cursor from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// `resources/read` of one resource.
    Read {
        /// The server.
        server: String,
        /// The resource URI.
        uri: String,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcpvisor: could not start tokio: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::ServeDemo { .. }) {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("MCPVISOR_LOG")
                    .unwrap_or_else(|_| "off".into()),
            )
            .with_writer(std::io::stderr)
            .try_init();
    }
    // SIGINT or SIGTERM during a command (`status --watch` handles its own):
    // the command is dropped with its runtime, the tokio runtime is shut
    // down, and every child process group is SIGKILLed as its handle drops.
    let watch = matches!(cli.command, Command::Status { watch: true });
    let result = rt.block_on(async {
        if watch {
            return run(cli).await;
        }
        tokio::select! {
            r = run(cli) => r,
            why = interrupted() => {
                eprintln!("mcpvisor: {why}: stopping every server");
                Ok(130)
            }
        }
    });
    // Also ends a terminal approver still blocked reading stdin.
    rt.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("mcpvisor: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Resolves on SIGINT or SIGTERM (never, if the handlers cannot be installed).
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => "interrupted",
            _ = term.recv() => "terminated",
        },
        _ => std::future::pending().await,
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Command::ServeDemo { tools } => {
            demo_server::serve(*tools).await?;
            Ok(0)
        }
        Command::Demo => demo(&cli).await,
        Command::Check { server } => check(&cli, server.as_deref()).await,
        Command::Tools { server } => tools(&cli, server.as_deref()).await,
        Command::Call {
            name,
            args,
            images,
            attachments,
            chat,
            strict_hooks,
        } => {
            let opts = CallFlags {
                images: *images,
                attachments: attachments.clone(),
                chat: chat.clone(),
                strict_hooks: *strict_hooks,
            };
            call(&cli, name, args.as_deref(), opts).await
        }
        Command::Status { watch } => status(&cli, *watch).await,
        Command::Resources { what } => resources(&cli, what).await,
        Command::Hooks { what } => hooks::run(&cli, what).await,
        Command::Bench { calls } => bench::run(*calls, cli.json).await,
    }
}

/// The demo server as a config entry: this same binary, hidden subcommand.
pub(crate) fn demo_config(name: &str, extra_tools: usize) -> anyhow::Result<ServerConfig> {
    let exe = std::env::current_exe().context("cannot locate the mcpvisor executable")?;
    let mut args = vec!["serve-demo".to_owned()];
    if extra_tools > 0 {
        args.push("--tools".into());
        args.push(extra_tools.to_string());
    }
    // The built-in demo server is part of this binary: trusted.
    Ok(ServerConfig::stdio(name, exe.to_string_lossy(), args).trusted())
}

fn config_path(cli: &Cli) -> PathBuf {
    cli.config
        .clone()
        .or_else(|| std::env::var_os("MCPVISOR_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("mcpvisor.toml"))
}

/// Load the servers. With no config file anywhere, `check`/`status` fall back
/// to the demo server (BIN-4).
fn load_config(cli: &Cli, allow_demo: bool) -> anyhow::Result<FileConfig> {
    let path = config_path(cli);
    let explicit = cli.config.is_some() || std::env::var_os("MCPVISOR_CONFIG").is_some();
    if !path.exists() {
        if allow_demo && !explicit {
            return Ok(FileConfig {
                servers: vec![demo_config("demo", 0)?],
                event_log: None,
                secrets_file: None,
                secrets_keyring: None,
                hooks: Default::default(),
            });
        }
        bail!(
            "config file {} not found (use --config FILE or MCPVISOR_CONFIG)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(parse_config(&path.display().to_string(), &text)?)
}

/// A runtime builder with what the config file asks for beyond servers, and
/// the terminal approver (TRUST-5).
fn builder_for(cfg: &FileConfig, strict_hooks: bool) -> anyhow::Result<mcpvisor::RuntimeBuilder> {
    let mut b = Runtime::builder()
        .approver(std::sync::Arc::new(approver::TerminalApprover))
        .hooks(hooks::settings(cfg, strict_hooks));
    if let Some(path) = &cfg.event_log {
        b = b.event_log(path.clone());
    }
    if let Some(path) = &cfg.secrets_file {
        let store = mcpvisor::FileSecretStore::open(path).map_err(anyhow::Error::msg)?;
        b = b.secrets(std::sync::Arc::new(store));
    }
    if let Some(service) = &cfg.secrets_keyring {
        #[cfg(all(feature = "keyring", target_os = "linux"))]
        {
            b = b.secrets(std::sync::Arc::new(mcpvisor::KeyringSecretStore::new(
                service.clone(),
            )));
        }
        #[cfg(not(all(feature = "keyring", target_os = "linux")))]
        bail!(
            "[secrets] keyring = {service:?}: this mcpvisor was built without the keyring feature (cargo build --features keyring, Linux only)"
        );
    }
    Ok(b)
}

async fn start(cfg: FileConfig, quiet: bool) -> anyhow::Result<Runtime> {
    start_with(builder_for(&cfg, false)?, cfg.servers, quiet).await
}

async fn start_with(
    mut b: mcpvisor::RuntimeBuilder,
    servers: Vec<ServerConfig>,
    quiet: bool,
) -> anyhow::Result<Runtime> {
    let names: Vec<String> = servers
        .iter()
        .filter(|s| s.enabled)
        .map(|s| s.server_name.clone())
        .collect();
    let limit = servers
        .iter()
        .map(|s| s.startup_timeout)
        .max()
        .unwrap_or_default()
        + Duration::from_secs(2);
    for s in servers {
        b = b.server(Scope::Global, s);
    }
    let runtime = b.start().await?;
    if !quiet && !names.is_empty() {
        eprint!(
            "connecting to {} server(s): {} …",
            names.len(),
            names.join(", ")
        );
    }
    settle(&runtime, &names, limit).await;
    if !quiet && !names.is_empty() {
        eprintln!(" done");
    }
    Ok(runtime)
}

/// Wait until every named server has left `connecting` for the first time
/// (ready, failed, reconnecting, exhausted…), bounded by the longest startup timeout.
async fn settle(runtime: &Runtime, names: &[String], limit: Duration) {
    let mut events = runtime.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let statuses = runtime.status();
        let pending = names.iter().any(|n| {
            statuses.iter().find(|s| &s.server == n).is_none_or(|s| {
                matches!(s.state, ServerState::Connecting | ServerState::Stopped)
                    && s.error.is_none()
            })
        });
        if !pending {
            // Give a list_changed-triggered re-sync a moment to land.
            tokio::time::sleep(Duration::from_millis(150)).await;
            return;
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return,
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
            Ok(_) => {}
        }
    }
}

async fn finish(runtime: Runtime) -> ShutdownReport {
    let report = runtime.shutdown(Duration::from_secs(20)).await;
    if !report.is_clean() {
        eprintln!("shutdown did not confirm everything:");
        for u in &report.unconfirmed {
            eprintln!("  - {u}");
        }
    }
    report
}

async fn demo(cli: &Cli) -> anyhow::Result<u8> {
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

fn status_line(s: &ServerStatus) -> String {
    let mut line = format!(
        "{:<16} {:<28} tools={:<4} gen={}",
        s.server,
        s.state.to_string(),
        s.tools,
        s.generation
    );
    if let Some(v) = &s.protocol_version {
        line.push_str(&format!(" protocol={v}"));
    }
    if let Some(p) = s.pid {
        line.push_str(&format!(" pid={p}"));
    }
    line
}

fn status_json(s: &ServerStatus) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
    if let (Value::Object(m), ServerState::Reconnecting { attempt, .. }) = (&mut v, &s.state) {
        m.insert("attempt".into(), json!(attempt));
    }
    v
}

async fn check(cli: &Cli, only: Option<&str>) -> anyhow::Result<u8> {
    let mut cfg = load_config(cli, true)?;
    let servers = &mut cfg.servers;
    if let Some(name) = only {
        servers.retain(|s| s.server_name == name);
        if servers.is_empty() {
            bail!("no server named \"{name}\" in the config");
        }
    }
    for s in servers.iter_mut() {
        // A check is one real handshake: no reconnect loop, no idle timer.
        s.reconnect.enabled = false;
        s.enabled = true;
        // Every server is reported (exit 1 if any failed), strict or not.
        s.fail_on_startup_error = false;
    }
    let runtime = start(cfg, cli.json).await?;
    let statuses = runtime.status();
    let _ = finish(runtime).await;
    let failed = statuses
        .iter()
        .filter(|s| s.state != ServerState::Ready)
        .count();
    if cli.json {
        println!(
            "{}",
            Value::Array(statuses.iter().map(status_json).collect())
        );
    } else {
        for s in &statuses {
            if s.state == ServerState::Ready {
                println!(
                    "ok     {:<16} protocol {}  {} tool(s){}",
                    s.server,
                    s.protocol_version.as_deref().unwrap_or("?"),
                    s.tools,
                    s.server_info
                        .as_deref()
                        .map(|i| format!("  ({i})"))
                        .unwrap_or_default()
                );
                for w in &s.warnings {
                    println!("       warning: {w}");
                }
            } else {
                println!("FAILED {:<16} {}", s.server, s.state);
                if let Some(e) = &s.error {
                    println!("       error: {e}");
                }
                if !s.stderr_tail.is_empty()
                    && !s.error.as_deref().unwrap_or("").contains(&s.stderr_tail)
                {
                    println!(
                        "       stderr tail:\n{}",
                        indent(&s.stderr_tail, "         ")
                    );
                }
            }
        }
    }
    Ok(u8::from(failed > 0))
}

fn indent(text: &str, pad: &str) -> String {
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn tools(cli: &Cli, only: Option<&str>) -> anyhow::Result<u8> {
    let runtime = start(load_config(cli, true)?, cli.json).await?;
    let mut tools = runtime.tools(&Scope::Global);
    let _ = finish(runtime).await;
    if let Some(s) = only {
        tools.retain(|t| t.server == s);
    }
    if cli.json {
        let arr: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut o = json!({
                    "name": t.name, "server": t.server, "raw_name": t.raw_name, "generation": t.generation,
                    "title": t.title, "description": t.description, "input_schema": &*t.input_schema,
                    "task_support_required": t.task_support_required,
                });
                if let (Some(schema), Value::Object(m)) = (&t.output_schema, &mut o) {
                    m.insert("output_schema".into(), Value::Object((**schema).clone()));
                }
                o
            })
            .collect();
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

fn outcome_json(o: &mcpvisor::ToolOutcome) -> Value {
    json!({
        "outcome": o.kind.name(),
        "projection": o.projection,
        "canonical": o.canonical,
        "error": o.error,
        "server": o.server,
        "raw_name": o.raw_name,
        "generation": o.generation,
        "images": o.images,
        "cut_bytes": o.cut_bytes,
        "notes": o.notes,
        "stop": o.stop,
    })
}

/// `call`'s options beyond the name and arguments.
struct CallFlags {
    images: bool,
    attachments: Option<PathBuf>,
    chat: Option<String>,
    strict_hooks: bool,
}

async fn call(cli: &Cli, name: &str, args: Option<&str>, flags: CallFlags) -> anyhow::Result<u8> {
    let args: Option<Value> = match args {
        None => None,
        Some(text) => Some(
            serde_json::from_str(text)
                .with_context(|| format!("--args is not valid JSON: {text}"))?,
        ),
    };
    let cfg = load_config(cli, true)?;
    let mut builder = builder_for(&cfg, flags.strict_hooks)?;
    if let Some(dir) = flags.attachments {
        builder = builder.attachments(std::sync::Arc::new(FileAttachmentStore::new(dir)));
    }
    let runtime = start_with(builder, cfg.servers, cli.json).await?;
    if !cli.json {
        hooks::print_load_warnings(&runtime);
    }
    let options = CallOptions {
        images: flags.images,
        chat: flags.chat.or_else(|| Some("cli".into())),
        ..CallOptions::default()
    };
    let outcome = runtime.call(&Scope::Global, name, args, options).await;
    let _ = finish(runtime).await;
    if cli.json {
        println!("{}", outcome_json(&outcome));
    } else {
        println!("{}", outcome.projection);
        if let Some(e) = &outcome.error
            && !outcome.projection.contains(e.as_str())
        {
            eprintln!("{}: {e}", outcome.kind.name());
        }
        for note in &outcome.notes {
            eprintln!("{note}");
        }
        if let Some(r) = &outcome.stop {
            eprintln!("a hook stopped the turn: {r}");
        }
    }
    Ok(u8::from(!outcome.is_ok()))
}

async fn status(cli: &Cli, watch: bool) -> anyhow::Result<u8> {
    let cfg = load_config(cli, true)?;
    if !watch {
        let runtime = start(cfg, cli.json).await?;
        let statuses = runtime.status();
        let _ = finish(runtime).await;
        if cli.json {
            println!(
                "{}",
                Value::Array(statuses.iter().map(status_json).collect())
            );
        } else {
            println!(
                "Runtime\n└── RootSupervisor\n    └── ScopeSupervisor(global)\n        ├── ToolRegistry(global)"
            );
            let n = statuses.len();
            for (i, s) in statuses.iter().enumerate() {
                let branch = if i + 1 == n { "└──" } else { "├──" };
                println!("        {branch} ServerSupervisor {}", status_line(s));
                if let Some(e) = &s.error {
                    println!(
                        "        {}       error: {e}",
                        if i + 1 == n { " " } else { "│" }
                    );
                }
            }
        }
        return Ok(0);
    }
    let runtime = builder_for(&cfg, false)?.start().await?;
    let mut events = runtime.subscribe();
    for s in cfg.servers {
        runtime.add_server(Scope::Global, s).await?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut out = std::io::stdout();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            ev = events.recv() => match ev {
                Ok(RuntimeEvent::ServerStatus(s)) => {
                    let line = if cli.json { status_json(&s).to_string() } else { status_line(&s) };
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    let report = finish(runtime).await;
    if cli.json {
        let _ = writeln!(out, "{}", json!({"shutdown": report}));
    }
    Ok(u8::from(!report.is_clean()))
}

async fn resources(cli: &Cli, what: &ResourcesCommand) -> anyhow::Result<u8> {
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
