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
mod chain;
mod host;
mod load;

use calls::Host;
pub use calls::{ModToolCall, ToolCaller, outcome_json};
use chain::*;
use host::*;
use load::*;

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

/// Why the mod host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModHostError {
    /// The engines' thread could not be started.
    #[error("cannot start the mod host's thread: {0}")]
    Thread(std::io::Error),
}

/// Something a mod did that the host reports (MOD-1..4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModReport {
    /// The mod (its file name).
    #[serde(rename = "mod")]
    pub mod_name: String,
    /// `load_error`, `timeout`, `throw`, `caught` (a throw its `catch`
    /// handled), `memory`, `disabled`, `unserved`, `refused_rewrite`, `log`.
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
    pub fn start(settings: ModSettings) -> Result<Self, ModHostError> {
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
            .map_err(ModHostError::Thread)?;
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
            Err(e) => reports.push(report(&mod_name(spec), "load_error", e.to_string())),
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

#[cfg(test)]
mod tests;
