//! The real-process integration tests, linked into one test binary.
//!
//! Each module was once a test binary of its own. Every binary links the
//! whole runtime (rmcp, Chromium's protocol, QuickJS), about 90 MB apiece on
//! disk and a link step apiece; one binary keeps a clean CI checkout's
//! target directory and its build time small (ADR 0010). Run one module with
//! `cargo test -p mcpvisor-chaos --test all -- browser::`.
//!
//! `obs_spans` stays apart: it installs the global `tracing` subscriber.

mod browser;
mod chaos_runner;
mod cli;
mod computer;
mod eras;
mod everything;
mod fault_server;
mod gateway;
mod gateway_conformance;
mod hooks;
mod hostile_timing;
mod http_errors;
mod inspector;
mod mods;
mod oauth;
mod replicas;
mod results;
mod seats;
mod secrets;
mod tasks;
mod trust;
mod turn;
