//! The stages of the policy chain every call passes (CALL-1), in order: the
//! trust gate, the hook bridges, the native guards; embedders add their own
//! `CallPolicy`s after these.

pub mod hooks;
#[cfg(feature = "mods")]
pub mod mods;
pub mod trust;
