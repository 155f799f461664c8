//! Command hooks with real shells and real processes (HOOK-1..HOOK-12,
//! conformance cases of hooks-reference §6). Pure parsing rules are unit
//! tested next to the codecs; these tests run hooks end to end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mcpvisor::{
    Approval, CallOptions, CancellationToken, Dialect, HookEvent, HookInput, HookOutcome,
    HookSession, HookSettings, OutcomeKind, PolicyCall, Runtime, RuntimeEvent, Scope, StopState,
    StopVerdict, ToolGuard, TrustMode,
};
use mcpvisor_chaos::{
    RequestLog, ScriptedApprover, TempDir, process_alive, shutdown_checked, start_logged_server,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const G: Scope = Scope::Global;

/// Removed, with what the test wrote in it, when the test ends.
fn temp_dir(tag: &str) -> TempDir {
    TempDir::new(tag).unwrap()
}

fn write_hooks(dir: &Path, name: &str, hooks: Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(&json!({ "hooks": hooks })).unwrap()).unwrap();
    p
}

fn one(event: &str, matcher: Option<&str>, command: &str) -> Value {
    let mut group = json!({"hooks": [{"type": "command", "command": command, "timeout": 10}]});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({ event: [group] })
}

fn session(dir: &Path) -> HookSession {
    HookSession {
        session_id: "s1".into(),
        cwd: dir.display().to_string(),
        model: "m".into(),
        turn_id: "t1".into(),
        ..HookSession::default()
    }
}

async fn runtime_with(claude: Option<PathBuf>, codex: Option<PathBuf>, dir: &Path) -> Runtime {
    Runtime::builder()
        .hooks(HookSettings {
            claude,
            codex,
            session: session(dir),
            ..HookSettings::default()
        })
        .start()
        .await
        .unwrap()
}

fn pre_bash(command: &str) -> HookInput {
    HookInput::PreToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({"command": command}),
        tool_use_id: "call-1".into(),
    }
}

async fn run_one(
    dialect: Dialect,
    hooks: Value,
    input: &HookInput,
    dir: &Path,
) -> mcpvisor::HookReport {
    let file = write_hooks(dir, &format!("{dialect:?}.json"), hooks);
    let rt = match dialect {
        Dialect::Claude => runtime_with(Some(file), None, dir).await,
        Dialect::Codex => runtime_with(None, Some(file), dir).await,
    };
    let report = rt
        .hooks()
        .run(&session(dir), input, None, &CancellationToken::new())
        .await;
    let shutdown = rt.shutdown(Duration::from_secs(5)).await;
    assert!(shutdown.is_clean(), "{shutdown:?}");
    // Nothing the hook started outlives the runtime: hooks carry the
    // runtime's tag, and none is left with it (RECO-7).
    assert!(shutdown.escaped.is_empty(), "{shutdown:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t1_payload_framing_and_fields_per_dialect() {
    let dir = temp_dir("t1");
    let capture = format!("cat > {}/in", dir.display());
    let input = pre_bash("rm -rf build");
    let r = run_one(
        Dialect::Claude,
        one("PreToolUse", Some("Bash"), &capture),
        &input,
        &dir,
    )
    .await;
    assert_eq!(r.merged.verdict().0, "proceed");
    let bytes = std::fs::read(dir.join("in")).unwrap();
    assert_eq!(
        bytes.last(),
        Some(&b'\n'),
        "Claude Code ends stdin with a newline"
    );
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    for key in [
        "session_id",
        "transcript_path",
        "cwd",
        "permission_mode",
        "hook_event_name",
        "tool_name",
        "tool_input",
        "tool_use_id",
    ] {
        assert!(p.get(key).is_some(), "CC payload lacks {key}: {p}");
    }
    assert_eq!(p["transcript_path"], json!(""));
    assert_eq!(p["tool_input"]["command"], json!("rm -rf build"));

    let r = run_one(
        Dialect::Codex,
        one("PreToolUse", Some("Bash"), &capture),
        &input,
        &dir,
    )
    .await;
    assert_eq!(r.merged.verdict().0, "proceed");
    let bytes = std::fs::read(dir.join("in")).unwrap();
    assert_eq!(bytes.last(), Some(&b'}'), "Codex sends no trailing newline");
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(p["tool_input"], json!({"command": "rm -rf build"}));
    assert_eq!(p["transcript_path"], Value::Null);
    assert_eq!(p["turn_id"], json!("t1"));
    assert_eq!(p["model"], json!("m"));
    assert_eq!(p["permission_mode"], json!("default"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t2_claude_substitutes_and_exports_codex_does_neither() {
    let dir = temp_dir("t2");
    let script = dir.join("h.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s' \"$CLAUDE_PROJECT_DIR\" > {}/project\nexit 0\n",
            dir.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let hooks = one("PreToolUse", None, "${CLAUDE_PLUGIN_ROOT}/h.sh");
    let r = run_one(Dialect::Claude, hooks.clone(), &pre_bash("ls"), &dir).await;
    assert!(r.merged.errors.is_empty(), "{:?}", r.merged);
    assert_eq!(r.runs[0].exit_code, Some(0));
    assert_eq!(
        std::fs::read_to_string(dir.join("project")).unwrap(),
        dir.display().to_string(),
        "CLAUDE_PROJECT_DIR defaults to the session cwd"
    );
    let r = run_one(Dialect::Codex, hooks, &pre_bash("ls"), &dir).await;
    assert_eq!(r.runs[0].exit_code, Some(127), "no substitution: /h.sh");
    assert_eq!(r.merged.verdict().0, "proceed");
    assert_eq!(r.merged.errors.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t6_t10_t11_exit_codes_through_real_shells() {
    let dir = temp_dir("t6");
    for d in [Dialect::Claude, Dialect::Codex] {
        let r = run_one(
            d,
            one("PreToolUse", None, "echo 'blocked by policy' >&2; exit 2"),
            &pre_bash("rm"),
            &dir,
        )
        .await;
        assert_eq!(r.merged.verdict(), ("deny", Some("blocked by policy")));
        let r = run_one(
            d,
            one("PreToolUse", None, "echo boom >&2; exit 1"),
            &pre_bash("rm"),
            &dir,
        )
        .await;
        assert_eq!(r.merged.verdict().0, "proceed");
        assert!(r.merged.errors[0].contains(if d == Dialect::Claude {
            "boom"
        } else {
            "exited with code 1"
        }));
        let r = run_one(
            d,
            one("PreToolUse", None, "/nonexistent/hook.sh"),
            &pre_bash("rm"),
            &dir,
        )
        .await;
        assert_eq!(r.runs[0].exit_code, Some(127));
        assert_eq!(r.merged.verdict().0, "proceed", "fail open (HOOK-5)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t12_timeout_kills_the_whole_group_within_the_hooks_own_limit() {
    let dir = temp_dir("t12");
    let pidfile = dir.join("pid");
    // A grandchild in the background: only a group kill reaches it.
    let command = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let hooks =
        json!({"PreToolUse": [{"hooks": [{"type": "command", "command": command, "timeout": 1}]}]});
    for d in [Dialect::Claude, Dialect::Codex] {
        let started = Instant::now();
        let r = run_one(d, hooks.clone(), &pre_bash("x"), &dir).await;
        assert!(r.runs[0].timed_out);
        assert!(r.merged.errors[0].contains("timed out after 1000 ms"));
        assert!(
            r.runs[0].duration_ms < 5_000,
            "the hook's own 1 s limit applies, not the default: {} ms",
            r.runs[0].duration_ms
        );
        assert_eq!(r.merged.verdict().0, "proceed");
        // 1 s, not the 600 s default (a generous bound: this is not a timing test).
        assert!(started.elapsed() < Duration::from_secs(20));
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            mcpvisor_chaos::wait_gone(pid, Duration::from_secs(5)).await,
            "the backgrounded grandchild {pid} outlived its hook"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t19_matchers_select_per_dialect() {
    let dir = temp_dir("t19");
    let log = dir.join("log");
    let groups: Vec<Value> = [
        "Bash",
        "^Bash$",
        "mcp__memory",
        "mcp__memory__.*",
        "(?i)bash",
        "[",
    ]
    .iter()
    .enumerate()
    .map(|(i, m)| {
        json!({"matcher": m, "hooks": [{"type": "command",
                "command": format!("echo {i} >> {}", log.display())}]})
    })
    .collect();
    let hooks = json!({ "PreToolUse": groups, "UserPromptSubmit": [{"matcher": "[", "hooks": [{"type": "command", "command": format!("echo ups >> {}", log.display())}]}] });
    let fired = |subject: &str| HookInput::PreToolUse {
        tool_name: subject.into(),
        tool_input: json!({}),
        tool_use_id: "c".into(),
    };
    let seen = |d: Dialect, input: HookInput| {
        let _ = std::fs::remove_file(&log);
        let hooks = hooks.clone();
        let dir = dir.to_path_buf();
        let log = log.clone();
        async move {
            run_one(d, hooks, &input, &dir).await;
            let mut lines: Vec<String> = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            lines.sort();
            lines
        }
    };
    assert!(seen(Dialect::Claude, fired("BashOutput")).await.is_empty());
    assert_eq!(seen(Dialect::Codex, fired("BashOutput")).await, ["0", "4"]);
    assert_eq!(seen(Dialect::Claude, fired("mcp__memory__x")).await, ["3"]);
    assert_eq!(
        seen(Dialect::Codex, fired("mcp__memory__x")).await,
        ["2", "3"]
    );
    let prompt = HookInput::UserPromptSubmit {
        prompt: "hi".into(),
    };
    assert_eq!(seen(Dialect::Claude, prompt.clone()).await, ["ups"]);
    assert_eq!(seen(Dialect::Codex, prompt).await, ["ups"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t20_hooks_run_concurrently_dedupe_per_dialect_and_deny_wins() {
    let dir = temp_dir("t20");
    let d = dir.display();
    // Each waits for the other's mark: only concurrent runs both finish.
    let a = format!("touch {d}/a; while [ ! -f {d}/b ]; do sleep 0.02; done; echo x >> {d}/log");
    let b = format!("touch {d}/b; while [ ! -f {d}/a ]; do sleep 0.02; done");
    let deny = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}'"#;
    let allow = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'"#;
    let cmd = |c: &str| json!({"type": "command", "command": c, "timeout": 10});
    let hooks = json!({"PreToolUse": [
        {"hooks": [cmd(&a), cmd(&b), cmd(allow)]},
        {"hooks": [cmd(&a), cmd(deny)]}]});
    for (dialect, runs) in [(Dialect::Claude, 4), (Dialect::Codex, 5)] {
        for f in ["a", "b", "log"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let r = run_one(dialect, hooks.clone(), &pre_bash("x"), &dir).await;
        assert_eq!(r.runs.len(), runs, "{dialect:?}");
        assert!(r.runs.iter().all(|r| !r.timed_out), "{:?}", r.runs);
        let logged = std::fs::read_to_string(dir.join("log")).unwrap();
        assert_eq!(logged.lines().count(), runs - 3, "duplicates: {dialect:?}");
        assert_eq!(r.merged.verdict(), ("deny", Some("no")));
        // Codex refuses `allow` as unsupported output.
        assert_eq!(
            r.merged.errors.len(),
            usize::from(dialect == Dialect::Codex)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t15_hook7_stop_continues_until_the_budget_and_marks_stop_hook_active() {
    let dir = temp_dir("t15");
    let log = dir.join("active");
    let command = format!(
        r#"grep -o '"stop_hook_active":[a-z]*' >> {}; echo '{{"decision":"block","reason":"run tests"}}'"#,
        log.display()
    );
    let file = write_hooks(&dir, "cc.json", one("Stop", None, &command));
    let rt = Runtime::builder()
        .hooks(HookSettings {
            claude: Some(file),
            session: session(&dir),
            stop_budget: 3,
            ..HookSettings::default()
        })
        .start()
        .await
        .unwrap();
    let mut events = rt.subscribe();
    let hooks = rt.hooks();
    let mut state = StopState::default();
    let cancel = CancellationToken::new();
    let mut verdicts = Vec::new();
    for _ in 0..4 {
        let (v, _) = hooks
            .on_stop(&mut state, &session(&dir), None, &cancel)
            .await;
        verdicts.push(v);
    }
    assert_eq!(
        verdicts,
        vec![
            StopVerdict::Continue("run tests".into()),
            StopVerdict::Continue("run tests".into()),
            StopVerdict::Continue("run tests".into()),
            StopVerdict::BudgetExhausted(3),
        ]
    );
    let active = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        active.lines().collect::<Vec<_>>(),
        [
            "\"stop_hook_active\":false",
            "\"stop_hook_active\":true",
            "\"stop_hook_active\":true",
            "\"stop_hook_active\":true"
        ]
    );
    let mut notice = false;
    while let Ok(e) = events.try_recv() {
        notice |= matches!(e, RuntimeEvent::HookNotice { text } if text.contains("3 times"));
    }
    assert!(notice, "an endless Stop hook ends with a clear event");
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_subagent_events_are_claude_only() {
    let dir = temp_dir("t21");
    let start = r#"echo '{"hookSpecificOutput":{"hookEventName":"SubagentStart","additionalContext":"be terse"}}'"#;
    let stop = r#"echo '{"decision":"block","reason":"verify"}'"#;
    let hooks = json!({
        "SubagentStart": [{"matcher": "Explore", "hooks": [{"type": "command", "command": start}]}],
        "SubagentStop": [{"matcher": "Explore", "hooks": [{"type": "command", "command": stop}]}]});
    let s = HookInput::SubagentStart {
        agent_id: "a1".into(),
        agent_type: "Explore".into(),
    };
    let r = run_one(Dialect::Claude, hooks.clone(), &s, &dir).await;
    assert_eq!(r.merged.context, ["be terse"]);
    let e = HookInput::SubagentStop {
        stop_hook_active: false,
        agent_id: "a1".into(),
        agent_type: "Explore".into(),
        agent_transcript_path: None,
        last_assistant_message: None,
    };
    let r = run_one(Dialect::Claude, hooks.clone(), &e, &dir).await;
    assert_eq!(r.merged.verdict(), ("continue", Some("verify")));
    let r = run_one(Dialect::Codex, hooks, &s, &dir).await;
    assert!(r.runs.is_empty(), "Codex has no subagent events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t22_unusable_relative_config_registers_nothing_and_is_read_once() {
    // A relative path resolves against the process cwd.
    let cwd = std::env::current_dir().unwrap();
    let dir = temp_dir("t22");
    let rel = PathBuf::from(format!("t22-hooks-{}.json", std::process::id()));
    let abs = cwd.join(&rel);
    // Removed however the test ends: a failed assertion must not leave a
    // file in the crate directory.
    struct RemoveOnDrop(PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _cleanup = RemoveOnDrop(abs.clone());
    std::fs::write(&abs, "{ not json").unwrap();
    let rt = runtime_with(None, Some(rel.clone()), &dir).await;
    assert!(rt.hooks().sets().iter().all(|s| s.groups.is_empty()));
    let hooks = rt.hooks();
    let warning = &hooks.sets()[0].warnings[0];
    assert!(
        warning.starts_with("could not load hook config: ")
            && warning.contains("not valid JSON")
            && warning.ends_with("; no hooks registered"),
        "{warning}"
    );
    // Fixing the file later changes nothing: it was read once.
    std::fs::write(
        &abs,
        serde_json::to_vec(&json!({"hooks": one("PreToolUse", None, "exit 2")})).unwrap(),
    )
    .unwrap();
    let r = rt
        .hooks()
        .run(
            &session(&dir),
            &pre_bash("x"),
            None,
            &CancellationToken::new(),
        )
        .await;
    assert!(r.runs.is_empty());
    rt.shutdown(Duration::from_secs(5)).await;
    // And the same relative path, valid at start, loads.
    let rt = runtime_with(None, Some(rel), &dir).await;
    assert_eq!(rt.hooks().sets()[0].groups.len(), 1);
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook8_dispose_aborts_and_reaps_detached_runs_and_events_form_triples() {
    let dir = temp_dir("hook8");
    // The hook reports its pid through a FIFO: reading it waits for the hook.
    let hook = fifo_hook(&dir);
    let file = write_hooks(&dir, "cc.json", one("SessionStart", None, &hook.command));
    let rt = runtime_with(Some(file), None, &dir).await;
    let mut events = rt.subscribe();
    let handle = rt.hooks().run_detached(
        session(&dir),
        HookInput::SessionStart {
            source: "startup".into(),
        },
    );
    let pid = hook.pid().await;
    assert!(process_alive(pid));
    match events.recv().await.unwrap() {
        RuntimeEvent::HookMatched(info) => assert!(info.detached),
        other => panic!("expected hook_matched, got {other:?}"),
    }
    let started = Instant::now();
    let report = rt.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.hook_runs_aborted, 1);
    assert!(
        !process_alive(pid),
        "the detached hook {pid} survived dispose"
    );
    // Far under the 10 s deadline: the runs are aborted, not waited out.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let r = handle.await.unwrap();
    assert!(r.merged.errors[0].contains("cancelled"), "{:?}", r.merged);
}

/// A runtime with hooks, guards and an approver as set, and one fault-server
/// `srv` (trust `always` unless set) that logs its requests.
struct PipelineBuilder {
    claude: Option<Value>,
    codex: Option<Value>,
    approver: Option<Arc<ScriptedApprover>>,
    guard: Option<Arc<dyn ToolGuard>>,
    approved: Option<Vec<String>>,
    trust: TrustMode,
}

/// No hooks, guard or approver; trust `always`.
fn pipeline() -> PipelineBuilder {
    PipelineBuilder {
        claude: None,
        codex: None,
        approver: None,
        guard: None,
        approved: None,
        trust: TrustMode::Always,
    }
}

impl PipelineBuilder {
    /// `hooks` (an event → groups map) as the file of `dialect`.
    fn hooks(mut self, dialect: Dialect, hooks: Value) -> Self {
        match dialect {
            Dialect::Claude => self.claude = Some(hooks),
            Dialect::Codex => self.codex = Some(hooks),
        }
        self
    }

    fn approver(mut self, approver: Arc<ScriptedApprover>) -> Self {
        self.approver = Some(approver);
        self
    }

    fn guard(mut self, guard: Arc<dyn ToolGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// HOOK-12: only hooks with these command hashes run.
    fn approved(mut self, hashes: Vec<String>) -> Self {
        self.approved = Some(hashes);
        self
    }

    fn trust(mut self, trust: TrustMode) -> Self {
        self.trust = trust;
        self
    }

    /// Start the runtime and wait until `srv` is ready. Hook settings are
    /// only given when there are hooks (or approved hashes) to set.
    async fn start(self) -> Pipeline {
        let mut b = Runtime::builder();
        let mut hooks_dir = None;
        if self.claude.is_some() || self.codex.is_some() || self.approved.is_some() {
            let dir = hooks_dir.insert(temp_dir("pipe"));
            b = b.hooks(HookSettings {
                claude: self.claude.map(|h| write_hooks(dir, "cc.json", h)),
                codex: self.codex.map(|h| write_hooks(dir, "cx.json", h)),
                session: session(dir),
                approved: self.approved.map(|a| a.into_iter().collect()),
                ..HookSettings::default()
            });
        }
        if let Some(a) = self.approver {
            b = b.approver(a);
        }
        if let Some(g) = self.guard {
            b = b.guard(g);
        }
        let (rt, log) = start_logged_server(b, self.trust).await.unwrap();
        Pipeline {
            rt,
            log,
            _hooks_dir: hooks_dir,
        }
    }
}

/// A started pipeline: the runtime and server `srv`'s request log.
struct Pipeline {
    rt: Runtime,
    log: RequestLog,
    /// The hooks files are read when a hook runs: kept for the pipeline's life.
    _hooks_dir: Option<TempDir>,
}

impl Pipeline {
    async fn echo(&self) -> mcpvisor::ToolOutcome {
        echo(&self.rt, CallOptions::default()).await
    }

    /// The echo call as a task of its own.
    fn spawn_echo(&self, options: CallOptions) -> JoinHandle<mcpvisor::ToolOutcome> {
        let rt = self.rt.clone();
        tokio::spawn(async move { echo(&rt, options).await })
    }

    fn calls_seen(&self) -> usize {
        self.log.tool_calls()
    }

    async fn done(self) {
        shutdown_checked(&self.rt, &[]).await.assert_clean();
    }
}

/// `mcp__srv__echo` with message "hi".
async fn echo(rt: &Runtime, options: CallOptions) -> mcpvisor::ToolOutcome {
    rt.call(
        &G,
        "mcp__srv__echo",
        Some(json!({"message": "hi"})),
        options,
    )
    .await
}

/// A hook command that writes its pid to a FIFO in `dir`, then sleeps (as
/// that same process) for a minute.
struct FifoHook {
    fifo: PathBuf,
    command: String,
}

/// Make the FIFO `dir/pid` and the hook command that reports through it.
fn fifo_hook(dir: &Path) -> FifoHook {
    let fifo = dir.join("pid");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let command = format!("echo $$ > {}; exec sleep 60", fifo.display());
    FifoHook { fifo, command }
}

impl FifoHook {
    /// The hook's pid: reading the FIFO waits until the hook runs.
    async fn pid(self) -> u32 {
        tokio::task::spawn_blocking(move || std::fs::read_to_string(self.fifo))
            .await
            .unwrap()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_pre_tool_deny_never_reaches_the_server_and_hooks_see_the_public_name() {
    // HOOK-6, HOOK-11, and the pipeline order trust → hooks → call.
    let dir = temp_dir("order");
    let capture = format!(
        "cat > {}/in; echo 'not on my watch' >&2; exit 2",
        dir.display()
    );
    let p = pipeline()
        .hooks(
            Dialect::Claude,
            one("PreToolUse", Some("mcp__srv__.*"), &capture),
        )
        .start()
        .await;
    let out = p.echo().await;
    assert_eq!(out.kind, OutcomeKind::DeniedByHook);
    assert!(
        out.projection.contains("not on my watch"),
        "{}",
        out.projection
    );
    assert_eq!(p.calls_seen(), 0, "the server saw a denied call");
    let payload: Value = serde_json::from_slice(&std::fs::read(dir.join("in")).unwrap()).unwrap();
    assert_eq!(payload["tool_name"], json!("mcp__srv__echo"));
    assert_eq!(payload["tool_input"], json!({"message": "hi"}));
    p.done().await;

    // Trust first: a refused call never runs its hooks.
    let _ = std::fs::remove_file(dir.join("in"));
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, &capture))
        .trust(TrustMode::Never)
        .start()
        .await;
    assert_eq!(p.echo().await.kind, OutcomeKind::RefusedByTrust);
    assert!(
        !dir.join("in").exists(),
        "hooks ran for a call trust refused"
    );
    p.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_ask_routes_to_the_approver_and_allow_never_skips_it() {
    let ask = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"deletes files"}}'"#;
    let approver = Arc::new(ScriptedApprover::new(vec![
        Approval::DontAllow,
        Approval::AllowThisChat,
    ]));
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, ask))
        .approver(approver.clone())
        .start()
        .await;
    assert!(p.echo().await.is_ok());
    let denied = p.echo().await;
    assert_eq!(denied.kind, OutcomeKind::DeniedByHook);
    assert!(
        denied.projection.contains("declined"),
        "{}",
        denied.projection
    );
    assert_eq!(p.calls_seen(), 1);
    let asked = approver.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].reason.as_deref(), Some("deletes files"));
    p.done().await;

    // A hook's allow is no decision: trust `ask` still asks (HOOK-9).
    let allow = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'"#;
    let approver = Arc::new(ScriptedApprover::new(vec![]));
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, allow))
        .approver(approver.clone())
        .trust(TrustMode::Ask)
        .start()
        .await;
    assert_eq!(p.echo().await.kind, OutcomeKind::RefusedByTrust);
    assert_eq!(approver.asked().len(), 1);
    p.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t5_updated_input_is_never_applied_the_server_gets_the_original() {
    let rewrite = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"message":"rewritten"}}}'"#;
    for dialect in [Dialect::Claude, Dialect::Codex] {
        let codex = dialect == Dialect::Codex;
        let p = pipeline()
            .hooks(dialect, one("PreToolUse", None, rewrite))
            .start()
            .await;
        let out = p.echo().await;
        assert!(out.is_ok(), "{}", out.projection);
        assert!(out.projection.contains("hi"), "{}", out.projection);
        assert!(!out.projection.contains("rewritten"));
        let note = out.notes.join("\n");
        if codex {
            assert!(note.contains("unsupported updatedInput"), "{note}");
        } else {
            assert!(note.contains("updatedInput ignored"), "{note}");
        }
        p.done().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_post_tool_feedback_appends_for_claude_and_replaces_for_codex() {
    // T18: the call ran (side effect kept); the model sees feedback.
    let fix = "echo 'fix lint' >&2; exit 2";
    let warn = r#"echo '{"systemMessage":"lint warnings"}'"#;
    let hooks = json!({"PostToolUse": [{"hooks": [
        {"type": "command", "command": fix}, {"type": "command", "command": warn}]}]});
    let p = pipeline()
        .hooks(Dialect::Claude, hooks.clone())
        .start()
        .await;
    let out = p.echo().await;
    assert!(out.is_ok());
    assert!(out.projection.contains("hi"), "{}", out.projection);
    assert!(out.projection.contains("fix lint"), "{}", out.projection);
    assert!(
        !out.projection.contains("lint warnings"),
        "systemMessage reached the model"
    );
    assert!(out.notes.iter().any(|n| n.contains("lint warnings")));
    assert_eq!(p.calls_seen(), 1);
    p.done().await;

    let p = pipeline().hooks(Dialect::Codex, hooks).start().await;
    let out = p.echo().await;
    assert!(out.is_ok());
    assert!(out.canonical.is_some(), "the result is kept");
    assert_eq!(out.projection, "PostToolUse hook feedback: fix lint");
    assert_eq!(p.calls_seen(), 1);
    p.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook12_strict_hooks_run_only_approved_commands() {
    let dir = temp_dir("strict");
    let mark = format!("touch {}/ran; exit 2", dir.display());
    let hash = mcpvisor::command_hash(&mark);
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, &mark))
        .approved(vec!["0".repeat(64)])
        .start()
        .await;
    let out = p.echo().await;
    assert!(out.is_ok(), "an unapproved hook does not run");
    assert!(!dir.join("ran").exists());
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains(&hash) && n.contains("not approved"))
    );
    p.done().await;
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, &mark))
        .approved(vec![hash])
        .start()
        .await;
    assert_eq!(p.echo().await.kind, OutcomeKind::DeniedByHook);
    assert!(dir.join("ran").exists());
    p.done().await;
}

struct Broken(&'static str);

impl ToolGuard for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn check<'a>(&'a self, _call: &'a PolicyCall) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            match self.0 {
                "panic" => panic!("guard bug"),
                "err" => Err("policy store unreachable".into()),
                _ => Ok(None),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook5_native_guards_fail_closed() {
    for (mode, text) in [("panic", "panicked"), ("err", "unreachable"), ("ok", "")] {
        let p = pipeline().guard(Arc::new(Broken(mode))).start().await;
        let out = p.echo().await;
        if mode == "ok" {
            assert!(out.is_ok());
        } else {
            assert_eq!(out.kind, OutcomeKind::DeniedByHook);
            assert!(out.projection.contains(text), "{}", out.projection);
            assert_eq!(p.calls_seen(), 0);
        }
        p.done().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook8_in_turn_runs_leave_a_matched_invoked_result_triple() {
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, "exit 0"))
        .start()
        .await;
    let mut events = p.rt.subscribe();
    assert!(p.echo().await.is_ok());
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        match e {
            RuntimeEvent::HookMatched(i) => {
                assert_eq!(i.point, HookEvent::PreToolUse);
                assert!(!i.detached);
                seen.push(("matched", i.run_id));
            }
            RuntimeEvent::HookInvoked { run_id } => seen.push(("invoked", run_id)),
            RuntimeEvent::HookResult {
                run_id, outcomes, ..
            } => {
                assert_eq!(outcomes, vec![HookOutcome::Proceed]);
                seen.push(("result", run_id));
            }
            _ => {}
        }
    }
    let id = seen[0].1;
    assert_eq!(seen, [("matched", id), ("invoked", id), ("result", id)]);
    p.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook3_cancelling_a_call_kills_its_running_hook_and_the_server_never_sees_it() {
    let dir = temp_dir("cancel");
    let hook = fifo_hook(&dir);
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, &hook.command))
        .start()
        .await;
    let cancel = CancellationToken::new();
    let call = p.spawn_echo(CallOptions {
        cancel: Some(cancel.clone()),
        ..CallOptions::default()
    });
    let pid = hook.pid().await;
    cancel.cancel();
    let out = call.await.unwrap();
    assert_eq!(out.kind, OutcomeKind::Cancelled, "{}", out.projection);
    assert!(
        mcpvisor_chaos::wait_gone(pid, Duration::from_secs(5)).await,
        "the hook {pid} outlived its cancelled call"
    );
    assert!(
        out.notes.iter().any(|n| n.contains("cancelled")),
        "{:?}",
        out.notes
    );
    assert_eq!(p.calls_seen(), 0);
    p.done().await;
}

struct DenyAll;

impl ToolGuard for DenyAll {
    fn name(&self) -> &str {
        "deny-all"
    }
    fn check<'a>(&'a self, _call: &'a PolicyCall) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async { Ok(Some("nothing today".into())) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook6_an_earlier_allow_with_context_never_overrides_a_later_deny() {
    let allow = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","additionalContext":"repo is clean"}}'"#;
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, allow))
        .guard(Arc::new(DenyAll))
        .start()
        .await;
    let out = p.echo().await;
    assert_eq!(out.kind, OutcomeKind::DeniedByHook);
    assert!(
        out.projection.contains("nothing today"),
        "{}",
        out.projection
    );
    // The hook's context is merged into the downstream decision, not lost.
    assert!(
        out.projection.contains("repo is clean"),
        "{}",
        out.projection
    );
    assert_eq!(p.calls_seen(), 0);
    p.done().await;
}

/// One conformance row: event, hook command, expected (decision, reason)
/// per dialect, and whether an error is expected per dialect.
struct Row {
    case: &'static str,
    input: HookInput,
    command: &'static str,
    cc: (&'static str, Option<&'static str>, bool),
    cx: (&'static str, Option<&'static str>, bool),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_rows_through_real_shells_in_both_dialects() {
    let dir = temp_dir("rows");
    let ups = HookInput::UserPromptSubmit {
        prompt: "deploy".into(),
    };
    let start = HookInput::SessionStart {
        source: "startup".into(),
    };
    let pre = pre_bash("rm -rf build");
    let rows = [
        Row {
            case: "T3",
            input: pre.clone(),
            command: r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}'"#,
            cc: ("deny", Some("no rm"), false),
            cx: ("deny", Some("no rm"), false),
        },
        Row {
            case: "T4",
            input: pre.clone(),
            command: r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"no rm"}}'"#,
            cc: ("ask", Some("no rm"), false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T7",
            input: pre.clone(),
            command: "exit 2",
            cc: ("deny", Some("No stderr output"), false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T8",
            input: pre.clone(),
            command: r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny"}}'"#,
            cc: ("deny", Some("Blocked by hook"), false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T9 block",
            input: pre.clone(),
            command: r#"echo '{"decision":"block","reason":"legacy"}'"#,
            cc: ("deny", Some("legacy"), false),
            cx: ("deny", Some("legacy"), false),
        },
        Row {
            case: "T9 approve",
            input: pre.clone(),
            command: r#"echo '{"decision":"approve"}'"#,
            cc: ("proceed", None, false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T13",
            input: ups.clone(),
            command: "echo 'branch: main'",
            cc: ("proceed", None, false),
            cx: ("proceed", None, false),
        },
        Row {
            case: "T14 reason",
            input: ups.clone(),
            command: r#"echo '{"decision":"block","reason":"secret detected"}'"#,
            cc: ("block", Some("secret detected"), false),
            cx: ("block", Some("secret detected"), false),
        },
        Row {
            case: "T14 bare",
            input: ups.clone(),
            command: r#"echo '{"decision":"block"}'"#,
            cc: ("block", Some("Blocked by hook"), false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T16 start",
            input: start,
            command: r#"echo '{"continue":false,"stopReason":"maintenance"}'"#,
            cc: ("stop", Some("maintenance"), false),
            cx: ("stop", Some("maintenance"), false),
        },
        Row {
            case: "T16 pre",
            input: pre.clone(),
            command: r#"echo '{"continue":false,"stopReason":"maintenance"}'"#,
            cc: ("stop", Some("maintenance"), false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T17 pre",
            input: pre,
            command: r#"echo '{"foo":1}'"#,
            cc: ("proceed", None, false),
            cx: ("proceed", None, true),
        },
        Row {
            case: "T17 ups",
            input: ups,
            command: "echo '{not json'",
            cc: ("proceed", None, false),
            cx: ("proceed", None, true),
        },
    ];
    for row in rows {
        let event = row.input.event().name();
        for (dialect, (decision, reason, error)) in
            [(Dialect::Claude, row.cc), (Dialect::Codex, row.cx)]
        {
            let r = run_one(dialect, one(event, None, row.command), &row.input, &dir).await;
            let m = &r.merged;
            let what = format!("{} {dialect:?}: {m:?}", row.case);
            assert_eq!(m.verdict(), (decision, reason), "{what}");
            assert_eq!(!m.errors.is_empty(), error, "{what}");
        }
    }
    // T13 / T17: plain text (and CC's malformed JSON) on a prompt is context.
    let r = run_one(
        Dialect::Claude,
        one("UserPromptSubmit", None, "echo '{not json'"),
        &HookInput::UserPromptSubmit { prompt: "p".into() },
        &dir,
    )
    .await;
    assert_eq!(r.merged.context, ["{not json"]);
    let r = run_one(
        Dialect::Codex,
        one("UserPromptSubmit", None, "echo 'branch: main'"),
        &HookInput::UserPromptSubmit { prompt: "p".into() },
        &dir,
    )
    .await;
    assert_eq!(r.merged.context, ["branch: main"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook3_a_call_given_up_by_its_caller_kills_its_running_hook() {
    let dir = temp_dir("dropped");
    let hook = fifo_hook(&dir);
    let p = pipeline()
        .hooks(Dialect::Claude, one("PreToolUse", None, &hook.command))
        .start()
        .await;
    let call = p.spawn_echo(CallOptions::default());
    let pid = hook.pid().await;
    // The embedder stops waiting: the call's future is dropped.
    call.abort();
    assert!(
        mcpvisor_chaos::wait_gone(pid, Duration::from_secs(5)).await,
        "the hook {pid} outlived the call its caller gave up"
    );
    assert_eq!(p.calls_seen(), 0);
    p.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_hooks_see_the_project_dir_override_and_plugin_data_as_env_and_substitution() {
    // HOOK-2: `CLAUDE_PROJECT_DIR` is the configured project dir (not the
    // session cwd) and `CLAUDE_PLUGIN_DATA` the configured data dir, both in
    // the environment and as `${VAR}` substituted in the command text.
    let dir = temp_dir("claude-env");
    let (project, data) = (dir.join("project"), dir.join("plugin-data"));
    let out = dir.join("out");
    let command = format!(
        "printf '%s|%s|%s|%s' \"$CLAUDE_PROJECT_DIR\" \"$CLAUDE_PLUGIN_DATA\" '${{CLAUDE_PLUGIN_DATA}}' '${{CLAUDE_PROJECT_DIR}}' > {}",
        out.display()
    );
    let file = write_hooks(&dir, "cc.json", one("PreToolUse", None, &command));
    let rt = Runtime::builder()
        .hooks(HookSettings {
            claude: Some(file),
            session: session(&dir),
            project_dir: Some(project.clone()),
            plugin_data: Some(data.clone()),
            ..HookSettings::default()
        })
        .start()
        .await
        .unwrap();
    let r = rt
        .hooks()
        .run(
            &session(&dir),
            &pre_bash("ls"),
            None,
            &CancellationToken::new(),
        )
        .await;
    rt.shutdown(Duration::from_secs(5)).await;
    assert_eq!(r.merged.verdict().0, "proceed");
    let (p, d) = (project.display(), data.display());
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{p}|{d}|{d}|{p}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_hooks_run_through_the_users_login_shell() {
    // HOOK-2 (Codex): the command runs as `$SHELL -lc <command>`, falling
    // back to /bin/sh when SHELL is unset or not a file; no Claude variables.
    let dir = temp_dir("codex-shell");
    let out = dir.join("out");
    // A compound command, so the shell does not exec its last command and
    // /proc/$$ still shows the shell's own command line.
    let command = format!(
        "line=$(tr '\\0' ' ' < /proc/$$/cmdline); printf '%s|%s' \"$line\" \"${{CLAUDE_PROJECT_DIR:-unset}}\" > {}",
        out.display()
    );
    let r = run_one(
        Dialect::Codex,
        one("PreToolUse", None, &command),
        &pre_bash("ls"),
        &dir,
    )
    .await;
    assert_eq!(r.merged.verdict().0, "proceed");
    let shell = std::env::var("SHELL")
        .ok()
        .filter(|s| !s.is_empty() && Path::new(s).is_file())
        .unwrap_or_else(|| "/bin/sh".into());
    let seen = std::fs::read_to_string(&out).unwrap();
    let (line, project) = seen.rsplit_once('|').unwrap();
    assert!(
        line.starts_with(&format!("{shell} -lc line=")),
        "{line:?} (SHELL {shell})"
    );
    assert_eq!(project, "unset", "Codex hooks get no Claude variables");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook8_the_event_log_file_holds_each_runs_matched_invoked_result_triple() {
    // HOOK-8 through the event log file (not only the broadcast): three
    // lines per run, in order, sharing one run id.
    let dir = temp_dir("hook-log");
    let log = dir.join("events.jsonl");
    let file = write_hooks(&dir, "cc.json", one("PreToolUse", None, "exit 0"));
    let rt = Runtime::builder()
        .hooks(HookSettings {
            claude: Some(file),
            session: session(&dir),
            ..HookSettings::default()
        })
        .event_log(&log)
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        let r = rt
            .hooks()
            .run(
                &session(&dir),
                &pre_bash("ls"),
                None,
                &CancellationToken::new(),
            )
            .await;
        assert_eq!(r.merged.verdict().0, "proceed");
    }
    rt.shutdown(Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let mut seen: Vec<(String, u64)> = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let kind = v["event"].as_str().unwrap_or_default();
        if kind.starts_with("hook_") && kind != "hook_notice" {
            let id = find_run_id(&v).unwrap_or_else(|| panic!("no run_id in {line}"));
            seen.push((kind.to_owned(), id));
        }
    }
    assert_eq!(seen.len(), 6, "{text}");
    for run in seen.chunks(3) {
        let id = run[0].1;
        let kinds: Vec<&str> = run.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            ["hook_matched", "hook_invoked", "hook_result"],
            "{text}"
        );
        assert!(run.iter().all(|(_, i)| *i == id), "{run:?}");
    }
    assert_ne!(seen[0].1, seen[3].1, "each run has its own id");
}

/// The first `run_id` anywhere in `v`.
fn find_run_id(v: &Value) -> Option<u64> {
    match v {
        Value::Object(m) => m
            .get("run_id")
            .and_then(Value::as_u64)
            .or_else(|| m.values().find_map(find_run_id)),
        Value::Array(a) => a.iter().find_map(find_run_id),
        _ => None,
    }
}

// Issue 36: PostToolUseFailure runs after a failed call only (besides
// PostToolUse), with the tool, its input and what the model is told of the
// failure; its context reaches the model. Codex has no such event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_tool_use_failure_runs_after_a_failed_call_only_with_the_error() {
    let dir = temp_dir("failure");
    let seen = dir.join("seen.json");
    let command = format!(
        r#"cat > '{}'; echo '{{"hookSpecificOutput":{{"hookEventName":"PostToolUseFailure","additionalContext":"retry with care"}}}}'"#,
        seen.display()
    );
    let hooks = one("PostToolUseFailure", Some("mcp__srv__.*"), &command);
    let p = pipeline()
        .hooks(Dialect::Claude, hooks.clone())
        .start()
        .await;
    assert!(p.echo().await.is_ok());
    assert!(!seen.exists(), "it ran after a call that succeeded");
    let failed =
        p.rt.call(
            &G,
            "mcp__srv__is_error",
            Some(json!({})),
            CallOptions::default(),
        )
        .await;
    assert!(!failed.is_ok());
    assert!(
        failed.projection.contains("retry with care"),
        "{} (the hook ran: {}; notes {:?}; kind {:?})",
        failed.projection,
        seen.exists(),
        failed.notes,
        failed.kind
    );
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(payload["hook_event_name"], "PostToolUseFailure");
    assert_eq!(payload["tool_name"], "mcp__srv__is_error");
    assert_eq!(payload["is_interrupt"], false);
    assert!(
        !payload["error"].as_str().unwrap_or_default().is_empty(),
        "{payload}"
    );
    p.done().await;
    let p = pipeline().hooks(Dialect::Codex, hooks).start().await;
    assert!(
        p.rt.hooks()
            .sets()
            .iter()
            .flat_map(|s| s.warnings.iter())
            .any(|w| w.contains("PostToolUseFailure is not a Codex event")),
        "Codex has no PostToolUseFailure"
    );
    p.done().await;
}
