//! JS mods (MOD-1..6), feature `mods`: trusted host extensions in an
//! embedded QuickJS engine (rquickjs). Mods are trusted code of the host,
//! NOT an OS sandbox: a mod runs with the host's privileges, limited only by
//! its memory limit, its deadline per handler, and the host APIs it was
//! granted.
//!
//! - **Loading (MOD-1).** Only with `[mods] enabled = true`, and only the
//!   files listed in `[[mods.load]]`, in order. A mod is an ES module that
//!   exports `register(on, options)`. A mod that fails to load is reported
//!   with its file, line and message; the others still load.
//! - **The host.** [`ModHost`] owns the engines: one QuickJS runtime per mod
//!   (its own memory limit), all on one dedicated thread (the engine is not
//!   `Send`), driven through a channel. Dropping the host (or
//!   [`ModHost::shutdown`]) lets the in-flight chain finish, then drops the
//!   engines.
//! - **Chains (MOD-3).** Handlers run in mod load order, then registration
//!   order. Each gets `(event, next)`; calling `next()` continues the chain,
//!   and returning without it ends the chain there (that handler decided).
//!   A handler may be registered with `{ catch(error, event, next) }`. A
//!   throw or a timeout is reported, and the chain continues as if `next()`
//!   had been called. Each handler has a deadline: the engine's interrupt
//!   stops a loop, and a promise that does not settle in time is abandoned.
//!   A mod that exceeds its memory limit, or times out three times, is
//!   reported and disabled; the host serves the others.
//! - **Events (MOD-2).** All eight events are accepted in registrations,
//!   and all eight are raised at their points ([`SERVED`]): the turn's and
//!   the call pipeline's by the runtime, the session's, `command.run` and
//!   `ui.render` by the host's session (`mcpvisor chat`), each through
//!   [`ModHost::run`]. An unknown event is an error of the mod's
//!   registration.
//! - **Rewrites (MOD-4).** `event.prompt` of a `prompt.submit` may be
//!   assigned. That rewrites the prompt's text, and its non-text blocks stay
//!   in place. Strings pushed to `event.context` are appended context.
//!   A changed `event.input` of a `tool.call` is reported and ignored.
//! - **Host APIs (MOD-6).** On `options.host`, each a capability granted
//!   per mod: `log(msg)` (`log`), `config()` (`config`), `spawn(cmd, args)`
//!   (`spawn`: a process group of its own, reaped, killed at the handler's
//!   deadline), `fetch(url, init)` (`http`: the endpoint validated, TRUST-3)
//!   and `callTool(name, args, {scope})` (`tools`: a promise of the call's
//!   outcome, through the whole call pipeline). An ungranted API throws
//!   inside the mod.
//! - **No recursion (MOD-5).** The one host API that raises an event is
//!   `callTool`: its `tool.call` is seen only by the mods loaded before the
//!   caller. The call carries its origin ([`ModToolCall::origin`], then
//!   `CallOptions::mod_origin`); while the caller's handler awaits it, the
//!   host's thread runs that nested chain on the mods before the caller, and
//!   keeps every other request for after the handler.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};

use rquickjs::{CatchResultExt, CaughtError, Context, Function, Module, Object, Runtime as Engine};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod calls;
use calls::Host;
pub use calls::{ModToolCall, ToolCaller, outcome_json};

/// The events mods can register for (MOD-2).
pub const EVENTS: &[&str] = &[
    "session.start",
    "session.end",
    "prompt.submit",
    "turn.start",
    "turn.complete",
    "tool.call",
    "command.run",
    "ui.render",
];

/// The events raised at their points: `turn.start`, `prompt.submit` and
/// `turn.complete` in `Runtime::turn`, `tool.call` in the call pipeline;
/// `session.start` / `session.end`, `command.run` (a `/command` line) and
/// `ui.render` (a line the host draws) by the host's session and UI
/// (`mcpvisor chat`; an embedder raises them with `ModHost::run`). All
/// eight are served.
pub const SERVED: &[&str] = &[
    "prompt.submit",
    "tool.call",
    "turn.start",
    "turn.complete",
    "session.start",
    "session.end",
    "command.run",
    "ui.render",
];

/// The host APIs a mod can be granted (MOD-6).
pub const CAPABILITIES: &[&str] = &["log", "config", "spawn", "http", "tools"];

/// One mod to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModSpec {
    /// The ES module file.
    pub path: PathBuf,
    /// Granted host APIs ([`CAPABILITIES`]).
    pub capabilities: Vec<String>,
}

/// The mod host's settings.
#[derive(Debug, Clone)]
pub struct ModSettings {
    /// The mods, in load order.
    pub mods: Vec<ModSpec>,
    /// Each mod's memory limit (bytes).
    pub memory_limit: usize,
    /// Each handler's deadline.
    pub deadline: Duration,
    /// What `options.host.config()` returns (a JSON value).
    pub config: Value,
    /// `MCPVISOR_TAG` of the processes mods spawn (the runtime's shutdown
    /// finds by it whatever left its group, RECO-7).
    pub process_tag: Option<String>,
}

impl ModSettings {
    /// Defaults (32 MiB, 500 ms) for these mods.
    pub fn new(mods: Vec<ModSpec>) -> Self {
        Self {
            mods,
            memory_limit: 32 << 20,
            deadline: Duration::from_millis(500),
            config: Value::Null,
            process_tag: None,
        }
    }
}

/// Something a mod did that the host reports (MOD-1..4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModReport {
    /// The mod (its file name).
    #[serde(rename = "mod")]
    pub mod_name: String,
    /// `load_error`, `timeout`, `throw`, `memory`, `disabled`, `unserved`,
    /// `refused_rewrite`, `log`.
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// One registration, as `mods list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Registration {
    /// The mod.
    #[serde(rename = "mod")]
    pub mod_name: String,
    /// The event.
    pub event: String,
    /// Whether the host serves that event.
    pub served: bool,
    /// Registered with a `catch` handler.
    pub catch: bool,
}

/// What a chain decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainOutcome {
    /// The event.
    pub event: String,
    /// The event payload after the chain: for `prompt.submit` with the
    /// rewritten `prompt` and `blocks`; for `command.run` and `ui.render`
    /// with what the handlers set (`output`, `text`). For the other events
    /// it is the payload as raised (a `tool.call`'s input is not
    /// rewritable, MOD-4).
    pub payload: Value,
    /// `prompt.submit`: the prompt text after the chain.
    pub prompt: Option<String>,
    /// Appended context strings, in order.
    pub context: Vec<String>,
    /// The handlers that ran, as `mod#index`.
    pub ran: Vec<String>,
    /// Whether a handler ended the chain without `next()`.
    pub stopped_by: Option<String>,
    /// Timeouts, throws, unserved events, refused rewrites, logs.
    pub reports: Vec<ModReport>,
}

/// The JS side of the chain: `on` collects registrations (checking the
/// event name); `__mcpvisor_run` runs handler `i` on an event (JSON in,
/// JSON out), through its `catch` when it throws.
const PRELUDE: &str = r#"
globalThis.__mcpvisor = { handlers: [], known: __KNOWN__, pending: null, calls: {} };
globalThis.__mcpvisor_settle = function (id, json) {
  const c = __mcpvisor.calls[id];
  if (!c) return;
  delete __mcpvisor.calls[id];
  const r = JSON.parse(json);
  if (r.refused !== undefined) c.reject(new Error(r.refused)); else c.resolve(r);
};
globalThis.__mcpvisor_on = function (event, handler, opts) {
  if (typeof event !== "string" || !__mcpvisor.known.includes(event)) {
    throw new Error("unknown event " + JSON.stringify(event) + " (known: " + __mcpvisor.known.join(", ") + ")");
  }
  if (typeof handler !== "function") throw new Error("the handler of " + event + " is not a function");
  const c = opts && typeof opts.catch === "function" ? opts.catch : null;
  __mcpvisor.handlers.push({ event, handler, catch: c });
};
globalThis.__mcpvisor_list = function () {
  return JSON.stringify(__mcpvisor.handlers.map((h) => ({ event: h.event, catch: h.catch !== null })));
};
globalThis.__mcpvisor_run = function (i, json) {
  const h = __mcpvisor.handlers[i];
  const ev = JSON.parse(json);
  if (!Array.isArray(ev.context)) ev.context = [];
  const st = { continued: false, threw: null, caught: null, done: true };
  const next = () => { st.continued = true; };
  const fail = (e) => {
    const text = String(e && e.message !== undefined ? e.message : e);
    if (h.catch) {
      st.caught = text;
      try { h.catch(e, ev, next); } catch (e2) { st.threw = String(e2 && e2.message !== undefined ? e2.message : e2); st.continued = true; }
    } else {
      st.threw = text;
      st.continued = true;
    }
  };
  try {
    const r = h.handler(ev, next);
    if (r && typeof r.then === "function") {
      st.done = false;
      r.then(() => { st.done = true; }, (e) => { fail(e); st.done = true; });
    }
  } catch (e) {
    fail(e);
  }
  __mcpvisor.pending = { ev, st };
  return __mcpvisor_collect();
};
globalThis.__mcpvisor_collect = function () {
  const p = __mcpvisor.pending;
  return JSON.stringify({ ev: p.ev, st: p.st });
};
"#;

/// A handler's result, from `__mcpvisor_collect`.
#[derive(Debug, serde::Deserialize)]
struct Ran {
    ev: Value,
    st: RanState,
}

#[derive(Debug, serde::Deserialize)]
struct RanState {
    continued: bool,
    threw: Option<String>,
    caught: Option<String>,
    done: bool,
}

/// One loaded mod: its engine, context and registrations.
struct Loaded {
    name: String,
    engine: Engine,
    ctx: Context,
    /// (event, has catch), by registration index.
    handlers: Vec<(String, bool)>,
    deadline_at: Arc<AtomicU64>,
    epoch: Instant,
    timeouts: u32,
    /// Stopped serving (memory, timeouts); the reason is in its report.
    disabled: bool,
    /// Its `callTool` calls in flight, by host-wide id.
    calls: Rc<RefCell<HashMap<u64, CancellationToken>>>,
}

/// Requests to the mod host's thread.
enum Req {
    List(Sender<(Vec<Registration>, Vec<ModReport>)>),
    Run {
        event: String,
        payload: Value,
        /// Raised by this mod's `callTool` (MOD-5): only the mods before
        /// it see the event.
        origin: Option<usize>,
        reply: Sender<ChainOutcome>,
    },
    /// A `callTool` call ended.
    Settled {
        id: u64,
        result: Value,
    },
    /// Serve what came before, then drop the engines.
    Stop,
}

/// The mod host: the engines on their own thread (see the module docs).
pub struct ModHost {
    tx: std::sync::Mutex<Option<Sender<Req>>>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// How `callTool` reaches the runtime, once it runs.
    caller: Arc<OnceLock<ToolCaller>>,
}

impl std::fmt::Debug for ModHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModHost").finish_non_exhaustive()
    }
}

impl ModHost {
    /// Load the mods (on the host's thread) and start serving. Load errors
    /// are in [`ModHost::list`]'s reports, never fatal.
    pub fn start(settings: ModSettings) -> Result<Self, String> {
        let (tx, rx) = std::sync::mpsc::channel::<Req>();
        // `spawn` and `fetch` run their I/O on the caller's tokio runtime
        // (the process-group owner's reaper is a tokio task).
        let io = tokio::runtime::Handle::try_current().ok();
        let caller: Arc<OnceLock<ToolCaller>> = Arc::default();
        let host = Host {
            tx: tx.clone(),
            io,
            caller: caller.clone(),
            ids: Arc::default(),
        };
        let thread = std::thread::Builder::new()
            .name("mcpvisor-mods".into())
            .spawn(move || serve(settings, rx, host))
            .map_err(|e| format!("cannot start the mod host's thread: {e}"))?;
        Ok(Self {
            tx: std::sync::Mutex::new(Some(tx)),
            thread: std::sync::Mutex::new(Some(thread)),
            caller,
        })
    }

    /// Give `callTool` its way to the runtime (the runtime does this once
    /// it runs; a second caller is ignored). Until then `callTool` rejects.
    pub fn set_caller(&self, caller: ToolCaller) {
        let _ = self.caller.set(caller);
    }

    /// Every registration and the reports so far (load errors, unserved
    /// registrations).
    pub fn list(&self) -> (Vec<Registration>, Vec<ModReport>) {
        let (reply, rx) = std::sync::mpsc::channel();
        if self.send(Req::List(reply)) {
            return rx.recv().unwrap_or_default();
        }
        (Vec::new(), Vec::new())
    }

    /// Run `event`'s chain on `payload` (blocking; call it from a blocking
    /// context, e.g. `tokio::task::spawn_blocking`).
    pub fn run(&self, event: &str, payload: Value) -> ChainOutcome {
        self.run_from(event, payload, None)
    }

    /// [`Self::run`] for an event raised by the host API of the mod at load
    /// index `origin` (MOD-5): only the mods loaded before it see it.
    pub fn run_from(&self, event: &str, payload: Value, origin: Option<usize>) -> ChainOutcome {
        let (reply, rx) = std::sync::mpsc::channel();
        let sent = self.send(Req::Run {
            event: event.to_owned(),
            payload: payload.clone(),
            origin,
            reply,
        });
        let gone = || ChainOutcome {
            event: event.to_owned(),
            prompt: payload
                .get("prompt")
                .and_then(Value::as_str)
                .map(str::to_owned),
            payload: payload.clone(),
            context: Vec::new(),
            ran: Vec::new(),
            stopped_by: None,
            reports: vec![ModReport {
                mod_name: "host".into(),
                kind: "disabled".into(),
                message: "the mod host has stopped".into(),
            }],
        };
        if !sent {
            return gone();
        }
        rx.recv().unwrap_or_else(|_| gone())
    }

    fn send(&self, req: Req) -> bool {
        let tx = self.tx.lock().ok().and_then(|t| t.clone());
        tx.is_some_and(|tx| tx.send(req).is_ok())
    }

    /// Let the in-flight chain finish, then drop the engines.
    pub fn shutdown(self) {
        self.stop();
    }

    /// [`Self::shutdown`] through a shared handle (the runtime's shutdown):
    /// later chains get a "stopped" report. Blocking.
    pub fn stop(&self) {
        // The engines hold senders of their own (for `callTool`'s results):
        // the thread stops at `Stop`, not when this sender goes.
        if let Ok(mut tx) = self.tx.lock()
            && let Some(tx) = tx.take()
        {
            let _ = tx.send(Req::Stop);
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for ModHost {
    fn drop(&mut self) {
        self.stop();
    }
}

fn report(name: &str, kind: &str, message: impl Into<String>) -> ModReport {
    ModReport {
        mod_name: name.to_owned(),
        kind: kind.to_owned(),
        message: message.into(),
    }
}

/// The host's thread: load, then serve requests until the channel closes.
fn serve(settings: ModSettings, rx: Receiver<Req>, host: Host) {
    let mut reports = Vec::new();
    let mut mods = Vec::new();
    for spec in &settings.mods {
        match load(spec, &settings, &mut reports, &host, mods.len()) {
            Ok(m) => mods.push(m),
            Err(e) => reports.push(report(&mod_name(spec), "load_error", e)),
        }
    }
    let mut deferred = VecDeque::new();
    loop {
        let req = match deferred.pop_front() {
            Some(r) => r,
            None => match rx.recv() {
                Ok(r) => r,
                Err(_) => break,
            },
        };
        match req {
            Req::Stop => break,
            // The result of a call whose handler was abandoned.
            Req::Settled { .. } => {}
            Req::List(reply) => {
                let regs = mods
                    .iter()
                    .flat_map(|m| {
                        m.handlers.iter().map(|(event, catch)| Registration {
                            mod_name: m.name.clone(),
                            event: event.clone(),
                            served: SERVED.contains(&event.as_str()),
                            catch: *catch,
                        })
                    })
                    .collect();
                let _ = reply.send((regs, reports.clone()));
            }
            Req::Run {
                event,
                payload,
                origin,
                reply,
            } => {
                // MOD-5: an event a mod's host call raised (its handler has
                // gone since) is still seen only by the mods before it.
                let seen = origin.map_or(mods.len(), |o| o.min(mods.len()));
                let mut waits = Waits {
                    rx: &rx,
                    deferred: &mut deferred,
                };
                // A bug of the engine's binding must not take every mod down
                // with the thread: the request gets a report instead.
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_chain(
                        &mut mods[..seen],
                        &settings,
                        &event,
                        payload.clone(),
                        &mut waits,
                    )
                }));
                let out = ran.unwrap_or_else(|_| ChainOutcome {
                    event: event.clone(),
                    prompt: None,
                    payload,
                    context: Vec::new(),
                    ran: Vec::new(),
                    stopped_by: None,
                    reports: vec![report(
                        "host",
                        "host_error",
                        "the chain failed inside the mod host (a panic); the mods stay loaded",
                    )],
                });
                let _ = reply.send(out);
            }
        }
    }
}

fn mod_name(spec: &ModSpec) -> String {
    spec.path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec.path.display().to_string())
}

/// The text of an error caught from the engine.
fn caught(e: CaughtError<'_>) -> String {
    match e {
        CaughtError::Exception(ex) => {
            let msg = ex.message().unwrap_or_default();
            match ex.stack() {
                Some(stack) if !stack.trim().is_empty() => {
                    format!("{msg} ({})", stack.lines().next().unwrap_or("").trim())
                }
                _ => msg,
            }
        }
        CaughtError::Value(v) => format!("{v:?}"),
        CaughtError::Error(e) => e.to_string(),
    }
}

fn load(
    spec: &ModSpec,
    settings: &ModSettings,
    reports: &mut Vec<ModReport>,
    host_side: &Host,
    index: usize,
) -> Result<Loaded, String> {
    let io = host_side.io.clone();
    let calls: Rc<RefCell<HashMap<u64, CancellationToken>>> = Rc::default();
    let name = mod_name(spec);
    let file = spec.path.display().to_string();
    let src =
        std::fs::read_to_string(&spec.path).map_err(|e| format!("{file}: cannot read it: {e}"))?;
    let engine = Engine::new().map_err(|e| format!("{file}: no JS engine: {e}"))?;
    engine.set_memory_limit(settings.memory_limit);
    engine.set_max_stack_size(512 << 10);
    let epoch = Instant::now();
    let deadline_at = Arc::new(AtomicU64::new(u64::MAX));
    let cell = deadline_at.clone();
    engine.set_interrupt_handler(Some(Box::new(move || {
        u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
            > cell.load(Ordering::Relaxed)
    })));
    let ctx = Context::full(&engine).map_err(|e| format!("{file}: no JS context: {e}"))?;
    let known = serde_json::to_string(EVENTS).unwrap_or_else(|_| "[]".into());
    let granted = spec.capabilities.clone();
    let config = settings.config.to_string();
    let mut logs: Vec<String> = Vec::new();
    let handlers = ctx.with(|ctx| -> Result<Vec<(String, bool)>, String> {
        ctx.eval::<(), _>(PRELUDE.replace("__KNOWN__", &known))
            .catch(&ctx)
            .map_err(|e| format!("{file}: the prelude failed: {}", caught(e)))?;
        // options.host: each API throws unless granted (MOD-6).
        let host = format!(
            r#"(() => {{
  const granted = {granted};
  const gate = (cap, f) => (...a) => {{
    if (!granted.includes(cap)) throw new Error("the host API " + cap + " was not granted to this mod (capabilities = [\"" + cap + "\"] in its [[mods.load]] entry)");
    return f(...a);
  }};
  globalThis.__mcpvisor_logs = [];
  return {{
    log: gate("log", (m) => {{ __mcpvisor_logs.push(String(m)); }}),
    config: gate("config", () => JSON.parse({config:?})),
    spawn: gate("spawn", (cmd, args) => {{
      const r = JSON.parse(__mcpvisor_spawn(String(cmd), JSON.stringify(args || [])));
      if (r.error) throw new Error(r.error);
      return r;
    }}),
    fetch: gate("http", (url, init) => {{
      const r = JSON.parse(__mcpvisor_fetch(String(url), JSON.stringify(init || {{}})));
      if (r.error) throw new Error(r.error);
      return r;
    }}),
    callTool: gate("tools", (name, args, opts) => new Promise((resolve, reject) => {{
      const scope = opts && opts.scope !== undefined ? String(opts.scope) : "";
      const r = JSON.parse(__mcpvisor_call_tool(String(name), JSON.stringify(args === undefined ? {{}} : args), scope));
      if (r.refused !== undefined) {{ reject(new Error(r.refused)); return; }}
      __mcpvisor.calls[r.id] = {{ resolve, reject }};
    }})),
  }};
}})()"#,
            granted = serde_json::to_string(&granted).unwrap_or_else(|_| "[]".into()),
        );
        // The Rust side of spawn and fetch: JSON in, JSON out; each bounded
        // by what is left of the running handler's deadline.
        let left = {
            let cell = deadline_at.clone();
            move || {
                let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                Duration::from_millis(cell.load(Ordering::Relaxed).saturating_sub(now).min(60_000))
            }
        };
        let (io1, left1, tag) = (io.clone(), left.clone(), settings.process_tag.clone());
        let spawn = Function::new(ctx.clone(), move |cmd: String, args: String| -> String {
            host_spawn(io1.as_ref(), &cmd, &args, left1(), tag.as_deref()).to_string()
        })
        .map_err(|e| format!("{file}: {e}"))?;
        ctx.globals().set("__mcpvisor_spawn", spawn).map_err(|e| format!("{file}: {e}"))?;
        let (io2, left2) = (io.clone(), left.clone());
        let fetch = Function::new(ctx.clone(), move |url: String, init: String| -> String {
            host_fetch(io2.as_ref(), &url, &init, left2()).to_string()
        })
        .map_err(|e| format!("{file}: {e}"))?;
        ctx.globals().set("__mcpvisor_fetch", fetch).map_err(|e| format!("{file}: {e}"))?;
        let (call_host, call_list) = (host_side.clone(), calls.clone());
        let call_tool = Function::new(
            ctx.clone(),
            move |name: String, args: String, scope: String| -> String {
                call_host
                    .call_tool(index, &call_list, &name, &args, &scope)
                    .to_string()
            },
        )
        .map_err(|e| format!("{file}: {e}"))?;
        ctx.globals()
            .set("__mcpvisor_call_tool", call_tool)
            .map_err(|e| format!("{file}: {e}"))?;
        let host: Object<'_> = ctx
            .eval(host)
            .catch(&ctx)
            .map_err(|e| format!("{file}: the host API failed: {}", caught(e)))?;
        let module = Module::declare(ctx.clone(), file.clone(), src.clone())
            .catch(&ctx)
            .map_err(|e| format!("{file}: {}", caught(e)))?;
        let (module, promise) = module
            .eval()
            .catch(&ctx)
            .map_err(|e| format!("{file}: {}", caught(e)))?;
        promise
            .finish::<()>()
            .catch(&ctx)
            .map_err(|e| format!("{file}: {}", caught(e)))?;
        let register: Function<'_> = module
            .get("register")
            .catch(&ctx)
            .map_err(|_| format!("{file}: the module exports no register(on, options) function"))?;
        let on: Function<'_> = ctx
            .globals()
            .get("__mcpvisor_on")
            .map_err(|e| format!("{file}: {e}"))?;
        let options = Object::new(ctx.clone()).map_err(|e| format!("{file}: {e}"))?;
        options.set("host", host).map_err(|e| format!("{file}: {e}"))?;
        register
            .call::<_, rquickjs::Value<'_>>((on, options))
            .catch(&ctx)
            .map_err(|e| format!("{file}: register failed: {}", caught(e)))?;
        let list: Function<'_> = ctx
            .globals()
            .get("__mcpvisor_list")
            .map_err(|e| format!("{file}: {e}"))?;
        let listed: String = list.call(()).map_err(|e| format!("{file}: {e}"))?;
        logs = take_logs(&ctx);
        let parsed: Vec<Value> = serde_json::from_str(&listed).unwrap_or_default();
        Ok(parsed
            .iter()
            .map(|h| {
                (
                    h["event"].as_str().unwrap_or_default().to_owned(),
                    h["catch"].as_bool().unwrap_or(false),
                )
            })
            .collect())
    })?;
    for l in logs {
        reports.push(report(&name, "log", l));
    }
    for (event, _) in &handlers {
        if !SERVED.contains(&event.as_str()) {
            reports.push(report(
                &name,
                "unserved",
                format!(
                    "registered for {event}, which this host does not raise yet (served: {})",
                    SERVED.join(", ")
                ),
            ));
        }
    }
    Ok(Loaded {
        name,
        engine,
        ctx,
        handlers,
        deadline_at,
        epoch,
        timeouts: 0,
        disabled: false,
        calls,
    })
}

/// The output a spawned process may leave, per stream.
const SPAWN_OUTPUT: u64 = 64 << 10;

/// `host.spawn(cmd, args)`: the process runs in a group of its own through
/// the runtime's process-group owner, and is reaped before this returns;
/// one still running at the handler's deadline is killed and reaped.
fn host_spawn(
    io: Option<&tokio::runtime::Handle>,
    cmd: &str,
    args: &str,
    limit: Duration,
    tag: Option<&str>,
) -> Value {
    let Some(io) = io else {
        return json!({"error": "spawn needs the runtime's tokio runtime (the mod host was started outside one)"});
    };
    if limit.is_zero() {
        return json!({"error": format!("spawn {cmd:?}: the handler's deadline has passed")});
    }
    let args: Vec<String> = match serde_json::from_str::<Vec<Value>>(args) {
        Ok(a) => a
            .into_iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect(),
        Err(e) => return json!({"error": format!("spawn's args must be an array of strings: {e}")}),
    };
    io.block_on(async move {
        use tokio::io::AsyncReadExt as _;
        let mut command = crate::process::command(cmd);
        command.args(&args);
        if let Some(tag) = tag {
            command.env(crate::process::TAG_VAR, tag);
        }
        let (mut group, pipes) = match crate::process::ProcessGroup::spawn(&command) {
            Ok(g) => g,
            Err(e) => return json!({"error": format!("cannot spawn {cmd:?}: {e}")}),
        };
        drop(pipes.stdin);
        let mut stdout = pipes.stdout;
        let mut stderr = pipes.stderr;
        let out = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stdout).take(SPAWN_OUTPUT).read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        let err = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stderr).take(SPAWN_OUTPUT).read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        match group.wait(Some(limit)).await {
            Some(exit) => json!({
                "code": exit.code(),
                "stdout": out.await.unwrap_or_default(),
                "stderr": err.await.unwrap_or_default(),
            }),
            None => {
                let pid = group.pid();
                group.kill_and_reap().await;
                json!({"error": format!(
                    "{cmd:?} (pid {pid}) still ran at the handler's deadline ({} ms): killed and reaped",
                    limit.as_millis()
                )})
            }
        }
    })
}

/// `host.fetch(url, init)`: an HTTP request to an endpoint that passes the
/// one endpoint validator (TRUST-3), bounded by the handler's deadline.
fn host_fetch(
    io: Option<&tokio::runtime::Handle>,
    url: &str,
    init: &str,
    limit: Duration,
) -> Value {
    if let Err(e) = crate::messages::trust::validate_endpoint(url) {
        return json!({"error": e.to_string()});
    }
    let Some(io) = io else {
        return json!({"error": "fetch needs the runtime's tokio runtime (the mod host was started outside one)"});
    };
    if limit.is_zero() {
        return json!({"error": format!("fetch {url}: the handler's deadline has passed")});
    }
    let init: Value = serde_json::from_str(init).unwrap_or(Value::Null);
    let method = init["method"].as_str().unwrap_or("GET").to_uppercase();
    let body = init["body"].as_str().map(str::to_owned);
    let url = url.to_owned();
    io.block_on(async move {
        let client = match reqwest::Client::builder().timeout(limit).build() {
            Ok(c) => c,
            Err(e) => return json!({"error": format!("no HTTP client: {e}")}),
        };
        let method = match reqwest::Method::from_bytes(method.as_bytes()) {
            Ok(m) => m,
            Err(_) => return json!({"error": format!("unknown method {method:?}")}),
        };
        let mut req = client.request(method, &url);
        if let Some(b) = body {
            req = req.body(b);
        }
        match req.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.text().await {
                    Ok(text) => json!({"status": status, "body": text}),
                    Err(e) => json!({"error": format!("{url}: the body could not be read: {e}")}),
                }
            }
            Err(e) => json!({"error": format!("{url}: {e}")}),
        }
    })
}

fn take_logs(ctx: &rquickjs::Ctx<'_>) -> Vec<String> {
    let logs: String = ctx
        .eval("JSON.stringify(globalThis.__mcpvisor_logs || []); ")
        .unwrap_or_default();
    let _ = ctx.eval::<(), _>("globalThis.__mcpvisor_logs = [];");
    serde_json::from_str(&logs).unwrap_or_default()
}

/// A timed-out or failed handler's classification.
enum Failure {
    Timeout,
    Memory(String),
    Throw(String),
}

/// Where a handler waits for its host calls: the host's requests, and
/// those that must wait for the running chain to end.
struct Waits<'a> {
    rx: &'a Receiver<Req>,
    deferred: &'a mut VecDeque<Req>,
}

/// Run one handler of `m` (the mod after `before`) on `ev`, within the
/// deadline. While it awaits its `callTool` calls, the chains those calls
/// raise run on `before` (MOD-5).
fn run_handler(
    m: &Loaded,
    index: usize,
    ev: &Value,
    before: &mut [Loaded],
    settings: &ModSettings,
    waits: &mut Waits<'_>,
) -> (Result<Ran, Failure>, Vec<String>) {
    let deadline = settings.deadline;
    let now = u64::try_from(m.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
    let limit = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
    m.deadline_at
        .store(now.saturating_add(limit), Ordering::Relaxed);
    let started = Instant::now();
    let classify = |msg: String| {
        if started.elapsed() >= deadline || msg.contains("interrupted") {
            Failure::Timeout
        } else if msg.contains("out of memory") || msg.contains("memory") && msg.contains("alloc") {
            Failure::Memory(msg)
        } else {
            Failure::Throw(msg)
        }
    };
    let mut result = || -> (Result<Ran, Failure>, Vec<String>) {
        let first = m.ctx.with(|ctx| {
            let f: Function<'_> = ctx
                .globals()
                .get("__mcpvisor_run")
                .map_err(|e| e.to_string())?;
            f.call::<_, String>((index, ev.to_string()))
                .catch(&ctx)
                .map_err(caught)
        });
        let mut out = match first {
            Ok(s) => s,
            Err(e) => return (Err(classify(e)), m.ctx.with(|ctx| take_logs(&ctx))),
        };
        // A promise: run its jobs (outside `with`: the engine is not
        // borrowed then) until it settles or the deadline passes.
        loop {
            let logs = || m.ctx.with(|ctx| take_logs(&ctx));
            let ran: Option<Ran> = serde_json::from_str(&out).ok();
            match ran {
                Some(r) if r.st.done => return (Ok(r), logs()),
                Some(_) if started.elapsed() >= deadline => return (Err(Failure::Timeout), logs()),
                Some(_) => {}
                None => {
                    return (
                        Err(Failure::Throw(format!(
                            "the handler's result is not readable: {out}"
                        ))),
                        logs(),
                    );
                }
            }
            match m.engine.execute_pending_job() {
                Ok(true) => {}
                // Nothing left to run and not settled: it awaits its host
                // calls, or something that will never come.
                Ok(false) => {
                    if m.calls.borrow().is_empty() {
                        return (Err(Failure::Timeout), logs());
                    }
                    let left = deadline.saturating_sub(started.elapsed());
                    match waits.rx.recv_timeout(left) {
                        Ok(Req::Settled { id, result }) => {
                            if m.calls.borrow_mut().remove(&id).is_some() {
                                let settled = m.ctx.with(|ctx| {
                                    ctx.globals()
                                        .get::<_, Function<'_>>("__mcpvisor_settle")
                                        .and_then(|f| f.call::<_, ()>((id, result.to_string())))
                                        .map_err(|e| e.to_string())
                                });
                                if let Err(e) = settled {
                                    return (Err(classify(e)), logs());
                                }
                            }
                        }
                        // The tool.call of this mod's own call: the mods
                        // before it see it, now, on this thread.
                        Ok(Req::Run {
                            event,
                            payload,
                            origin: Some(o),
                            reply,
                        }) if o <= before.len() => {
                            let out = run_chain(&mut before[..o], settings, &event, payload, waits);
                            let _ = reply.send(out);
                        }
                        Ok(other) => waits.deferred.push_back(other),
                        Err(RecvTimeoutError::Timeout) => return (Err(Failure::Timeout), logs()),
                        Err(RecvTimeoutError::Disconnected) => {
                            return (Err(Failure::Throw("the mod host stopped".into())), logs());
                        }
                    }
                }
                Err(_) => return (Err(classify("a promise job failed".into())), logs()),
            }
            let collected = m.ctx.with(|ctx| {
                ctx.globals()
                    .get::<_, Function<'_>>("__mcpvisor_collect")
                    .and_then(|f| f.call::<_, String>(()))
                    .map_err(|e| e.to_string())
            });
            out = match collected {
                Ok(s) => s,
                Err(e) => return (Err(classify(e)), logs()),
            };
        }
    };
    let result = result();
    m.deadline_at.store(u64::MAX, Ordering::Relaxed);
    // The handler is over: its calls still in flight are cancelled, and
    // their results will find no promise.
    let abandoned: Vec<CancellationToken> = m.calls.borrow_mut().drain().map(|(_, c)| c).collect();
    if !abandoned.is_empty() {
        for c in abandoned {
            c.cancel();
        }
        m.ctx.with(|ctx| {
            let _ = ctx.eval::<(), _>("__mcpvisor.calls = {};");
        });
    }
    result
}

/// The text of a prompt's text blocks.
fn prompt_text(payload: &Value) -> Option<String> {
    if let Some(p) = payload.get("prompt").and_then(Value::as_str) {
        return Some(p.to_owned());
    }
    let blocks = payload.get("blocks")?.as_array()?;
    Some(
        blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Put the rewritten text into `payload`: `prompt`, and in `blocks` the
/// first text block (the other text blocks go; non-text blocks stay where
/// they were, MOD-4).
fn rewrite_prompt(payload: &mut Value, text: &str) {
    if let Some(o) = payload.as_object_mut() {
        o.insert("prompt".into(), Value::String(text.to_owned()));
    }
    let Some(blocks) = payload.get_mut("blocks").and_then(Value::as_array_mut) else {
        return;
    };
    let mut placed = false;
    blocks.retain_mut(|b| {
        if b["type"] != "text" {
            return true;
        }
        if placed {
            return false;
        }
        placed = true;
        b["text"] = Value::String(text.to_owned());
        true
    });
    if !placed {
        blocks.push(json!({"type": "text", "text": text}));
    }
}

fn run_chain(
    mods: &mut [Loaded],
    settings: &ModSettings,
    event: &str,
    payload: Value,
    waits: &mut Waits<'_>,
) -> ChainOutcome {
    let mut out = ChainOutcome {
        event: event.to_owned(),
        prompt: None,
        payload: payload.clone(),
        context: Vec::new(),
        ran: Vec::new(),
        stopped_by: None,
        reports: Vec::new(),
    };
    if !EVENTS.contains(&event) {
        out.reports.push(report(
            "host",
            "unknown_event",
            format!("unknown event {event:?} (known: {})", EVENTS.join(", ")),
        ));
        return out;
    }
    let mut ev = payload.clone();
    let prompt = if event == "prompt.submit" {
        prompt_text(&payload)
    } else {
        None
    };
    if let (Some(p), Some(o)) = (&prompt, ev.as_object_mut()) {
        o.insert("prompt".into(), Value::String(p.clone()));
    }
    if let Some(o) = ev.as_object_mut() {
        o.insert("event".into(), Value::String(event.to_owned()));
        o.insert("context".into(), json!([]));
    }
    let input_before = ev.get("input").cloned();
    'chain: for k in 0..mods.len() {
        let (before, rest) = mods.split_at_mut(k);
        let Some(m) = rest.first_mut() else {
            break;
        };
        if m.disabled {
            continue;
        }
        for index in 0..m.handlers.len() {
            if m.handlers[index].0 != event {
                continue;
            }
            let who = format!("{}#{index}", m.name);
            out.ran.push(who.clone());
            let (result, logs) = run_handler(m, index, &ev, before, settings, waits);
            for l in logs {
                out.reports.push(report(&m.name, "log", l));
            }
            match result {
                Ok(ran) => {
                    if let Some(c) = &ran.st.caught {
                        out.reports.push(report(
                            &m.name,
                            "caught",
                            format!("{who} threw {c:?}; its catch handled it"),
                        ));
                    }
                    if let Some(t) = &ran.st.threw {
                        if t.contains("out of memory") {
                            out.reports.push(report(&m.name, "memory", format!("{who} exceeded the memory limit ({} bytes): {t}; the mod is disabled", settings.memory_limit)));
                            m.disabled = true;
                            continue 'chain;
                        }
                        out.reports.push(report(
                            &m.name,
                            "throw",
                            format!("{who} threw: {t}; the chain went on"),
                        ));
                    }
                    // A tool's input is not rewritable (MOD-4).
                    if event == "tool.call" && ran.ev.get("input").cloned() != input_before {
                        out.reports.push(report(&m.name, "refused_rewrite", format!("{who} changed the tool input: tool-input rewrite is not supported, the input is unchanged")));
                    }
                    let mut next_ev = ran.ev;
                    if let (Some(o), Some(i)) = (next_ev.as_object_mut(), &input_before) {
                        o.insert("input".into(), i.clone());
                    }
                    ev = next_ev;
                    if !ran.st.continued {
                        out.stopped_by = Some(who);
                        break 'chain;
                    }
                }
                Err(Failure::Timeout) => {
                    m.timeouts += 1;
                    out.reports.push(report(
                        &m.name,
                        "timeout",
                        format!(
                            "{who} did not finish within {} ms; the chain went on",
                            settings.deadline.as_millis()
                        ),
                    ));
                    if m.timeouts >= 3 {
                        m.disabled = true;
                        out.reports.push(report(
                            &m.name,
                            "disabled",
                            format!("{} timed out three times: disabled", m.name),
                        ));
                        continue 'chain;
                    }
                }
                Err(Failure::Memory(e)) => {
                    out.reports.push(report(
                        &m.name,
                        "memory",
                        format!(
                            "{who} exceeded the memory limit ({} bytes): {e}; the mod is disabled",
                            settings.memory_limit
                        ),
                    ));
                    m.disabled = true;
                    continue 'chain;
                }
                Err(Failure::Throw(e)) => {
                    out.reports.push(report(
                        &m.name,
                        "throw",
                        format!("{who} threw: {e}; the chain went on"),
                    ));
                }
            }
        }
    }
    if let Some(ctx) = ev.get("context").and_then(Value::as_array) {
        out.context = ctx
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| c.to_string())
            })
            .collect();
    }
    let mut payload = payload;
    if event == "prompt.submit" {
        let text = ev
            .get("prompt")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(prompt);
        if let Some(t) = &text {
            rewrite_prompt(&mut payload, t);
        }
        out.prompt = text;
    }
    // The host's own commands and drawing: the handlers' answer is the
    // event itself (`event.output`, `event.text`).
    if matches!(event, "command.run" | "ui.render") {
        if let Some(o) = ev.as_object_mut() {
            o.remove("event");
            o.remove("context");
        }
        payload = ev;
    }
    out.payload = payload;
    out
}
