//! The vocabulary: configuration, messages, events, errors, and the pure rules
//! on them. No I/O and no tasks live here.

pub mod approval;
pub mod budget;
pub mod call;
pub mod capabilities;
pub mod catalog;
pub mod config;
pub mod hooks;
pub mod images;
#[cfg(feature = "mods")]
pub mod mods;
pub mod naming;
pub mod projection;
#[cfg(test)]
pub(crate) mod prop_gen;
pub mod provider;
pub mod registry;
pub mod resources;
pub mod round;
pub mod schema;
pub mod seat;
pub mod server;
pub mod status;
pub mod store;
pub mod trace;
pub mod transport;
pub mod tree;
pub mod trust;
