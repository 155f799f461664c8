//! The supervision tree's protocol: the messages of the root and scope
//! supervisors, the hooks supervisor and the event log, and the scope handle
//! the root hands out. (The server supervisor's are in [`super::server`],
//! the registry's in [`super::registry`].)

use std::sync::Arc;
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::watch;

use super::config::{ConfigError, Scope, ServerConfig};
use super::registry::ScopeSnapshot;
use super::status::ShutdownReport;

/// Messages of the root supervisor.
pub enum RootMsg {
    /// Get (or create) a scope.
    Scope {
        /// The scope.
        scope: Scope,
        /// Its handle.
        reply: RpcReplyPort<Result<ScopeHandle, TreeError>>,
    },
    /// The hooks supervisor.
    HooksSupervisor {
        /// Its ref.
        reply: RpcReplyPort<ActorRef<HooksMsg>>,
    },
    /// The provider seats (SEAT-1).
    Seats {
        /// Each seat's actor.
        reply: RpcReplyPort<Vec<(super::seat::SeatKind, ActorRef<super::seat::SeatMsg>)>>,
    },
    /// The global switch (TRUST-1): remembered for scopes started later.
    SetEnabled {
        /// On or off.
        enabled: bool,
        /// The merged report of the stops.
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// Shut every child down, tier by tier, and report.
    Shutdown {
        /// The merged report.
        reply: RpcReplyPort<ShutdownReport>,
    },
}

/// What the runtime keeps of a scope: its supervisor and its snapshot.
#[derive(Debug, Clone)]
pub struct ScopeHandle {
    /// The scope supervisor.
    pub(crate) actor: ActorRef<ScopeMsg>,
    /// The registry's published catalog.
    pub snapshot: watch::Receiver<Arc<ScopeSnapshot>>,
}

/// Messages of a scope supervisor.
pub enum ScopeMsg {
    /// Add and start a server; refused when the name is taken in this scope
    /// (CONN-4) or the runtime is off (TRUST-1).
    AddServer {
        /// Validated config.
        config: Box<ServerConfig>,
        /// The server_name (derived from the display name when empty, SYNC-2)
        /// once the server's supervisor runs.
        reply: RpcReplyPort<Result<String, TreeError>>,
    },
    /// The global switch (TRUST-1), for this scope: every enabled server that
    /// was not turned off by itself is switched.
    SetEnabled {
        /// On or off.
        enabled: bool,
        /// The merged report of the stops.
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// Turn one server off, or on again (refused while the runtime is off).
    SetServerEnabled {
        /// The server.
        server: String,
        /// On or off.
        enabled: bool,
        /// Its stop's report, or why not.
        reply: RpcReplyPort<Result<ShutdownReport, TreeError>>,
    },
    /// Stop one server quiescently and forget it: its supervisor is not
    /// restarted, its tools and status leave the registry (hot reload).
    RemoveServer {
        /// The server.
        server: String,
        /// Its stop's report, or why not.
        reply: RpcReplyPort<Result<ShutdownReport, TreeError>>,
    },
    /// Stop everything in reverse start order and report (RECO-7).
    Shutdown {
        /// The report.
        reply: RpcReplyPort<ShutdownReport>,
    },
}

/// Messages of the hooks supervisor.
pub enum HooksMsg {
    /// Start one hook run as a temporary child (HOOK-3). Its result goes to
    /// `reply`; dropped unanswered only if the run is stopped (a drain) or
    /// could not start, which the engine reads as a cancelled run.
    Run {
        /// What to run.
        command: super::hooks::run::HookCommand,
        /// The operation's cancellation (the run uses a child token).
        cancel: tokio_util::sync::CancellationToken,
        /// The runtime's disposal: ends the run like a cancellation.
        disposed: tokio_util::sync::CancellationToken,
        /// Where the result goes.
        reply: tokio::sync::oneshot::Sender<super::hooks::codec::RawRun>,
    },
    /// Stop every running hook (their groups are killed and reaped), then
    /// answer; runs still going after `limit` are left to their own kill.
    Drain {
        /// How long to wait.
        limit: Duration,
        /// Answered once every run has stopped.
        reply: RpcReplyPort<()>,
    },
}

/// Messages of the event log.
pub enum EventLogMsg {
    /// Drain, flush and stop; answered when the file is complete.
    Stop {
        /// Answered once flushed.
        reply: RpcReplyPort<()>,
    },
}

/// Why an actor gave no answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// No answer within the deadline.
    #[error("did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The actor is gone (stopped, or it dropped the request).
    #[error("is gone")]
    Gone,
}

/// Why the tree refused a lifecycle request (add a server, switch one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// The runtime is shutting down.
    #[error("the runtime is shutting down")]
    ShuttingDown,
    /// The runtime is turned off (TRUST-1); `adding`: the request added a server.
    #[error("the runtime is turned off (TRUST-1): turn it on {}", if *.adding { "before adding servers" } else { "first" })]
    Off {
        /// Whether a server was being added.
        adding: bool,
    },
    /// The name is taken in the scope (CONN-4).
    #[error("server_name \"{name}\" is already registered in scope {scope}")]
    NameTaken {
        /// The name.
        name: String,
        /// The scope.
        scope: Scope,
    },
    /// No such server in the scope.
    #[error("no such server in scope {scope}")]
    NoSuchServer {
        /// The scope.
        scope: Scope,
    },
    /// The server's configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An actor of the tree could not be started.
    #[error("could not start {what}: {reason}")]
    Start {
        /// What ("scope global", "the server supervisor").
        what: String,
        /// Why.
        reason: String,
    },
    /// An actor of the tree did not answer.
    #[error("the {actor} {why}")]
    NoAnswer {
        /// Which ("server supervisor").
        actor: &'static str,
        /// Why.
        why: AskError,
    },
}
