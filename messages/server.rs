//! Messages of the per-server actors: `ServerSupervisor` and `Connection`.
//!
//! The reconnect budget, the stability window, the close barrier and the
//! quiescent shutdown are all expressed as these messages (RECO-1..7).

use ractor::RpcReplyPort;

use super::status::ShutdownReport;

/// A process whose close was not confirmed (RECO-3): how to learn that it
/// was reaped after all, and how to SIGKILL its group again. The kill is
/// skipped once the leader was reaped, so it can never reach another process
/// that reused the id.
#[derive(Clone)]
pub struct Unreaped {
    /// Turns `true` once the leader is reaped.
    pub reaped: tokio::sync::watch::Receiver<bool>,
    /// SIGKILL the group again, unless the leader was reaped.
    pub kill_again: std::sync::Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Unreaped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unreaped")
            .field("reaped", &*self.reaped.borrow())
            .finish_non_exhaustive()
    }
}

/// What a connection learned from `initialize`.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// `serverInfo` as "name version".
    pub server_info: Option<String>,
    /// Attributed instructions text (RES-5), within the byte cap.
    pub instructions: Option<String>,
    /// Whether the server declared the `resources` capability (RES-1).
    pub has_resources: bool,
    /// Whether the server declared the `prompts` capability.
    pub has_prompts: bool,
    /// Child pid (stdio).
    pub pid: Option<u32>,
}

/// An MCP protocol era (ERA-1): the session era (`initialize`,
/// `Mcp-Session-Id`, up to 2025-11-25) or the stateless era (2026-07-28 and
/// later: `server/discover`, per-request `_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// 2026-07-28 and later.
    Stateless,
    /// 2025-11-25 and earlier.
    #[default]
    Session,
}

impl Era {
    /// The era of a protocol version string (dates compare as text).
    pub fn of(version: &str) -> Self {
        if version >= "2026-07-28" {
            Self::Stateless
        } else {
            Self::Session
        }
    }
}

impl ConnInfo {
    /// The era the negotiated version belongs to (ERA-1).
    pub fn era(&self) -> Era {
        Era::of(&self.protocol_version)
    }
}

/// Messages of the `ServerSupervisor` actor.
pub enum ServerSupervisorMsg {
    /// Connection `conn_gen` finished its handshake and first catalog fetch.
    ConnUp {
        /// Connection generation.
        conn_gen: u64,
        /// The session's client.
        client: super::registry::McpClient,
        /// Handshake facts.
        info: ConnInfo,
        /// Every `tools/list` page (no entry without the tools capability).
        catalog: super::catalog::ToolPages,
    },
    /// The transport of connection `conn_gen` is closed; `reaped` = the process was
    /// confirmed gone (RECO-3).
    ConnectionEnded {
        /// Connection generation.
        conn_gen: u64,
        /// Close confirmed.
        reaped: bool,
        /// The reaped pid (stdio).
        pid: Option<u32>,
        /// When not confirmed and a process exists: how the supervisor can
        /// confirm it later, or kill it again (RECO-3).
        reaped_later: Option<Unreaped>,
        /// Processes that had left the server's process group (`setsid`),
        /// found by its tag and SIGKILLed with the close (RECO-7).
        escaped: Vec<u32>,
    },
    /// `notifications/tools/list_changed` from connection `conn_gen` (SYNC-5).
    ToolsListChanged {
        /// Connection generation.
        conn_gen: u64,
    },
    /// The quiet period before a follow-up sync of connection `conn_gen` may
    /// be over (SYNC-5's debounce).
    ResyncDue {
        /// Connection generation.
        conn_gen: u64,
    },
    /// A catalog re-sync of connection `conn_gen` finished phase 1 (SYNC-3):
    /// from the `CatalogSync` actor number `n`.
    SyncDone {
        /// Connection generation.
        conn_gen: u64,
        /// The sync's number: only the one running now counts (SYNC-6).
        n: u64,
        /// Every page, or why the fetch failed.
        result: Result<super::catalog::ToolPages, String>,
    },
    /// The tool list armed as `arm` is past the freshness its server gave
    /// (`ttlMs`): fetch it again, as for a list change (ERA-4).
    CatalogExpired {
        /// Connection generation.
        conn_gen: u64,
        /// Which arming: only the latest counts.
        arm: u64,
    },
    /// The backoff timer for attempt `attempt` fired (RECO-1).
    Reconnect {
        /// 1-based attempt.
        attempt: u32,
    },
    /// The close barrier's deadline for connection `conn_gen` (RECO-3).
    CloseDeadline {
        /// Connection generation.
        conn_gen: u64,
    },
    /// Check the idle timer (RECO-6).
    IdleCheck,
    /// A call found the server idle-stopped: start it and answer when ready (RECO-6).
    Wake {
        /// Ok when ready, or the error.
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// Explicit restart (RECO-4): resets the budget and starts a fresh connection.
    Restart {
        /// Answered once the restart began, or with why it was refused.
        reply: RpcReplyPort<Result<(), String>>,
    },
    /// Turn the server off (quiescently, like a shutdown, but the supervisor
    /// stays; no process, no tools) or on again (TRUST-1).
    SetEnabled {
        /// On or off.
        enabled: bool,
        /// The quiescent stop's report (empty when turning on).
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// Stop everything and report (RECO-7).
    Shutdown {
        /// The report.
        reply: RpcReplyPort<ShutdownReport>,
    },
    /// The shutdown's deadline.
    ShutdownDeadline,
    /// Test-only (feature `chaos`): the handler fails, as a bug would, so the
    /// scope's restart of a failed server supervisor can be exercised.
    #[cfg(feature = "chaos")]
    FailForChaos,
}

/// The facade's side of a server supervisor: every request the runtime
/// makes of it is a typed method (`supervisors/server/handle.rs`), so no
/// [`ServerSupervisorMsg`] is built outside the tree.
#[derive(Debug, Clone)]
pub struct ServerHandle {
    pub(crate) actor: ractor::ActorRef<ServerSupervisorMsg>,
}
