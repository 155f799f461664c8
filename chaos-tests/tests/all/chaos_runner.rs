//! The chaos runner against the real runtime (CHAOS-1..3): scenarios pass on
//! the real runtime, and a deliberately broken runtime (no close barrier)
//! makes `no_overlap` fail — the checks can fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcpvisor_chaos::chaos::{
    Invariant, RunOptions, Scenario, ScenarioReport, Verdict, run_scenario, scenarios,
};

/// How many of the run's calls ended with outcome `kind`.
fn ended(r: &ScenarioReport, kind: &str) -> u64 {
    r.outcomes.get(kind).copied().unwrap_or(0)
}

fn scenario(name: &str) -> Scenario {
    scenarios(42).into_iter().find(|s| s.name == name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stubborn_server_whose_connection_breaks_never_overlaps_its_replacement() {
    // RECO-3 seen from outside: the old process ignores SIGTERM and stays alive
    // ~2.5 s; the replacement waits for its reap.
    let r = run_scenario(&scenario("overlong_line_stubborn"), &RunOptions::default()).await;
    assert!(r.violations().is_empty(), "{:#?}", r.violations());
    assert_eq!(r.invariants.len(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_close_barrier_makes_no_overlap_fail() {
    let opts = RunOptions {
        break_close_barrier: true,
        ..RunOptions::default()
    };
    let r = run_scenario(&scenario("overlong_line_stubborn"), &opts).await;
    assert!(
        matches!(
            r.invariants.get(&Invariant::NoOverlap),
            Some(Verdict::Fail(_))
        ),
        "{:#?}",
        r.invariants
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_and_protocol_fault_scenarios_hold_every_invariant() {
    // Each with the outcome its fault must produce (the trigger's) besides
    // calls that went through: a run whose calls all ended another way
    // (`unknown_tool`, `server_not_ready`) fails here.
    for (name, fault_kind) in [
        (
            "crash_mid_call_with_grandchild",
            "transport_lost_during_call",
        ),
        ("invalid_result", "invalid_result"),
        // http_session_loss: its own test below.
        ("colliding_names", "ok"),
    ] {
        let r = run_scenario(&scenario(name), &RunOptions::default()).await;
        assert!(r.violations().is_empty(), "{name}: {:#?}", r.violations());
        assert!(
            ended(&r, fault_kind) >= 1,
            "{name}: no {fault_kind} outcome: {:?}",
            r.outcomes
        );
        assert!(
            ended(&r, "ok") >= 1,
            "{name}: no call went through: {:?}",
            r.outcomes
        );
        assert_eq!(r.outcomes.get("unknown_tool"), None, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_fault_scenarios_hold_every_invariant_and_calls_fail_open() {
    // HOOK-3, HOOK-5 under fault injection: hooks that leave processes
    // behind, hang past their timeout, or print garbage never leave an
    // orphan, and every call still gets its outcome (command hooks fail open).
    for name in ["hook_grandchild", "hook_hang", "hook_garbage"] {
        let r = run_scenario(&scenario(name), &RunOptions::default()).await;
        assert!(r.violations().is_empty(), "{name}: {:#?}", r.violations());
        // Fail open: every call, the one whose hook hung or failed
        // included, ended ok; a denial or an error would show here.
        let kinds: Vec<&String> = r.outcomes.keys().collect();
        assert_eq!(kinds, vec!["ok"], "{name}: {:?}", r.outcomes);
        assert!(r.outcomes["ok"] >= 2, "{name}: {:?}", r.outcomes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_timing_scenarios_end_every_call_in_time() {
    // A reply nested past the parse limit ends as
    // invalid_result at once; a server that freezes mid-call (stdin no
    // longer read) still gives every later call its outcome within the bound.
    let deep = run_scenario(&scenario("deep_json"), &RunOptions::default()).await;
    assert!(deep.violations().is_empty(), "{:#?}", deep.violations());
    assert!(ended(&deep, "invalid_result") > 0, "{:?}", deep.outcomes);
    let frozen = run_scenario(&scenario("stdin_freeze"), &RunOptions::default()).await;
    assert!(frozen.violations().is_empty(), "{:#?}", frozen.violations());
    assert!(ended(&frozen, "timeout") > 0, "{:?}", frozen.outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_replies_idle_stops_leaked_secrets_and_supervisor_panics_lose_nothing() {
    // Replies read in pieces while the client answers
    // pings and re-syncs (CONN-6), resource reads across idle stops (RECO-6),
    // a server that echoes its secret (TRUST-2), and a supervisor that fails
    // while its stubborn process is still closing (the restart barrier).
    for (name, judged) in [
        ("split_replies", Invariant::NoLostReply),
        ("resources_only_idle", Invariant::NoLostReply),
        ("secret_echo", Invariant::NoSecretLeak),
        ("supervisor_panic_mid_close", Invariant::NoOverlap),
    ] {
        let r = run_scenario(&scenario(name), &RunOptions::default()).await;
        assert!(r.violations().is_empty(), "{name}: {:#?}", r.violations());
        assert_eq!(r.invariants.get(&judged), Some(&Verdict::Pass), "{name}");
        assert_eq!(
            r.invariants.get(&Invariant::NoSecretLeak),
            Some(&Verdict::Pass),
            "{name}: every stdio run has a secret to keep"
        );
        assert!(ended(&r, "ok") > 0, "{name}: {:?}", r.outcomes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_http_session_never_replays_a_call_and_later_calls_get_a_new_session() {
    // CALL-5: the call answered 404 for its session ends
    // server_not_ready and is never sent again (no_double_send also counts
    // POSTs at fault-server's HTTP layer); later calls succeed on a new
    // connection with a new session.
    let r = run_scenario(&scenario("http_session_loss"), &RunOptions::default()).await;
    assert!(r.violations().is_empty(), "{:#?}", r.violations());
    assert_eq!(
        r.invariants.get(&Invariant::NoDoubleSend),
        Some(&Verdict::Pass)
    );
    // The 404'd call's own kind and words are expected_consequences' (issue
    // 31): "not sent, nothing ran … HTTP 404", server_not_ready.
    assert_eq!(
        r.invariants.get(&Invariant::ExpectedConsequences),
        Some(&Verdict::Pass)
    );
    assert!(ended(&r, "ok") >= 1, "{:?}", r.outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_backoff_fails_budget_respected_where_it_once_passed() {
    // Zero backoff passed in hang_on_initialize and
    // crash_after_calls (judged start to start, with no upper bound). From
    // each failure to the next start, it fails there too, and only there.
    for name in ["hang_on_initialize", "crash_after_calls", "crash_mid_call"] {
        let mut opts = RunOptions::default();
        assert!(opts.set_break("backoff"));
        let r = run_scenario(&scenario(name), &opts).await;
        let failed: Vec<Invariant> = r.violations().into_iter().map(|(i, _)| i).collect();
        assert_eq!(
            failed,
            vec![Invariant::BudgetRespected],
            "{name}: {:#?}",
            r.violations()
        );
        let r = run_scenario(&scenario(name), &RunOptions::default()).await;
        assert!(r.violations().is_empty(), "{name}: {:#?}", r.violations());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_left_its_group_is_killed_and_without_the_tag_no_orphans_fails() {
    // RECO-7: the daemonized grandchild is found by the runtime's
    // tag and killed; started without the tag (the break switch), it
    // survives, and no_orphans, which also looks for the run's CHAOS_TAG in
    // every environment, reports it, and only it.
    let sc = scenario("daemonized_grandchild");
    let r = run_scenario(&sc, &RunOptions::default()).await;
    assert!(r.violations().is_empty(), "{:#?}", r.violations());
    let broken = RunOptions {
        break_escape_sweep: true,
        ..RunOptions::default()
    };
    let r = run_scenario(&sc, &broken).await;
    let failed: Vec<Invariant> = r.violations().into_iter().map(|(i, _)| i).collect();
    assert_eq!(failed, vec![Invariant::NoOrphans], "{:#?}", r.violations());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_that_carries_no_tag_is_found_below_the_subreaper_runner() {
    // no_orphans: the chaos binary is a child subreaper and, with
    // one run at a time, judges every process below it after the shutdown.
    // A daemon that also clears its environment escapes the runtime's tag
    // sweep and the runner's CHAOS_TAG (RECO-7's documented gap): only that
    // walk finds it, and no_orphans fails alone. Without the fault the same
    // scenario passes (the walk finds nothing the runtime left).
    let chaos = |broken: bool| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_chaos"));
        c.args(["--seed", "7", "--scenario", "daemonized_grandchild"]);
        if broken {
            c.args(["--break", "untagged-daemon"]);
        }
        c.env("CARGO", "/bin/true")
            .stdin(std::process::Stdio::null())
            .output()
    };
    let out = chaos(false).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let line = only_violation(&chaos(true).await.unwrap(), "no_orphans");
    assert!(line.contains("sleep 1000"), "{line}");
}

/// The one violation a `chaos` binary's run reported, which must be of
/// `invariant`, with exit status 1.
fn only_violation(out: &std::process::Output, invariant: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let violations: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("violation: "))
        .collect();
    assert_eq!(violations.len(), 1, "{err}");
    assert!(
        violations[0].starts_with(&format!("violation: {invariant}")),
        "{err}"
    );
    violations[0].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_break_switch_makes_its_invariant_fail_and_only_it() {
    // Each invariant is shown to fail when the runtime is broken
    // in the way it exists to catch, and no other invariant fails with it.
    for (name, invariant, scenario_name) in mcpvisor_chaos::chaos::BREAKS {
        let mut opts = RunOptions::default();
        assert!(opts.set_break(name), "{name}");
        let r = run_scenario(&scenario(scenario_name), &opts).await;
        let failed: Vec<Invariant> = r.violations().into_iter().map(|(i, _)| i).collect();
        assert_eq!(
            failed,
            vec![*invariant],
            "--break {name} on {scenario_name}: {:#?}",
            r.violations()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leak_per_call_fails_bounded_memory_over_a_short_soak() {
    // bounded_memory's break switch: it is judged over a soak,
    // so the chaos binary itself runs one, 6 s of hang_on_call with every
    // call leaking 256 KiB. It must exit 1 on bounded_memory, and only it.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            "--soak",
            "6",
            "--seed",
            "3",
            "--scenario",
            "hang_on_call",
            "--break",
            "leak",
        ])
        .env("CARGO", "/bin/true")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    only_violation(&out, "bounded_memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_runs_each_scenario_once_per_seed() {
    // The 1000-seed run's flag: --seeds N runs seed, seed+1, …
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            "--seeds",
            "3",
            "--seed",
            "5",
            "--scenario",
            "is_error",
            "--json",
        ])
        .env("CARGO", "/bin/true")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let seeds: Vec<u64> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, vec![5, 6, 7]);
}
