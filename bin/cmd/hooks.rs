//! `mcpvisor hooks list|test`: the configured command hooks, and a dry run of
//! one event's hooks on a payload (the contract tests and docs use).

use std::time::Duration;

use anyhow::{Context, bail};
use mcpvisor::HookEvent;
use mcpvisor::load_hook_file;
use mcpvisor::{CancellationToken, Dialect, FileConfig, HookInput, HookSession, HookSettings};
use serde_json::{Map, Value, json};

use crate::cli::{Cli, DialectArg, HooksCommand};
use crate::config::load_config;
use crate::render::{errln, outln};

/// The `[hooks]` table as runtime settings; `strict` turns on HOOK-12 with
/// the table's approved hashes.
pub(crate) fn settings(cfg: &FileConfig, strict: bool) -> HookSettings {
    let h = &cfg.hooks;
    HookSettings {
        claude: h.claude.clone(),
        codex: h.codex.clone(),
        project_dir: h.project_dir.clone(),
        session: HookSession {
            session_id: format!("mcpvisor-{}", uuid::Uuid::new_v4()),
            ..HookSession::default()
        },
        // Hashes are compared as `command_hash` writes them: lowercase.
        approved: strict.then(|| h.approved.iter().map(|a| a.to_ascii_lowercase()).collect()),
        ..HookSettings::default()
    }
}

fn load_warnings(runtime: &mcpvisor::Runtime) -> Vec<String> {
    runtime
        .hooks()
        .sets()
        .iter()
        .flat_map(|s| s.warnings.iter().cloned())
        .collect()
}

/// Hook files that could not be loaded, or parts that were skipped, on stderr.
pub(crate) fn print_load_warnings(runtime: &mcpvisor::Runtime) {
    for w in load_warnings(runtime) {
        errln!("mcpvisor: hooks: {w}");
    }
}

pub(crate) async fn run(cli: &Cli, what: &HooksCommand) -> anyhow::Result<u8> {
    // Hooks need no servers: only the [hooks] table is used (none without
    // a config file).
    let mut cfg = load_config(cli, false).or_else(|e| {
        let explicit = cli.config.is_some() || std::env::var_os("MCPVISOR_CONFIG").is_some();
        if explicit || crate::config::config_path(cli).exists() {
            Err(e)
        } else {
            Ok(FileConfig::default())
        }
    })?;
    cfg.servers.clear();
    match what {
        HooksCommand::List => list(cli, &cfg).await,
        HooksCommand::Test {
            event,
            dialect,
            payload,
            strict_hooks,
        } => {
            test(
                cli,
                &cfg,
                event,
                *dialect,
                payload.as_deref(),
                *strict_hooks,
            )
            .await
        }
    }
}

async fn list(cli: &Cli, cfg: &FileConfig) -> anyhow::Result<u8> {
    // Only the files are read: no runtime is needed to list them.
    let sets: Vec<_> = [
        (Dialect::Claude, &cfg.hooks.claude),
        (Dialect::Codex, &cfg.hooks.codex),
    ]
    .into_iter()
    .filter_map(|(d, path)| path.as_ref().map(|p| load_hook_file(d, p)))
    .collect();
    let warnings: Vec<&String> = sets.iter().flat_map(|s| &s.warnings).collect();
    let hooks = sets.iter().flat_map(|set| {
        set.handlers()
            .map(move |(event, group, handler)| (set, event, group, handler))
    });
    if cli.json {
        let rows: Vec<Value> = hooks
            .map(|(set, event, group, handler)| {
                json!({
                    "dialect": set.dialect,
                    "file": set.origin,
                    "event": event.name(),
                    "matcher": group.pattern,
                    "command": handler.command,
                    "timeout_ms": u64::try_from(handler.timeout.as_millis()).unwrap_or(u64::MAX),
                    "hash": handler.hash,
                })
            })
            .collect();
        outln!("{}", json!({"hooks": rows, "warnings": warnings}));
        return Ok(0);
    }
    let mut any = false;
    for (set, event, group, handler) in hooks {
        any = true;
        outln!(
            "{} {event} matcher={} timeout={}ms sha256={}\n    {}",
            set.dialect.name(),
            group.pattern.as_deref().unwrap_or("*"),
            handler.timeout.as_millis(),
            handler.hash,
            handler.command,
        );
    }
    if !any {
        outln!("no hooks configured");
    }
    for w in warnings {
        errln!("mcpvisor: hooks: {w}");
    }
    Ok(0)
}

async fn test(
    cli: &Cli,
    cfg: &FileConfig,
    event: &str,
    dialect: Option<DialectArg>,
    payload: Option<&str>,
    strict: bool,
) -> anyhow::Result<u8> {
    let Some(event) = HookEvent::parse(event) else {
        let known: Vec<&str> = HookEvent::ALL.iter().map(|e| e.name()).collect();
        bail!(
            "--event {event:?} is not a hook event (one of: {})",
            known.join(", ")
        );
    };
    let fields: Map<String, Value> = match payload {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text)
            .with_context(|| format!("--payload is not valid JSON: {text}"))?
        {
            Value::Object(m) => m,
            other => bail!("--payload must be a JSON object, got {other}"),
        },
    };
    let dialect = dialect.map(|d| match d {
        DialectArg::Claude => Dialect::Claude,
        DialectArg::Codex => Dialect::Codex,
    });
    if dialect == Some(Dialect::Claude) && cfg.hooks.claude.is_none()
        || dialect == Some(Dialect::Codex) && cfg.hooks.codex.is_none()
    {
        bail!("--dialect given, but [hooks] in the config names no file for it");
    }
    let runtime = mcpvisor::Runtime::builder()
        .hooks(settings(cfg, strict))
        .start()
        .await?;
    // Session fields come from the payload when given, else defaults.
    let mut session = runtime.hooks().session().clone();
    session.session_id = "hooks-test".into();
    session.turn_id = "turn-1".into();
    let mut base = serde_json::to_value(&session)?;
    if let Value::Object(b) = &mut base {
        for (k, v) in &fields {
            if b.contains_key(k) {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    let session: HookSession =
        serde_json::from_value(base).context("--payload: session fields have the wrong types")?;
    let input = HookInput::from_fields(event, &fields);
    let report = runtime
        .hooks()
        .run(&session, &input, dialect, &CancellationToken::new())
        .await;
    let mut warnings: Vec<String> = load_warnings(&runtime)
        .into_iter()
        .map(|w| format!("config: {w}"))
        .collect();
    runtime.shutdown(Duration::from_secs(5)).await;
    let m = &report.merged;
    warnings.extend(m.warnings.iter().cloned());
    let (decision, reason) = m.verdict();
    if cli.json {
        outln!(
            "{}",
            json!({
                "event": event.name(),
                "decision": decision,
                "reason": reason,
                "context": m.context,
                "warnings": warnings,
                "errors": m.errors,
                "runs": report.runs,
            })
        );
    } else {
        outln!("decision: {decision}");
        if let Some(r) = reason {
            outln!("reason: {r}");
        }
        for c in &m.context {
            outln!("context: {c}");
        }
        for w in &warnings {
            outln!("warning: {w}");
        }
        for e in &m.errors {
            outln!("error: {e}");
        }
        for r in &report.runs {
            let how = match (r.skipped, r.timed_out, r.exit_code) {
                (true, _, _) => "skipped (not approved)".to_owned(),
                (_, true, _) => "timed out".to_owned(),
                (_, _, Some(c)) => format!("exit {c}"),
                _ => "no exit code".to_owned(),
            };
            outln!(
                "run: [{}] {how} in {} ms: {}",
                r.dialect.name(),
                r.duration_ms,
                r.command
            );
        }
        if report.runs.is_empty() {
            outln!("(no hook matched {})", event.name());
        }
    }
    Ok(0)
}
