//! The transports of one server that have not confirmed their close (RECO-3).

use crate::messages::server::Unreaped;

/// The transports of one server that have not confirmed their close, kept
/// outside its supervisor (the scope holds it): a supervisor restarted after
/// a failure finds them, waits for them, and continues the generation count
/// (RECO-3 across a restart).
#[derive(Debug, Default)]
pub struct OpenTransports {
    inner: std::sync::Mutex<OpenInner>,
}

#[derive(Debug, Default)]
struct OpenInner {
    next_gen: u64,
    closed: std::collections::BTreeMap<u64, Unreaped>,
}

impl OpenTransports {
    fn lock(&self) -> std::sync::MutexGuard<'_, OpenInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next connection generation (1 for a new server).
    pub fn next_gen(&self) -> u64 {
        self.lock().next_gen.max(1)
    }

    /// Remember the next connection generation.
    pub fn set_next_gen(&self, next: u64) {
        self.lock().next_gen = next;
    }

    /// `conn_gen`'s transport is open; `closed` tells once its close is confirmed.
    pub fn register(&self, conn_gen: u64, closed: Unreaped) {
        self.lock().closed.insert(conn_gen, closed);
    }

    /// `conn_gen` confirmed its close.
    pub fn forget(&self, conn_gen: u64) {
        self.lock().closed.remove(&conn_gen);
    }

    /// The registered transports not confirmed closed yet.
    pub fn pending(&self) -> Vec<(u64, Unreaped)> {
        self.lock()
            .closed
            .iter()
            .filter(|(_, u)| !*u.reaped.borrow())
            .map(|(g, u)| (*g, u.clone()))
            .collect()
    }
}
