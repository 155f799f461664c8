//! The calls of one model round run together (issue 36): each call's policy
//! chain (trust, PreToolUse hooks, the installed policies) runs one at a
//! time in the model's order, no call is sent before every chain ran, and
//! then at most `parallel` calls are in flight, taken in the model's order;
//! a call that is not safe beside others runs alone.
//!
//! A [`RoundGate`] is made for a round, and each call carries its
//! [`RoundSlot`] in `CallOptions::round`. A slot is released when its last
//! clone drops, whichever way its call ended (refused, unknown tool,
//! cancelled, never made at all), so one call's early end never holds the
//! others.

use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, SemaphorePermit, watch};

/// Marks in order: `first` is the index of the first slot not yet marked.
#[derive(Debug)]
struct Ordered {
    marks: Mutex<Vec<bool>>,
    first: watch::Sender<usize>,
}

impl Ordered {
    fn new(n: usize) -> Self {
        Self {
            marks: Mutex::new(vec![false; n]),
            first: watch::Sender::new(0),
        }
    }

    /// Wait until every slot before `i` was marked.
    async fn turn(&self, i: usize) {
        let mut rx = self.first.subscribe();
        let _ = rx.wait_for(|f| *f >= i).await;
    }

    fn mark(&self, i: usize) {
        let first = match self.marks.lock() {
            Ok(mut m) => {
                if let Some(slot) = m.get_mut(i) {
                    *slot = true;
                }
                m.iter().position(|done| !done).unwrap_or(m.len())
            }
            Err(_) => return,
        };
        self.first.send_replace(first);
    }
}

/// One round's calls, together.
#[derive(Debug)]
pub struct RoundGate {
    /// The policy chains, in order.
    chains: Ordered,
    /// The turns to take a permit, in order.
    sends: Ordered,
    /// Calls in flight at once.
    permits: Semaphore,
    parallel: u32,
    total: usize,
}

impl RoundGate {
    /// A round of `exclusive.len()` calls (in the model's order), at most
    /// `parallel` in flight (at least 1); `exclusive[i]`: call `i` runs
    /// alone. The slots, one per call.
    pub fn slots(parallel: usize, exclusive: &[bool]) -> Vec<RoundSlot> {
        // More permits than calls change nothing (and a semaphore has a limit).
        let parallel = u32::try_from(parallel.clamp(1, exclusive.len().max(1))).unwrap_or(1);
        let gate = Arc::new(RoundGate {
            chains: Ordered::new(exclusive.len()),
            sends: Ordered::new(exclusive.len()),
            permits: Semaphore::new(usize::try_from(parallel).unwrap_or(usize::MAX)),
            parallel,
            total: exclusive.len(),
        });
        exclusive
            .iter()
            .enumerate()
            .map(|(index, &alone)| RoundSlot {
                place: Arc::new(Place {
                    gate: gate.clone(),
                    index,
                    alone,
                }),
            })
            .collect()
    }
}

/// One call's place in its round (see the module docs); released when its
/// last clone drops.
#[derive(Debug, Clone)]
pub struct RoundSlot {
    place: Arc<Place>,
}

#[derive(Debug)]
struct Place {
    gate: Arc<RoundGate>,
    index: usize,
    alone: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.gate.chains.mark(self.index);
        self.gate.sends.mark(self.index);
    }
}

impl RoundSlot {
    /// Wait for this call's turn to run its policy chain.
    pub(crate) async fn chain_turn(&self) {
        self.place.gate.chains.turn(self.place.index).await;
    }

    /// This call's policy chain ran (or never will).
    pub(crate) fn chain_done(&self) {
        self.place.gate.chains.mark(self.place.index);
    }

    /// Wait until every chain of the round ran and this call may be sent:
    /// its turn among the round's calls, then a permit (all of them when
    /// it runs alone), held until the call ends.
    pub(crate) async fn send_permit(&self) -> Option<SemaphorePermit<'_>> {
        self.place.gate.chains.turn(self.place.gate.total).await;
        self.place.gate.sends.turn(self.place.index).await;
        let n = if self.place.alone {
            self.place.gate.parallel
        } else {
            1
        };
        let permit = self.place.gate.permits.acquire_many(n).await.ok();
        self.place.gate.sends.mark(self.place.index);
        permit
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // Chains run in order, none is sent before all chains ran, at most
    // `parallel` are in flight, and a call that runs alone waits for the
    // others and holds the rest back.
    #[tokio::test]
    async fn chains_in_order_then_bounded_sends_in_order() {
        let slots = RoundGate::slots(2, &[false, false, true, false]);
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let runs = slots.into_iter().rev().map(|slot| {
            let (log, in_flight) = (log.clone(), in_flight.clone());
            async move {
                slot.chain_turn().await;
                log.lock()
                    .unwrap()
                    .push(format!("chain {}", slot.place.index));
                tokio::task::yield_now().await;
                slot.chain_done();
                let _permit = slot.send_permit().await;
                let now = in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                log.lock()
                    .unwrap()
                    .push(format!("send {} ({now} in flight)", slot.place.index));
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        futures::future::join_all(runs).await;
        let log = log.lock().unwrap().clone();
        assert_eq!(
            &log[..4],
            ["chain 0", "chain 1", "chain 2", "chain 3"],
            "{log:?}"
        );
        let sends: Vec<&String> = log[4..].iter().collect();
        assert!(
            sends[0].starts_with("send 0") && sends[1].starts_with("send 1"),
            "{log:?}"
        );
        assert_eq!(sends[2], "send 2 (1 in flight)", "{log:?}");
        assert!(sends[3].starts_with("send 3"), "{log:?}");
        assert!(log.iter().all(|l| !l.contains("(3 in flight)")), "{log:?}");
    }

    // A slot dropped before its chain ran (a call never made: invalid
    // arguments, an unknown tool) releases its place: the others go on;
    // a clone alive keeps it.
    #[tokio::test]
    async fn a_dropped_slot_holds_nobody() {
        let mut slots = RoundGate::slots(4, &[false, false, false]);
        let last = slots.pop().unwrap();
        let kept = slots[0].clone();
        drop(slots.remove(0));
        let first_open = *kept.place.gate.chains.first.borrow();
        assert_eq!(first_open, 0, "a clone keeps the place");
        drop(kept);
        drop(slots);
        last.chain_turn().await;
        last.chain_done();
        assert!(last.send_permit().await.is_some());
    }
}
