//! The MCP wire: everything between the runtime and a server's bytes. The
//! stdio transport (the child's pipes, the line guard, the close
//! sequence), the streamable-HTTP transport, a connection's diagnostics,
//! and the transports of a server still closing. Below `actors/`: the
//! connection actor owns one of these, the supervisors keep what outlives
//! it.

pub mod client;
pub mod diagnostics;
#[cfg(feature = "oauth")]
mod dpop;
mod error;
pub mod http;
pub mod open;
pub mod opening;
pub mod stdio;

pub use error::{HttpSetupError, WireError};
