//! The provider seats' API (SEAT-1..10): register and release a provider,
//! open and close an activation.
//!
//! The seats are actors of the tree (`supervisors/seat.rs`, children of the
//! root); this is the caller's side. An [`Activation`] is one live run of an
//! agent in a scope: while it lives, every held seat's tools are mounted in
//! its scope, and what it uses (its browser) is its own, keyed by its id.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Runtime, RuntimeError};
use crate::messages::config::Scope;
use crate::messages::seat::{ActivationId, SeatError, SeatKind, SeatProvider, SeatStatus};
use crate::messages::status::ShutdownReport;
use crate::supervisors::seat::{DISPOSE_DEADLINE, SeatHandle};
use crate::supervisors::spec::AskError;

/// How long registering a provider may take (mounting it in every live
/// activation).
const REGISTER_DEADLINE: Duration = Duration::from_secs(30);
/// How long a release may take: every activation's close, concurrently.
const RELEASE_DEADLINE: Duration = Duration::from_secs(DISPOSE_DEADLINE.as_secs() + 20);

impl Runtime {
    fn seat(&self, kind: SeatKind) -> Result<&SeatHandle, RuntimeError> {
        self.inner
            .seats
            .iter()
            .find(|s| s.kind() == kind)
            .ok_or(RuntimeError::Unavailable {
                actor: "seat",
                why: AskError::Gone,
            })
    }

    /// Put a provider in its seat (SEAT-1): refused, naming the holder, when
    /// the seat is held or still releasing. Its tools are mounted in every
    /// live activation's scope.
    pub async fn register_provider(
        &self,
        provider: Arc<dyn SeatProvider>,
    ) -> Result<(), RuntimeError> {
        let seat = self.seat(provider.info().seat)?;
        seat.register(provider, REGISTER_DEADLINE)
            .await
            .map_err(RuntimeError::unavailable("seat"))?
            .map_err(RuntimeError::Seat)
    }

    /// Release a seat (SEAT-2, SEAT-10): the provider's tools leave every
    /// scope, every activation's resources close (their processes reaped),
    /// then the seat is free. A close that fails or cannot be confirmed
    /// keeps the seat held and is the error, naming what is still open.
    pub async fn release_provider(&self, kind: SeatKind) -> Result<ShutdownReport, RuntimeError> {
        let seat = self.seat(kind)?;
        seat.release(RELEASE_DEADLINE)
            .await
            .map_err(RuntimeError::unavailable("seat"))?
            .map_err(RuntimeError::Seat)
    }

    /// Both seats' status: holder, live activations, owned pids.
    pub async fn seats(&self) -> Vec<SeatStatus> {
        let mut out = Vec::new();
        for seat in &self.inner.seats {
            let s = seat.status(Duration::from_secs(5)).await;
            out.push(s.unwrap_or_else(|e| SeatStatus {
                seat: seat.kind().name().to_owned(),
                holder: None,
                kind: None,
                activations: Vec::new(),
                pids: Vec::new(),
                releasing: false,
                still_open: vec![format!("the seat {e}")],
            }));
        }
        out
    }

    /// Open an activation in `scope` (SEAT-7): a fresh opaque id, and every
    /// held seat's tools mounted in the scope for as long as it lives. A
    /// scope has one live activation at a time.
    pub async fn open_activation(&self, scope: Scope) -> Result<Activation, RuntimeError> {
        let n = self.inner.activation_ids.fetch_add(1, Ordering::SeqCst);
        let id = ActivationId::mint(&self.inner.tag, n);
        {
            let mut live = self
                .inner
                .activations
                .lock()
                .map_err(|_| RuntimeError::Start("the activation table is poisoned".into()))?;
            if let Some(holder) = live.get(&scope) {
                return Err(RuntimeError::Seat(SeatError::ScopeTaken {
                    scope,
                    holder: holder.clone(),
                }));
            }
            live.insert(scope.clone(), id.clone());
        }
        let mut activation = Activation {
            runtime: Arc::downgrade(&self.inner),
            id,
            scope: scope.clone(),
            mounted: Vec::new(),
            closed: false,
        };
        let handle = self.scope_handle(&scope).await?;
        for seat in &self.inner.seats {
            let opened = seat
                .open(
                    activation.id.clone(),
                    scope.clone(),
                    handle.clone(),
                    REGISTER_DEADLINE,
                )
                .await
                .map_err(RuntimeError::unavailable("seat"))
                .and_then(|r| r.map_err(RuntimeError::Seat));
            match opened {
                Ok(Some(server)) => {
                    // The activation's tools are there when it is open; a
                    // provider that fails to start fails the activation
                    // (strict startup, SEAT-5). Dropping it unmounts.
                    let limit = self
                        .server_entry(&scope, &server)
                        .map(|e| e.config.startup_timeout)
                        .unwrap_or(Duration::from_secs(30))
                        + Duration::from_secs(2);
                    activation.mounted.push((seat.kind(), server.clone()));
                    self.wait_outcome(&scope, &server, limit, super::Wait::FirstAttempt)
                        .await?;
                }
                Ok(None) => {}
                // Dropping the activation closes what was opened.
                Err(e) => return Err(e),
            }
        }
        Ok(activation)
    }
}

/// One live activation (SEAT-7). [`Activation::close`] ends it and reports
/// what was reaped; dropping it without `close` ends it too, in the
/// background.
pub struct Activation {
    /// Weak: an activation does not keep its runtime alive (the runtime may
    /// hold it, see `RuntimeBuilder::activate`).
    runtime: std::sync::Weak<super::Inner>,
    id: ActivationId,
    scope: Scope,
    mounted: Vec<(SeatKind, String)>,
    closed: bool,
}

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("id", &self.id)
            .field("scope", &self.scope)
            .field("mounted", &self.mounted)
            .finish()
    }
}

impl Activation {
    /// Its opaque id.
    pub fn id(&self) -> &ActivationId {
        &self.id
    }

    /// The scope its tools are mounted in.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The servers carrying the held seats' tools in the scope.
    pub fn mounted(&self) -> &[(SeatKind, String)] {
        &self.mounted
    }

    /// End the activation: its tools leave the scope, its resources close
    /// and their processes are reaped (SEAT-8). A close that cannot be
    /// confirmed is the error, naming what is still open (SEAT-10).
    pub async fn close(mut self) -> Result<ShutdownReport, RuntimeError> {
        self.closed = true;
        self.forget();
        let mut report = ShutdownReport::default();
        let mut open = Vec::new();
        let mut failed_seat = None;
        // The runtime is gone: its tree, and every process in it, went with it.
        let Some(inner) = self.runtime.upgrade() else {
            return Ok(report);
        };
        for seat in &inner.seats {
            let before = open.len();
            let closed = seat.close(self.id.clone(), RELEASE_DEADLINE).await;
            match closed {
                Ok(Ok(r)) => report.absorb(r),
                Ok(Err(SeatError::StillOpen { open: o, .. })) => open.extend(o),
                Ok(Err(e)) => open.push(e.to_string()),
                // A seat gone with the runtime's shutdown released it all.
                Err(AskError::Gone) => {}
                Err(e) => open.push(format!("the seat {e}")),
            }
            if open.len() > before {
                failed_seat.get_or_insert(seat.kind());
            }
        }
        match failed_seat {
            None => Ok(report),
            Some(seat) => Err(RuntimeError::Seat(SeatError::StillOpen { seat, open })),
        }
    }

    fn forget(&self) {
        let Some(inner) = self.runtime.upgrade() else {
            return;
        };
        if let Ok(mut live) = inner.activations.lock()
            && live.get(&self.scope) == Some(&self.id)
        {
            live.remove(&self.scope);
        }
    }
}

impl Drop for Activation {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.forget();
        let Some(inner) = self.runtime.upgrade() else {
            return;
        };
        for seat in &inner.seats {
            seat.close_detached(self.id.clone());
        }
    }
}
