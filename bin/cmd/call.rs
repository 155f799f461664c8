//! `mcpvisor call`: call one tool by its public name and print what the
//! model would see. Only the server the name names is started; a name of
//! no configured server is refused before anything starts.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, bail};
use mcpvisor::{CallOptions, FileAttachmentStore, Scope, ToolDefinition, TrustMode};
use serde_json::{Map, Value};

use crate::cli::{Cli, Target};
use crate::cmd::hooks;
use crate::config::{builder_for, load_for_target};
use crate::lifecycle::{finish, start_with};
use crate::render::outcome_json;
use crate::render::{errln, outln};

/// `call`'s options beyond the name and arguments.
pub(crate) struct CallFlags {
    /// `--images`: valid images are saved and attached.
    pub(crate) images: bool,
    /// `--attachments DIR`: the file attachment store.
    pub(crate) attachments: Option<PathBuf>,
    /// `--chat ID`: the chat the call belongs to.
    pub(crate) chat: Option<String>,
    /// `--strict-hooks`: only approved hooks run.
    pub(crate) strict_hooks: bool,
    /// `--arg KEY=VALUE`, repeatable.
    pub(crate) arg: Vec<String>,
    /// `--yes`: allow this call without asking.
    pub(crate) yes: bool,
    /// `--url` / `-- COMMAND`: a one-shot server.
    pub(crate) target: Target,
}

/// The `--args` text: inline JSON, `@FILE`, or `-` (stdin).
fn args_text(args: &str) -> anyhow::Result<String> {
    if args == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read --args from stdin")?;
        return Ok(s);
    }
    if let Some(path) = args.strip_prefix('@') {
        return std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --args file {path}"));
    }
    Ok(args.to_owned())
}

/// `VALUE` typed by the property's schema type: numbers, booleans and JSON
/// values parsed, strings kept as written.
fn typed(value: &str, schema: Option<&Value>) -> anyhow::Result<Value> {
    let kind = schema
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(match kind {
        "string" => Value::String(value.to_owned()),
        "integer" => Value::from(
            value
                .parse::<i64>()
                .with_context(|| format!("{value:?} is not an integer"))?,
        ),
        "number" => serde_json::from_str::<Value>(value)
            .ok()
            .filter(Value::is_number)
            .with_context(|| format!("{value:?} is not a number"))?,
        "boolean" => Value::Bool(match value {
            "true" => true,
            "false" => false,
            _ => bail!("{value:?} is not true or false"),
        }),
        "object" | "array" => serde_json::from_str(value)
            .with_context(|| format!("{value:?} is not valid JSON for a {kind}"))?,
        // No schema type: JSON when it parses, else the string.
        _ => serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned())),
    })
}

/// Merge `--arg KEY=VALUE`s into `base`, typed by `def`'s input schema.
fn merge_args(
    base: Option<Value>,
    pairs: &[String],
    def: Option<&ToolDefinition>,
) -> anyhow::Result<Option<Value>> {
    if pairs.is_empty() {
        return Ok(base);
    }
    let mut obj = match base {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => bail!("--args must be a JSON object to combine it with --arg"),
    };
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            bail!("--arg {p:?}: expected KEY=VALUE");
        };
        let schema = def.and_then(|d| d.input_schema.get("properties")?.get(k).cloned());
        let value = typed(v, schema.as_ref()).with_context(|| format!("--arg {k}"))?;
        obj.insert(k.to_owned(), value);
    }
    Ok(Some(Value::Object(obj)))
}

/// Start the runtime the calls run in: `--yes`, the attachment store
/// (`--images` alone: a temporary directory), and the config's providers
/// in the run's one activation.
async fn start_for_calls(
    cli: &Cli,
    mut cfg: mcpvisor::FileConfig,
    flags: &CallFlags,
) -> anyhow::Result<(mcpvisor::Runtime, Option<PathBuf>)> {
    if flags.yes {
        for s in &mut cfg.servers {
            if s.trust == TrustMode::Ask {
                s.trust = TrustMode::Always;
            }
        }
        for p in [&mut cfg.providers.browser, &mut cfg.providers.computer]
            .into_iter()
            .flatten()
        {
            if p.trust.is_none_or(|t| t == TrustMode::Ask) {
                p.trust = Some(TrustMode::Always);
            }
        }
    }
    crate::config::require_hooks(&cfg)?;
    // `call` takes --yes, and may run a server from the command line.
    let one_shot = (flags.target.url.is_some() || !flags.target.command.is_empty())
        .then(|| cfg.servers.first().map(|s| s.server_name.clone()))
        .flatten();
    let mut builder = builder_for(&cfg, flags.strict_hooks)?.approver(std::sync::Arc::new(
        crate::approver::TerminalApprover::new(&cfg, one_shot.as_deref(), true),
    ));
    let attachments = match (&flags.attachments, flags.images) {
        (Some(dir), _) => Some(dir.clone()),
        (None, true) => {
            Some(std::env::temp_dir().join(format!("mcpvisor-attachments-{}", std::process::id())))
        }
        (None, false) => None,
    };
    if let Some(dir) = &attachments {
        builder = builder.attachments(std::sync::Arc::new(FileAttachmentStore::new(dir.clone())));
    }
    let runtime = start_with(builder, cfg.servers, cli.json).await?;
    if !cli.json {
        hooks::print_load_warnings(&runtime);
    }
    Ok((runtime, attachments))
}

/// The servers' progress on this run's calls (`notifications/progress`,
/// `RuntimeEvent::CallProgress`), shown on stderr while they run: one line
/// redrawn on a terminal, a line per notification on a pipe.
struct ProgressLine {
    stop: mcpvisor::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressLine {
    fn start(runtime: &mcpvisor::Runtime) -> Self {
        use std::io::{IsTerminal as _, Write as _};
        let mut events = runtime.subscribe();
        let stop = mcpvisor::CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let tty = std::io::stderr().is_terminal();
            let mut tools = std::collections::HashMap::new();
            let mut drawn = false;
            loop {
                let event = tokio::select! {
                    e = events.recv() => e,
                    _ = stopped.cancelled() => break,
                };
                match event {
                    Ok(mcpvisor::RuntimeEvent::CallStarted { tool, call_id, .. }) => {
                        tools.insert(call_id, tool);
                    }
                    Ok(mcpvisor::RuntimeEvent::CallProgress {
                        call_id,
                        progress,
                        total,
                        message,
                        ..
                    }) => {
                        let tool = tools.get(&call_id).map_or("a call", String::as_str);
                        let line = progress_text(tool, progress, total, message.as_deref());
                        let line = crate::render::term(&line);
                        if tty {
                            eprint!("\r\x1b[2K{line}");
                            drawn = true;
                        } else {
                            eprintln!("progress {line}");
                        }
                        let _ = std::io::stderr().flush();
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
            if drawn {
                eprint!("\r\x1b[2K");
            }
        });
        Self { stop, task }
    }

    /// Stop showing (a terminal's line is cleared).
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// `tool: 3/10 step three` (`3` alone without a total; whole numbers
/// without a fraction).
fn progress_text(tool: &str, progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let n = |x: f64| {
        if x.fract() == 0.0 && x.abs() < 1e15 {
            format!("{}", x as i64)
        } else {
            format!("{x:.2}")
        }
    };
    let mut s = format!("{tool}: {}", n(progress));
    if let Some(t) = total {
        s.push_str(&format!("/{}", n(t)));
    }
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        s.push(' ');
        s.push_str(m);
    }
    s
}

fn call_options(flags: &CallFlags) -> CallOptions {
    CallOptions {
        images: flags.images,
        chat: flags.chat.clone().or_else(|| Some("cli".into())),
        ..CallOptions::default()
    }
}

/// `call --batch FILE|-`: every line a call, run in order in the one
/// activation of this run, each outcome printed (`--json` form) as soon as
/// the call ends. A line that is not a call is answered with a
/// `bad_input` object naming its line; the others still run. Exit 1 when
/// any call did not end `ok`.
pub(crate) async fn run_batch(cli: &Cli, file: &str, flags: CallFlags) -> anyhow::Result<u8> {
    use std::io::Write as _;
    use tokio::io::AsyncBufReadExt;
    let input: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if file == "-" {
        Box::new(tokio::io::stdin())
    } else {
        Box::new(
            tokio::fs::File::open(file)
                .await
                .with_context(|| format!("cannot read --batch file {file}"))?,
        )
    };
    let (cfg, _) = load_for_target(cli, &flags.target)?;
    let (runtime, _) = start_for_calls(cli, cfg, &flags).await?;
    let options = call_options(&flags);
    let mut lines = tokio::io::BufReader::new(input).lines();
    let mut all_ok = true;
    let mut n = 0u64;
    let result: anyhow::Result<()> = async {
        loop {
            let line = tokio::select! {
                l = lines.next_line() => l.with_context(|| format!("cannot read --batch {file}"))?,
                _ = tokio::signal::ctrl_c() => break,
            };
            let Some(line) = line else { break };
            n += 1;
            if line.trim().is_empty() {
                continue;
            }
            let printed = match batch_line(&line) {
                Ok((name, args)) => {
                    let outcome = runtime
                        .call(&Scope::Global, &name, args, options.clone())
                        .await;
                    all_ok &= outcome.is_ok();
                    outcome_json(&outcome)
                }
                Err(e) => {
                    all_ok = false;
                    serde_json::json!({"line": n, "kind": "bad_input", "ok": false, "error": e})
                }
            };
            let mut out = std::io::stdout().lock();
            writeln!(out, "{printed}")?;
            out.flush()?;
        }
        Ok(())
    }
    .await;
    let _ = finish(runtime).await;
    result?;
    Ok(u8::from(!all_ok))
}

/// One `--batch` line: `{"name": "...", "args": {...}}` (`args` optional).
fn batch_line(line: &str) -> Result<(String, Option<Value>), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut o) = v else {
        return Err("expected an object {\"name\": ..., \"args\": {...}}".into());
    };
    let name = match o.remove("name") {
        Some(Value::String(n)) => n,
        _ => return Err("\"name\" (a string, the tool's public name) is missing".into()),
    };
    let args = match o.remove("args") {
        None | Some(Value::Null) => None,
        Some(a @ Value::Object(_)) => Some(a),
        Some(_) => return Err(format!("{name}: \"args\" must be an object")),
    };
    if let Some(k) = o.keys().next() {
        return Err(format!(
            "unknown key {k:?} (a line has \"name\" and \"args\")"
        ));
    }
    Ok((name, args))
}

/// Run `call` of `name` with `args` (a JSON object); exit 1 unless the outcome is ok.
pub(crate) async fn run(
    cli: &Cli,
    name: &str,
    args: Option<&str>,
    flags: CallFlags,
) -> anyhow::Result<u8> {
    let args: Option<Value> = match args {
        None => None,
        Some(spec) => {
            let text = args_text(spec)?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("--args is not valid JSON: {}", text.trim()))?,
            )
        }
    };
    let (mut cfg, target) = load_for_target(cli, &flags.target)?;
    // A one-shot target's tools may be called by the server's own names.
    let name = match &target {
        Some(t) if !name.starts_with("mcp__") => mcpvisor::public_tool_name(t, name),
        _ => name.to_owned(),
    };
    let shared = matches!(
        name.as_str(),
        "list_mcp_resources" | "list_mcp_resource_templates" | "read_mcp_resource"
    );
    if !shared {
        // Only the work this call needs: the one server its name names.
        let owner = cfg
            .servers
            .iter()
            .filter(|s| name.starts_with(&format!("mcp__{}__", s.server_name)))
            .max_by_key(|s| s.server_name.len())
            .map(|s| s.server_name.clone());
        let providers = crate::config::provider_names(&cfg);
        let provider = providers
            .iter()
            .find(|p| name.starts_with(&format!("mcp__{p}__")));
        let owner = match (owner, provider) {
            // A provider's tool: no configured server is needed.
            (None, Some(_)) => Some(String::new()),
            (o, _) => o,
        };
        let Some(owner) = owner else {
            let mut known: Vec<&str> = cfg.servers.iter().map(|s| s.server_name.as_str()).collect();
            known.extend(providers.iter().map(String::as_str));
            bail!(
                "{name:?} names no configured server (public names are mcp__<server>__<tool>; configured: {}); `mcpvisor tools` lists the tools",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
        };
        cfg.servers.retain(|s| s.server_name == owner);
    }
    let (runtime, attachments) = start_for_calls(cli, cfg, &flags).await?;
    let def = runtime
        .tools(&Scope::Global)
        .into_iter()
        .find(|d| d.name == name);
    let args = match merge_args(args, &flags.arg, def.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            let _ = finish(runtime).await;
            return Err(e);
        }
    };
    let options = call_options(&flags);
    let progress = (!cli.json).then(|| ProgressLine::start(&runtime));
    let outcome = runtime.call(&Scope::Global, &name, args, options).await;
    if let Some(p) = progress {
        p.stop().await;
    }
    let _ = finish(runtime).await;
    if cli.json {
        println!("{}", outcome_json(&outcome));
    } else {
        outln!("{}", outcome.projection);
        if let Some(e) = &outcome.error
            && !outcome.projection.contains(e.as_str())
        {
            errln!("{}: {e}", outcome.kind.name());
        }
        for note in &outcome.notes {
            errln!("{note}");
        }
        if let Some(r) = &outcome.stop {
            errln!("a hook stopped the turn: {r}");
        }
        if outcome.kind == mcpvisor::OutcomeKind::UnknownTool {
            errln!("(`mcpvisor tools` lists the tool names)");
        }
        if !outcome.images.is_empty()
            && let Some(dir) = &attachments
        {
            eprintln!(
                "{} image(s) saved in {}",
                outcome.images.len(),
                dir.display()
            );
        }
    }
    Ok(u8::from(!outcome.is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_values_are_typed_by_the_schema() {
        let int = serde_json::json!({"type": "integer"});
        assert_eq!(typed("42", Some(&int)).unwrap(), Value::from(42));
        assert!(typed("4x", Some(&int)).is_err());
        let s = serde_json::json!({"type": "string"});
        assert_eq!(typed("42", Some(&s)).unwrap(), Value::String("42".into()));
        let b = serde_json::json!({"type": "boolean"});
        assert_eq!(typed("true", Some(&b)).unwrap(), Value::Bool(true));
        assert_eq!(typed("[1,2]", None).unwrap(), serde_json::json!([1, 2]));
        assert_eq!(typed("hello", None).unwrap(), Value::String("hello".into()));
    }
}
