//! One file per actor.

pub mod catalog_sync;
pub mod connection;
pub mod event_log;
pub mod hook_run;
#[cfg(feature = "mods")]
pub mod mod_host;
pub mod registry;
pub mod sessions;
