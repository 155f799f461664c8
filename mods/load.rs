//! Loading one mod: a QuickJS context with the memory limit, the prelude
//! and the capabilities its grant allows, its file evaluated and its
//! handlers collected.

use super::*;

pub(super) fn mod_name(spec: &ModSpec) -> String {
    spec.path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec.path.display().to_string())
}

/// The text of an error caught from the engine.
pub(super) fn caught(e: CaughtError<'_>) -> String {
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

/// Why a mod did not load (its `load_error` report): the file, and what
/// went wrong there.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {problem}")]
pub(super) struct LoadError {
    /// The mod's file, as its path displays.
    file: String,
    /// What went wrong.
    problem: LoadProblem,
}

/// What went wrong loading a mod; a caught JS exception is its message
/// (and the first line of its stack).
#[derive(Debug, thiserror::Error)]
enum LoadProblem {
    /// The file cannot be read.
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    /// No QuickJS runtime.
    #[error("no JS engine: {0}")]
    Engine(rquickjs::Error),
    /// No QuickJS context.
    #[error("no JS context: {0}")]
    Context(rquickjs::Error),
    /// The host's prelude threw.
    #[error("the prelude failed: {0}")]
    Prelude(String),
    /// The `options.host` object could not be built.
    #[error("the host API failed: {0}")]
    HostApi(String),
    /// The module did not declare or evaluate.
    #[error("{0}")]
    Module(String),
    /// The module has no `register` export.
    #[error("the module exports no register(on, options) function")]
    NoRegister,
    /// `register` threw.
    #[error("register failed: {0}")]
    Register(String),
    /// The engine refused a host function, a global or a call.
    #[error("{0}")]
    Js(rquickjs::Error),
}

fn at(file: &str, problem: LoadProblem) -> LoadError {
    LoadError {
        file: file.to_owned(),
        problem,
    }
}

pub(super) fn load(
    spec: &ModSpec,
    settings: &ModSettings,
    reports: &mut Vec<ModReport>,
    host_side: &Host,
    index: usize,
) -> Result<Loaded, LoadError> {
    let io = host_side.io.clone();
    let calls: Rc<RefCell<HashMap<u64, CancellationToken>>> = Rc::default();
    let name = mod_name(spec);
    let file = spec.path.display().to_string();
    let src = std::fs::read_to_string(&spec.path).map_err(|e| at(&file, LoadProblem::Read(e)))?;
    let engine = Engine::new().map_err(|e| at(&file, LoadProblem::Engine(e)))?;
    engine.set_memory_limit(settings.memory_limit);
    engine.set_max_stack_size(512 << 10);
    let epoch = Instant::now();
    let deadline_at = Arc::new(AtomicU64::new(u64::MAX));
    let cell = deadline_at.clone();
    engine.set_interrupt_handler(Some(Box::new(move || {
        u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
            > cell.load(Ordering::Relaxed)
    })));
    let ctx = Context::full(&engine).map_err(|e| at(&file, LoadProblem::Context(e)))?;
    let known = serde_json::to_string(EVENTS).unwrap_or_else(|_| "[]".into());
    let granted = spec.capabilities.clone();
    let config = settings.config.to_string();
    let mut logs: Vec<String> = Vec::new();
    let handlers = ctx.with(|ctx| -> Result<Vec<(String, bool)>, LoadError> {
        ctx.eval::<(), _>(PRELUDE.replace("__KNOWN__", &known))
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::Prelude(caught(e))))?;
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
        .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        ctx.globals().set("__mcpvisor_spawn", spawn).map_err(|e| at(&file, LoadProblem::Js(e)))?;
        let (io2, left2) = (io.clone(), left.clone());
        let fetch = Function::new(ctx.clone(), move |url: String, init: String| -> String {
            host_fetch(io2.as_ref(), &url, &init, left2()).to_string()
        })
        .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        ctx.globals().set("__mcpvisor_fetch", fetch).map_err(|e| at(&file, LoadProblem::Js(e)))?;
        let (call_host, call_list) = (host_side.clone(), calls.clone());
        let call_tool = Function::new(
            ctx.clone(),
            move |name: String, args: String, scope: String| -> String {
                call_host
                    .call_tool(index, &call_list, &name, &args, &scope)
                    .to_string()
            },
        )
        .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        ctx.globals()
            .set("__mcpvisor_call_tool", call_tool)
            .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        let host: Object<'_> = ctx
            .eval(host)
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::HostApi(caught(e))))?;
        let module = Module::declare(ctx.clone(), file.clone(), src.clone())
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::Module(caught(e))))?;
        let (module, promise) = module
            .eval()
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::Module(caught(e))))?;
        promise
            .finish::<()>()
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::Module(caught(e))))?;
        let register: Function<'_> = module
            .get("register")
            .catch(&ctx)
            .map_err(|_| at(&file, LoadProblem::NoRegister))?;
        let on: Function<'_> = ctx
            .globals()
            .get("__mcpvisor_on")
            .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        let options = Object::new(ctx.clone()).map_err(|e| at(&file, LoadProblem::Js(e)))?;
        options.set("host", host).map_err(|e| at(&file, LoadProblem::Js(e)))?;
        register
            .call::<_, rquickjs::Value<'_>>((on, options))
            .catch(&ctx)
            .map_err(|e| at(&file, LoadProblem::Register(caught(e))))?;
        let list: Function<'_> = ctx
            .globals()
            .get("__mcpvisor_list")
            .map_err(|e| at(&file, LoadProblem::Js(e)))?;
        let listed: String = list.call(()).map_err(|e| at(&file, LoadProblem::Js(e)))?;
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
