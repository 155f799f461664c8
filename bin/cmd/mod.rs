//! One module per subcommand of `mcpvisor`; each has a `run`.

pub(crate) mod auth;
pub(crate) mod bench;
pub(crate) mod call;
pub(crate) mod chat;
pub(crate) mod check;
pub(crate) mod conformance;
pub(crate) mod demo;
pub(crate) mod edit;
pub(crate) mod gateway;
pub(crate) mod hooks;
pub(crate) mod import;
pub(crate) mod mods;
pub(crate) mod prompts;
pub(crate) mod resources;
pub(crate) mod status;
pub(crate) mod tools;
