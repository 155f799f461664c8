//! The JS mods host's protocol (its actor: `actors/mod_host.rs`).

use ractor::RpcReplyPort;

use super::status::ShutdownReport;

/// Messages of the mod host's actor.
pub enum ModsMsg {
    /// The runtime's shutdown: let the in-flight chain finish, then drop
    /// the engines, then stop.
    Drain {
        /// Empty, or what could not be confirmed.
        reply: RpcReplyPort<ShutdownReport>,
    },
}
