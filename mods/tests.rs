//! The mod host in process: real mods in JS files run by the engine, each
//! rule of the module's header checked on [`ModHost`] itself (the CLI's
//! `mods test` is checked from outside in the chaos crate's `mods.rs`).

use super::*;

/// A directory of its own for one test's mod files, removed at the end.
struct ModDir(PathBuf);

impl ModDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mcpvisor-mods-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn spec(&self, name: &str, source: &str, capabilities: &[&str]) -> ModSpec {
        let path = self.0.join(name);
        std::fs::write(&path, source).unwrap();
        ModSpec {
            path,
            capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
        }
    }
}

impl Drop for ModDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn host(mods: Vec<ModSpec>, deadline_ms: u64) -> ModHost {
    let mut settings = ModSettings::new(mods);
    settings.deadline = Duration::from_millis(deadline_ms);
    settings.memory_limit = 16 << 20;
    ModHost::start(settings).unwrap()
}

fn kinds(out: &ChainOutcome) -> Vec<(&str, &str)> {
    out.reports
        .iter()
        .map(|r| (r.mod_name.as_str(), r.kind.as_str()))
        .collect()
}

#[test]
fn the_prompt_text_is_the_prompt_or_else_the_text_blocks_joined() {
    assert_eq!(
        prompt_text(&json!({"prompt": "p", "blocks": [{"type": "text", "text": "b"}]})).as_deref(),
        Some("p")
    );
    let blocks = json!({"blocks": [
        {"type": "text", "text": "one"},
        {"type": "image", "data": "AA=="},
        {"type": "text", "text": "two"}
    ]});
    assert_eq!(prompt_text(&blocks).as_deref(), Some("one\ntwo"));
    assert_eq!(prompt_text(&json!({"other": 1})), None);
}

#[test]
fn a_rewrite_takes_the_first_text_block_and_leaves_the_others_in_place() {
    // MOD-4: the image stays where it was; the second text block goes.
    let mut payload = json!({"prompt": "one\ntwo", "blocks": [
        {"type": "text", "text": "one"},
        {"type": "image", "data": "AA=="},
        {"type": "text", "text": "two"}
    ]});
    rewrite_prompt(&mut payload, "new");
    assert_eq!(
        payload,
        json!({"prompt": "new", "blocks": [
            {"type": "text", "text": "new"},
            {"type": "image", "data": "AA=="}
        ]})
    );
    // Only non-text blocks: the text is added after them.
    let mut payload = json!({"blocks": [{"type": "image", "data": "AA=="}]});
    rewrite_prompt(&mut payload, "t");
    assert_eq!(payload["blocks"][1], json!({"type": "text", "text": "t"}));
}

#[test]
fn handlers_run_in_load_then_registration_order_until_one_decides() {
    // MOD-3: mod order, then registration order; `next()` goes on, a
    // handler that returns without it ends the chain there.
    let dir = ModDir::new("order");
    let first = dir.spec(
        "first.js",
        r#"export function register(on) {
  on("prompt.submit", (e, next) => { e.context.push("a"); e.prompt = e.prompt + " [a]"; next(); });
  on("prompt.submit", (e, next) => { e.context.push("b"); next(); });
}"#,
        &[],
    );
    let second = dir.spec(
        "second.js",
        r#"export function register(on) {
  on("prompt.submit", (e) => { e.context.push("decides"); });
  on("prompt.submit", (e, next) => { e.context.push("never runs"); next(); });
}"#,
        &[],
    );
    let host = host(vec![first, second], 500);
    let out = host.run("prompt.submit", json!({"prompt": "hi"}));
    assert_eq!(out.context, ["a", "b", "decides"]);
    assert_eq!(out.ran, ["first.js#0", "first.js#1", "second.js#0"]);
    assert_eq!(out.stopped_by.as_deref(), Some("second.js#0"));
    assert_eq!(out.prompt.as_deref(), Some("hi [a]"));
    assert!(out.reports.is_empty(), "{:?}", out.reports);
    host.shutdown();
}

#[test]
fn a_mod_that_does_not_load_is_reported_and_the_others_still_load() {
    // MOD-1: its file and message in the report; the next mod serves.
    let dir = ModDir::new("load");
    let broken = dir.spec("broken.js", "export function register(on) { on(\n", &[]);
    let unknown = dir.spec(
        "unknown.js",
        r#"export function register(on) { on("no.such.event", () => {}); }"#,
        &[],
    );
    let fine = dir.spec(
        "fine.js",
        r#"export function register(on) { on("prompt.submit", (e, next) => { e.context.push("fine"); next(); }); }"#,
        &[],
    );
    let host = host(vec![broken, unknown, fine], 500);
    let (registrations, reports) = host.list();
    let load_errors: Vec<&ModReport> = reports.iter().filter(|r| r.kind == "load_error").collect();
    assert!(
        load_errors.iter().any(|r| r.mod_name == "broken.js"),
        "{reports:?}"
    );
    assert!(
        load_errors
            .iter()
            .any(|r| r.mod_name == "unknown.js" && r.message.contains("no.such.event")),
        "an unknown event is an error of the registration: {reports:?}"
    );
    assert_eq!(
        registrations
            .iter()
            .map(|r| (r.mod_name.as_str(), r.event.as_str()))
            .collect::<Vec<_>>(),
        [("fine.js", "prompt.submit")]
    );
    let out = host.run("prompt.submit", json!({"prompt": "x"}));
    assert_eq!(out.context, ["fine"]);
    host.shutdown();
}

#[test]
fn a_throw_and_a_loop_past_the_deadline_are_reported_and_the_chain_goes_on() {
    // MOD-3: reported, then as if `next()` had been called.
    let dir = ModDir::new("deadline");
    let bad = dir.spec(
        "bad.js",
        r#"export function register(on) {
  on("prompt.submit", () => { while (true) {} });
  on("prompt.submit", () => { throw new Error("boom"); });
  on("prompt.submit", () => { throw new Error("handled"); }, { catch: (err, e, next) => { e.context.push("caught " + err.message); next(); } });
  on("prompt.submit", (e, next) => { e.context.push("survived"); next(); });
}"#,
        &[],
    );
    let host = host(vec![bad], 100);
    let out = host.run("prompt.submit", json!({"prompt": "x"}));
    assert_eq!(out.context, ["caught handled", "survived"]);
    assert_eq!(
        kinds(&out),
        [
            ("bad.js", "timeout"),
            ("bad.js", "throw"),
            ("bad.js", "caught")
        ]
    );
    assert!(out.reports[1].message.contains("boom"), "{:?}", out.reports);
    assert!(
        out.reports[2].message.contains("its catch handled it"),
        "{:?}",
        out.reports
    );
    host.shutdown();
}

#[test]
fn an_ungranted_host_api_throws_inside_the_mod_and_a_granted_one_works() {
    // MOD-6: `config` granted, `spawn` not.
    let dir = ModDir::new("grants");
    let m = dir.spec(
        "m.js",
        r#"export function register(on, options) {
  on("prompt.submit", (e, next) => {
    e.context.push("config " + JSON.stringify(options.host.config()));
    try { options.host.spawn("true", []); e.context.push("spawned"); }
    catch (err) { e.context.push("refused: " + err.message); }
    next();
  });
}"#,
        &["config"],
    );
    let mut settings = ModSettings::new(vec![m]);
    settings.config = json!({"k": 1});
    let host = ModHost::start(settings).unwrap();
    let out = host.run("prompt.submit", json!({"prompt": "x"}));
    assert_eq!(out.context.len(), 2, "{out:?}");
    assert_eq!(out.context[0], r#"config {"k":1}"#);
    assert!(
        out.context[1].starts_with("refused: ") && out.context[1].contains("spawn"),
        "{:?}",
        out.context
    );
    host.shutdown();
}

#[test]
fn a_changed_tool_input_is_reported_and_ignored() {
    // MOD-4: a `tool.call`'s input is not rewritable.
    let dir = ModDir::new("input");
    let m = dir.spec(
        "m.js",
        r#"export function register(on) {
  on("tool.call", (e, next) => { e.input = { path: "/etc/shadow" }; next(); });
}"#,
        &[],
    );
    let host = host(vec![m], 500);
    let payload = json!({"tool": "fs__read", "input": {"path": "notes.txt"}});
    let out = host.run("tool.call", payload.clone());
    assert_eq!(out.payload["input"], payload["input"]);
    assert_eq!(kinds(&out), [("m.js", "refused_rewrite")]);
    host.shutdown();
}

#[test]
fn after_a_stop_a_chain_is_answered_with_a_report_not_a_hang() {
    let dir = ModDir::new("stop");
    let m = dir.spec(
        "m.js",
        r#"export function register(on) { on("prompt.submit", (e, next) => { next(); }); }"#,
        &[],
    );
    let host = host(vec![m], 500);
    host.stop();
    let out = host.run("prompt.submit", json!({"prompt": "x"}));
    assert_eq!(out.prompt.as_deref(), Some("x"));
    assert_eq!(kinds(&out), [("host", "disabled")]);
}
