//! The workload of a run: sequential and concurrent echo calls, the faults'
//! trigger calls, and a tally of every call's outcome.

use std::collections::BTreeMap;
use std::time::Duration;

use mcpvisor::{CallOptions, Runtime, Scope, ServerState, ServerStatus, ToolOutcome};
use serde_json::json;
use tokio::time::error::Elapsed;

use super::run::Run;
use crate::wait_for;

/// Every server's `tool_call_timeout`.
pub(super) const TOOL_CALL_TIMEOUT: Duration = Duration::from_millis(800);

/// How long the runner waits for any one call's outcome before it counts
/// the call as hung.
const CALL_LIMIT: Duration = TOOL_CALL_TIMEOUT.saturating_add(Duration::from_secs(6));

/// The calls of a run and what came of them.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Calls issued.
    pub(super) issued: u64,
    /// Calls that returned an outcome.
    pub(super) returned: u64,
    /// Calls with no outcome within [`CALL_LIMIT`].
    pub(super) hung: Vec<String>,
    /// Outcome kind → count.
    pub(super) outcomes: BTreeMap<String, u64>,
    /// The last echo nonce used.
    nonce: u64,
    /// The longest time a call took to its outcome, and which call.
    pub(super) slowest: (Duration, String),
}

impl Tally {
    /// The arguments of the next echo call: a nonce unique to this run.
    fn next_echo(&mut self, run_id: &str) -> serde_json::Value {
        self.nonce += 1;
        json!({"message": format!("{run_id}#{}", self.nonce)})
    }

    /// Count what came of one call; `what` names a call that hung.
    fn record(
        &mut self,
        (result, took): (Result<ToolOutcome, Elapsed>, Duration),
        what: impl FnOnce() -> String,
    ) {
        let what = what();
        if took > self.slowest.0 {
            self.slowest = match &result {
                Ok(o) => (took, format!("{what} ({})", o.kind.name())),
                Err(_) => (took, what.clone()),
            };
        }
        match result {
            Ok(o) => {
                self.returned += 1;
                *self.outcomes.entry(o.kind.name().to_owned()).or_default() += 1;
            }
            Err(_) => self.hung.push(what),
        }
    }
}

/// Call tool `tool` of server `s`, bounded by [`CALL_LIMIT`].
async fn call(
    runtime: &Runtime,
    tool: &str,
    args: serde_json::Value,
) -> (Result<ToolOutcome, Elapsed>, Duration) {
    let name = format!("mcp__s__{tool}");
    let started = tokio::time::Instant::now();
    let result = tokio::time::timeout(
        CALL_LIMIT,
        runtime.call(&Scope::Global, &name, Some(args), CallOptions::default()),
    )
    .await;
    (result, started.elapsed())
}

/// The scenario's sequential echo calls, one after the other.
pub(super) async fn sequential_calls(run: &Run<'_>, tally: &mut Tally) {
    for _ in 0..run.sc.calls {
        let args = tally.next_echo(&run.ids.run_id);
        let nonce = tally.nonce;
        tally.issued += 1;
        let result = call(&run.runtime, "echo", args).await;
        tally.record(result, || format!("echo #{nonce}"));
    }
}

/// The scenario's concurrent echo calls, all at once.
pub(super) async fn concurrent_calls(run: &Run<'_>, tally: &mut Tally) {
    let batch: Vec<_> = (0..run.sc.concurrent)
        .map(|_| call(&run.runtime, "echo", tally.next_echo(&run.ids.run_id)))
        .collect();
    tally.issued += run.sc.concurrent;
    for result in futures::future::join_all(batch).await {
        tally.record(result, || "concurrent echo".into());
    }
}

/// Each fault's trigger call, then a bounded wait for any reconnect it caused.
pub(super) async fn trigger(run: &Run<'_>, tally: &mut Tally) {
    for fault in &run.sc.faults {
        let Some(tool) = fault.trigger() else {
            continue;
        };
        tally.issued += 1;
        let result = call(&run.runtime, tool, fault.trigger_args()).await;
        tally.record(result, || format!("trigger {tool}"));
    }
    // Give a reconnect the chance to happen, bounded.
    settle(&run.runtime, Duration::from_secs(5)).await;
}

/// Wait until every server has left `connecting`/`reconnecting`, for at most `limit`.
pub(super) async fn settle(runtime: &Runtime, limit: Duration) {
    let mut events = runtime.subscribe();
    let _ = wait_for(runtime, &mut events, limit, |statuses| {
        (!statuses.iter().any(busy)).then_some(())
    })
    .await;
}

/// True while a server is still connecting or reconnecting.
fn busy(s: &ServerStatus) -> bool {
    matches!(
        s.state,
        ServerState::Connecting | ServerState::Reconnecting { .. }
    )
}
