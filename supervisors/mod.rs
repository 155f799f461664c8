//! OTP-style supervision on ractor, the supervision tree, and the `Runtime` facade.

pub mod hooks;
pub mod results;
pub mod root;
pub mod runtime;
pub mod scope;
pub mod server;
pub mod spec;
pub mod trust;
