//! The gateway's Prometheus metrics (issue 35), served at `/metrics` in the
//! OpenMetrics text format: calls by server, tool and outcome with their
//! latency, each server's state, restarts and reconnect budget left, the
//! session-era clients connected, the HTTP requests in flight, whether
//! the replica drains, and each seat's holder, activations and processes.
//!
//! Calls are counted from the runtime's `CallFinished` events, read by the
//! gateway's one event task; the servers' figures are read from their
//! status at each scrape. A tool label comes only from the catalog: a call
//! of a tool nobody serves is counted under `tool=""`, so a client cannot
//! grow the series without bound.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::{RuntimeEvent, SeatStatus, ServerStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    server: String,
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeatLabels {
    seat: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    server: String,
    state: String,
}

/// The metrics of one gateway.
pub(super) struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Family<ServerLabels, Histogram>,
    states: Family<StateLabels, Gauge>,
    restarts: Family<ServerLabels, Gauge>,
    budget: Family<ServerLabels, Gauge>,
    clients: Gauge,
    in_flight: Gauge,
    draining: Gauge,
    seat_held: Family<SeatLabels, Gauge>,
    seat_activations: Family<SeatLabels, Gauge>,
    seat_processes: Family<SeatLabels, Gauge>,
    events_missed: Counter,
    scrape: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// What a scrape reads besides the counted calls.
pub(super) struct Now<'a> {
    pub(super) servers: &'a [ServerStatus],
    pub(super) seats: &'a [SeatStatus],
    pub(super) clients: usize,
    pub(super) in_flight: usize,
    pub(super) draining: bool,
}

impl Metrics {
    pub(super) fn new() -> Self {
        let mut registry = Registry::with_prefix("mcpvisor");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "Tool calls finished, by server, tool and outcome (ok, tool_error, timeout, …)",
            calls.clone(),
        );
        // 1 ms to about 65 s.
        let latency = Family::<ServerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 17))
        });
        registry.register(
            "call_duration_seconds",
            "Wall time of finished tool calls, by server",
            latency.clone(),
        );
        let states = Family::<StateLabels, Gauge>::default();
        registry.register(
            "server_state",
            "1 for each server's current state (starting, ready, backoff, failed, …)",
            states.clone(),
        );
        let restarts = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "server_restarts",
            "Restarts of each server since it was added",
            restarts.clone(),
        );
        let budget = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "server_reconnect_budget_left",
            "Reconnect attempts each server has left before it is failed",
            budget.clone(),
        );
        let clients = Gauge::default();
        registry.register(
            "gateway_clients",
            "Session-era (2025) clients connected to the gateway",
            clients.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "gateway_requests_in_flight",
            "HTTP requests to /mcp whose replies have not ended",
            in_flight.clone(),
        );
        let draining = Gauge::default();
        registry.register(
            "gateway_draining",
            "1 while the replica drains (SIGTERM), else 0",
            draining.clone(),
        );
        let seat_held = Family::<SeatLabels, Gauge>::default();
        registry.register(
            "seat_held",
            "1 while a provider holds the seat (browser_use, computer_use), else 0",
            seat_held.clone(),
        );
        let seat_activations = Family::<SeatLabels, Gauge>::default();
        registry.register(
            "seat_activations",
            "Live activations each seat serves",
            seat_activations.clone(),
        );
        let seat_processes = Family::<SeatLabels, Gauge>::default();
        registry.register(
            "seat_processes",
            "Processes the seat's session resources own (a browser's, a desktop's)",
            seat_processes.clone(),
        );
        let events_missed = Counter::default();
        registry.register(
            "metrics_events_missed",
            "Runtime events the metrics missed (the event queue overflowed): calls not counted",
            events_missed.clone(),
        );
        Self {
            registry,
            calls,
            latency,
            states,
            restarts,
            budget,
            clients,
            in_flight,
            draining,
            seat_held,
            seat_activations,
            seat_processes,
            events_missed,
            scrape: std::sync::Mutex::new(()),
        }
    }

    /// Count a finished call.
    pub(super) fn observe(&self, ev: &RuntimeEvent) {
        if let RuntimeEvent::CallFinished {
            tool,
            outcome,
            duration_ms,
            ..
        } = ev
        {
            let (server, tool) = labels(tool, outcome);
            self.calls
                .get_or_create(&CallLabels {
                    server: server.clone(),
                    tool,
                    outcome: (*outcome).to_owned(),
                })
                .inc();
            self.latency
                .get_or_create(&ServerLabels { server })
                .observe(*duration_ms as f64 / 1000.0);
        }
    }

    /// Events the event task missed.
    pub(super) fn missed(&self, n: u64) {
        self.events_missed.inc_by(n);
    }

    /// The exposition text, with the servers' figures as they are now.
    pub(super) fn render(&self, now: Now<'_>) -> String {
        // One scrape at a time: the servers' families are rebuilt.
        let _one = self.scrape.lock();
        self.states.clear();
        self.restarts.clear();
        self.budget.clear();
        for s in now.servers {
            let server = s.server.clone();
            self.states
                .get_or_create(&StateLabels {
                    server: server.clone(),
                    state: s.state.name().to_owned(),
                })
                .set(1);
            self.restarts
                .get_or_create(&ServerLabels {
                    server: server.clone(),
                })
                .set(i64::from(s.restarts));
            self.budget
                .get_or_create(&ServerLabels { server })
                .set(i64::from(s.budget_left));
        }
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for s in now.seats {
            let seat = SeatLabels {
                seat: s.seat.clone(),
            };
            self.seat_held
                .get_or_create(&seat)
                .set(i64::from(s.holder.is_some()));
            self.seat_activations
                .get_or_create(&seat)
                .set(count(s.activations.len()));
            self.seat_processes
                .get_or_create(&seat)
                .set(count(s.pids.len()));
        }
        self.clients
            .set(i64::try_from(now.clients).unwrap_or(i64::MAX));
        self.in_flight
            .set(i64::try_from(now.in_flight).unwrap_or(i64::MAX));
        self.draining.set(i64::from(now.draining));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The server and tool labels of a call of public tool `name`: from
/// `mcp__<server>__<tool>`, and none for a tool nobody serves
/// (`unknown_tool`: a client's name, not the catalog's), no tool for a
/// server not ready (which answers so for any name).
fn labels(name: &str, outcome: &str) -> (String, String) {
    if outcome == "unknown_tool" {
        return (String::new(), String::new());
    }
    match name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        // A server that is not ready answers so for any tool name of its
        // own: the server is the catalog's, the tool may be anyone's.
        Some((server, _)) if outcome == "server_not_ready" => (server.to_owned(), String::new()),
        Some((server, tool)) => (server.to_owned(), tool.to_owned()),
        None => (String::new(), name.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_server_tool_and_outcome_and_unknown_names_add_no_series() {
        let m = Metrics::new();
        let finished = |tool: &str, outcome: &'static str, ms| RuntimeEvent::CallFinished {
            scope: crate::Scope::Global,
            tool: tool.into(),
            call_id: 1,
            outcome,
            duration_ms: ms,
            projection: String::new(),
        };
        m.observe(&finished("mcp__s__echo", "ok", 3));
        m.observe(&finished("mcp__s__echo", "ok", 5));
        m.observe(&finished("mcp__s__is_error", "server_error", 1));
        m.observe(&finished("mcp__zz__made_up_1", "unknown_tool", 0));
        m.observe(&finished("mcp__zz__made_up_2", "unknown_tool", 0));
        m.observe(&finished("mcp__s__made_up_3", "server_not_ready", 0));
        m.missed(2);
        let seat = SeatStatus {
            seat: "browser_use".into(),
            holder: Some("browser".into()),
            kind: Some("browser-native".into()),
            activations: vec!["a1".into()],
            pids: vec![10, 11],
            releasing: false,
            still_open: Vec::new(),
        };
        let text = m.render(Now {
            servers: &[],
            seats: &[seat],
            clients: 2,
            in_flight: 1,
            draining: true,
        });
        for line in [
            "mcpvisor_calls_total{server=\"s\",tool=\"echo\",outcome=\"ok\"} 2",
            "mcpvisor_calls_total{server=\"s\",tool=\"is_error\",outcome=\"server_error\"} 1",
            "mcpvisor_calls_total{server=\"\",tool=\"\",outcome=\"unknown_tool\"} 2",
            "mcpvisor_call_duration_seconds_count{server=\"s\"} 4",
            "mcpvisor_gateway_clients 2",
            "mcpvisor_gateway_requests_in_flight 1",
            "mcpvisor_gateway_draining 1",
            "mcpvisor_metrics_events_missed_total 2",
            "mcpvisor_seat_held{seat=\"browser_use\"} 1",
            "mcpvisor_seat_activations{seat=\"browser_use\"} 1",
            "mcpvisor_seat_processes{seat=\"browser_use\"} 2",
            "mcpvisor_calls_total{server=\"s\",tool=\"\",outcome=\"server_not_ready\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("made_up"), "{text}");
    }
}
