//! The provider seats' vocabulary (SEAT-1..10): the two seats, activation
//! ids, the `SeatProvider` and `SessionResource` ports, the seat and session
//! messages, and their errors.
//!
//! A seat holds at most one provider. A provider's tools reach the call
//! pipeline as one server mounted in each live activation's scope (an
//! in-process MCP server for the native providers, a stdio server for the
//! MCP-backed ones), so they go through trust, hooks, results and images
//! like any server's. What an activation owns (its browser, its desktop
//! session) is a session resource, keyed by the activation's id.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use ractor::RpcReplyPort;

use super::config::{Scope, ServerConfig};
use super::status::ShutdownReport;
use super::tree::ScopeHandle;

/// The two seats (SEAT-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SeatKind {
    /// `browser_use`.
    BrowserUse,
    /// `computer_use`.
    ComputerUse,
}

impl SeatKind {
    /// Both seats, in status order.
    pub const ALL: [SeatKind; 2] = [SeatKind::BrowserUse, SeatKind::ComputerUse];

    /// The seat's name: `browser_use`, `computer_use`.
    pub fn name(self) -> &'static str {
        match self {
            SeatKind::BrowserUse => "browser_use",
            SeatKind::ComputerUse => "computer_use",
        }
    }
}

impl fmt::Display for SeatKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An activation's opaque id (SEAT-7): minted per activation, never the
/// durable session id, never reused within a runtime.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActivationId {
    id: String,
    /// The runtime's part of `MCPVISOR_TAG` (RECO-7).
    runtime_tag: String,
}

impl ActivationId {
    /// The `n`th activation of the runtime tagged `runtime_tag`.
    pub(crate) fn mint(runtime_tag: &str, n: u64) -> Self {
        Self {
            id: format!("act-{n}-{:08x}", rand::random::<u32>()),
            runtime_tag: runtime_tag.to_owned(),
        }
    }

    /// The id as text (`act-…`).
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The `MCPVISOR_TAG` value for a process this activation's provider
    /// starts (`<runtime>/<what>/<activation>`): the runtime's shutdown
    /// finds it by this even when it left its process group (RECO-7).
    pub fn process_tag(&self, what: &str) -> String {
        format!("{}/{what}/{}", self.runtime_tag, self.id)
    }
}

impl fmt::Display for ActivationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// What an activation owns of a provider: a launched browser, a desktop
/// session. Opened once per activation by the provider's opener (SEAT-8),
/// closed at the activation's end or the provider's release (SEAT-10).
pub trait SessionResource: Any + Send + Sync {
    /// The processes it owns (for `status`).
    fn pids(&self) -> Vec<u32>;
    /// Interrupt the operation that runs now, if any (disposal, SEAT-8).
    fn interrupt(&self);
    /// Close it: every process it started reaped. The report lists what
    /// was reaped; anything that could not be confirmed goes in
    /// `unconfirmed`, and then the resource stays owned (SEAT-10).
    fn close(self: Arc<Self>) -> BoxFuture<'static, ShutdownReport>;
    /// For the provider's own tools: the concrete type.
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Opens an activation's session resource (the provider's part of SEAT-8).
pub type Opener = Arc<
    dyn Fn(ActivationId) -> BoxFuture<'static, Result<Arc<dyn SessionResource>, String>>
        + Send
        + Sync,
>;

/// What a provider says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Its name (the config table's key, e.g. `browser`).
    pub name: String,
    /// Its kind (`browser-native`, …).
    pub kind: String,
    /// The seat it takes.
    pub seat: SeatKind,
}

/// A provider a seat can hold (SEAT-3, SEAT-4): it registers its own tools
/// (the server it mounts in each activation's scope) and owns its session
/// resources (through its opener).
pub trait SeatProvider: Send + Sync + 'static {
    /// Name, kind, seat.
    fn info(&self) -> ProviderInfo;
    /// The server that carries its tools in `activation`'s scope. Calls of
    /// those tools reach the activation's resource through `sessions`.
    fn mount(
        &self,
        activation: &ActivationId,
        sessions: SessionsHandle,
    ) -> Result<ServerConfig, String>;
    /// Opens the session resource of one activation (none: the mounted
    /// server owns everything itself, as an MCP-backed provider's does).
    fn opener(&self) -> Option<Opener>;
    /// Whether `activation` may have the tools mounted now. A provider of
    /// one exclusive resource (an MCP-backed browser attached to one
    /// browser) claims it here for the first activation and answers
    /// `false` to the others: their tools are masked (not mounted) until
    /// the holder's mount ends, when the seat asks again (SEAT-9).
    fn admit(&self, activation: &ActivationId) -> bool {
        let _ = activation;
        true
    }

    /// The activation's tools were withdrawn and its resources closed:
    /// remove what the mount itself made (a working directory).
    fn unmounted(&self, activation: &ActivationId) {
        let _ = activation;
    }
}

/// A handle of one activation on its provider's session resources, for the
/// provider's mounted tools.
#[derive(Clone)]
pub struct SessionsHandle {
    /// The session-resources actor.
    pub(crate) actor: ractor::ActorRef<SessionsMsg>,
    /// The activation it acts for.
    pub activation: ActivationId,
    /// The seat whose provider it serves (in errors).
    pub seat: SeatKind,
}

impl fmt::Debug for SessionsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionsHandle")
            .field("activation", &self.activation)
            .finish_non_exhaustive()
    }
}

/// Errors of the seats and their activations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeatError {
    /// SEAT-1: the seat is taken.
    #[error("the {seat} seat is held by provider \"{holder}\": release it first")]
    Held {
        /// The seat.
        seat: SeatKind,
        /// Who holds it.
        holder: String,
    },
    /// SEAT-2: the old provider's work is still closing.
    #[error("the {seat} seat is still releasing provider \"{holder}\"")]
    Releasing {
        /// The seat.
        seat: SeatKind,
        /// The provider being released.
        holder: String,
    },
    /// Nothing holds the seat.
    #[error("the {seat} seat holds no provider")]
    Empty {
        /// The seat.
        seat: SeatKind,
    },
    /// SEAT-10: a close failed or could not be confirmed; the entry and the
    /// seat stay owned.
    #[error("the {seat} seat could not be released: still open: {}", .open.join("; "))]
    StillOpen {
        /// The seat.
        seat: SeatKind,
        /// What is still open.
        open: Vec<String>,
    },
    /// The activation is not (or no longer) live (SEAT-7).
    #[error("activation {0} is not live")]
    NotLive(ActivationId),
    /// A scope has one live activation at a time.
    #[error("scope {scope} already has the live activation {holder}")]
    ScopeTaken {
        /// The scope.
        scope: Scope,
        /// The live activation.
        holder: ActivationId,
    },
    /// The provider's tools could not be mounted in the activation's scope.
    #[error("provider \"{provider}\" could not be mounted in scope {scope}: {reason}")]
    Mount {
        /// The provider.
        provider: String,
        /// The scope.
        scope: Scope,
        /// Why.
        reason: String,
    },
    /// Opening the activation's resource failed (the entry is gone: a
    /// later call may try again, SEAT-8).
    #[error("{0}")]
    Open(String),
    /// The runtime is shutting down.
    #[error("the runtime is shutting down")]
    ShuttingDown,
}

/// A seat as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SeatStatus {
    /// `browser_use` or `computer_use`.
    pub seat: String,
    /// The provider holding it.
    pub holder: Option<String>,
    /// The provider's kind.
    pub kind: Option<String>,
    /// Live activations.
    pub activations: Vec<String>,
    /// Processes its session resources own.
    pub pids: Vec<u32>,
    /// A release is under way (or stopped on a close it could not confirm).
    pub releasing: bool,
    /// What a failed release left open.
    pub still_open: Vec<String>,
}

/// Messages of a seat (`supervisors/seat.rs`).
pub enum SeatMsg {
    /// Take the seat (SEAT-1).
    Register {
        /// The provider.
        provider: Arc<dyn SeatProvider>,
        /// Refused when held.
        reply: RpcReplyPort<Result<(), SeatError>>,
    },
    /// Release the seat (SEAT-2, SEAT-10): tools withdrawn from every
    /// activation's scope, every resource closed, then released.
    Release {
        /// What was stopped and reaped, or what is still open.
        reply: RpcReplyPort<Result<ShutdownReport, SeatError>>,
    },
    /// An activation began: mount the provider's tools in its scope.
    Open {
        /// The activation.
        activation: ActivationId,
        /// Its scope.
        scope: Scope,
        /// The scope's handle (to mount the server).
        handle: ScopeHandle,
        /// The mounted server's name, `None` when the seat is empty.
        reply: RpcReplyPort<Result<Option<String>, SeatError>>,
    },
    /// An activation ended: withdraw its tools, close its resource.
    Close {
        /// The activation.
        activation: ActivationId,
        /// What was reaped, or what is still open. `None`: fire and forget
        /// (an `Activation` dropped without `close`).
        reply: Option<RpcReplyPort<Result<ShutdownReport, SeatError>>>,
    },
    /// The global switch turned off (TRUST-1): every activation's
    /// resources close (no process runs while off); the provider stays,
    /// and the next call after switching on opens a fresh resource.
    CloseResources {
        /// What was reaped, and what could not be confirmed.
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// The seat's status.
    Status {
        /// It.
        reply: RpcReplyPort<SeatStatus>,
    },
    /// The runtime's shutdown: release, and refuse everything after.
    Shutdown {
        /// The release's report (a failed release in `unconfirmed`).
        reply: RpcReplyPort<ShutdownReport>,
    },
}

/// What the session resources own: each activation's pids, and what
/// failed closes left open.
pub type Owned = (Vec<(ActivationId, Vec<u32>)>, Vec<String>);

/// Messages of a provider's session resources (`actors/sessions.rs`).
pub enum SessionsMsg {
    /// The activation is live: its resource may be acquired.
    Live {
        /// It.
        activation: ActivationId,
    },
    /// The activation's resource, opened on first use; concurrent callers
    /// share one opening (SEAT-8).
    Acquire {
        /// For whom.
        activation: ActivationId,
        /// The resource, or why not.
        reply: RpcReplyPort<Result<Arc<dyn SessionResource>, SeatError>>,
    },
    /// An opening ended (from the actor's own opening task).
    Opened {
        /// For whom.
        activation: ActivationId,
        /// Which opening (a disposed activation's late opening is closed).
        attempt: u64,
        /// What it gave.
        result: Result<Arc<dyn SessionResource>, String>,
    },
    /// The activation ended: interrupt and close its resource (SEAT-8). A
    /// close that cannot be confirmed keeps the entry (SEAT-10).
    Dispose {
        /// It.
        activation: ActivationId,
        /// What was reaped, or what is still open.
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// A close ended (from the actor's own close task).
    Closed {
        /// Whose.
        activation: ActivationId,
        /// What it reaped, or could not confirm.
        report: ShutdownReport,
    },
    /// The pids every resource owns, per activation.
    Owned {
        /// (activation, pids), and what failed closes left.
        reply: RpcReplyPort<Owned>,
    },
}
