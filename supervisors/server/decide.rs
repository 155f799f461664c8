//! The server supervisor's decisions as pure functions: what a connection's
//! exit and a failure lead to, given the phase's facts and the policy. The
//! actor (`mod.rs`) gathers the facts, asks, and performs the answer, so
//! each row of the header table these decide is tested here with no tree,
//! no timer and no process (as `ractor_cluster` tests its node handshake
//! state by state).

use std::time::Duration;

use crate::messages::config::{OnDisconnect, ReconnectPolicy};

/// Why the connection that ended was being stopped, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopFor {
    /// Idle stop (RECO-6).
    Idle,
    /// Explicit restart (RECO-4).
    Restart,
}

/// What a connection's exit leads to (the table's `connection exit` rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// A new connection now (or once the close barrier is clear), and the
    /// outage's count starts again: an idle stop a call is waiting on, or
    /// a restart.
    Connect {
        /// The failure count starts again (a clean stop ends the outage,
        /// RECO-2); a restart reset it already.
        reset_failures: bool,
    },
    /// Idle-stopped, nobody waiting (RECO-6).
    IdleStopped,
    /// The connection failed: count it (see [`after_failure`]).
    Failure,
}

/// The exit of the current connection, which was being stopped for
/// `stopping` (or not at all); `waiting` says a Wake waits for a
/// connection.
pub(super) fn after_exit(stopping: Option<StopFor>, waiting: bool) -> AfterExit {
    match stopping {
        Some(StopFor::Idle) if waiting => AfterExit::Connect {
            reset_failures: true,
        },
        Some(StopFor::Idle) => AfterExit::IdleStopped,
        Some(StopFor::Restart) => AfterExit::Connect {
            reset_failures: false,
        },
        None => AfterExit::Failure,
    }
}

/// What a failure leads to (RECO-1/2/4/5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterFailure {
    /// Reconnect is off: `failed`, the tools withdrawn if the policy says so.
    Failed {
        /// `on_disconnect = "remove"`.
        remove_tools: bool,
    },
    /// The outage spent its budget: tools withdrawn, `exhausted` (RECO-4).
    Exhausted,
    /// Try again: attempt `attempt` after `delay`.
    Reconnect {
        /// 1-based attempt of this outage.
        attempt: u32,
        /// The backoff before it (RECO-1), the jitter applied.
        delay: Duration,
    },
}

/// The facts of one failure.
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    /// Failures counted in the outage so far.
    pub(super) failures: u32,
    /// How long the failed connection had been up (`None`: it never was).
    pub(super) up_for: Option<Duration>,
    /// Trying again cannot help: a server that never came up in this
    /// runtime whose executable does not exist (CONN-5).
    pub(super) permanent: bool,
}

/// The failure budget: the outage's new count and what comes next.
/// `jitter` picks a delay in `[delay/2, delay]` (ms) when the policy asks
/// for one; `no_backoff` is the chaos runner's break switch.
pub(super) fn after_failure(
    policy: &ReconnectPolicy,
    on_disconnect: OnDisconnect,
    failure: Failure,
    jitter: impl FnOnce(std::ops::RangeInclusive<u64>) -> u64,
    no_backoff: bool,
) -> (u32, AfterFailure) {
    // RECO-2: a connection that stayed up for the window ended the outage.
    let before = if failure
        .up_for
        .is_some_and(|up| up >= policy.stability_window())
    {
        0
    } else {
        failure.failures
    };
    let failures = before.saturating_add(1);
    if failure.permanent {
        return (
            failures,
            AfterFailure::Failed {
                remove_tools: false,
            },
        );
    }
    if !policy.enabled {
        let remove_tools = on_disconnect == OnDisconnect::Remove;
        return (failures, AfterFailure::Failed { remove_tools });
    }
    if failures > policy.max_attempts {
        return (failures, AfterFailure::Exhausted);
    }
    let mut delay = policy.delay_for_attempt(failures);
    if policy.jitter {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        delay = Duration::from_millis(jitter(ms / 2..=ms));
    }
    if no_backoff {
        delay = Duration::ZERO;
    }
    (
        failures,
        AfterFailure::Reconnect {
            attempt: failures,
            delay,
        },
    )
}

/// What a connection that is due to start does (RECO-3): start now, or
/// wait in `awaiting_close` for the previous generations to confirm their
/// close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenDue {
    /// The barrier is clear: spawn `Connection(next)`.
    Connect,
    /// A close is pending: `awaiting_close` until `ConnectionEnded`.
    AwaitClose,
    /// A reconnect timer the phase has moved past: nothing.
    Stale,
}

/// A connection is due: `clear` says the close barrier is clear (or the
/// chaos switch skips it).
pub(super) fn when_due(clear: bool) -> WhenDue {
    if clear {
        WhenDue::Connect
    } else {
        WhenDue::AwaitClose
    }
}

/// `Reconnect(attempt)` fired; `backing_off` is the attempt the phase waits
/// for, if it is `backing_off` at all.
pub(super) fn on_reconnect(backing_off: Option<u32>, attempt: u32, clear: bool) -> WhenDue {
    if backing_off == Some(attempt) {
        when_due(clear)
    } else {
        WhenDue::Stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_reconnect_connects_when_the_barrier_is_clear_and_waits_otherwise() {
        // Rows: backing_off(k) | Reconnect(k), barrier clear → connecting;
        // close pending → awaiting_close; a timer of another attempt, or
        // one that fires after the phase left backing_off, does nothing.
        assert_eq!(on_reconnect(Some(2), 2, true), WhenDue::Connect);
        assert_eq!(on_reconnect(Some(2), 2, false), WhenDue::AwaitClose);
        assert_eq!(on_reconnect(Some(3), 2, true), WhenDue::Stale);
        assert_eq!(on_reconnect(None, 2, true), WhenDue::Stale);
        // A restart, a wake, or a switch-on that is due: the barrier alone.
        assert_eq!(when_due(true), WhenDue::Connect);
        assert_eq!(when_due(false), WhenDue::AwaitClose);
    }

    fn policy() -> ReconnectPolicy {
        ReconnectPolicy {
            enabled: true,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_millis(4000),
            max_attempts: 3,
            jitter: false,
        }
    }

    fn fail(failures: u32, up_ms: Option<u64>) -> Failure {
        Failure {
            failures,
            up_for: up_ms.map(Duration::from_millis),
            permanent: false,
        }
    }

    fn no_jitter(_: std::ops::RangeInclusive<u64>) -> u64 {
        unreachable!("the policy has no jitter")
    }

    #[test]
    fn a_connection_exit_leads_where_its_stop_reason_says() {
        // Rows: stopping(idle) exit with and without a Wake waiting;
        // stopping(restart) exit; an unasked exit is a failure.
        assert_eq!(
            after_exit(Some(StopFor::Idle), true),
            AfterExit::Connect {
                reset_failures: true
            }
        );
        assert_eq!(
            after_exit(Some(StopFor::Idle), false),
            AfterExit::IdleStopped
        );
        assert_eq!(
            after_exit(Some(StopFor::Restart), false),
            AfterExit::Connect {
                reset_failures: false
            }
        );
        assert_eq!(after_exit(None, true), AfterExit::Failure);
    }

    #[test]
    fn failures_back_off_on_the_schedule_then_exhaust_the_budget() {
        // RECO-1: delay(k) = min(max, initial × 2^(k−1)); RECO-4: past
        // max_attempts the server is exhausted.
        let p = policy();
        let mut failures = 0;
        let mut delays = Vec::new();
        loop {
            let (now, next) = after_failure(
                &p,
                OnDisconnect::Keep,
                fail(failures, None),
                no_jitter,
                false,
            );
            failures = now;
            match next {
                AfterFailure::Reconnect { attempt, delay } => {
                    assert_eq!(attempt, failures);
                    delays.push(delay.as_millis());
                }
                AfterFailure::Exhausted => break,
                AfterFailure::Failed { .. } => panic!("reconnect is on"),
            }
        }
        assert_eq!(delays, [500, 1000, 2000]);
        assert_eq!(failures, 4);
    }

    #[test]
    fn a_connection_up_for_the_stability_window_starts_a_new_outage() {
        // RECO-2: up ≥ max_delay resets the count first; up for less does
        // not (a server that comes up briefly and crashes shares one budget).
        let p = policy();
        let (n, next) = after_failure(
            &p,
            OnDisconnect::Keep,
            fail(3, Some(4000)),
            no_jitter,
            false,
        );
        assert_eq!(n, 1);
        assert_eq!(
            next,
            AfterFailure::Reconnect {
                attempt: 1,
                delay: Duration::from_millis(500)
            }
        );
        let (n, next) = after_failure(
            &p,
            OnDisconnect::Keep,
            fail(3, Some(3999)),
            no_jitter,
            false,
        );
        assert_eq!((n, next), (4, AfterFailure::Exhausted));
    }

    #[test]
    fn with_reconnect_off_a_failure_is_failed_and_keeps_or_removes_the_tools() {
        // RECO-5.
        let mut p = policy();
        p.enabled = false;
        for (on, remove_tools) in [(OnDisconnect::Keep, false), (OnDisconnect::Remove, true)] {
            let (_, next) = after_failure(&p, on, fail(0, Some(10)), no_jitter, false);
            assert_eq!(next, AfterFailure::Failed { remove_tools });
        }
    }

    #[test]
    fn a_permanent_failure_is_failed_at_once_with_budget_left() {
        // A missing executable: no reconnect, though the budget allows one.
        let mut f = fail(0, None);
        f.permanent = true;
        let (n, next) = after_failure(&policy(), OnDisconnect::Keep, f, no_jitter, false);
        assert_eq!(
            (n, next),
            (
                1,
                AfterFailure::Failed {
                    remove_tools: false
                }
            )
        );
    }

    #[test]
    fn jitter_picks_within_half_to_whole_delay_and_the_break_switch_zeroes_it() {
        let mut p = policy();
        p.jitter = true;
        let (_, next) = after_failure(
            &p,
            OnDisconnect::Keep,
            fail(1, None),
            |range| {
                assert_eq!(range, 500..=1000);
                700
            },
            false,
        );
        assert_eq!(
            next,
            AfterFailure::Reconnect {
                attempt: 2,
                delay: Duration::from_millis(700)
            }
        );
        let (_, next) = after_failure(
            &policy(),
            OnDisconnect::Keep,
            fail(0, None),
            no_jitter,
            true,
        );
        assert_eq!(
            next,
            AfterFailure::Reconnect {
                attempt: 1,
                delay: Duration::ZERO
            }
        );
    }
}
