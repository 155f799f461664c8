//! JS mods (MOD-1..4, MOD-6) through `mcpvisor mods list|test --json`,
//! with real mods in JS files run by the embedded engine: load order and
//! registration order across two mods, `next()` and `catch`, a handler
//! that loops forever (stopped at its deadline, the chain goes on), one
//! that allocates without bound (stopped by the memory limit, the mod
//! disabled), a prompt rewrite that keeps an image block in place, a
//! tool-input rewrite (reported, ignored), an ungranted host API, a mod
//! that does not load (file, line, message; the others still load), an
//! unknown event, and mods that are off.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use mcpvisor_chaos::{ConfigDir, ensure_mcpvisor_built};
use serde_json::{Value, json};

/// A config dir with `mods` (file name, source) listed in order, each
/// with its capabilities.
fn dir_with(mods: &[(&str, &str, &[&str])], extra: &str) -> ConfigDir {
    let mut toml = format!("[mods]\nenabled = true\ndeadline_ms = 300\nmemory_mib = 16\n{extra}");
    for (name, _, caps) in mods {
        toml.push_str(&format!(
            "[[mods.load]]\npath = \"mods/{name}\"\ncapabilities = {caps:?}\n"
        ));
    }
    let dir = ConfigDir::new("mods", &toml).unwrap();
    std::fs::create_dir_all(dir.dir.join("mods")).unwrap();
    for (name, src, _) in mods {
        std::fs::write(dir.dir.join("mods").join(name), src).unwrap();
    }
    dir
}

async fn mcpvisor(cwd: &Path, args: &[&str]) -> std::process::Output {
    tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(ensure_mcpvisor_built().unwrap())
            .args(args)
            .current_dir(cwd)
            .env_remove("MCPVISOR_CONFIG")
            .output(),
    )
    .await
    .expect("mcpvisor finished in time")
    .unwrap()
}

/// A runtime with these mods and a trusted fault server `s` (logging its
/// requests to `log`), ready.
async fn with_mods_and_server(
    settings: mcpvisor::mods::ModSettings,
    log: &mcpvisor_chaos::RequestLog,
) -> mcpvisor::Runtime {
    let rt = mcpvisor::Runtime::builder()
        .mods(settings)
        .start()
        .await
        .unwrap();
    rt.add_server(
        mcpvisor::Scope::Global,
        mcpvisor_chaos::fault_server_config("s", log.args()).trusted(),
    )
    .await
    .unwrap();
    rt.wait_ready(&mcpvisor::Scope::Global, "s", Duration::from_secs(20))
        .await
        .unwrap();
    rt
}

async fn test_event(dir: &ConfigDir, event: &str, payload: Value) -> Value {
    let p = payload.to_string();
    let out = mcpvisor(
        &dir.dir,
        &["--json", "mods", "test", "--event", event, "--payload", &p],
    )
    .await;
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn reports(v: &Value, kind: &str) -> Vec<String> {
    v["reports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .map(|r| {
            format!(
                "{}: {}",
                r["mod"].as_str().unwrap(),
                r["message"].as_str().unwrap()
            )
        })
        .collect()
}

const FIRST: &str = r#"
export function register(on) {
  on("prompt.submit", (e, next) => { e.context.push("first-a sees " + e.prompt); e.prompt = e.prompt + " [a]"; next(); });
  on("prompt.submit", (e, next) => { e.context.push("first-b"); e.prompt = e.prompt + " [b]"; next(); });
}
"#;

const SECOND: &str = r#"
export function register(on) {
  on("prompt.submit", (e, next) => { e.context.push("second sees " + e.prompt); next(); });
  on("prompt.submit", (e, next) => { throw new Error("handled here"); }, { catch: (err, e, next) => { e.context.push("caught " + err.message); next(); } });
  on("prompt.submit", (e) => { e.context.push("decides"); });
  on("prompt.submit", (e, next) => { e.context.push("never runs"); next(); });
}
"#;

/// MOD-3: mod load order, then registration order; `next()` continues,
/// `catch` handles a throw, and a handler that returns without `next()`
/// ends the chain. MOD-4: the rewritten prompt keeps the image block in
/// its place.
#[tokio::test]
async fn chains_run_in_load_then_registration_order_and_a_rewrite_keeps_the_image_in_place() {
    let dir = dir_with(&[("first.js", FIRST, &[]), ("second.js", SECOND, &[])], "");
    let payload = json!({"blocks": [
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "text", "text": "hi"}
    ]});
    let v = test_event(&dir, "prompt.submit", payload).await;
    assert_eq!(v["prompt"], "hi [a] [b]", "{v}");
    assert_eq!(
        v["context"],
        json!([
            "first-a sees hi",
            "first-b",
            "second sees hi [a] [b]",
            "caught handled here",
            "decides"
        ]),
        "{v}"
    );
    assert_eq!(
        v["ran"],
        json!([
            "first.js#0",
            "first.js#1",
            "second.js#0",
            "second.js#1",
            "second.js#2"
        ])
    );
    assert_eq!(v["stopped_by"], "second.js#2");
    let blocks = v["payload"]["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0]["type"], "image", "the image moved: {blocks:?}");
    assert_eq!(blocks[0]["data"], "AAAA");
    assert_eq!(blocks[1], json!({"type": "text", "text": "hi [a] [b]"}));
    assert!(reports(&v, "throw").is_empty(), "{v}");
    assert_eq!(reports(&v, "caught").len(), 1, "{v}");
}

const RUNAWAY: &str = r#"
export function register(on) {
  on("prompt.submit", () => { while (true) {} });
  on("prompt.submit", (e, next) => { throw new Error("boom"); });
  on("prompt.submit", async (e, next) => { await new Promise(() => {}); });
  on("prompt.submit", (e, next) => { e.context.push("runaway survived"); next(); });
}
"#;

const HOG: &str = r#"
export function register(on) {
  on("prompt.submit", (e, next) => { const a = []; while (true) a.push(new Array(100000).fill(7)); });
  on("prompt.submit", (e, next) => { e.context.push("hog's second handler"); next(); });
}
"#;

const LAST: &str = r#"
export function register(on) {
  on("prompt.submit", (e, next) => { e.context.push("last ran"); next(); });
}
"#;

/// MOD-3: a handler that loops forever is stopped at its deadline, a
/// throw and a promise that never settles are reported, and the chain goes
/// on each time; a mod that allocates without bound is stopped by its
/// memory limit and disabled, and the host serves the others.
#[tokio::test]
async fn a_runaway_loop_a_throw_and_a_memory_hog_are_reported_and_the_chain_goes_on() {
    let dir = dir_with(
        &[
            ("runaway.js", RUNAWAY, &[]),
            ("hog.js", HOG, &[]),
            ("last.js", LAST, &[]),
        ],
        "",
    );
    let started = std::time::Instant::now();
    let v = test_event(&dir, "prompt.submit", json!({"prompt": "go"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let timeouts = reports(&v, "timeout");
    assert_eq!(timeouts.len(), 2, "the loop and the pending promise: {v}");
    assert!(
        timeouts[0].starts_with("runaway.js: runaway.js#0 did not finish within 300 ms"),
        "{timeouts:?}"
    );
    assert!(
        reports(&v, "throw").iter().any(|t| t.contains("boom")),
        "{v}"
    );
    let memory = reports(&v, "memory");
    assert_eq!(memory.len(), 1, "{v}");
    assert!(
        memory[0].starts_with("hog.js: hog.js#0 exceeded the memory limit"),
        "{memory:?}"
    );
    // The hog is disabled: its second handler does not run; the others do.
    assert_eq!(v["context"], json!(["runaway survived", "last ran"]), "{v}");
}

const TOOLY: &str = r#"
export function register(on, options) {
  on("tool.call", (e, next) => { e.input = { path: "/etc/shadow" }; e.context.push("saw " + e.tool); next(); });
}
"#;

const NOSY: &str = r#"
export function register(on, options) {
  on("prompt.submit", (e, next) => {
    try { options.host.config(); e.context.push("config granted?!"); }
    catch (err) { e.context.push("refused: " + err.message); }
    options.host.log("nosy logged");
    next();
  });
}
"#;

/// MOD-4: a tool-input rewrite is reported and ignored. MOD-6: an
/// ungranted host API throws a clear error inside the mod; a granted one
/// works.
#[tokio::test]
async fn a_tool_input_rewrite_is_refused_and_an_ungranted_host_api_throws() {
    let dir = dir_with(&[("tooly.js", TOOLY, &[]), ("nosy.js", NOSY, &["log"])], "");
    let v = test_event(
        &dir,
        "tool.call",
        json!({"tool": "mcp__fs__read", "input": {"path": "/tmp/x"}}),
    )
    .await;
    assert_eq!(
        v["payload"]["input"],
        json!({"path": "/tmp/x"}),
        "the input changed: {v}"
    );
    assert_eq!(reports(&v, "refused_rewrite").len(), 1, "{v}");
    assert!(reports(&v, "refused_rewrite")[0].contains("tool-input rewrite is not supported"));
    assert_eq!(v["context"], json!(["saw mcp__fs__read"]));
    let v = test_event(&dir, "prompt.submit", json!({"prompt": "hi"})).await;
    let ctx = v["context"][0].as_str().unwrap();
    assert!(
        ctx.starts_with("refused: the host API config was not granted"),
        "{ctx}"
    );
    assert!(
        reports(&v, "log")
            .iter()
            .any(|l| l == "nosy.js: nosy logged"),
        "{v}"
    );
}

const BROKEN: &str =
    "export function register(on) {\n  on(\"prompt.submit\", (e, next) => {\n  }\n";

const UNKNOWN: &str = r#"
export function register(on) { on("prompt.sumbit", () => {}); }
"#;

const LATER: &str = r#"
export function register(on) {
  on("ui.render", () => {});
  on("prompt.submit", (e, next) => { e.context.push("later loaded"); next(); });
}
"#;

/// MOD-1 and MOD-2: a mod with a syntax error is reported with its file
/// and line, one registering for an unknown event fails to load, and the
/// others still load; every known event is served. Mods that are off are
/// not loaded at all.
#[tokio::test]
async fn a_mod_that_fails_to_load_is_reported_and_the_others_still_load() {
    let dir = dir_with(
        &[
            ("broken.js", BROKEN, &[]),
            ("unknown.js", UNKNOWN, &[]),
            ("later.js", LATER, &[]),
        ],
        "",
    );
    let out = mcpvisor(&dir.dir, &["--json", "mods", "list"]).await;
    assert_eq!(out.status.code(), Some(1), "a load error is exit 1");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = reports(&v, "load_error");
    assert_eq!(errors.len(), 2, "{v}");
    assert!(
        errors[0].contains("broken.js") && errors[0].contains("broken.js:4"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("unknown event \"prompt.sumbit\""),
        "{errors:?}"
    );
    let regs = v["registrations"].as_array().unwrap();
    assert_eq!(regs.len(), 2, "{v}");
    // All eight known events are served now: none is reported unserved.
    assert_eq!(regs[0]["event"], "ui.render");
    assert_eq!(regs[0]["served"], true);
    assert_eq!(regs[1]["served"], true);
    assert!(reports(&v, "unserved").is_empty(), "{v}");
    let run = test_event(&dir, "prompt.submit", json!({"prompt": "x"})).await;
    assert_eq!(run["context"], json!(["later loaded"]));

    let off = ConfigDir::new(
        "mods-off",
        "[mods]\nenabled = false\n[[mods.load]]\npath = \"x.js\"\n",
    )
    .unwrap();
    let out = mcpvisor(&off.dir, &["mods", "list"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mods are off"));
    let bad = ConfigDir::new(
        "mods-caps",
        "[mods]\nenabled = true\n[[mods.load]]\npath = \"x.js\"\ncapabilities = [\"spawn\", \"root\"]\n",
    )
    .unwrap();
    let out = mcpvisor(&bad.dir, &["mods", "list"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        !err.contains("capability \"spawn\""),
        "spawn is a capability: {err}"
    );
    assert!(
        err.contains("capability \"root\": expected one of"),
        "{err}"
    );
}

const AT_POINTS: &str = r#"
export function register(on) {
  on("turn.start", (e, next) => { next(); });
  on("prompt.submit", (e, next) => { e.prompt = e.prompt.replace("please", "PLEASE"); e.context.push("mod context"); next(); });
  on("tool.call", (e, next) => { e.context.push("the mod saw " + e.raw_name); e.input = { message: "rewritten" }; next(); });
  on("turn.complete", (e, next) => { next(); });
}
"#;

/// MOD-2 at the real points: `Runtime::turn` raises `prompt.submit` on the
/// direct human prompt (the model gets the rewritten text and the appended
/// context), and the call pipeline raises `tool.call` (its context reaches
/// the model's view of the result; the server gets the original input).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_and_the_call_pipeline_raise_the_mod_events_at_their_points() {
    use mcpvisor::mods::{ModSettings, ModSpec};
    use mcpvisor_chaos::model::{ScriptedModel, openai_text, openai_tool_calls};
    let dir = dir_with(&[("points.js", AT_POINTS, &[])], "");
    let log = mcpvisor_chaos::RequestLog::new("mods-points");
    let rt = with_mods_and_server(
        ModSettings::new(vec![ModSpec {
            path: dir.dir.join("mods/points.js"),
            capabilities: vec![],
        }]),
        &log,
    )
    .await;
    let model = ScriptedModel::start(vec![
        openai_tool_calls(&[("c1", "mcp__s__echo", r#"{"message":"original"}"#)]),
        openai_text("done"),
    ])
    .await
    .unwrap();
    let route = mcpvisor::ModelRoute::new(
        mcpvisor::Provider::OpenAi,
        format!("{}/v1", model.base_url()),
        "m",
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = rt
        .turn(
            mcpvisor::TurnRequest::new(mcpvisor::Scope::Global, route, "echo this please"),
            Some(tx),
        )
        .await;
    assert_eq!(out.error, None, "{out:?}");
    let reqs = model.requests();
    assert_eq!(
        reqs[0].body["messages"][0]["content"],
        "echo this PLEASE\n\nmod context"
    );
    let tool_msg = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert!(
        tool_msg["content"].to_string().contains("the mod saw echo"),
        "{tool_msg}"
    );
    assert!(
        log.text().contains(r#"{"message":"original"}"#),
        "{}",
        log.text()
    );
    assert!(!log.text().contains("rewritten"), "{}", log.text());
    let mut saw_rewrite = false;
    while let Ok(e) = rx.try_recv() {
        if let mcpvisor::TurnEvent::Hook {
            hook_event,
            verdict,
            ..
        } = e
        {
            saw_rewrite |= hook_event == "mods:prompt.submit" && verdict == "rewrite";
        }
    }
    assert!(saw_rewrite, "no rewrite event");
    let host = rt.mods().expect("the runtime has a mod host");
    let report = rt.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    // The tree drained the host: its engines are gone.
    let after =
        tokio::task::spawn_blocking(move || host.run("prompt.submit", json!({"prompt": "x"})))
            .await
            .unwrap();
    assert!(
        after.reports.iter().any(|r| r.message.contains("stopped")),
        "{after:?}"
    );
}

const SPAWNER: &str = r#"
export function register(on, options) {
  on("prompt.submit", (e, next) => {
    const r = options.host.spawn("sh", ["-c", "echo from-$0", "child"]);
    e.context.push("code " + r.code + " out " + r.stdout.trim());
    const page = options.host.fetch(__URL__);
    e.context.push("fetched " + page.status + " " + page.body);
    try { options.host.fetch("http://192.0.2.9/x"); } catch (err) { e.context.push("remote: " + err.message); }
    // Last: it uses up the handler's deadline.
    try { options.host.spawn("sleep", ["31.7"]); } catch (err) { e.context.push("sleep: " + err.message); }
    next();
  });
}
"#;

/// MOD-6: `spawn` runs through the process-group owner and is reaped; a
/// spawned process that outlives its handler's deadline is killed and
/// reaped (none is left); `fetch` reaches a loopback server and is refused
/// off loopback over plain HTTP (TRUST-3).
#[tokio::test]
async fn spawn_is_reaped_even_past_the_deadline_and_fetch_passes_the_endpoint_rule() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/page", axum::routing::get(|| async { "hello mod" }));
    tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    let src = SPAWNER.replace("__URL__", &format!("{:?}", format!("http://{addr}/page")));
    let dir = dir_with(&[("spawner.js", &src, &["spawn", "http"])], "");
    let v = test_event(&dir, "prompt.submit", json!({"prompt": "x"})).await;
    let ctx: Vec<String> = v["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ctx.len(), 4, "{v}");
    assert_eq!(ctx[0], "code 0 out from-child", "{v}");
    assert_eq!(ctx[1], "fetched 200 hello mod", "{ctx:?}");
    assert!(
        ctx[2].starts_with("remote: ") && ctx[2].contains("192.0.2.9"),
        "{ctx:?}"
    );
    assert!(
        ctx[3].starts_with("sleep: \"sleep\"") && ctx[3].contains("killed and reaped"),
        "{ctx:?}"
    );
    let left = mcpvisor_chaos::processes_with_arg("31.7");
    assert!(
        left.is_empty(),
        "the spawned sleep is still running: {left:?}"
    );
}

const SESSIONS: &str = r#"
export function register(on, options) {
  on("session.start", (e, next) => { options.host.log("start " + e.source); next(); });
  on("session.end", (e, next) => { options.host.log("end " + e.session_id.slice(0, 5)); next(); });
}
"#;

/// MOD-2: `mcpvisor chat` is the CLI's session: it raises `session.start`
/// before the first turn and `session.end` after the last.
#[tokio::test]
async fn chat_raises_the_session_events() {
    use mcpvisor_chaos::model::{ScriptedModel, openai_text};
    let dir = dir_with(&[("sessions.js", SESSIONS, &["log"])], "");
    let model = ScriptedModel::start(vec![openai_text("hello")])
        .await
        .unwrap();
    let endpoint = format!("{}/v1", model.base_url());
    let out = mcpvisor(
        &dir.dir,
        &[
            "--json",
            "chat",
            "--provider",
            "openai",
            "--endpoint",
            &endpoint,
            "--model",
            "m",
            "--prompt",
            "hi",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let logs: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l["mods"].is_string())
        .map(|l| {
            (
                l["mods"].as_str().unwrap().to_owned(),
                l["report"]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        logs,
        vec![
            ("session.start".to_owned(), "start chat".to_owned()),
            ("session.end".to_owned(), "end chat-".to_owned())
        ],
        "{stdout}"
    );
    // The session events bracket the turn's output.
    let first_mod = lines.iter().position(|l| l["mods"].is_string()).unwrap();
    let last_mod = lines.iter().rposition(|l| l["mods"].is_string()).unwrap();
    let final_line = lines.iter().position(|l| l.get("final").is_some()).unwrap();
    assert!(first_mod < final_line && final_line < last_mod, "{stdout}");
}

const SLOW: &str = r#"
export function register(on) {
  for (let i = 0; i < 3; i++) on("prompt.submit", (e, next) => { while (true) {} });
  on("prompt.submit", (e, next) => { e.context.push("slow's fourth ran"); next(); });
}
"#;

/// MOD-3: a mod that keeps timing out (three times) is reported and
/// disabled; the host keeps serving the others.
#[tokio::test]
async fn a_mod_that_keeps_timing_out_is_disabled_and_the_others_still_run() {
    let dir = dir_with(&[("slow.js", SLOW, &[]), ("last.js", LAST, &[])], "");
    let v = test_event(&dir, "prompt.submit", json!({"prompt": "go"})).await;
    assert_eq!(reports(&v, "timeout").len(), 3, "{v}");
    let disabled = reports(&v, "disabled");
    assert_eq!(
        disabled,
        vec!["slow.js: slow.js timed out three times: disabled".to_owned()],
        "{v}"
    );
    assert_eq!(v["context"], json!(["last ran"]), "{v}");
}

/// Both mods see every `tool.call`; `second` calls a tool from its
/// `prompt.submit`, `first` from its `turn.start` (both through
/// `callTool`, capability `tools`).
const CALLS_FIRST: &str = r#"
export function register(on, options) {
  on("tool.call", (e, next) => { e.context.push("first saw " + e.input.message); next(); });
  on("turn.start", async (e, next) => {
    const r = await options.host.callTool("mcp__s__echo", { message: "from first" });
    e.context.push("first got " + r.kind + " " + JSON.stringify(r.context));
    next();
  });
}
"#;

const CALLS_SECOND: &str = r#"
export function register(on, options) {
  on("tool.call", (e, next) => { e.context.push("second saw " + e.input.message); next(); });
  on("prompt.submit", async (e, next) => {
    const r = await options.host.callTool("mcp__s__echo", { message: "from second" });
    e.context.push("second got " + r.kind + " " + JSON.stringify(r.context));
    try { await options.host.callTool("mcp__s__nosuch", {}, { scope: "team:x" }); }
    catch (err) { e.context.push("refused: " + err.message); }
    next();
  });
}
"#;

/// MOD-5: the `tool.call` a mod's own host call raises is seen only by the
/// mods loaded before it: `second`'s call is seen by `first` alone,
/// `first`'s by none, an agent's call by both. The calls go through the
/// real pipeline to a real server; a bad scope rejects the promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mods_own_tool_call_is_seen_only_by_the_mods_loaded_before_it() {
    use mcpvisor::mods::{ModSettings, ModSpec};
    let dir = dir_with(
        &[
            ("first.js", CALLS_FIRST, &["tools"]),
            ("second.js", CALLS_SECOND, &["tools"]),
        ],
        "",
    );
    let log = mcpvisor_chaos::RequestLog::new("mods-recursion");
    let spec = |name: &str| ModSpec {
        path: dir.dir.join("mods").join(name),
        capabilities: vec!["tools".into()],
    };
    let mut settings = ModSettings::new(vec![spec("first.js"), spec("second.js")]);
    settings.deadline = Duration::from_secs(15);
    let rt = with_mods_and_server(settings, &log).await;
    let host = rt.mods().unwrap();
    let run = |event: &'static str| {
        let host = host.clone();
        tokio::task::spawn_blocking(move || host.run(event, json!({"prompt": "x"})))
    };
    let second = run("prompt.submit").await.unwrap();
    assert_eq!(
        second.context,
        vec![
            r#"second got ok ["first saw from second"]"#.to_owned(),
            r#"refused: callTool: unknown scope "team:x" (expected "global", "agent:ID" or "chat:ID")"#
                .to_owned(),
        ],
        "{second:?}"
    );
    let first = run("turn.start").await.unwrap();
    assert_eq!(
        first.context,
        vec!["first got ok []".to_owned()],
        "{first:?}"
    );
    // An agent's call: every mod sees it.
    let out = rt
        .call(
            &mcpvisor::Scope::Global,
            "mcp__s__echo",
            Some(json!({"message": "from the agent"})),
            mcpvisor::CallOptions::default(),
        )
        .await;
    assert!(out.is_ok(), "{out:?}");
    for want in ["first saw from the agent", "second saw from the agent"] {
        assert!(out.projection.contains(want), "{want:?} in {out:?}");
    }
    // The mods' calls reached the server, once each.
    let text = log.text();
    for msg in ["from first", "from second", "from the agent"] {
        assert_eq!(text.matches(msg).count(), 1, "{msg:?} in {text}");
    }
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

const HOST_UI: &str = r#"
export function register(on) {
  on("command.run", (e, next) => {
    if (e.command === "todo") { e.output = "added: " + e.args; return; }
    next();
  });
  on("ui.render", (e, next) => { e.text = e.kind + " drawn by the mod: " + e.text; next(); });
}
"#;

/// MOD-2's host events in `mcpvisor chat`: a `/command` line is raised as
/// `command.run` (a handler's `event.output` is printed, a command nobody
/// takes is named as unknown, `/exit` ends the session), and every row the
/// chat draws for a tool call and its result goes through `ui.render`
/// first: the user sees the mod's text, the model never does.
#[tokio::test]
async fn chat_raises_command_run_for_slash_lines_and_ui_render_for_each_row() {
    use mcpvisor_chaos::model::{ScriptedModel, openai_text, openai_tool_calls};
    use tokio::io::AsyncWriteExt as _;
    let server = mcpvisor_chaos::fault_server_section::<&str>("s", &[], "always");
    let dir = dir_with(&[("host_ui.js", HOST_UI, &[])], &server);
    let model = ScriptedModel::start(vec![
        openai_tool_calls(&[("c1", "mcp__s__echo", r#"{"message":"hi there"}"#)]),
        openai_text("done"),
    ])
    .await
    .unwrap();
    let endpoint = format!("{}/v1", model.base_url());
    let mut child = tokio::process::Command::new(ensure_mcpvisor_built().unwrap())
        .args([
            "chat",
            "--provider",
            "openai",
            "--endpoint",
            &endpoint,
            "--model",
            "m",
        ])
        .current_dir(&dir.dir)
        .env_remove("MCPVISOR_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"/todo add milk\n/nosuch thing\necho it\n/exit\nnever sent\n")
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("chat finished in time")
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("added: add milk"), "{stdout}");
    assert!(
        stderr.contains("unknown command /nosuch: no mod handled it"),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"⏺ tool_call drawn by the mod: mcp__s__echo {"message":"hi there"}"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("⎿ tool_result drawn by the mod: mcp__s__echo ok:"),
        "{stderr}"
    );
    // One turn reached the model ("echo it"): the commands never did, the
    // line after /exit was never read as a prompt, and the model's view of
    // the result is the server's, not the drawing.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let body = reqs[1].body.to_string();
    assert!(body.contains("echo it") && !body.contains("todo"), "{body}");
    assert!(
        !body.contains("drawn by the mod") && !body.contains("never sent"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mods_test_refuses_an_event_no_mod_can_register_for() {
    // Issue 37, item 10 (issue 16's rule): `mods test --event` with a name
    // that is not an event is an error naming the events, not a silent
    // run of nothing.
    let dir = dir_with(&[("later.js", LATER, &[])], "");
    let out = mcpvisor(
        &dir.dir,
        &[
            "mods",
            "test",
            "--event",
            "prompt.sumbit",
            "--payload",
            "{}",
        ],
    )
    .await;
    assert!(!out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("\"prompt.sumbit\"") && said.contains("prompt.submit"),
        "{said}"
    );
    // A real event still runs.
    let v = test_event(&dir, "prompt.submit", json!({"prompt": "hi"})).await;
    assert_eq!(v["event"], "prompt.submit", "{v}");
}
