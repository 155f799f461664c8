//! `mcpvisor`: the reference binary. Thin: parse arguments, build the config,
//! call the library, render the output.
//!
//! # Layout
//!
//! - `cli`: the command line (clap definitions).
//! - `cmd/`: one file per subcommand (`demo`, `check`, `tools`, `call`,
//!   `status`, `resources`, `hooks`, `gateway`, `bench`), each with a `run`.
//! - `config`: the config file, and the runtime builder it asks for.
//! - `lifecycle`: a runtime for one command: start, settle, shut down.
//! - `render`: output shaping the commands share.
//! - `approver`: the terminal approver; `demo_server`: the built-in demo
//!   MCP server (`serve-demo`).

mod approver;
mod cli;
mod cmd;
mod config;
mod demo_server;
mod lifecycle;
mod render;

use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::cmd::call::CallFlags;

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `--json` covers usage errors too: one JSON object on stdout.
        Err(e) if wants_json() && e.use_stderr() => {
            println!(
                "{}",
                serde_json::json!({"error": e.kind().to_string(), "message": e.render().to_string().trim(), "kind": "usage"})
            );
            return std::process::ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let json_errors = cli.json;
    // Spans exported over OTLP when the environment names an endpoint:
    // set up before tokio (its HTTP client blocks, on its own thread).
    #[cfg(feature = "otlp")]
    let otlp = match mcpvisor::OtlpExport::from_env("mcpvisor") {
        Ok(export) => export,
        Err(e) => {
            eprintln!("mcpvisor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads(&cli.command) {
        builder.worker_threads(n);
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcpvisor: could not start tokio: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if !matches!(
        cli.command,
        Command::ServeDemo { .. } | Command::ServeRelay { .. }
    ) {
        use tracing_subscriber::prelude::*;
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_env("MCPVISOR_LOG")
                    .unwrap_or_else(|_| "off".into()),
            );
        let subscriber = tracing_subscriber::registry().with(log);
        // The call spans, exported.
        #[cfg(feature = "otlp")]
        let subscriber = subscriber.with(otlp.as_ref().map(|export| export.layer()));
        let _ = subscriber.try_init();
    }
    // SIGINT or SIGTERM during a command (`status --watch` handles its own):
    // the command is dropped with its runtime, the tokio runtime is shut
    // down, and every child process group is SIGKILLed as its handle drops.
    // `status --watch`, `gateway` and `chat` handle their own signals: they
    // shut the runtime down quiescently.
    let watch = matches!(
        cli.command,
        Command::Status { watch: true, .. } | Command::Gateway { .. } | Command::Chat { .. }
    );
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
    #[cfg(feature = "otlp")]
    if let Some(export) = otlp
        && let Err(e) = export.shutdown()
    {
        eprintln!("mcpvisor: {e}");
    }
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) if json_errors => {
            // Config problems keep their file:line:column, one per entry.
            let problems = e
                .downcast_ref::<mcpvisor::ConfigError>()
                .map(|c| c.problems.clone());
            let mut out = serde_json::json!({"error": format!("{e:#}")});
            out["kind"] = if config::is_config_error(&e) {
                "config"
            } else {
                "error"
            }
            .into();
            if let Some(p) = problems {
                out["problems"] = p.into();
            }
            println!("{out}");
            std::process::ExitCode::from(error_code(&e))
        }
        Err(e) => {
            eprintln!("mcpvisor: {e:#}");
            std::process::ExitCode::from(error_code(&e))
        }
    }
}

/// The worker threads `command` runs on; None: tokio's default (one per
/// CPU, or `TOKIO_WORKER_THREADS`). A stdio gateway serves one client on
/// one pipe: on one thread a call crosses no thread, and it measured a
/// fifth less added time than on two with no loss of throughput
/// (docs/performance.md, "Issue 34, fourth part"). `TOKIO_WORKER_THREADS`
/// still sets its default, as it does everywhere else.
fn worker_threads(command: &Command) -> Option<usize> {
    match command {
        Command::Gateway {
            threads: Some(n), ..
        } => Some(usize::from(*n)),
        Command::Gateway { stdio: true, .. }
            if std::env::var_os("TOKIO_WORKER_THREADS").is_none() =>
        {
            Some(1)
        }
        _ => None,
    }
}

/// 3 for a config error, 2 for every other error (usage, arguments, start).
fn error_code(e: &anyhow::Error) -> u8 {
    if config::is_config_error(e) { 3 } else { 2 }
}

/// `--json` among the arguments (for errors before they parse).
fn wants_json() -> bool {
    std::env::args().skip(1).any(|a| a == "--json")
}

/// Resolves on SIGINT or SIGTERM (never, if the handlers cannot be installed).
pub(crate) async fn interrupted() -> &'static str {
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

/// Run the subcommand; its exit status.
async fn run(cli: Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Command::ServeDemo { tools } => {
            demo_server::serve(*tools).await?;
            Ok(0)
        }
        Command::ServeRelay { command } => cmd::bench::relay(command).await,
        Command::Demo | Command::Bench { .. } if cli.config.is_some() => {
            anyhow::bail!(
                "`demo` and `bench` run the built-in demo server and read no config: drop --config"
            )
        }
        Command::Demo => cmd::demo::run(&cli).await,
        Command::Check { server, wait } => cmd::check::run(&cli, server.as_deref(), *wait).await,
        Command::Tools {
            server,
            target,
            wait,
        } => {
            // One server named or started alone is waited for in full.
            let one = server.is_some() || target.url.is_some() || !target.command.is_empty();
            let wait = crate::lifecycle::Wait::from_flag(*wait || one);
            cmd::tools::run(&cli, server.as_deref(), target, wait).await
        }
        Command::Call {
            name,
            batch,
            args,
            arg,
            yes,
            target,
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
                arg: arg.clone(),
                yes: *yes,
                target: target.clone(),
            };
            match (batch, name) {
                (Some(file), _) => cmd::call::run_batch(&cli, file, opts).await,
                (None, Some(name)) => cmd::call::run(&cli, name, args.as_deref(), opts).await,
                (None, None) => anyhow::bail!("call needs a tool name or --batch FILE"),
            }
        }
        Command::Status { watch, wait } => cmd::status::run(&cli, *watch, *wait).await,
        Command::Resources { what } => cmd::resources::run(&cli, what).await,
        Command::Prompts { what } => cmd::prompts::run(&cli, what).await,
        Command::Add {
            name,
            url,
            env,
            env_secret,
            header,
            header_secret,
            cwd,
            trust,
            disabled,
            no_check,
            scope,
            startup_timeout,
            command,
        } => {
            let flags = cmd::edit::AddFlags {
                name: name.clone(),
                url: url.clone(),
                env: env.clone(),
                env_secret: env_secret.clone(),
                header: header.clone(),
                header_secret: header_secret.clone(),
                cwd: cwd.clone(),
                trust: trust.clone(),
                disabled: *disabled,
                no_check: *no_check,
                scope: scope.clone(),
                startup_timeout_ms: *startup_timeout,
                command: command.clone(),
            };
            cmd::edit::add(&cli, flags).await
        }
        Command::Remove { name, scope } => cmd::edit::remove(&cli, name, scope.as_deref()),
        Command::Enable { names, scope } => {
            cmd::edit::set_enabled(&cli, names, true, scope.as_deref())
        }
        Command::Disable { names, scope } => {
            cmd::edit::set_enabled(&cli, names, false, scope.as_deref())
        }
        Command::List => cmd::edit::list(&cli),
        Command::Import {
            file,
            out,
            merge,
            from,
            secrets_file,
        } => cmd::import::import(
            &cli,
            file,
            out.as_deref(),
            *merge,
            from.as_deref(),
            secrets_file.as_deref(),
        ),
        Command::Config {
            what: cli::ConfigCommand::Validate { file },
        } => cmd::import::validate(&cli, file.as_deref()),
        Command::Hooks { what } => cmd::hooks::run(&cli, what).await,
        Command::Mods { what } => cmd::mods::run(&cli, what).await,
        Command::Gateway {
            stdio,
            http,
            allow_remote,
            token_secret,
            status_tool,
            max_sessions,
            session_idle_s,
            raw_names,
            drain_timeout_s,
            replica_id,
            peers,
            stateful,
            threads: _,
        } => {
            let flags = cmd::gateway::GatewayFlags {
                stdio: *stdio,
                http: *http,
                allow_remote: *allow_remote,
                token_secret: token_secret.clone(),
                status_tool: *status_tool,
                max_sessions: *max_sessions,
                session_idle: std::time::Duration::from_secs(*session_idle_s),
                raw_names: *raw_names,
                drain_timeout: std::time::Duration::from_secs(*drain_timeout_s),
                replica: replica_id.clone(),
                peers: peers.clone(),
                stateful: stateful.clone(),
            };
            cmd::gateway::run(&cli, flags).await
        }
        Command::Chat {
            provider,
            endpoint,
            model,
            key_secret,
            prompt,
            max_rounds,
            no_tools,
            parallel,
            defer,
            tool_search,
        } => {
            let flags = cmd::chat::ChatFlags {
                provider: provider.clone(),
                endpoint: endpoint.clone(),
                model: model.clone(),
                key_secret: key_secret.clone(),
                prompt: prompt.clone(),
                max_rounds: *max_rounds,
                no_tools: *no_tools,
                parallel: *parallel,
                defer: defer.clone(),
                tool_search: tool_search.clone(),
            };
            cmd::chat::run(&cli, flags).await
        }
        Command::Conformance { url } => cmd::conformance::run(url).await,
        Command::Auth { what } => cmd::auth::run(&cli, what).await,
        Command::Bench {
            calls,
            quick,
            runs,
            only,
            soak,
        } => cmd::bench::run(*calls, *quick, *runs, only, *soak, cli.json).await,
    }
}
