//! One file per actor, with the transport glue beside the actor that owns it.

pub mod attachments;
pub mod connection;
pub mod event_log;
pub mod hook_run;
pub mod http;
pub mod registry;
pub mod secrets;
pub mod stdio;
