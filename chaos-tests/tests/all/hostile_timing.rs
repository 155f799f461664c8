//! Hostile timing over real stdio: a server that stops reading
//! its stdin with large arguments queued. Every call still gets its outcome
//! within its timeout plus the documented margin (CALL-4), and a transport
//! whose writes stay blocked is declared dead so reconnecting takes over.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mcpvisor::{CallOptions, OutcomeKind, Runtime, Scope, ServerState};
use mcpvisor_chaos::{fault_server_config, shutdown_checked, start_with_server, wait_for_status};
use serde_json::json;

const G: Scope = Scope::Global;

/// The call's timeout, plus the cancel notice's margin (CANCEL_NOTICE_WAIT,
/// 1 s), plus slack for a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(2 + 1 + 2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_reading_stdin_never_holds_a_call_past_its_bound() {
    let mut cfg = fault_server_config("frozen", ["--freeze-on-echo"]).trusted();
    cfg.tool_call_timeout = Duration::from_secs(2);
    cfg.reconnect.initial_delay = Duration::from_millis(100);
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let mut events = runtime.subscribe();
    let first_pid = runtime.status()[0].pid.expect("a stdio server has a pid");
    // The server freezes in the handler: from now on it reads nothing.
    let t = Instant::now();
    let frozen = runtime
        .call(
            &G,
            "mcp__frozen__echo",
            Some(json!({"message": "freeze"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(frozen.kind, OutcomeKind::Timeout, "{frozen:?}");
    assert!(t.elapsed() < BOUND, "took {:?}", t.elapsed());
    // More than a pipe's worth of arguments, twice: the writes block.
    let big = "x".repeat(1024 * 1024);
    for _ in 0..2 {
        let t = Instant::now();
        let out = runtime
            .call(
                &G,
                "mcp__frozen__echo",
                Some(json!({ "message": big })),
                CallOptions::default(),
            )
            .await;
        assert!(
            matches!(
                out.kind,
                OutcomeKind::Timeout
                    | OutcomeKind::TransportLostDuringCall
                    | OutcomeKind::ServerNotReady
            ),
            "{out:?}"
        );
        assert!(t.elapsed() < BOUND, "took {:?}: {out:?}", t.elapsed());
    }
    // The blocked transport is dead (WRITE_STALL_DEADLINE, 10 s): the server
    // is reconnected with a new process, and the old one is gone.
    let s = wait_for_status(
        &runtime,
        &mut events,
        "frozen",
        Duration::from_secs(40),
        |s| s.state == ServerState::Ready && s.pid.is_some_and(|p| p != first_pid),
    )
    .await
    .unwrap();
    assert!(s.restarts >= 1, "{s:?}");
    let check = shutdown_checked(&runtime, &[first_pid]).await;
    check.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_nested_past_the_parse_limit_ends_its_call_at_once_as_invalid_result() {
    // CALL-4: valid JSON nested 300 deep is an outcome
    // naming the depth, never a skipped line and a timeout.
    let mut cfg = fault_server_config("deep", ["--deep-echo", "300"]).trusted();
    cfg.tool_call_timeout = Duration::from_secs(30);
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let t = Instant::now();
    let out = runtime
        .call(
            &G,
            "mcp__deep__echo",
            Some(json!({"message": "hi"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::InvalidResult, "{out:?}");
    assert!(out.projection.contains("128 levels"), "{}", out.projection);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    let after = runtime
        .call(
            &G,
            "mcp__deep__echo",
            Some(json!({"message": "again"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(
        after.kind,
        OutcomeKind::InvalidResult,
        "the connection stays usable"
    );
    shutdown_checked(&runtime, &[]).await.assert_clean();
}

/// The pid in the server's "daemon pid N" stderr line.
fn daemon_pid(runtime: &mcpvisor::Runtime, server: &str) -> Option<u32> {
    let status = runtime.status();
    let tail = &status.iter().find(|s| s.server == server)?.stderr_tail;
    tail.split("daemon pid ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_left_its_group_dies_with_its_connection_and_at_shutdown() {
    // RECO-7: a server's descendant that left its process group
    // with setsid is out of reach of group signals; the runtime's tag in its
    // environment finds it. It dies when its connection closes (here: a
    // restart), and a shutdown kills what is left and reports it.
    let cfg = fault_server_config("d", ["--daemonize"]).trusted();
    let runtime = start_with_server(mcpvisor::Runtime::builder(), G, cfg)
        .await
        .unwrap();
    let mut events = runtime.subscribe();
    let first = wait_for_status(&runtime, &mut events, "d", Duration::from_secs(10), |s| {
        s.stderr_tail.contains("daemon pid ")
    })
    .await
    .unwrap();
    let daemon = daemon_pid(&runtime, "d").unwrap();
    assert!(mcpvisor_chaos::process_alive(daemon), "the daemon runs");
    // It is in a process group of its own, not the server's.
    let stat = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
    let pgrp: u32 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(Some(pgrp), first.pid, "setsid left the server's group");
    runtime.restart_server(&G, "d").await.unwrap();
    assert!(
        mcpvisor_chaos::wait_gone(daemon, Duration::from_secs(10)).await,
        "the daemon {daemon} outlived its connection"
    );
    let second = wait_for_status(&runtime, &mut events, "d", Duration::from_secs(10), |s| {
        s.connection_generation > first.connection_generation
            && s.stderr_tail.contains("daemon pid ")
    })
    .await
    .unwrap();
    let daemon2 = daemon_pid(&runtime, "d").unwrap();
    assert_ne!(daemon2, daemon);
    assert!(mcpvisor_chaos::process_alive(daemon2));
    let _ = second;
    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
    assert!(
        mcpvisor_chaos::wait_gone(daemon2, Duration::from_secs(10)).await,
        "the daemon {daemon2} outlived the runtime"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stuck_in_its_handshake_never_holds_up_another() {
    // CONN-1: servers connect side by side. One never answers
    // initialize (30 s startup timeout); the other is ready and answers calls
    // meanwhile, and the shutdown does not wait out the stuck handshake.
    let runtime = Runtime::builder().start().await.unwrap();
    let mut stuck = fault_server_config("stuck", ["--hang-on-initialize"]).trusted();
    stuck.startup_timeout = Duration::from_secs(30);
    runtime.add_server(G, stuck).await.unwrap();
    let started = Instant::now();
    runtime
        .add_server(
            G,
            fault_server_config("fine", Vec::<String>::new()).trusted(),
        )
        .await
        .unwrap();
    runtime
        .wait_ready(&G, "fine", Duration::from_secs(20))
        .await
        .unwrap();
    let out = runtime
        .call(
            &G,
            "mcp__fine__echo",
            Some(json!({"message": "not blocked"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(out.kind, OutcomeKind::Ok, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let status = runtime.status();
    let s = status.iter().find(|s| s.server == "stuck").unwrap();
    assert_eq!(s.state, ServerState::Connecting, "still in its handshake");
    let shut = Instant::now();
    let check = shutdown_checked(&runtime, &[]).await;
    check.assert_clean();
    assert!(
        shut.elapsed() < Duration::from_secs(10),
        "the shutdown waited for the stuck handshake: {:?}",
        shut.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_cursors_and_uris_reach_the_server_untouched() {
    // RES-4: a cursor and a URI belong to the server; the shared resource
    // tools pass them through byte for byte, spaces, slashes, `+`, `?`, `&`
    // and non-ASCII included.
    let cfg = fault_server_config("r", ["--resources-only"]).trusted();
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let call = |tool: &'static str, args: serde_json::Value| {
        let rt = runtime.clone();
        async move { rt.call(&G, tool, Some(args), CallOptions::default()).await }
    };
    let first = call("list_mcp_resources", json!({"server": "r"})).await;
    assert_eq!(first.kind, OutcomeKind::Ok, "{first:?}");
    let cursor = first.canonical.as_ref().unwrap()["r"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(cursor, " opaque/+=cursor?&é ");
    let second = call(
        "list_mcp_resources",
        json!({"server": "r", "cursor": cursor}),
    )
    .await;
    assert_eq!(second.kind, OutcomeKind::Ok, "{second:?}");
    let uri = second.canonical.as_ref().unwrap()["r"]["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(uri, "mem://note/cursor/ opaque/+=cursor?&é ");
    let odd = "mem://note/a b/%2F?x=1&y=é#frag";
    let read = call("read_mcp_resource", json!({"server": "r", "uri": odd})).await;
    assert_eq!(read.kind, OutcomeKind::Ok, "{read:?}");
    let contents = &read.canonical.as_ref().unwrap()["r"]["contents"][0];
    assert_eq!(contents["uri"], odd);
    assert_eq!(contents["text"], format!("note at {odd}"));
    shutdown_checked(&runtime, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_right_after_a_restart_waits_for_the_new_connection() {
    // RECO-4: once `restart_server` has returned, the snapshot no longer
    // shows the old connection as live, so a `wait_ready` right after it
    // waits for the new connection (never the old one's stale `ready`), and
    // the next call reaches a live server. Found by `bench --soak`, whose
    // calls after each restart failed for about 0.1 s.
    let cfg = fault_server_config("r", Vec::<String>::new()).trusted();
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    for round in 0..5 {
        let before = runtime
            .wait_ready(&G, "r", Duration::from_secs(10))
            .await
            .unwrap();
        runtime.restart_server(&G, "r").await.unwrap();
        let after = runtime
            .wait_ready(&G, "r", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            after.connection_generation > before.connection_generation,
            "round {round}: wait_ready returned the old connection ({} then {})",
            before.connection_generation,
            after.connection_generation
        );
        let o = runtime
            .call(
                &G,
                "mcp__r__echo",
                Some(json!({"message": "after the restart"})),
                CallOptions::default(),
            )
            .await;
        assert_eq!(o.kind, OutcomeKind::Ok, "round {round}: {o:?}");
    }
    shutdown_checked(&runtime, &[]).await.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_while_a_daemon_holds_its_stdout_ends_its_connection_at_once() {
    // CONN-14, RECO: the server starts a background
    // process in a session of its own that inherits its stdout, then exits
    // mid-call. stdout never reaches its end, yet the leader's exit ends
    // the connection: the call in flight ends transport_lost_during_call
    // at once (not after its 60 s timeout), the daemon is swept, and the
    // reconnect policy brings the server back.
    let mut cfg = fault_server_config("held", ["--daemon-holds-stdout"]).trusted();
    cfg.tool_call_timeout = Duration::from_secs(60);
    cfg.reconnect.initial_delay = Duration::from_millis(100);
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let mut events = runtime.subscribe();
    let first = wait_for_status(
        &runtime,
        &mut events,
        "held",
        Duration::from_secs(10),
        |s| s.stderr_tail.contains("daemon pid "),
    )
    .await
    .unwrap();
    let daemon = daemon_pid(&runtime, "held").unwrap();
    assert!(mcpvisor_chaos::process_alive(daemon), "the daemon runs");
    let t = Instant::now();
    let crashed = runtime
        .call(&G, "mcp__held__crash", None, CallOptions::default())
        .await;
    assert_eq!(
        crashed.kind,
        OutcomeKind::TransportLostDuringCall,
        "{crashed:?}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the call waited {:?} for a server that had exited",
        t.elapsed()
    );
    let error = crashed.error.unwrap_or_default();
    assert!(error.contains("exited with status 5"), "{error}");
    assert!(
        mcpvisor_chaos::wait_gone(daemon, Duration::from_secs(10)).await,
        "the daemon {daemon} outlived its server's connection"
    );
    // Never `ready` with the dead pid; back with a new process.
    let back = wait_for_status(
        &runtime,
        &mut events,
        "held",
        Duration::from_secs(20),
        |s| s.state == ServerState::Ready && s.connection_generation > first.connection_generation,
    )
    .await
    .unwrap();
    assert_ne!(back.pid, first.pid);
    assert!(back.restarts >= 1, "{back:?}");
    let after = runtime
        .call(
            &G,
            "mcp__held__echo",
            Some(json!({"message": "again"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(after.kind, OutcomeKind::Ok, "{after:?}");
    let daemon2 = daemon_pid(&runtime, "held").unwrap();
    shutdown_checked(&runtime, &[]).await.assert_clean();
    assert!(mcpvisor_chaos::wait_gone(daemon2, Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_cannot_be_read_ends_its_call_at_once_and_a_lone_surrogate_is_read_leniently()
{
    // CALL-4: a reply to an awaited call that does not
    // parse as it stands is an outcome at once, never a skipped line and a
    // 60 s wait. A lone surrogate escape (Node cuts text mid-emoji) reads as
    // U+FFFD; a byte that is not UTF-8, and `result` with `error`, end the
    // call invalid_result with the parser's reason.
    let mut cfg = fault_server_config("bad", ["--unreadable-replies"]).trusted();
    cfg.tool_call_timeout = Duration::from_secs(60);
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let call = |kind: &'static str| {
        let runtime = runtime.clone();
        async move {
            let t = Instant::now();
            let out = runtime
                .call(
                    &G,
                    "mcp__bad__unreadable",
                    Some(json!({ "kind": kind })),
                    CallOptions::default(),
                )
                .await;
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{kind}: took {:?}",
                t.elapsed()
            );
            out
        }
    };
    let surrogate = call("surrogate").await;
    assert_eq!(surrogate.kind, OutcomeKind::Ok, "{surrogate:?}");
    assert_eq!(surrogate.projection, "cut \u{fffd}");
    for kind in ["utf8", "both"] {
        let out = call(kind).await;
        assert_eq!(out.kind, OutcomeKind::InvalidResult, "{kind}: {out:?}");
        assert!(
            out.projection
                .contains("the server's reply cannot be read: "),
            "{kind}: {}",
            out.projection
        );
    }
    // None of them was counted as noise, and the connection stays usable.
    assert_eq!(runtime.status()[0].non_json_lines, 0);
    let after = runtime
        .call(
            &G,
            "mcp__bad__echo",
            Some(json!({"message": "still here"})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(after.kind, OutcomeKind::Ok, "{after:?}");
    shutdown_checked(&runtime, &[]).await.assert_clean();
}

/// A stdio server that closes its stdin once it has listed its tools and
/// goes on running: every later request meets a pipe with no reader.
const DEAF_SERVER: &str = r#"
import json, os, sys, time
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "deaf", "version": "1"}}})
    elif method == "tools/list":
        os.close(0)
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}}]}})
        break
time.sleep(60)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_request_could_not_be_written_says_not_sent() {
    // CALL-5 over stdio: the server's stdin has no reader left, so the
    // write of the request fails before one byte of it is written. Nothing
    // ran: `server_not_ready`, "not sent, nothing ran", at once (not
    // `transport_lost_during_call`, "side effects unknown", and not after
    // the call's timeout).
    let mut cfg =
        mcpvisor::ServerConfig::stdio("deaf", "python3", vec!["-c".into(), DEAF_SERVER.into()])
            .trusted();
    cfg.tool_call_timeout = Duration::from_secs(30);
    let runtime = start_with_server(Runtime::builder(), G, cfg).await.unwrap();
    let t = Instant::now();
    let o = runtime
        .call(
            &G,
            "mcp__deaf__echo",
            Some(json!({})),
            CallOptions::default(),
        )
        .await;
    assert_eq!(o.kind, OutcomeKind::ServerNotReady, "{o:?}");
    let error = o.error.clone().unwrap_or_default();
    assert!(error.contains("not sent, nothing ran"), "{error}");
    assert!(
        error.contains("nothing of the request was written"),
        "{error}"
    );
    assert!(t.elapsed() < BOUND, "the call took {:?}", t.elapsed());
    shutdown_checked(&runtime, &[]).await.assert_clean();
}
