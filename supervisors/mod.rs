//! Supervision only: the OTP vocabulary on ractor and the supervisors of the
//! tree (root, scope, server, hook runs).

pub mod hooks;
pub mod root;
pub mod scope;
pub mod seat;
pub mod server;
pub mod spec;
