//! Scenarios: a seed and the fault plan drawn from it, and the catalogue of
//! every scenario the runner knows.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use super::fault::{FIXED_TOOLS, Fault, FaultHook};
use super::rng::SeededRng;

/// A scenario: a name, the faults it injects (params from the seed).
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Name (stable across seeds).
    pub name: &'static str,
    /// The seed its plan came from.
    pub seed: u64,
    /// The fault plan.
    pub faults: Vec<Fault>,
    /// Sequential echo calls before and after the trigger.
    pub calls: u64,
    /// Concurrent echo calls.
    pub concurrent: u64,
}

/// Every scenario of the catalogue, with parameters drawn from `seed`.
pub fn scenarios(seed: u64) -> Vec<Scenario> {
    type Make = fn(&mut SeededRng) -> Vec<Fault>;
    let table: Vec<(&'static str, Make)> = vec![
        ("crash_at_start", |r| {
            vec![Fault::CrashAtStart {
                code: r.range(1, 9) as i32,
            }]
        }),
        ("crash_after_calls", |r| {
            vec![Fault::CrashAfterCalls { n: r.range(2, 6) }]
        }),
        ("crash_mid_call", |_| vec![Fault::CrashMidCall]),
        ("hang_on_initialize", |_| vec![Fault::HangOnInitialize]),
        ("hang_on_call", |_| vec![Fault::HangOnCall]),
        ("slow_responses", |r| {
            vec![Fault::SlowResponses { ms: r.range(5, 40) }]
        }),
        ("reordered_replies", |_| vec![Fault::ReorderedReplies]),
        ("admin_paths", |_| vec![Fault::AdminPaths]),
        ("admin_paths_stubborn", |_| {
            vec![Fault::AdminPaths, Fault::IgnoreSigterm]
        }),
        ("non_json_lines", |_| vec![Fault::NonJsonLines]),
        ("overlong_line", |_| vec![Fault::OverlongLine]),
        ("noise_before_handshake", |r| {
            vec![Fault::NoiseBeforeHandshake {
                lines: r.range(1, 20),
            }]
        }),
        ("ignore_sigterm", |_| vec![Fault::IgnoreSigterm]),
        ("grandchild", |_| vec![Fault::Grandchild]),
        ("list_changed_storm", |r| {
            vec![Fault::ListChangedStorm {
                count: r.range(10, 100),
            }]
        }),
        ("duplicate_names", |_| vec![Fault::DuplicateNames]),
        ("colliding_names", |_| vec![Fault::CollidingNames]),
        ("invalid_result", |_| vec![Fault::InvalidResult]),
        ("is_error", |_| vec![Fault::IsError]),
        ("schema_violation", |_| vec![Fault::SchemaViolation]),
        ("huge_result", |r| {
            vec![Fault::HugeResult {
                bytes: r.range(1, 4) * 1024 * 1024,
            }]
        }),
        ("audio_content", |_| vec![Fault::AudioContent]),
        ("paginated_catalog", |r| {
            vec![Fault::PaginatedCatalog {
                tools: r.range(20, 300),
                page: r.range(3, 50),
            }]
        }),
        ("long_and_bad_names", |_| {
            vec![Fault::LongNames, Fault::BadCharNames]
        }),
        ("stderr_then_exit", |_| vec![Fault::StderrThenExit]),
        ("http_401", |_| vec![Fault::Http401]),
        ("http_500", |_| vec![Fault::Http500]),
        ("http_session_loss", |r| {
            vec![Fault::HttpSessionLoss {
                after: r.range(1, 4),
            }]
        }),
        ("http_stall", |_| vec![Fault::HttpStall]),
        ("hook_grandchild", |_| vec![Fault::HookGrandchild]),
        ("hook_hang", |_| vec![Fault::HookHang]),
        ("hook_garbage", |_| vec![Fault::HookGarbage]),
        ("deep_json", |_| vec![Fault::DeepJson]),
        ("stdin_freeze", |_| vec![Fault::StdinFreeze]),
        // Combinations: a connection that fails while its process refuses to die
        // is what the close barrier exists for (RECO-3).
        ("overlong_line_stubborn", |_| {
            vec![Fault::OverlongLine, Fault::IgnoreSigterm]
        }),
        ("crash_mid_call_with_grandchild", |_| {
            vec![Fault::CrashMidCall, Fault::Grandchild]
        }),
        // Hostile timing. New scenarios go last: each draws from
        // the stream of its index, so the plans above stay the same per seed.
        ("split_replies", |r| {
            vec![Fault::SplitReplies { ms: r.range(2, 10) }]
        }),
        ("large_args_stall", |r| {
            vec![
                Fault::StdinFreeze,
                Fault::LargeArgs {
                    bytes: r.range(64, 512) * 1024,
                },
            ]
        }),
        ("secret_echo", |_| vec![Fault::SecretEcho]),
        ("resources_only_idle", |r| {
            vec![Fault::ResourcesOnlyIdle {
                idle_ms: r.range(100, 300),
            }]
        }),
        ("supervisor_panic_mid_outage", |_| {
            vec![Fault::CrashMidCall, Fault::SupervisorPanic]
        }),
        // The panic while the failed connection's stubborn process is still
        // being closed: the restarted supervisor must wait for that close.
        ("supervisor_panic_mid_close", |_| {
            vec![
                Fault::OverlongLine,
                Fault::IgnoreSigterm,
                Fault::SupervisorPanic,
            ]
        }),
        ("daemonized_grandchild", |_| {
            vec![Fault::DaemonizedGrandchild]
        }),
        // The model side of a tool-loop turn.
        ("model_stall", |_| vec![Fault::ModelStall]),
        ("model_cut_stream", |_| vec![Fault::ModelCutStream]),
        ("model_garbage_sse", |_| vec![Fault::ModelGarbageSse]),
        // A provider's browser whose process group will not die.
        ("browser_wont_die", |_| vec![Fault::BrowserWontDie]),
        // A mod that hangs, throws, or blows its memory up.
        ("mod_hang", |_| vec![Fault::ModHang]),
        ("mod_throw", |_| vec![Fault::ModThrow]),
        ("mod_memory", |_| vec![Fault::ModMemory]),
        // The protocol eras: a server that crashes mid-call and comes back
        // speaking the other era (ERA-1's remembered era is then wrong).
        ("era_change_on_restart", |_| {
            vec![Fault::CrashMidCall, Fault::EraFlip]
        }),
        ("endless_input_required", |_| vec![Fault::EndlessInput]),
        ("endless_task", |_| vec![Fault::EndlessTask]),
        ("listen_break", |_| vec![Fault::ListenBreak]),
    ];
    table
        .into_iter()
        .enumerate()
        .map(|(i, (name, make))| {
            let mut rng = SeededRng::new(seed, i as u64);
            let faults = make(&mut rng);
            Scenario {
                name,
                seed,
                faults,
                calls: rng.range(3, 8),
                concurrent: rng.range(2, 16),
            }
        })
        .collect()
}

impl Scenario {
    /// True when the fault-server is served over streamable HTTP.
    pub(super) fn is_http(&self) -> bool {
        self.faults.iter().any(Fault::is_http)
    }

    /// True when a second server `s__t` joins to collide with `s`.
    pub(super) fn colliding(&self) -> bool {
        self.faults.contains(&Fault::CollidingNames)
    }

    /// True when `initialize` is never answered (a short startup timeout).
    pub(super) fn hangs_on_initialize(&self) -> bool {
        self.faults.contains(&Fault::HangOnInitialize)
    }

    /// Every server's `tool_call_timeout` in this scenario: 0.8 s, or 5 s
    /// when the server writes megabytes: an overlong line, a huge result.
    /// Reading 8 MiB (or 4) through a 64 KiB pipe took longer than 0.8 s on
    /// a loaded machine (the 1000-seed runs), and the call then ended
    /// `timeout`: correct (CALL-4), but the fault exists to show the line
    /// limit, or a large result delivered whole.
    pub(super) fn call_timeout(&self) -> std::time::Duration {
        let megabytes = |f: &Fault| matches!(f, Fault::OverlongLine | Fault::HugeResult { .. });
        if self.faults.iter().any(megabytes) {
            std::time::Duration::from_secs(5)
        } else {
            super::workload::TOOL_CALL_TIMEOUT
        }
    }

    /// True when server `s` gets a secret in its environment (every stdio
    /// run; `secret_echo` makes the server leak it).
    pub(super) fn has_secret(&self) -> bool {
        !self.is_http()
    }

    /// True when no connection of server `s` can ever succeed: it is started
    /// exactly 1 + max_attempts times (`budget_respected`).
    pub(super) fn every_start_fails(&self) -> bool {
        !self.is_http()
            && !self.panics_supervisor()
            && self
                .faults
                .iter()
                .any(|f| matches!(f, Fault::CrashAtStart { .. } | Fault::HangOnInitialize))
    }

    /// True when the server supervisor is made to fail after each trigger.
    /// True when the browser_use seat holds a provider in this run.
    pub(super) fn has_browser(&self) -> bool {
        self.faults.contains(&Fault::BrowserWontDie)
    }

    pub(super) fn panics_supervisor(&self) -> bool {
        self.faults.contains(&Fault::SupervisorPanic)
    }

    /// `idle_stop_after` of server `s`, when the plan idle-stops it.
    pub(super) fn idle_stop(&self) -> Option<std::time::Duration> {
        self.faults.iter().find_map(|f| match f {
            Fault::ResourcesOnlyIdle { idle_ms } => {
                Some(std::time::Duration::from_millis(*idle_ms))
            }
            _ => None,
        })
    }

    /// True when every workload call must end `ok` (`no_lost_reply`): every
    /// fault of the plan leaves the server answering.
    pub(super) fn keeps_answering(&self) -> bool {
        self.faults.iter().all(Fault::keeps_answering)
    }

    /// The public tool name and arguments of the workload call carrying
    /// `nonce`: `echo` (padded under [`Fault::LargeArgs`]), or a resource
    /// read for a resources-only server. The nonce is in what the server
    /// logs, so `no_double_send` finds it.
    pub(super) fn workload_call(&self, nonce: &str) -> (&'static str, serde_json::Value) {
        if self.idle_stop().is_some() {
            let args = serde_json::json!({"server": "s", "uri": format!("mem://note/{nonce}")});
            return ("read_mcp_resource", args);
        }
        let mut args = serde_json::json!({ "message": nonce });
        for f in &self.faults {
            if let Fault::LargeArgs { bytes } = f {
                args["pad"] = serde_json::Value::String("p".repeat(*bytes as usize));
            }
        }
        ("mcp__s__echo", args)
    }

    /// The fault-server flags of server `s`: its request log, then every fault's.
    pub(super) fn server_args(&self, log: &Path) -> Vec<String> {
        let mut args: Vec<String> =
            vec!["--log-requests".into(), log.to_string_lossy().into_owned()];
        for f in &self.faults {
            args.extend(f.server_args());
        }
        args
    }

    /// The hooks the faults install.
    pub(super) fn hooks(&self) -> Vec<FaultHook> {
        self.faults.iter().filter_map(Fault::hook).collect()
    }

    /// The whole catalog of each server: a catalog is whole or empty. Server
    /// "s" lists the fixed tools plus the faults' extras (a duplicate name
    /// rejects it whole); "s__t" the fixed ones.
    pub(super) fn expected_catalog(&self) -> HashMap<String, u64> {
        let extras: u64 = self.faults.iter().map(Fault::extra_tools).sum();
        let whole = if self.faults.contains(&Fault::DuplicateNames)
            || self.faults.iter().any(Fault::no_tools)
        {
            0
        } else {
            FIXED_TOOLS + extras
        };
        HashMap::from([("s".into(), whole), ("s__t".into(), FIXED_TOOLS)])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        let a = serde_json::to_string(&scenarios(7)).unwrap();
        let b = serde_json::to_string(&scenarios(7)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, serde_json::to_string(&scenarios(8)).unwrap());
    }

    #[test]
    fn the_catalogue_exercises_at_least_25_fault_kinds() {
        let kinds: HashSet<&str> = scenarios(1)
            .iter()
            .flat_map(|s| s.faults.iter().map(Fault::name))
            .collect();
        assert!(kinds.len() >= 25, "{} kinds: {kinds:?}", kinds.len());
    }
}
