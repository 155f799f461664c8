//! One file per actor, with the transport glue beside the actor that owns it.

pub mod catalog_sync;
pub mod connection;
pub mod event_log;
pub mod hook_run;
pub mod http;
#[cfg(feature = "mods")]
pub mod mod_host;
pub mod process;
pub mod registry;
pub mod sessions;
pub mod spawn;
pub mod stdio;
