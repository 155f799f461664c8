//! `mcpvisor chat`: the tool loop (LOOP-1..7) against an OpenAI-compatible
//! or Anthropic endpoint, with every configured tool. `--prompt TEXT` runs
//! one turn (for scripts); without it, each line read from stdin is a turn.
//! Text streams to stdout; a row per tool use goes to stderr; `--json`
//! prints every event as a JSON line and a last `{"final": …}` line.
//!
//! A line that starts with `/` is a command, not a prompt (`//` sends a
//! prompt that starts with `/`): `/exit` and `/quit` end the session, any
//! other is raised as the mods' `command.run`. The rows drawn for tool
//! calls, results and hooks pass through the mods' `ui.render` first.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use anyhow::{Context, bail};
use mcpvisor::{ModelRoute, Provider, TurnEvent, TurnOutcome, TurnRequest};
use serde_json::json;

use crate::cli::Cli;
use crate::config::{builder_for, load_config};
use crate::lifecycle::{finish, start_with};

/// `chat`'s flags (each falls back to the config's `[model]`).
pub(crate) struct ChatFlags {
    pub(crate) provider: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) key_secret: Option<String>,
    pub(crate) prompt: Option<String>,
    pub(crate) max_rounds: Option<u32>,
    pub(crate) no_tools: bool,
    pub(crate) parallel: Option<usize>,
    pub(crate) defer: Option<String>,
    pub(crate) tool_search: Option<String>,
}

/// Run `chat`; exit 0 when every turn finished, 1 when one failed.
pub(crate) async fn run(cli: &Cli, flags: ChatFlags) -> anyhow::Result<u8> {
    let cfg = load_config(cli, true)?;
    let m = cfg.model.clone();
    let provider_name = flags
        .provider
        .or(m.provider)
        .context("no model provider: pass --provider openai|anthropic|openai-responses (or set [model] provider)")?;
    let Some(provider) = Provider::parse(&provider_name) else {
        bail!("--provider {provider_name:?}: expected openai, anthropic or openai-responses");
    };
    let endpoint = flags
        .endpoint
        .or(m.endpoint)
        .context("no model endpoint: pass --endpoint URL (or set [model] endpoint), e.g. https://api.openai.com/v1")?;
    let model = flags
        .model
        .or(m.model)
        .context("no model name: pass --model NAME (or set [model] model)")?;
    let defer = match flags.defer.as_deref() {
        None => mcpvisor::Defer::Auto,
        Some(word) => mcpvisor::Defer::parse(word)
            .with_context(|| format!("--defer {word:?}: expected auto, always or never"))?,
    };
    let tool_search = match flags.tool_search.as_deref().or(m.tool_search.as_deref()) {
        None => mcpvisor::ToolSearch::Auto,
        Some(word) => mcpvisor::ToolSearch::parse(word)
            .with_context(|| format!("--tool-search {word:?}: expected auto, native or local"))?,
    };
    if tool_search == mcpvisor::ToolSearch::Native && provider == Provider::OpenAi {
        bail!(
            "--tool-search native: Chat Completions (provider openai) has no tool search of its own; use local, or --provider openai-responses"
        );
    }
    let mut route = ModelRoute::new(provider, endpoint, model);
    route.tool_search = tool_search;
    route.key_secret = flags.key_secret.or(m.key_secret);
    route.supports_tools = !flags.no_tools && m.supports_tools.unwrap_or(true);
    route.encrypted_reasoning = m.encrypted_reasoning.unwrap_or(false);
    let max_rounds = flags
        .max_rounds
        .or(m.max_rounds)
        .unwrap_or(mcpvisor::DEFAULT_MAX_ROUNDS);
    // Registered before any server starts: a signal during the start is
    // taken at the first turn or prompt, never the default kill.
    let signals = Signals::new()?;
    crate::config::require_hooks(&cfg)?;
    let builder = builder_for(&cfg, false)?;
    let runtime = start_with(builder, cfg.servers, cli.json).await?;
    let chat = format!("chat-{}", uuid::Uuid::new_v4());
    // MOD-2: the chat is the CLI's session.
    mod_event(&runtime, "session.start", &chat, cli.json).await;
    let render = renderer(&runtime).await;
    let mut failed = false;
    let mut session = Session {
        cli,
        runtime: &runtime,
        route: &route,
        chat: chat.clone(),
        max_rounds,
        parallel: flags.parallel.unwrap_or(mcpvisor::DEFAULT_PARALLEL_CALLS),
        defer,
        signals,
        system: session_start(&runtime, cli.json, render.as_ref()).await,
        render,
    };
    // Why the session ends, for the SessionEnd hooks: the end of input or
    // an exit command, else a signal or a turn that asked to stop.
    let mut end = "other";
    match flags.prompt {
        Some(prompt) => match parse_line(&prompt) {
            Line::Prompt(prompt) => {
                let (f, _) = session.turn(prompt).await;
                failed |= f;
            }
            Line::Command { name, args } => {
                failed |= !session.command(name, args).await.1;
            }
        },
        None => loop {
            eprint!("> ");
            let _ = std::io::stderr().flush();
            let read = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|n| (n, line))
            });
            // A signal at the prompt ends the session.
            let (n, line) = tokio::select! {
                r = read => r??,
                _ = session.signals.next() => break,
            };
            if n == 0 {
                end = "prompt_input_exit";
                break;
            }
            let prompt = line.trim().to_owned();
            if prompt.is_empty() {
                continue;
            }
            let prompt = match parse_line(&prompt) {
                Line::Prompt(p) => p,
                Line::Command { name, args } => {
                    if session.command(name, args).await.0 {
                        end = "prompt_input_exit";
                        break;
                    }
                    continue;
                }
            };
            let (f, stop) = session.turn(prompt).await;
            failed |= f;
            if stop {
                break;
            }
        },
    }
    session_end(&runtime, end).await;
    mod_event(&runtime, "session.end", &chat, cli.json).await;
    let _ = finish(runtime).await;
    Ok(u8::from(failed))
}

/// Raise a session event for the mods (`session.start`, `session.end`).
async fn mod_event(runtime: &mcpvisor::Runtime, event: &'static str, chat: &str, json: bool) {
    if let Some(host) = runtime.mods() {
        let payload = serde_json::json!({"session_id": chat, "source": "chat"});
        mod_chain(&host, event, payload, json).await;
    }
}

/// Run `event`'s chain; its reports go to stderr (or, with `--json`, as
/// `mods` lines).
async fn mod_chain(
    host: &Arc<mcpvisor::mods::ModHost>,
    event: &'static str,
    payload: serde_json::Value,
    json: bool,
) -> Option<mcpvisor::mods::ChainOutcome> {
    let host = host.clone();
    let out = tokio::task::spawn_blocking(move || host.run(event, payload))
        .await
        .ok()?;
    for r in &out.reports {
        if json {
            println!("{}", serde_json::json!({"mods": event, "report": r}));
        } else {
            eprintln!("mods: {event}: {}: {}: {}", r.mod_name, r.kind, r.message);
        }
    }
    Some(out)
}

/// The mod host when a mod draws (`ui.render`): only then does each row
/// take a trip through the chain.
async fn renderer(runtime: &mcpvisor::Runtime) -> Option<Arc<mcpvisor::mods::ModHost>> {
    let host = runtime.mods()?;
    let h = host.clone();
    let draws =
        tokio::task::spawn_blocking(move || h.list().0.iter().any(|r| r.event == "ui.render"))
            .await
            .unwrap_or(false);
    draws.then_some(host)
}

/// A line read at the prompt.
#[derive(Debug, PartialEq)]
enum Line<'a> {
    Prompt(String),
    Command { name: &'a str, args: &'a str },
}

/// `/name args` is a command; `//text` is the prompt `/text`.
fn parse_line(line: &str) -> Line<'_> {
    match line.strip_prefix('/') {
        Some(rest) if rest.starts_with('/') => Line::Prompt(rest.to_owned()),
        Some(rest) if !rest.is_empty() => {
            let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            Line::Command {
                name,
                args: args.trim(),
            }
        }
        _ => Line::Prompt(line.to_owned()),
    }
}

/// SessionStart hooks (source `startup`): their context becomes the system
/// prompt of the session's turns.
/// The SessionEnd hooks (HOOK-6), with why the session ends; their notes
/// on stderr. Nothing they answer changes anything: the session is over.
async fn session_end(runtime: &mcpvisor::Runtime, reason: &str) {
    let input = mcpvisor::HookInput::SessionEnd {
        reason: reason.to_owned(),
    };
    let _ = session_hooks(runtime, &input).await;
}

/// Run the hooks of a session event (none configured: `None`), their notes
/// on stderr.
async fn session_hooks(
    runtime: &mcpvisor::Runtime,
    input: &mcpvisor::HookInput,
) -> Option<mcpvisor::HookReport> {
    let hooks = runtime.hooks();
    if !hooks.has(input.event()) {
        return None;
    }
    let report = hooks
        .run(
            hooks.session(),
            input,
            None,
            &mcpvisor::CancellationToken::new(),
        )
        .await;
    for note in report.notes() {
        eprintln!("{note}");
    }
    Some(report)
}

async fn session_start(
    runtime: &mcpvisor::Runtime,
    json_out: bool,
    render: Option<&Arc<mcpvisor::mods::ModHost>>,
) -> Option<String> {
    let input = mcpvisor::HookInput::SessionStart {
        source: "startup".into(),
    };
    let report = session_hooks(runtime, &input).await?;
    if report.merged.context.is_empty() {
        return None;
    }
    let context = report.merged.context.join("\n\n");
    print_event(
        &TurnEvent::Hook {
            hook_event: "SessionStart".into(),
            verdict: "context".into(),
            text: context.clone(),
        },
        json_out,
        render,
    )
    .await;
    Some(context)
}

/// SIGINT and SIGTERM, registered once for the session.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next signal; true for SIGTERM (end the session).
    async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.int.recv() => false,
            _ = self.term.recv() => true,
        }
    }
}

/// What every turn of one `chat` shares.
struct Session<'a> {
    cli: &'a Cli,
    runtime: &'a mcpvisor::Runtime,
    route: &'a ModelRoute,
    /// The chat id (per-chat trust grants last the session).
    chat: String,
    /// The SessionStart hooks' context, the system prompt of every turn.
    system: Option<String>,
    max_rounds: u32,
    /// Calls of one round in flight at once.
    parallel: usize,
    /// Whether tools are deferred behind the search tool.
    defer: mcpvisor::Defer,
    signals: Signals,
    /// The mod host, when a mod handles `ui.render`.
    render: Option<Arc<mcpvisor::mods::ModHost>>,
}

impl Session<'_> {
    /// One turn, printed as it goes: (it failed, the session must end).
    async fn turn(&mut self, prompt: String) -> (bool, bool) {
        one_turn(self, prompt).await
    }

    /// A `/command`: `/exit` and `/quit` end the session; any other is the
    /// mods' `command.run` (`{command, args, session_id}`), whose handler
    /// answers by setting `event.output` (printed) or by ending the chain.
    /// (the session must end, a handler took it).
    async fn command(&mut self, name: &str, args: &str) -> (bool, bool) {
        let json_out = self.cli.json;
        if matches!(name, "exit" | "quit") {
            return (true, true);
        }
        let out = match self.runtime.mods() {
            Some(host) => {
                let payload = json!({"command": name, "args": args, "session_id": self.chat});
                mod_chain(&host, "command.run", payload, json_out).await
            }
            None => None,
        };
        let output = out
            .as_ref()
            .and_then(|o| o.payload.get("output"))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let taken = output.is_some() || out.as_ref().is_some_and(|o| o.stopped_by.is_some());
        match (output, json_out) {
            (Some(text), true) => println!("{}", json!({"command": name, "output": text})),
            (Some(text), false) => println!("{text}"),
            (None, _) if taken => {}
            (None, true) => println!(
                "{}",
                json!({"command": name, "error": "unknown command: no mod handled it"})
            ),
            (None, false) => eprintln!(
                "mcpvisor chat: unknown command /{name}: no mod handled it (built in: /exit, /quit; `//` sends a prompt that starts with /)"
            ),
        }
        (false, taken)
    }
}

/// One turn, printed as it goes: (it failed, the session must end). Ctrl-C
/// ends the turn quiescently (the running call is cancelled, its server is
/// told); SIGTERM also ends the session.
async fn one_turn(session: &mut Session<'_>, prompt: String) -> (bool, bool) {
    let (cli, runtime) = (session.cli, session.runtime);
    let cancel = mcpvisor::CancellationToken::new();
    let mut request = TurnRequest::new(mcpvisor::Scope::Global, session.route.clone(), prompt);
    request.max_rounds = session.max_rounds;
    request.parallel = session.parallel;
    request.defer = session.defer;
    request.chat = Some(session.chat.clone());
    request.system = session.system.clone();
    let signals = &mut session.signals;
    request.cancel = Some(cancel.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let json_out = cli.json;
    // A spinner on the tool row while its call runs, on a terminal only.
    let spin = !json_out && std::io::stderr().is_terminal();
    let render = session.render.clone();
    let printer = tokio::spawn(async move {
        let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
        let mut running = false;
        let mut frame = 0usize;
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            tokio::select! {
                e = rx.recv() => {
                    let Some(e) = e else { break };
                    if running {
                        eprint!("\r\x1b[2K");
                    }
                    print_event(&e, json_out, render.as_ref()).await;
                    running = spin && matches!(e, TurnEvent::ToolCall { .. });
                }
                _ = tick.tick(), if running => {
                    frame = (frame + 1) % frames.len();
                    eprint!("\r  {} running…", frames[frame]);
                    let _ = std::io::stderr().flush();
                }
            }
        }
    });
    let turn = runtime.turn(request, Some(tx));
    tokio::pin!(turn);
    let mut stop = false;
    let outcome: TurnOutcome = tokio::select! {
        o = &mut turn => o,
        term = signals.next() => {
            stop = term;
            cancel.cancel();
            turn.await
        }
    };
    let _ = printer.await;
    if json_out {
        println!(
            "{}",
            json!({
                "final": outcome.text,
                "rounds": outcome.rounds,
                "tool_uses": outcome.tool_uses,
                "usage": outcome.usage,
                "error": outcome.error.as_ref().map(|e| json!({"message": e.to_string(), "detail": e})),
            })
        );
    } else {
        println!();
        if let Some(e) = &outcome.error {
            eprintln!("mcpvisor chat: {e}");
        }
    }
    (outcome.error.is_some(), stop)
}

/// Print one turn event: streamed text to stdout, a row per tool call,
/// result and hook to stderr, each row through the mods' `ui.render` when
/// one draws (`{kind, text}`; a handler may replace `event.text`; what the
/// model sees never changes). `--json` prints the events as they are.
async fn print_event(e: &TurnEvent, as_json: bool, render: Option<&Arc<mcpvisor::mods::ModHost>>) {
    if as_json {
        if let Ok(line) = serde_json::to_string(e) {
            println!("{line}");
        }
        return;
    }
    if let TurnEvent::Text { text } = e {
        print!("{}", crate::render::term(text));
        let _ = std::io::stdout().flush();
        return;
    }
    let Some((kind, text)) = row(e) else {
        return;
    };
    let text = match render {
        Some(host) => {
            let payload = json!({"kind": kind, "text": text});
            mod_chain(host, "ui.render", payload, false)
                .await
                .and_then(|o| {
                    o.payload
                        .get("text")
                        .and_then(|t| t.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or(text)
        }
        None => text,
    };
    let text = crate::render::term(&text);
    match kind {
        "tool_call" => eprintln!("\n⏺ {text}"),
        "tool_result" => eprintln!("  ⎿ {text}"),
        "round" | "tools_found" | "tool_search" => eprintln!("· {text}"),
        _ => eprintln!("\n⚑ {text}"),
    }
}

/// The row drawn for an event, `(kind, text)`: `round` (how many tools
/// the request offered), `tools_found`, `tool_search` (the endpoint
/// refused its own tool search), `tool_call`, `tool_result` or `hook`.
fn row(e: &TurnEvent) -> Option<(&'static str, String)> {
    match e {
        TurnEvent::ToolCall {
            tool, arguments, ..
        } => {
            let args = arguments.to_string();
            let (args, _) = apply_cut(&args, 120);
            Some(("tool_call", format!("{tool} {args}")))
        }
        // A round's results come after all its calls: each names its tool.
        TurnEvent::ToolResult {
            tool,
            outcome,
            content,
            ..
        } => {
            let first = content.lines().next().unwrap_or("");
            let (first, _) = apply_cut(first, 160);
            Some(("tool_result", format!("{tool} {outcome}: {first}")))
        }
        TurnEvent::Hook {
            hook_event,
            verdict,
            text,
        } => {
            let (text, _) = apply_cut(text, 160);
            Some(("hook", format!("{hook_event} hook: {verdict}: {text}")))
        }
        TurnEvent::Round {
            round,
            tools,
            deferred,
            tool_bytes,
        } => Some((
            "round",
            if *deferred == 0 {
                format!("round {round}: {tools} tool(s) offered ({tool_bytes} bytes)")
            } else {
                format!(
                    "round {round}: {tools} tool(s) offered, {deferred} deferred ({tool_bytes} bytes)"
                )
            },
        )),
        TurnEvent::ToolSearchRefused { message, .. } => {
            let (message, _) = apply_cut(message, 160);
            Some((
                "tool_search",
                format!("the endpoint refused its own tool search ({message}); searching locally"),
            ))
        }
        TurnEvent::ToolsFound { query, tools, .. } => Some((
            "tools_found",
            format!(
                "searched {query:?}: found {}",
                if tools.is_empty() {
                    "nothing".to_owned()
                } else {
                    tools.join(", ")
                }
            ),
        )),
        TurnEvent::Text { .. } | TurnEvent::Thinking { .. } | TurnEvent::Usage { .. } => None,
        // An event this binary does not know yet draws no row.
        _ => None,
    }
}

/// `text` cut to `max` bytes on a character boundary, with `…`.
fn apply_cut(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}…", &text[..end]), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slash_line_is_a_command_and_a_double_slash_a_prompt() {
        assert_eq!(
            parse_line("/todo add milk"),
            Line::Command {
                name: "todo",
                args: "add milk"
            }
        );
        assert_eq!(
            parse_line("/exit"),
            Line::Command {
                name: "exit",
                args: ""
            }
        );
        assert_eq!(
            parse_line("//etc is a path"),
            Line::Prompt("/etc is a path".into())
        );
        assert_eq!(parse_line("/"), Line::Prompt("/".into()));
        assert_eq!(parse_line("hello /x"), Line::Prompt("hello /x".into()));
    }
}
