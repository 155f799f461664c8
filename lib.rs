//! mcpvisor: a supervised runtime for MCP servers, built on `ractor` actors.
//!
//! An agent host embeds a [`Runtime`], registers MCP servers (stdio child
//! processes or streamable-HTTP endpoints) in scopes, and calls their tools by
//! public name. Every server runs under its own supervisor with a reconnect
//! budget, a close barrier and idle stop; shutdown is quiescent and reports
//! every process it reaped.
//!
//! # Example
//!
//! This runs as a doc-test: a runtime whose only server cannot start. The
//! failure is a status with a clear error, never a panic, and the shutdown
//! reports what it stopped.
//!
//! ```
//! use mcpvisor::{CallOptions, OutcomeKind, Runtime, Scope, ServerConfig, ServerState};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut server = ServerConfig::stdio("missing", "no-such-mcp-server-xyz", vec![]);
//! server.reconnect.enabled = false;
//! let runtime = Runtime::builder().server(Scope::Global, server).start().await?;
//! let err = runtime.wait_ready(&Scope::Global, "missing", Duration::from_secs(10)).await.unwrap_err();
//! assert!(err.to_string().contains("executable \"no-such-mcp-server-xyz\" not found"));
//! assert_eq!(runtime.status()[0].state, ServerState::Failed);
//! let outcome = runtime.call(&Scope::Global, "mcp__missing__anything", None, CallOptions::default()).await;
//! // The server is known, and failed: the call says so, with its error.
//! assert_eq!(outcome.kind, OutcomeKind::ServerNotReady);
//! assert!(outcome.projection.contains("not found"));
//! let report = runtime.shutdown(Duration::from_secs(20)).await;
//! assert!(report.is_clean());
//! # Ok(()) }
//! ```
//!
//! With a real server (here server-everything through npx), list and call:
//!
//! ```no_run
//! use mcpvisor::{CallOptions, Runtime, Scope, ServerConfig};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // trust = "always": no approver is asked (TRUST-4; the default is "ask").
//! let server = ServerConfig::stdio("everything", "npx", vec!["-y".into(), "@modelcontextprotocol/server-everything".into()])
//!     .trusted();
//! let runtime = Runtime::builder().server(Scope::Global, server).start().await?;
//! runtime.wait_ready(&Scope::Global, "everything", Duration::from_secs(30)).await?;
//! for tool in runtime.tools(&Scope::Global) {
//!     println!("{} ({})", tool.name, tool.raw_name);
//! }
//! let outcome = runtime
//!     .call(&Scope::Global, "mcp__everything__echo", Some(serde_json::json!({"message": "hi"})), CallOptions::default())
//!     .await;
//! println!("{:?}: {}", outcome.kind, outcome.projection);
//! runtime.shutdown(Duration::from_secs(20)).await;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! The modules are private; everything an embedder uses is re-exported at
//! the crate root (below). Inside, the layers only point down:
//! `messages` ← `actors` ← `supervisors` ← `runtime` ← the crate root ← `bin/`.
//!
//! - `messages/`: the vocabulary. Config types, protocol message enums,
//!   events, errors, the ports (traits such as [`SecretStore`],
//!   [`AttachmentStore`], [`Approver`], [`CallPolicy`], [`ToolGuard`]) and
//!   the pure rules on them (naming, catalog validation, projection, hook
//!   dialects). No I/O, no tasks.
//! - `actors/`: one file per actor (connection, tool registry, hook run,
//!   event log), with the transport glue (stdio child processes, streamable
//!   HTTP) beside the actor that owns it.
//! - `supervisors/`: supervision only. The OTP vocabulary on ractor and the
//!   supervisors of the tree.
//! - `runtime/`: the [`Runtime`] facade. Its lifecycle API, the builder, the
//!   call pipeline (`call.rs`, with the result half in `results.rs`), the
//!   resource tools, the policy chain's stages (`policies/`), the hook engine,
//!   and the adapters behind the ports (`stores/`).
//! - `bin/`: the reference binary `mcpvisor` (and the built-in demo server).
//!
//! # The supervision tree
//!
//! ```text
//! Runtime (handle)
//! └── RootSupervisor                 the one root; escalates nothing
//!     ├── EventLog                   tier 0 (when configured): started first, stopped last
//!     ├── HooksSupervisor            tier 1; drained on shutdown
//!     │   └── HookRun                one per running hook; owns its process group
//!     ├── ModHostActor               tier 1 (feature `mods`); drains the JS engines
//!     ├── ScopeSupervisor(scope)     tier 2; one per scope
//!     │   ├── ToolRegistry(scope)    publishes generation-stamped snapshots
//!     │   └── ServerSupervisor(srv)  budget, close barrier, idle stop; 3 restarts / 5 s each
//!     │       └── Connection(gen)    one rmcp session; owns the process group
//!     └── Seat(browser_use|computer_use)  tier 3; one provider each
//!         └── SessionResources       each activation's browser or desktop
//! ```
//!
//! Calls do not pass through actors: a call resolves its tool in the scope's
//! published snapshot and sends the request from the caller's task.

#![warn(missing_docs, rust_2018_idioms, unnameable_types)]
#![deny(unsafe_code)]

// Every Rust example in the README compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("README.md")]
struct ReadmeExamples;

mod actors;
#[cfg(feature = "gateway")]
pub mod gateway;
mod messages;
#[cfg(feature = "mods")]
pub mod mods;
#[cfg(feature = "oauth")]
pub mod oauth;
#[cfg(feature = "browser")]
pub mod providers;
mod runtime;
mod supervisors;

// ===== The public surface =====
//
// Everything an embedder uses is re-exported here, grouped by topic; the
// modules themselves are private, so actor refs, message enums and internal
// fields are not API.

// The runtime and its lifecycle.
pub use messages::tree::{AskError, TreeError};
pub use runtime::{Runtime, RuntimeBuilder, RuntimeError};

// Configuration: validated types, and the TOML layer the binary reads.
pub use messages::config::ChaosSwitches;
pub use messages::config::{
    ConfigError, HttpConfig, OAuthConfig, OAuthGrant, OnDisconnect, OversizedInstructions,
    ReconnectPolicy, Scope, ServerConfig, StdioConfig, TransportConfig,
};
pub use messages::config_file::{
    FileConfig, RawConfigFile, RawEvents, RawHooks, RawModLoad, RawModel, RawMods, RawProvider,
    RawProviders, RawReconnect, RawSecrets, RawServerConfig, parse_config, parse_config_file,
};
pub use messages::transport::{InProcessConnection, InProcessConnector};

// Calls, outcomes and the policy chain.
pub use messages::call::{
    Annotations, CallOptions, CallPolicy, ModelEdit, OUTCOME_META, OutcomeKind, PolicyCall,
    PolicyVerdict, SIDE_EFFECTS_META, SideEffects, ToolDefinition, ToolOutcome,
};
pub use messages::projection::ProjectionPart;

pub use actors::stdio::looks_secret;
pub use messages::import::{
    FoundSecret, HooksFrom, Imported, import_file, import_file_beside, import_servers,
    import_servers_beside,
};
pub use messages::model::{Provider, Usage};
pub use messages::naming::{closest, derive_slug, public_tool_name, validate_server_name};
pub use runtime::turn::{
    DEFAULT_MAX_ROUNDS, ModelRoute, ToolUseRecord, TurnError, TurnEvent, TurnOutcome, TurnRequest,
};
pub use tokio_util::sync::CancellationToken;

// The fuzz targets' entry points (feature `fuzzing`; not API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use runtime::fuzzing;

// Results: limits, budgets, images and where they are saved.
pub use messages::budget::{ResultLimits, TurnBudget};
pub use messages::images::{AdmittedImage, AttachmentStore};
pub use messages::store::StoreError;
pub use runtime::stores::attachments::FileAttachmentStore;

// Provider seats and activations (SEAT-1..10).
pub use messages::seat::{
    ActivationId, Opener, ProviderInfo, SeatError, SeatKind, SeatProvider, SeatStatus,
    SessionResource, SessionsHandle,
};
pub use runtime::Activation;

// Status and events.
pub use messages::status::{HookRunInfo, RuntimeEvent, ServerState, ServerStatus, ShutdownReport};

// Trust and secrets.
pub use messages::approval::{ApprovalRequest, Approver};
pub use messages::trust::{
    Approval, EndpointError, Secret, SecretStore, TrustMode, validate_endpoint,
};
#[cfg(all(feature = "keyring", target_os = "linux"))]
pub use runtime::stores::secrets::KeyringSecretStore;
pub use runtime::stores::secrets::{EnvSecretStore, FileSecretStore, MemorySecretStore};

// Client capabilities a server may use (CONN-11).
pub use messages::capabilities::{
    AcceptSchemaDefaults, ElicitationHandler, ElicitationRequest, ElicitationResponse,
};

// Hooks.
pub use messages::hooks::config::{
    HookEvent, HookFileError, HookGroup, HookHandler, HookSet, command_hash,
};
pub use messages::hooks::engine::{
    HookReport, HookRunRecord, HookSettings, StopState, StopVerdict, ToolGuard,
};
pub use messages::hooks::input::{HookInput, HookSession};
pub use messages::hooks::{Dialect, HookOutcome, Matcher, Merged};
pub use runtime::hooks::{HookEngine, load_hook_file};
