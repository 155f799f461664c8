//! The reference binary `mcpvisor`, run as a real process against
//! `fault-server` configs.
//!
//! `cargo test -p mcpvisor-chaos` builds only this package's binaries, so each
//! test first makes sure `target/<profile>/mcpvisor` is built and up to date
//! (`ensure_mcpvisor_built`, a no-op `cargo build` when it is).
//!
//! Requirement ids (CONN, SYNC, CALL, RECO) refer to shared/spec/mcp.md.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use mcpvisor_chaos::{
    ConfigDir, RequestLog, ensure_mcpvisor_built, fault_server_path, fault_server_section,
    process_alive, unique_temp_path, wait_file_contains, wait_gone,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const RUN_LIMIT: Duration = Duration::from_secs(60);

fn mcpvisor() -> PathBuf {
    ensure_mcpvisor_built().unwrap()
}

/// A temp dir holding `mcpvisor.toml` with one fault-server `[servers.x]`
/// (trust `always`) and `extra`.
type Workdir = ConfigDir;

fn workdir(fault_args: &[&str], extra: &str) -> Workdir {
    workdir_trusting(fault_args, "always", extra)
}

fn workdir_trusting(fault_args: &[&str], trust: &str, extra: &str) -> Workdir {
    let toml = format!("{}{extra}", fault_server_section("x", fault_args, trust));
    ConfigDir::new("cli", &toml).unwrap()
}

fn command(cwd: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(mcpvisor());
    cmd.current_dir(cwd)
        .env_remove("MCPVISOR_CONFIG")
        .env_remove("MCPVISOR_LOG")
        // No user config (~/.config/mcpvisor) of whoever runs the tests.
        .env("XDG_CONFIG_HOME", cwd.join(".no-user-config"))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn run(cwd: &Path, args: &[&str]) -> Output {
    tokio::time::timeout(RUN_LIMIT, command(cwd).args(args).output())
        .await
        .expect("mcpvisor finished in time")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn json_stdout(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_exits_zero_and_reports_a_clean_shutdown() {
    // RECO-7: the report is printed and clean.
    let dir = unique_temp_path("demo");
    std::fs::create_dir_all(&dir).unwrap();
    let out = run(&dir, &["demo"]).await;
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", describe(&out));
    let line = stdout
        .lines()
        .find(|l| l.starts_with("shutdown:"))
        .unwrap_or_else(|| panic!("no shutdown line: {}", describe(&out)));
    assert!(
        line.contains("clean") && !line.contains("NOT CLEAN"),
        "{line}"
    );
    assert!(stdout.contains("call mcp__demo__echo → ok"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_json_lists_every_tool_with_its_definition_fields() {
    // SYNC-8: name, server, raw name, generation, description, input schema.
    let work = workdir(&[], "");
    let config = work.config().to_string_lossy().into_owned();
    let out = run(&work.dir, &["--config", &config, "tools", "--json"]).await;
    assert!(out.status.success(), "{}", describe(&out));
    let tools = json_stdout(&out);
    let tools = tools.as_array().expect("an array");
    assert_eq!(tools.len(), 10, "{tools:#?}");
    for t in tools {
        for field in [
            "name",
            "server",
            "raw_name",
            "generation",
            "description",
            "input_schema",
        ] {
            assert!(t.get(field).is_some(), "{field} missing in {t}");
        }
        assert_eq!(t["server"], "x");
        assert!(t["generation"].as_u64().unwrap() >= 1);
        assert!(t["input_schema"].is_object());
    }
    let echo = tools
        .iter()
        .find(|t| t["name"] == "mcp__x__echo")
        .expect("mcp__x__echo");
    assert_eq!(echo["raw_name"], "echo");
    assert_eq!(echo["description"], "Echo the message back");
    let structured = tools
        .iter()
        .find(|t| t["name"] == "mcp__x__structured_ok")
        .expect("mcp__x__structured_ok");
    assert_eq!(structured["output_schema"]["required"][0], "temp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_json_prints_the_ok_outcome_and_projection_and_exits_zero() {
    // CALL-4/CALL-6: the outcome kind and the model projection.
    let work = workdir(&[], "");
    let config = work.config().to_string_lossy().into_owned();
    let out = run(
        &work.dir,
        &[
            "--config",
            &config,
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
            "--json",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", describe(&out));
    let v = json_stdout(&out);
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_eq!(v["projection"], "Echo: hi", "{v}");
    assert_eq!(v["server"], "x");
    assert_eq!(v["raw_name"], "echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_of_an_is_error_tool_exits_nonzero_with_server_error() {
    // CALL-3: isError is a failed outcome, and the exit status says so.
    let work = workdir(&[], "");
    let config = work.config().to_string_lossy().into_owned();
    let out = run(
        &work.dir,
        &["--config", &config, "call", "mcp__x__is_error", "--json"],
    )
    .await;
    assert!(!out.status.success(), "{}", describe(&out));
    let v = json_stdout(&out);
    assert_eq!(v["outcome"], "server_error", "{v}");
    assert!(
        v["projection"]
            .as_str()
            .unwrap_or("")
            .contains("tool failed on purpose"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_of_a_server_crashing_at_start_exits_one_and_prints_its_stderr() {
    // CONN-7: the stderr tail is attached to the startup error.
    let work = workdir(&["--crash-at-start", "9"], "");
    let config = work.config().to_string_lossy().into_owned();
    let out = run(&work.dir, &["--config", &config, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAILED"), "{}", describe(&out));
    assert!(stdout.contains("boom at start"), "{}", describe(&out));
    assert!(
        stdout.contains("exited with status 9"),
        "{}",
        describe(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_streams_json_until_sigterm_then_reaps_the_server_and_exits_zero() {
    // OBS-2 status stream; RECO-7: SIGTERM → quiescent shutdown, child reaped.
    let work = workdir(&[], "");
    let config = work.config().to_string_lossy().into_owned();
    let mut child = command(&work.dir)
        .args(["--config", &config, "status", "--watch", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mcpvisor_pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let ready = tokio::time::timeout(RUN_LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            seen.push(line);
            if v["state"] == "ready" {
                return Some(v);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .unwrap_or_else(|| panic!("no ready line; saw {seen:?}"));
    assert_eq!(ready["server"], "x");
    let server_pid = u32::try_from(ready["pid"].as_u64().expect("ready has a pid")).unwrap();
    assert!(process_alive(server_pid));

    // SAFETY: kill(2) on our own child's pid, which has not been reaped.
    unsafe {
        libc::kill(mcpvisor_pid as libc::pid_t, libc::SIGTERM);
    }
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    let status = tokio::time::timeout(RUN_LIMIT, child.wait())
        .await
        .expect("mcpvisor exits after SIGTERM")
        .unwrap();
    assert!(
        status.success(),
        "exit {status:?}; output after SIGTERM: {rest:?}"
    );
    let shutdown: Value = rest
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("shutdown").is_some())
        .unwrap_or_else(|| panic!("no shutdown line in {rest:?}"));
    assert_eq!(shutdown["shutdown"]["unconfirmed"], serde_json::json!([]));
    assert!(
        shutdown["shutdown"]["processes_reaped"]
            .as_array()
            .unwrap()
            .contains(&Value::from(server_pid))
    );
    assert!(
        wait_gone(server_pid, Duration::from_secs(2)).await,
        "fault-server {server_pid} outlived mcpvisor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needing_approval_without_a_terminal_is_denied_with_a_clear_message() {
    // TRUST-5: the reference approver is a terminal prompt; with no terminal
    // it denies and says how to allow the server.
    let w = workdir_trusting(&[], "ask", "");
    let config = w.config();
    let out = run(
        &w.dir,
        &[
            "--config",
            &config.to_string_lossy(),
            "--json",
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "refused_by_trust");
    assert!(
        text(&out.stderr).contains("standard input is not a terminal"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains(
            "to allow it, pass --yes to allow this call, or set trust = \"always\" under [servers.x]"
        ),
        "{}",
        text(&out.stderr)
    );
    // Issue 37, item 4: nobody was asked, and the model is told so, not
    // that the user declined.
    let said = v["projection"].as_str().unwrap_or_default();
    assert!(
        said.contains("was not approved (no one to ask: standard input is not a terminal)")
            && !said.contains("declined"),
        "{v}"
    );
    // A one-shot server has no section: the fix is --yes.
    let fault = fault_server_path().to_string_lossy().into_owned();
    let out = run(
        &w.dir,
        &["call", "echo", "--arg", "message=hi", "--", &fault],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr)
            .contains("to allow it, pass --yes (the server comes from the command line"),
        "{}",
        describe(&out)
    );
}

/// A Workdir whose `[hooks]` names `cc.json` and `cx.json` holding `hooks`
/// (relative paths: resolved against the working directory, HOOK-4).
fn with_hooks(w: &Workdir, hooks: &Value, approved: &[String]) {
    for f in ["cc.json", "cx.json"] {
        std::fs::write(
            w.dir.join(f),
            serde_json::to_vec(&serde_json::json!({ "hooks": hooks })).unwrap(),
        )
        .unwrap();
    }
    let mut toml = std::fs::read_to_string(w.config()).unwrap();
    toml.push_str(&format!(
        "[hooks]\nclaude = \"cc.json\"\ncodex = \"cx.json\"\napproved = {approved:?}\n"
    ));
    std::fs::write(w.config(), toml).unwrap();
}

/// `mcpvisor --json hooks test --event PreToolUse` for one dialect and payload.
async fn hooks_test_pre_tool_use(cwd: &Path, dialect: &str, payload: &str) -> Output {
    let args = [
        "--json",
        "hooks",
        "test",
        "--event",
        "PreToolUse",
        "--dialect",
        dialect,
        "--payload",
        payload,
    ];
    run(cwd, &args).await
}

const DENY_NO_RM: &str = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}'"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_test_json_prints_the_neutral_outcome_per_dialect() {
    // The `hooks test` contract: decision, reason, context, warnings, errors, runs.
    let w = workdir(&[], "");
    let hooks = serde_json::json!({"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": DENY_NO_RM},
        {"type": "command", "command": "echo boom >&2; exit 1"}]}]});
    with_hooks(&w, &hooks, &[]);
    for dialect in ["claude", "codex"] {
        let out = hooks_test_pre_tool_use(
            &w.dir,
            dialect,
            r#"{"tool_name":"Bash","tool_input":{"command":"rm -rf build"}}"#,
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let v = json_stdout(&out);
        assert_eq!(v["decision"], "deny", "{v}");
        assert_eq!(v["reason"], "no rm");
        assert_eq!(v["context"], serde_json::json!([]));
        assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1]["exit_code"], 1);
        assert_eq!(runs[0]["timed_out"], false);
        assert!(runs[0]["duration_ms"].is_u64());
        assert!(runs[0]["command"].as_str().unwrap().contains("no rm"));
    }
    // A matcher that does not fire: proceed, no runs.
    let out = hooks_test_pre_tool_use(&w.dir, "claude", r#"{"tool_name":"BashOutput"}"#).await;
    let v = json_stdout(&out);
    assert_eq!(v["decision"], "proceed");
    assert_eq!(v["runs"], serde_json::json!([]));
    // Bad input is a clear error, exit 2.
    let out = run(&w.dir, &["hooks", "test", "--event", "Nope"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a hook event"),
        "{}",
        describe(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_passes_through_hooks_and_strict_hooks_runs_only_approved_ones() {
    // HOOK-6, HOOK-12 through the reference binary: a denied call never
    // reaches the server (its request log); under --strict-hooks an
    // unapproved hook is skipped with a note.
    let log = RequestLog::new("hooks-cli.log");
    let log_arg = log.path().to_string_lossy().into_owned();
    let w = workdir(&["--log-requests", &log_arg], "");
    let hooks = serde_json::json!({"PreToolUse": [{"matcher": "mcp__x__.*", "hooks": [
        {"type": "command", "command": DENY_NO_RM}]}]});
    with_hooks(&w, &hooks, &[]);
    let call = |strict: bool| {
        let mut args = vec![
            "--json",
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
        ];
        if strict {
            args.push("--strict-hooks");
        }
        let dir = w.dir.clone();
        async move { run(&dir, &args).await }
    };
    let out = call(false).await;
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let v = json_stdout(&out);
    assert_eq!(v["outcome"], "denied_by_hook");
    assert!(v["projection"].as_str().unwrap().contains("no rm"));
    let seen = log.text();
    assert!(
        !seen.contains("tools/call"),
        "the server saw a denied call: {seen}"
    );

    let out = call(true).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v = json_stdout(&out);
    assert_eq!(v["outcome"], "ok");
    let notes = v["notes"].to_string();
    assert!(notes.contains("not approved"), "{v}");
    assert!(log.text().contains("tools/call"));
}

/// `mcpvisor call mcp__x__hang` against a fault-server with `fault_args`
/// (plus a request log), started and waited for until the call is inside
/// the server: the running child and the processes below it.
async fn mcpvisor_inside_a_call(
    name: &str,
    fault_args: &[&str],
) -> (tokio::process::Child, Vec<u32>, Workdir, RequestLog) {
    let log = RequestLog::new(name);
    let log_arg = log.path().to_string_lossy().into_owned();
    let mut args = vec!["--log-requests", log_arg.as_str()];
    args.extend_from_slice(fault_args);
    let w = workdir(&args, "");
    let child = command(&w.dir)
        .args(["call", "mcp__x__hang"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mcpvisor_pid = child.id().unwrap();
    assert!(
        wait_file_contains(log.path(), "tools/call", RUN_LIMIT).await,
        "the call never reached the server"
    );
    let servers = mcpvisor_chaos::descendants_of(mcpvisor_pid);
    (child, servers, w, log)
}

/// The pids of `pids` still alive after 5 s each, SIGKILLed (cleanup only).
async fn survivors(pids: Vec<u32>) -> Vec<u32> {
    let mut left = Vec::new();
    for pid in pids {
        if !wait_gone(pid, Duration::from_secs(5)).await {
            left.push(pid);
            // SAFETY: kill(2) of a process this test saw start; cleanup only.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_call_kills_every_server_process_and_exits_130() {
    // BIN-3 / the no-orphan rule: an interrupted command leaves no child.
    let (mut child, servers, _w, _log) =
        mcpvisor_inside_a_call("ctrl-c.log", &["--grandchild"]).await;
    assert!(servers.len() >= 2, "server and grandchild: {servers:?}");
    let mcpvisor_pid = child.id().unwrap();
    // SAFETY: kill(2) on our own child's pid, which has not been reaped.
    unsafe {
        libc::kill(mcpvisor_pid as libc::pid_t, libc::SIGINT);
    }
    let status = tokio::time::timeout(RUN_LIMIT, child.wait())
        .await
        .expect("mcpvisor exits after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let left = survivors(servers).await;
    assert!(left.is_empty(), "{left:?} outlived an interrupted mcpvisor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_mcpvisor_takes_its_servers_with_it() {
    // The no-orphan rule when no drop can run: mcpvisor is SIGKILLed in the
    // middle of a call, and its server ignores SIGTERM and stdin EOF. The
    // server's leader dies with mcpvisor (PR_SET_PDEATHSIG).
    let (mut child, servers, _w, _log) =
        mcpvisor_inside_a_call("killed.log", &["--ignore-sigterm"]).await;
    assert!(!servers.is_empty(), "the server runs under mcpvisor");
    child.kill().await.unwrap(); // SIGKILL, and reaped
    let left = survivors(servers).await;
    assert!(left.is_empty(), "{left:?} outlived a killed mcpvisor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_sees_none_of_the_parents_environment_but_the_allowlist() {
    // CONN-5 on a real spawn (the pure child_environment test would pass
    // without env_clear): a variable of mcpvisor's own process
    // does not reach the server, NO_COLOR=1 and the runtime's tag do.
    let w = workdir(
        &["--print-env", "MCPVISOR_LEAK", "--leak-env", "NO_COLOR"],
        "",
    );
    let out = tokio::time::timeout(
        RUN_LIMIT,
        command(&w.dir)
            .args(["--json", "check"])
            .env("MCPVISOR_LEAK", "from-the-parent")
            .output(),
    )
    .await
    .expect("mcpvisor finished in time")
    .unwrap();
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("env MCPVISOR_LEAK=\\n") || all.contains("env MCPVISOR_LEAK=\n"),
        "{all}"
    );
    assert!(
        !all.contains("from-the-parent"),
        "the parent's variable leaked: {all}"
    );
    assert!(all.contains("env NO_COLOR=1"), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_names_a_failed_server_and_exits_1_while_listing_the_good_ones() {
    // A listing never hides a failure, and the progress line says
    // how many servers are ready.
    let extra = fault_server_section("bad", &["--crash-at-start", "3"], "always");
    let w = workdir(
        &[],
        &format!("{extra}[servers.bad.reconnect]\nenabled = false\n"),
    );
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "tools"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stdout.contains("mcp__x__echo"),
        "the good server's tools: {stdout}"
    );
    assert!(
        stderr.contains("server \"bad\" is not ready (failed)"),
        "{stderr}"
    );
    assert!(stderr.contains("fatal: boom at start"), "{stderr}");
    assert!(
        stderr.contains("1 ready, 1 not ready: bad (failed)"),
        "{stderr}"
    );
    assert!(!stderr.contains(" done"), "{stderr}");
}

/// `tools` prints each server's tools as soon as it is ready: a
/// server that never answers `initialize` does not hold the fast one's
/// listing back until its startup timeout; the progress line names each
/// server as it settles, then the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_shows_a_fast_server_at_once_while_a_hung_one_is_still_starting() {
    let slow = fault_server_section("slow", &["--hang-on-initialize"], "always");
    let w = workdir(
        &[],
        &format!(
            "{slow}startup_timeout_ms = 8000
[servers.slow.reconnect]
enabled = false
"
        ),
    );
    let config = w.config().to_string_lossy().into_owned();
    let started = std::time::Instant::now();
    let mut child = command(&w.dir)
        .args(["--config", &config, "tools"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(RUN_LIMIT, lines.next_line())
        .await
        .expect("a first line in time")
        .unwrap()
        .unwrap_or_default();
    assert!(first.starts_with("mcp__x__"), "{first}");
    // Out before the hung server's 8 s startup timeout could have ended:
    // a listing printed at the end comes after it, necessarily.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the listing waited for the hung server: {:?}",
        started.elapsed()
    );
    let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .expect("tools finished in time")
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(" x ready ("), "{stderr}");
    // Issue 37, item 6: a read-only command does not wait out a hung
    // server's startup timeout: it is reported as still connecting.
    assert!(
        stderr.contains("1 ready, 1 not ready: slow (connecting)")
            && stderr.contains("still connecting after 5 s, not waited for (`--wait`"),
        "{stderr}"
    );
    // `--wait` waits for every server: the hung one's timeout is reported.
    let out = run(&w.dir, &["--config", &config, "tools", "--wait"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 ready, 1 not ready: slow (failed)"),
        "{stderr}"
    );
    assert!(stderr.contains("startup_timeout_ms"), "{stderr}");
}

// Issue 37, item 6: a missing executable is not transient: the server
// fails at once, naming the directories searched, with no reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_executable_fails_at_once_with_the_search_path() {
    let w = workdir(
        &[],
        "[servers.gone]\ncommand = \"no-such-mcp-server-3f9a\"\nargs = []\n",
    );
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "tools", "--wait"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 ready, 1 not ready: gone (failed)")
            && stderr.contains("executable \"no-such-mcp-server-3f9a\" not found; searched: ")
            && !stderr.contains("reconnecting"),
        "{stderr}"
    );
}

/// A long call's progress notifications are shown while it runs
/// (on a pipe, a line per notification), naming the tool, step and total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_shows_the_servers_progress_while_the_call_runs() {
    let w = workdir(&["--progress", "2"], "");
    let config = w.config().to_string_lossy().into_owned();
    let out = run(
        &w.dir,
        &[
            "--config",
            &config,
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}", describe(&out));
    for want in [
        "progress mcp__x__echo: 1/2 step 1 of 2",
        "progress mcp__x__echo: 2/2 step 2 of 2",
    ] {
        assert!(stderr.contains(want), "{want:?} in {stderr}");
    }
    // `--json` keeps stdout one object: no progress lines there.
    let out = run(
        &w.dir,
        &[
            "--config",
            &config,
            "--json",
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
        ],
    )
    .await;
    assert_eq!(json_stdout(&out)["outcome"], "ok", "{}", describe(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_for_an_unknown_server_is_an_error_naming_the_configured_ones() {
    let w = workdir(&[], "");
    let config = w.config().to_string_lossy().into_owned();
    let out = run(
        &w.dir,
        &["--config", &config, "tools", "--server", "nosuch"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"nosuch\": no such server in the config (configured: x)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_failed_servers_tool_says_it_is_not_ready_and_a_typo_gets_a_suggestion() {
    let w = workdir(
        &["--crash-at-start", "4"],
        "[servers.x.reconnect]\nenabled = false\n",
    );
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "call", "mcp__x__echo"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("server_not_ready"), "{stdout}");
    assert!(stdout.contains("\"x\" is not ready (failed)"), "{stdout}");
    assert!(stdout.contains("fatal: boom at start"), "{stdout}");
    assert!(
        !stdout.contains("scope global"),
        "no internal vocabulary: {stdout}"
    );
    let ok = workdir(&[], "");
    let config = ok.config().to_string_lossy().into_owned();
    let out = run(&ok.dir, &["--config", &config, "call", "mcp__x__ecko"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("Did you mean \"mcp__x__echo\"?"),
        "{stdout}"
    );
    assert!(stderr.contains("`mcpvisor tools`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_writes_a_config_that_validates_with_every_server_disabled() {
    // BIN-1 / TRUST-5: an `.mcp.json` becomes mcpvisor TOML; nothing is
    // trusted or started by importing.
    let dir = unique_temp_path("import");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(".mcp.json");
    std::fs::write(
        &src,
        r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"]}, "web": {"type": "sse", "url": "https://x/sse"}}}"#,
    )
    .unwrap();
    let out_file = dir.join("mcpvisor.toml");
    let out = run(
        &dir,
        &[
            "import",
            &src.to_string_lossy(),
            "--out",
            &out_file.to_string_lossy(),
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("imported 1 server(s)"), "{stderr}");
    assert!(
        stderr.contains("skipped web: the legacy HTTP+SSE transport"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert!(written.contains("enabled = false") && written.contains("trust = \"ask\""));
    let again = run(
        &dir,
        &[
            "import",
            &src.to_string_lossy(),
            "--out",
            &out_file.to_string_lossy(),
        ],
    )
    .await;
    assert_eq!(again.status.code(), Some(2), "never overwrites");
    let valid = run(
        &dir,
        &[
            "--config",
            &out_file.to_string_lossy(),
            "config",
            "validate",
        ],
    )
    .await;
    assert_eq!(valid.status.code(), Some(0), "{}", text(&valid.stderr));
    assert!(text(&valid.stdout).contains("1 server(s), 0 enabled"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// TRUST-2: with `--secrets-file`, the secret values an import
/// finds go into that file (mode 0600) under generated names, the config
/// names them and the file, and no value is in the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_moves_secret_values_into_the_secret_file_never_into_the_config() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = unique_temp_path("import-secrets");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(".mcp.json");
    std::fs::write(
        &src,
        r#"{"mcpServers": {"gh": {"command": "true", "env": {"GITHUB_TOKEN": "ghp_secret_value", "LOG": "1"}}}}"#,
    )
    .unwrap();
    let (cfg, secrets) = (dir.join("mcpvisor.toml"), dir.join("secrets.toml"));
    let out = run(
        &dir,
        &[
            "import",
            &src.to_string_lossy(),
            "--out",
            &cfg.to_string_lossy(),
            "--secrets-file",
            &secrets.to_string_lossy(),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr)
            .contains("env GITHUB_TOKEN: its value moved into the secret file as GITHUB_TOKEN"),
        "{}",
        describe(&out)
    );
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(!written.contains("ghp_secret_value"), "{written}");
    assert!(
        written.contains("env_secrets = { \"GITHUB_TOKEN\" = \"GITHUB_TOKEN\" }")
            && written.contains("[secrets]"),
        "{written}"
    );
    let stored = std::fs::read_to_string(&secrets).unwrap();
    assert!(
        stored.contains("GITHUB_TOKEN = \"ghp_secret_value\""),
        "{stored}"
    );
    let mode = std::fs::metadata(&secrets).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let valid = run(
        &dir,
        &["--config", &cfg.to_string_lossy(), "config", "validate"],
    )
    .await;
    assert_eq!(valid.status.code(), Some(0), "{}", describe(&valid));
    // Without a secret file the value is left out, and the user is told.
    let out = run(&dir, &["import", &src.to_string_lossy()]).await;
    assert!(!text(&out.stdout).contains("ghp_secret_value"));
    assert!(
        text(&out.stderr).contains("was NOT imported"),
        "{}",
        describe(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Claude Code settings file's hooks import as a commented-out
/// `[hooks]` table naming the file absolutely, each command listed on
/// stderr; the written config runs no hook until uncommented, and once
/// uncommented `hooks list` shows the command with the same hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_of_a_hooks_file_lists_each_command_and_runs_none_until_uncommented() {
    let dir = unique_temp_path("import-hooks");
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    let src = dir.join(".claude/settings.json");
    std::fs::write(
        &src,
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo checked"}]}]}}"#,
    )
    .unwrap();
    let out = run(&dir, &["import", &src.to_string_lossy()]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("imported 1 hook command(s), commented out")
            && stderr.contains("PreToolUse (matcher \"Bash\"): echo checked"),
        "{stderr}"
    );
    let absolute = std::fs::canonicalize(&src).unwrap();
    let table = format!("# claude = \"{}\"", absolute.display());
    assert!(
        stdout.contains("# [hooks]") && stdout.contains(&table),
        "{stdout}"
    );
    let cfg = dir.join("mcpvisor.toml");
    std::fs::write(&cfg, &stdout).unwrap();
    let listed = run(
        &dir,
        &[
            "--config",
            &cfg.to_string_lossy(),
            "--json",
            "hooks",
            "list",
        ],
    )
    .await;
    assert!(
        !text(&listed.stdout).contains("echo checked"),
        "a commented table configures no hook: {}",
        text(&listed.stdout)
    );
    let on = stdout
        .replace("# [hooks]", "[hooks]")
        .replace(&table, &table[2..]);
    std::fs::write(&cfg, on).unwrap();
    let listed = run(
        &dir,
        &[
            "--config",
            &cfg.to_string_lossy(),
            "--json",
            "hooks",
            "list",
        ],
    )
    .await;
    let hash = mcpvisor::command_hash("echo checked");
    assert!(
        text(&listed.stdout).contains("echo checked") && stdout.contains(&hash),
        "{}",
        text(&listed.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `add` edits the config in place (comments and order stay),
/// refuses a duplicate, a bad name and a secret-looking value, and runs a
/// real handshake (a failing one keeps the entry and says how to undo it);
/// `list` shows what is configured; `remove` takes one table out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_list_and_remove_edit_the_config_in_place() {
    let dir = ConfigDir::new(
        "edit",
        "# my servers\n[servers.old]  # keep me\ncommand = \"true\"\n",
    )
    .unwrap();
    let config = dir.config().to_string_lossy().into_owned();
    let server = fault_server_path().to_string_lossy().into_owned();
    let out = run(&dir.dir, &["--config", &config, "add", "s", "--", &server]).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(text(&out.stdout).contains("ok     s"), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("10 tool(s)"),
        "{}",
        describe(&out)
    );
    let written = std::fs::read_to_string(dir.config()).unwrap();
    assert!(
        written.starts_with("# my servers\n[servers.old]  # keep me\n"),
        "{written}"
    );
    for (args, says) in [
        (vec!["add", "s", "--", "true"], "already configured"),
        (vec!["add", "bad name", "--", "true"], "is invalid"),
        (
            vec!["add", "t", "--env", "GITHUB_TOKEN=ghp_x", "--", "true"],
            "looks like a secret",
        ),
    ] {
        let mut a = vec!["--config", config.as_str()];
        a.extend(args);
        let out = run(&dir.dir, &a).await;
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            text(&out.stderr).contains(says),
            "{says:?}: {}",
            describe(&out)
        );
    }
    assert!(
        !std::fs::read_to_string(dir.config())
            .unwrap()
            .contains("ghp_x")
    );
    let out = run(
        &dir.dir,
        &[
            "--config",
            &config,
            "add",
            "broken",
            "--",
            &server,
            "--crash-at-start",
            "3",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("`mcpvisor remove broken` undoes"),
        "{}",
        describe(&out)
    );
    let listed = json_stdout(&run(&dir.dir, &["--config", &config, "--json", "list"]).await);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broken", "old", "s"], "{listed}");
    let out = run(&dir.dir, &["--config", &config, "remove", "broken"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let written = std::fs::read_to_string(dir.config()).unwrap();
    assert!(
        !written.contains("broken") && written.contains("# keep me"),
        "{written}"
    );
}

/// `import A B --out C --merge` keeps C's text, appends what is
/// new, and leaves out (and reports) a server C or an earlier file already
/// has; the result validates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_merges_several_files_into_an_existing_config() {
    let dir = unique_temp_path("import-merge");
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("mcpvisor.toml");
    let before = "# mine\n[servers.old]  # keep\ncommand = \"true\"\n";
    std::fs::write(&target, before).unwrap();
    let a = dir.join(".mcp.json");
    std::fs::write(
        &a,
        r#"{"mcpServers": {"old": {"command": "x"}, "a": {"command": "npx", "args": ["a"]}}}"#,
    )
    .unwrap();
    let b = dir.join("config.toml");
    std::fs::write(
        &b,
        "[mcp_servers.a]\ncommand = \"other\"\n[mcp_servers.b]\nurl = \"https://b.example/mcp\"\n",
    )
    .unwrap();
    let args = |merge: bool| {
        let mut v = vec![
            "import".to_owned(),
            a.to_string_lossy().into_owned(),
            b.to_string_lossy().into_owned(),
            "--out".to_owned(),
            target.to_string_lossy().into_owned(),
        ];
        if merge {
            v.push("--merge".to_owned());
        }
        v
    };
    let refused = run(
        &dir,
        &args(false).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    assert!(
        text(&refused.stderr).contains("--merge"),
        "{}",
        describe(&refused)
    );
    let out = run(
        &dir,
        &args(true).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("imported 2 server(s)"), "{stderr}");
    assert!(
        stderr.contains("skipped old: a server of that name is already configured")
            && stderr.contains("skipped a: a server of that name is already configured"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&target).unwrap();
    assert!(written.starts_with(before.trim_end()), "{written}");
    assert!(
        written.contains("[servers.a]\ncommand = \"npx\"") && written.contains("[servers.b]"),
        "the first file's `a` wins: {written}"
    );
    let t = target.to_string_lossy().into_owned();
    let valid = run(&dir, &["--config", &t, "config", "validate"]).await;
    assert!(
        text(&valid.stdout).contains("3 server(s), 1 enabled"),
        "{}",
        describe(&valid)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `add --scope user` writes the user's config, which commands
/// read where there is no ./mcpvisor.toml; `list` shows each server's last
/// known state from the event log of earlier runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_scope_user_writes_the_user_config_and_list_shows_the_last_known_state() {
    let dir = unique_temp_path("scope-user");
    let home = dir.join("xdg");
    let cwd = dir.join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let user = |args: &[&str]| {
        let mut cmd = command(&cwd);
        cmd.env("XDG_CONFIG_HOME", &home).args(args);
        async move {
            tokio::time::timeout(RUN_LIMIT, cmd.output())
                .await
                .expect("mcpvisor finished in time")
                .unwrap()
        }
    };
    let server = fault_server_path().to_string_lossy().into_owned();
    let out = user(&[
        "add", "u", "--scope", "user", "--trust", "always", "--", &server,
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("ok     u"),
        "the check read the user file: {}",
        describe(&out)
    );
    let file = home.join("mcpvisor/mcpvisor.toml");
    let mut written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("[servers.u]"), "{written}");
    let log = dir.join("events.jsonl");
    written.push_str(&format!("[events]\nlog = {:?}\n", log.to_string_lossy()));
    std::fs::write(&file, written).unwrap();
    let listed = json_stdout(&user(&["--json", "list"]).await);
    assert_eq!(listed[0]["name"], "u", "{listed}");
    assert!(
        listed[0]["last_state"].is_null(),
        "no run logged yet: {listed}"
    );
    let checked = user(&["check"]).await;
    assert_eq!(checked.status.code(), Some(0), "{}", describe(&checked));
    let listed = json_stdout(&user(&["--json", "list"]).await);
    assert_eq!(listed[0]["last_state"]["state"], "ready", "{listed}");
    let table = user(&["list"]).await;
    assert!(
        text(&table.stdout).contains("ready just now"),
        "{}",
        describe(&table)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_suggest_the_key_and_json_errors_are_json() {
    // Did-you-mean for keys, words for a wrong type, another
    // tool's format recognised; with --json the error is a JSON object.
    let dir = unique_temp_path("badcfg");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("mcpvisor.toml");
    std::fs::write(&bad, "[servers.a]\ncomand = \"x\"\n").unwrap();
    let p = bad.to_string_lossy().into_owned();
    let out = run(&dir, &["--config", &p, "config", "validate"]).await;
    assert_eq!(out.status.code(), Some(3), "a config error exits 3");
    let err = text(&out.stderr);
    assert!(
        err.contains("line 2, column 1") && err.contains("did you mean `command`?"),
        "{err}"
    );
    std::fs::write(
        &bad,
        "[servers.a]\ncommand = \"x\"\ntool_call_timeout_ms = \"60s\"\n",
    )
    .unwrap();
    let out = run(&dir, &["--config", &p, "config", "validate"]).await;
    assert!(
        text(&out.stderr).contains("a number of milliseconds"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(&bad, "[mcp_servers.a]\ncommand = \"x\"\n").unwrap();
    let out = run(&dir, &["--json", "--config", &p, "config", "validate"]).await;
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "config");
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap()
            .contains("mcpvisor import"),
        "{v}"
    );
    let out = run(&dir, &["--json", "tools", "--bogus"]).await;
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "usage");
    let out = run(&dir, &["--config", &p, "demo"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("read no config"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_targets_typed_args_args_files_and_yes_work_without_a_config() {
    // What an Inspector CLI user expects: `tools -- COMMAND`,
    // `call TOOL --arg k=v --yes -- COMMAND`, `--args @file`.
    let dir = unique_temp_path("oneshot");
    std::fs::create_dir_all(&dir).unwrap();
    let server = fault_server_path().to_string_lossy().into_owned();
    let out = run(&dir, &["tools", "--", &server]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("mcp__fault-server__echo"), "{stdout}");
    assert!(
        stdout.contains("message: string"),
        "the arguments are shown: {stdout}"
    );
    assert!(stdout.contains("ms?: integer"), "{stdout}");
    let out = run(
        &dir,
        &["call", "slow", "--arg", "ms=5", "--yes", "--", &server],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "an integer arg: {}",
        text(&out.stdout)
    );
    let args = dir.join("args.json");
    std::fs::write(&args, r#"{"message": "from a file"}"#).unwrap();
    let at = format!("@{}", args.display());
    let out = run(
        &dir,
        &["call", "echo", "--args", &at, "--yes", "--", &server],
    )
    .await;
    assert!(
        text(&out.stdout).contains("from a file"),
        "{}",
        text(&out.stdout)
    );
    // Without --yes a one-shot server asks, and with no terminal that is a refusal.
    let out = run(&dir, &["call", "echo", "--arg", "message=x", "--", &server]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("refused_by_trust"),
        "{}",
        text(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_starts_only_the_server_it_names_and_refuses_a_name_of_none_at_once() {
    let log = RequestLog::new("lazy-other");
    let other = fault_server_section("other", &log.args(), "always");
    let w = workdir(&[], &other);
    let config = w.config().to_string_lossy().into_owned();
    let out = run(
        &w.dir,
        &[
            "--config",
            &config,
            "call",
            "mcp__x__echo",
            "--arg",
            "message=hi",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        log.text().is_empty(),
        "the other server was never started: {}",
        log.text()
    );
    let out = run(&w.dir, &["--config", &config, "call", "mcp__nobody__echo"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("names no configured server") && err.contains("configured: other, x"),
        "{err}"
    );
    assert!(!err.contains("connecting to"), "nothing was started: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_1_with_a_failed_server_and_a_config_without_servers_says_so() {
    let w = workdir(
        &["--crash-at-start", "2"],
        "[servers.x.reconnect]\nenabled = false\n",
    );
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "status"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("fatal: boom at start"),
        "{}",
        text(&out.stdout)
    );
    let empty = ConfigDir::new("empty", "").unwrap();
    let config = empty.config().to_string_lossy().into_owned();
    let out = run(&empty.dir, &["--config", &config, "status"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("defines no servers"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_trust_name_the_server_does_not_list_is_flagged_with_the_closest() {
    let w = workdir(&[], "[servers.x.tool_trust]\nech = \"never\"\n");
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "tools"]).await;
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "tool_trust names \"ech\", which the server does not list (did you mean \"echo\"?)"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_list_is_a_table_and_read_prints_the_text() {
    let w = workdir(&["--resources-only"], "");
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "resources", "list"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.starts_with("SERVER"), "a table: {stdout}");
    assert!(
        stdout.contains("x                mem://note/readme"),
        "{stdout}"
    );
    let out = run(
        &w.dir,
        &[
            "--config",
            &config,
            "resources",
            "read",
            "x",
            "mem://note/a",
        ],
    )
    .await;
    assert_eq!(text(&out.stdout).trim(), "note at mem://note/a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_sequences_from_a_server_are_shown_not_obeyed_and_json_keeps_them() {
    // A server's OSC 52 clipboard write in its tool
    // description, version, results and stderr reaches the terminal
    // escaped in human output; `--json` keeps the exact strings.
    let w = workdir(&["--terminal-escapes"], "");
    let mut human = String::new();
    for args in [
        vec!["tools"],
        vec!["check"],
        vec!["status"],
        vec!["call", "mcp__x__echo", "--args", r#"{"message":"hi"}"#],
    ] {
        let out = run(&w.dir, &args).await;
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        human.push_str(&text(&out.stdout));
        human.push_str(&text(&out.stderr));
    }
    assert!(
        !human.contains('\u{1b}') && !human.contains('\u{7}'),
        "{human:?}"
    );
    assert!(human.contains("\\x1b]52;c;ZXZpbA==\\x07"), "{human}");
    let out = run(
        &w.dir,
        &[
            "--json",
            "call",
            "mcp__x__echo",
            "--args",
            r#"{"message":"hi"}"#,
        ],
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["projection"], "Echo: hi\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[31m",
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_hook_file_is_the_config_files_and_one_that_cannot_load_stops_a_call() {
    // Issue 37, item 1: `[hooks] claude = "deny.json"` is the config
    // file's neighbour, whatever directory the command runs in (as every
    // gateway example does), so its deny holds. A named hook file that
    // cannot be loaded stops the commands that run tools, naming it,
    // unless `[hooks] optional = true`.
    let deny = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"echo is off today"}}'"#;
    let w = workdir(&[], "[hooks]\nclaude = \"deny.json\"\n");
    std::fs::write(
        w.dir.join("deny.json"),
        serde_json::to_vec(&serde_json::json!({"hooks": {"PreToolUse": [
            {"matcher": "mcp__x__echo", "hooks": [{"type": "command", "command": deny}]}
        ]}}))
        .unwrap(),
    )
    .unwrap();
    let elsewhere = mcpvisor_chaos::unique_temp_path("cli-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let config = w.config().to_string_lossy().into_owned();
    let args = [
        "--config",
        &config,
        "call",
        "mcp__x__echo",
        "--arg",
        "message=hi",
    ];
    let denied = run(&elsewhere, &args).await;
    assert!(
        text(&denied.stdout).contains("echo is off today"),
        "{}",
        describe(&denied)
    );
    assert!(
        !text(&denied.stdout).contains("Echo: hi"),
        "{}",
        describe(&denied)
    );
    // The file gone: the call does not run, and says which file and why.
    std::fs::remove_file(w.dir.join("deny.json")).unwrap();
    let stopped = run(&elsewhere, &args).await;
    assert!(!stopped.status.success(), "{}", describe(&stopped));
    let said = text(&stopped.stderr);
    assert!(said.contains("[hooks] claude = "), "{}", describe(&stopped));
    assert!(said.contains("deny.json"), "{}", describe(&stopped));
    assert!(said.contains("optional = true"), "{}", describe(&stopped));
    assert!(
        !text(&stopped.stdout).contains("Echo: hi"),
        "{}",
        describe(&stopped)
    );
    // Opted out: the call runs, and the warning says the hooks are missing.
    let toml = std::fs::read_to_string(w.config()).unwrap();
    std::fs::write(
        w.config(),
        toml.replace("[hooks]\n", "[hooks]\noptional = true\n"),
    )
    .unwrap();
    let ran = run(&elsewhere, &args).await;
    assert!(text(&ran.stdout).contains("Echo: hi"), "{}", describe(&ran));
    assert!(
        text(&ran.stderr).contains("could not load hook config"),
        "{}",
        describe(&ran)
    );
    let _ = std::fs::remove_dir_all(&elsewhere);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_validate_takes_the_file_to_check() {
    // Issue 37, item 10 (asked by issue 15): `config validate FILE` checks
    // FILE, from any directory; a bad one exits 3 with its problem; FILE
    // and a different --config are refused rather than one silently
    // winning.
    let good = workdir(&[], "");
    let elsewhere = mcpvisor_chaos::unique_temp_path("cli-validate");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let file = good.config().to_string_lossy().into_owned();
    let ok = run(&elsewhere, &["config", "validate", &file]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", describe(&ok));
    assert!(
        text(&ok.stdout).contains("1 server(s)"),
        "{}",
        describe(&ok)
    );
    let bad = elsewhere.join("bad.toml");
    std::fs::write(&bad, "[servers.a]\ncomand = \"x\"\n").unwrap();
    let bad = bad.to_string_lossy().into_owned();
    let out = run(&elsewhere, &["config", "validate", &bad]).await;
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("did you mean `command`?"),
        "{}",
        describe(&out)
    );
    let both = run(&elsewhere, &["--config", &file, "config", "validate", &bad]).await;
    assert!(!both.status.success(), "{}", describe(&both));
    assert!(
        text(&both.stderr).contains("give one"),
        "{}",
        describe(&both)
    );
    let _ = std::fs::remove_dir_all(&elsewhere);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_the_demo_stands_in_for_a_missing_config_the_command_says_so() {
    // Issue 37, item 7: without a config, `tools` and `status` show the
    // built-in demo server, and say so (never quietly); `hooks list` has
    // no hooks to show and does not claim a demo.
    let empty = mcpvisor_chaos::unique_temp_path("cli-no-config");
    std::fs::create_dir_all(&empty).unwrap();
    for args in [&["tools"][..], &["status"][..]] {
        let out = run(&empty, args).await;
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        let said = text(&out.stderr);
        assert!(
            said.contains("no config here") && said.contains("built-in demo server"),
            "{args:?}: {}",
            describe(&out)
        );
    }
    let hooks = run(&empty, &["hooks", "list"]).await;
    assert!(hooks.status.success(), "{}", describe(&hooks));
    assert!(
        !text(&hooks.stderr).contains("demo"),
        "{}",
        describe(&hooks)
    );
    let _ = std::fs::remove_dir_all(&empty);
}

// Issue 37, item 3: `enable` / `disable` switch servers in place, `tools`
// names the disabled ones and the command that switches them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_and_disable_switch_servers_and_tools_names_the_disabled_ones() {
    let w = workdir(&[], "enabled = false\n# keep this comment\n");
    let config = w.config().to_string_lossy().into_owned();
    let out = run(&w.dir, &["--config", &config, "tools"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("disabled: x (`mcpvisor enable x` switches it on)"),
        "{}",
        describe(&out)
    );
    let out = run(&w.dir, &["--config", &config, "enable", "y"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("no server named \"y\"")
            && text(&out.stderr).contains("configured: x"),
        "{}",
        describe(&out)
    );
    let out = run(&w.dir, &["--config", &config, "enable", "x"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let written = std::fs::read_to_string(w.config()).unwrap();
    assert!(
        written.contains("enabled = true") && written.contains("# keep this comment"),
        "{written}"
    );
    let out = run(&w.dir, &["--config", &config, "tools"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("mcp__x__echo"),
        "{}",
        describe(&out)
    );
    let out = run(&w.dir, &["--json", "--config", &config, "disable", "x"]).await;
    assert_eq!(json_stdout(&out)["changed"], serde_json::json!(["x"]));
    let out = run(&w.dir, &["--config", &config, "list"]).await;
    let listing = text(&out.stdout);
    let row = listing
        .lines()
        .find(|l| l.starts_with("x "))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>());
    assert_eq!(row, Some(vec!["x", "stdio", "no"]), "{}", describe(&out));
}

// Issue 37, item 2: an imported server the config would refuse is written
// commented out with the reason, and every command accepts the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_never_writes_a_config_the_commands_refuse() {
    let dir = unique_temp_path("import-refused");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("claude_desktop_config.json");
    std::fs::write(
        &src,
        r#"{"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}},
            "remote": {"type": "http", "url": "http://example.com/mcp", "headers": {"Authorization": "Bearer sk-1"}}
        }}"#,
    )
    .unwrap();
    let cfg = dir.join("mcpvisor.toml");
    let (cfg_s, src_s) = (
        cfg.to_string_lossy().into_owned(),
        src.to_string_lossy().into_owned(),
    );
    let out = run(&dir, &["import", &src_s, "--out", &cfg_s]).await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("skipped remote: written commented out, since mcpvisor refuses it as written: servers.remote.url: endpoint \"http://example.com/mcp\" uses plain http://"),
        "{}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).contains("store it as the secret GITHUB_PERSONAL_ACCESS_TOKEN"),
        "{}",
        describe(&out)
    );
    for args in [
        vec!["--config", &cfg_s, "config", "validate"],
        vec!["--config", &cfg_s, "list"],
    ] {
        let out = run(&dir, &args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
    }
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        written.contains("# [servers.remote]")
            && written
                .contains("# header_secrets = { \"Authorization\" = \"Bearer ${REMOTE_TOKEN}\" }"),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 37, item 5: `add` gives a package runner time for its first
// download and `--startup-timeout` sets the time; a timed-out `npx` start
// says the package may be downloading, and npm's broken cache is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_runners_get_time_to_download_and_their_failures_say_why() {
    let dir = unique_temp_path("npx-start");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("mcpvisor.toml").to_string_lossy().into_owned();
    let out = run(
        &dir,
        &[
            "--config",
            &cfg,
            "add",
            "a",
            "--no-check",
            "--",
            "npx",
            "-y",
            "some-mcp-server",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr)
            .contains("startup_timeout_ms = 120000: `npx` downloads the package on its first run"),
        "{}",
        describe(&out)
    );
    let out = run(
        &dir,
        &[
            "--config",
            &cfg,
            "add",
            "b",
            "--no-check",
            "--startup-timeout",
            "7000",
            "--",
            "node",
            "s.js",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        written.contains("[servers.a]\ncommand = \"npx\"\nargs = [\"-y\", \"some-mcp-server\"]\nstartup_timeout_ms = 120000")
            && written.contains("startup_timeout_ms = 7000"),
        "{written}"
    );
    // A stand-in `npx` (the fault server under that name): one that hangs,
    // one that fails as npm does with a half-installed package.
    let npx = dir.join("npx");
    std::os::unix::fs::symlink(fault_server_path(), &npx).unwrap();
    let npx = npx.to_string_lossy().into_owned();
    let toml = format!(
        "[servers.hangs]\ncommand = {npx:?}\nargs = [\"--hang-on-initialize\"]\nstartup_timeout_ms = 1000\n\
         [servers.broken]\ncommand = {npx:?}\nargs = [\"--stderr-then-exit\", \"Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'zod'\"]\n"
    );
    let cfg2 = dir.join("npx.toml");
    std::fs::write(&cfg2, toml).unwrap();
    let out = run(
        &dir,
        &["--config", &cfg2.to_string_lossy(), "check", "--wait"],
    )
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stdout.contains("`npx` downloads the package on its first run, which can take longer"),
        "{}",
        describe(&out)
    );
    assert!(
        stdout.contains("delete ~/.npm/_npx (or run `npm cache clean --force`)"),
        "{}",
        describe(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 37, item 9: text and `--json` list the same tools; a duplicate
// server name is named as one; a `--json` error always has a `kind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_json_agree_and_errors_say_what_they_are() {
    let w = workdir(&["--resources-only"], "");
    let both = format!(
        "{}\n{}",
        std::fs::read_to_string(w.config()).unwrap(),
        fault_server_section("y", &[] as &[&str], "always")
    );
    std::fs::write(w.config(), both).unwrap();
    let config = w.config().to_string_lossy().into_owned();
    let listed = run(&w.dir, &["--config", &config, "tools"]).await;
    let json = run(&w.dir, &["--json", "--config", &config, "tools"]).await;
    let mut in_text: Vec<String> = text(&listed.stdout)
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    let mut in_json: Vec<String> = json_stdout(&json)
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    in_text.sort();
    in_json.sort();
    assert!(
        in_json.iter().any(|n| n == "read_mcp_resource"),
        "{in_json:?}"
    );
    assert_eq!(in_text, in_json, "{}", describe(&listed));
    let dup = w.dir.join("dup.toml");
    std::fs::write(
        &dup,
        "[servers.a]\ncommand = \"x\"\n\n[servers.a]\ncommand = \"y\"\n",
    )
    .unwrap();
    let out = run(&w.dir, &["--config", &dup.to_string_lossy(), "list"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("a server named \"a\" is already defined (first at line 1)"),
        "{}",
        describe(&out)
    );
    let out = run(&w.dir, &["--json", "--config", &config, "remove", "nope"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(json_stdout(&out)["kind"], "error", "{}", describe(&out));
}

// Issue 37, item 3: a secret name the config merged into already uses, or
// that the secret file holds with another value, is not reused for an
// imported server's value: one server's credential never reaches another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_never_reuses_a_secret_name_already_in_use_for_another_value() {
    let dir = unique_temp_path("import-names");
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("mcpvisor.toml");
    std::fs::write(
        &target,
        "[servers.mine]\ncommand = \"true\"\nenv_secrets = { API_KEY = \"API_KEY\" }\n",
    )
    .unwrap();
    let secrets = dir.join("secrets.toml");
    let src = dir.join(".mcp.json");
    std::fs::write(
        &src,
        r#"{"mcpServers": {"new": {"command": "npx", "env": {"API_KEY": "k-new", "OTHER_TOKEN": "t-new"}}}}"#,
    )
    .unwrap();
    // The secret file already holds OTHER_TOKEN, with another value.
    let store = mcpvisor::FileSecretStore::open(&secrets).unwrap();
    store
        .set("OTHER_TOKEN", &mcpvisor::Secret::new("t-old"))
        .unwrap();
    let out = run(
        &dir,
        &[
            "import",
            &src.to_string_lossy(),
            "--out",
            &target.to_string_lossy(),
            "--merge",
            "--secrets-file",
            &secrets.to_string_lossy(),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let written = std::fs::read_to_string(&target).unwrap();
    assert!(
        written.contains("\"API_KEY\" = \"NEW_API_KEY\"")
            && written.contains("\"OTHER_TOKEN\" = \"NEW_OTHER_TOKEN\""),
        "{written}"
    );
    let stored = std::fs::read_to_string(&secrets).unwrap();
    assert!(
        stored.contains("OTHER_TOKEN = \"t-old\"")
            && stored.contains("NEW_OTHER_TOKEN = \"t-new\"")
            && stored.contains("NEW_API_KEY = \"k-new\""),
        "{stored}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
