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
//! the crate root (below). Each room names only the rooms below it, and the
//! test `layers::every_room_names_only_the_rooms_below_it` reads the
//! sources to keep it so (ADR 0014). Bottom to top:
//!
//! - `messages/` (L0): the vocabulary. Config types (`config/`, with the
//!   TOML layer in `config/file.rs`), protocol message enums, events,
//!   errors, the ports (traits such as [`SecretStore`],
//!   [`AttachmentStore`], [`Approver`], [`CallPolicy`], [`ToolGuard`]) and
//!   the pure rules on them (naming, catalog validation, projection, hook
//!   dialects). No I/O, no tasks, no environment.
//! - `process/` (L1): child processes: a process group from spawn to reap,
//!   signals, the tag sweep. Every process `unsafe` of the library.
//! - `oauth/` (L1, feature `oauth`): OAuth 2.1 on rmcp's `auth`, and the one
//!   client every OAuth request dials through.
//! - `import/` (L1): other tools' configs to mcpvisor TOML (`mcpvisor
//!   import`), pure, in the library for its property tests and fuzz target.
//! - `transport/` (L2): the MCP wire. rmcp's client handler and handshake,
//!   the catalog fetch, liveness pings, the stdio transport (the child's
//!   pipes, the line guard, the close sequence), streamable HTTP, a
//!   connection's diagnostics, the transports still closing.
//! - `mods/`, `providers/` (L2): JS mods; the seat providers.
//! - `actors/` (L3): one file per actor (connection, catalog sync, tool
//!   registry, hook run, event log, session resources, mod host).
//! - `supervisors/` (L4): supervision only. The OTP vocabulary on ractor and
//!   the supervisors of the tree.
//! - `runtime/` (L5): the [`Runtime`] facade. Its lifecycle API, the
//!   builder, the call pipeline (`call.rs`, with the result half in
//!   `results.rs`), the resource tools, the policy chain's stages
//!   (`policies/`), the hook engine, the tool loop with its model wire
//!   codecs (`turn/`, pure functions in `turn/model/`), and the adapters
//!   behind the ports (`stores/`).
//! - `gateway/` (L6, feature `gateway`): the runtime served as one MCP
//!   server, through the crate root's names only.
//! - `bin/`: the reference binary `mcpvisor` (and the built-in demo server).
//!
//! # Compatibility
//!
//! The events, states, errors, outcomes and reports an embedder reads
//! ([`RuntimeEvent`], [`ServerState`], [`OutcomeKind`], [`SideEffects`],
//! [`RuntimeError`], [`TreeError`], [`AskError`], [`TurnEvent`],
//! [`TurnError`], [`SeatError`], [`StoreError`], [`EndpointError`],
//! [`TrustDecision`], [`HookOutcome`], [`HookDecision`], [`MatcherError`],
//! [`StopVerdict`], [`ServerStatus`], [`ShutdownReport`], [`ToolOutcome`],
//! [`TurnOutcome`], [`SeatStatus`], [`HookReport`]; with feature `oauth`,
//! `oauth::OAuthError` and `oauth::DialError`) are `#[non_exhaustive]`: a
//! new variant or field is not a breaking change, so a `match` on them needs a `_`
//! arm, and a report an embedder returns (a [`SessionResource`]'s close)
//! is built from `Default` and its public fields set.
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
mod import;
mod messages;
#[cfg(feature = "mods")]
pub mod mods;
#[cfg(feature = "oauth")]
pub mod oauth;
mod process;
#[cfg(feature = "browser")]
pub mod providers;
mod runtime;
mod supervisors;
mod transport;

// ===== The public surface =====
//
// Everything an embedder uses is re-exported here, grouped by topic; the
// modules themselves are private, so actor refs, message enums and internal
// fields are not API.

// The runtime and its lifecycle.
pub use messages::tree::{AskError, TreeError};
#[cfg(feature = "otlp")]
pub use runtime::otel::OtlpExport;
pub use runtime::{Runtime, RuntimeBuilder, RuntimeError};

// Configuration: validated types, and the TOML layer the binary reads.
#[cfg(feature = "chaos")]
pub use messages::config::ChaosSwitches;
pub use messages::config::file::{
    FileConfig, RawConfigFile, RawEvents, RawHooks, RawModLoad, RawModel, RawMods, RawProvider,
    RawProviders, RawReconnect, RawSecrets, RawServerConfig, parse_config_at,
};
pub use messages::config::{
    ConfigError, HttpConfig, OAuthConfig, OAuthGrant, OnDisconnect, OversizedInstructions,
    ProtocolChoice, ReconnectPolicy, Scope, ServerConfig, StdioConfig, TransportConfig,
};
pub use messages::transport::{InProcessConnection, InProcessConnector};
pub use runtime::config::{parse_config, parse_config_file};

// Calls, outcomes and the policy chain.
pub use messages::call::{
    Annotations, CallOptions, CallPolicy, ModelEdit, OUTCOME_META, OutcomeKind, PolicyCall,
    PolicyVerdict, ProgressSink, RpcErrorReply, SIDE_EFFECTS_META, SideEffects, ToolDefinition,
    ToolOutcome,
};
pub use messages::projection::ProjectionPart;
pub use messages::registry::ProgressNote;

pub use import::{
    FoundSecret, HooksFrom, ImportError, Imported, import_file, import_file_beside, import_servers,
    import_servers_beside,
};
pub use messages::naming::{
    InvalidServerName, closest, derive_slug, public_tool_name, validate_server_name,
};
pub use messages::provider::Provider;
pub use messages::trace::TraceContext;
pub use messages::trust::{looks_secret, secret_reference};
pub use runtime::turn::model::Usage;
pub use runtime::turn::{
    DEFAULT_DEFER_THRESHOLD, DEFAULT_MAX_ROUNDS, DEFAULT_PARALLEL_CALLS, Defer, ModelRoute,
    ToolSearch, ToolUseRecord, TurnError, TurnEvent, TurnOutcome, TurnRequest,
};
pub use tokio_util::sync::CancellationToken;
pub use transport::stdio::package_runner_of;

// The fuzz targets' entry points (feature `fuzzing`; not API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use runtime::fuzzing;

// Results: limits, budgets, images and where they are saved.
pub use messages::budget::{ResultLimits, TurnBudget, apply_budget};
pub use messages::images::{AdmittedImage, AttachmentStore};
pub use messages::resources::ResourceOp;
pub use messages::round::{RoundGate, RoundSlot};
pub use messages::store::StoreError;
pub use runtime::stores::attachments::FileAttachmentStore;

// Provider seats and activations (SEAT-1..10).
pub use messages::seat::{
    ActivationId, Opener, ProviderInfo, SeatError, SeatKind, SeatProvider, SeatStatus,
    SessionResource, SessionsHandle,
};
pub use runtime::Activation;

// Status and events.
pub use messages::status::{
    CancelledTask, HookRunInfo, RuntimeEvent, ServerState, ServerStatus, ShutdownReport,
};

// Trust and secrets.
pub use messages::approval::{ApprovalRequest, Approver};
pub use messages::trust::{
    Approval, EndpointError, Secret, SecretStore, StoreLock, TrustDecision, TrustMode,
    validate_endpoint,
};
#[cfg(all(feature = "keyring", target_os = "linux"))]
pub use runtime::stores::secrets::KeyringSecretStore;
pub use runtime::stores::secrets::{EnvSecretStore, FileSecretStore, MemorySecretStore};

// Client capabilities a server may use (CONN-11).
pub use messages::capabilities::{
    AcceptSchemaDefaults, CallerRelay, ElicitationHandler, ElicitationRequest, ElicitationResponse,
    Offers, RELAY_KEY, RelayAsk, RelayError,
};

// Hooks.
pub use messages::hooks::config::{
    HookEvent, HookFileError, HookGroup, HookHandler, HookSet, command_hash,
};
pub use messages::hooks::engine::{
    HookReport, HookRunRecord, HookSettings, StopState, StopVerdict, ToolGuard,
};
pub use messages::hooks::input::{HookInput, HookSession};
pub use messages::hooks::{Dialect, HookDecision, HookOutcome, Matcher, MatcherError, Merged};
pub use runtime::hooks::{HookEngine, load_hook_file};

/// The layering test: the rooms of `# Layout` and the arrows between them,
/// read from the sources (ADR 0014). A `crate::<room>` path in a room's
/// product code (tests are not read) that its row does not allow fails
/// it, so the layers cannot drift unseen again. Paths to the crate root's
/// re-exports (`crate::Runtime`) are every room's.
#[cfg(test)]
mod layers {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// Each room, and the rooms its code may name.
    const ARROWS: &[(&str, &[&str])] = &[
        ("messages", &[]),
        ("process", &["messages"]),
        ("oauth", &["messages", "process"]),
        ("transport", &["messages", "process", "oauth"]),
        ("import", &["messages"]),
        ("mods", &["messages", "process"]),
        ("providers", &["messages", "process"]),
        ("actors", &["messages", "process", "transport", "mods"]),
        (
            "supervisors",
            &["messages", "process", "transport", "actors", "mods"],
        ),
        (
            "runtime",
            &[
                "messages",
                "process",
                "oauth",
                "transport",
                "import",
                "mods",
                "providers",
                "actors",
                "supervisors",
            ],
        ),
        ("gateway", &[]),
    ];

    /// The rooms named by `crate::` paths in `code`, comments and test
    /// modules left out; grouped imports (`crate::{a::X, b::Y}`) give
    /// each of their first segments.
    fn named_rooms(code: &str) -> Vec<String> {
        let product = code.split("#[cfg(test)]").next().unwrap_or(code);
        let mut out = Vec::new();
        for line in product.lines() {
            let line = line.split("//").next().unwrap_or("");
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let seg = item.trim().split("::").next().unwrap_or("");
                        out.push(seg.to_owned());
                    }
                } else {
                    let seg: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    out.push(seg);
                }
            }
        }
        out
    }

    /// Every `.rs` file under `dir`.
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// A file that holds tests only: a test module of its own (`tests.rs`,
    /// `props.rs`, `*_props.rs`, `*_tests.rs`) or the property-test
    /// generators.
    fn is_test_file(name: &str) -> bool {
        let file = name.rsplit('/').next().unwrap_or(name);
        file.ends_with("tests.rs") || file.ends_with("props.rs") || file == "prop_gen.rs"
    }

    /// The arrows of `room`'s files that its row forbids.
    fn forbidden(room: &str, files: &[(String, String)]) -> Vec<String> {
        let rooms: Vec<&str> = ARROWS.iter().map(|(r, _)| *r).collect();
        let allowed = ARROWS
            .iter()
            .find(|(r, _)| *r == room)
            .map(|(_, a)| *a)
            .unwrap_or(&[]);
        let mut bad = Vec::new();
        for (name, code) in files {
            // Tests beside the code, and the property-test generators.
            if is_test_file(name) {
                continue;
            }
            for target in named_rooms(code) {
                if target != room
                    && rooms.contains(&target.as_str())
                    && !allowed.contains(&target.as_str())
                {
                    bad.push(format!("{name} → crate::{target}"));
                }
            }
        }
        bad.sort();
        bad.dedup();
        bad
    }

    #[test]
    fn every_room_names_only_the_rooms_below_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut bad = Vec::new();
        for (room, _) in ARROWS {
            let mut paths = Vec::new();
            sources(&root.join(room), &mut paths);
            let files: Vec<(String, String)> = paths
                .iter()
                .map(|p| {
                    let name = p.strip_prefix(root).unwrap().display().to_string();
                    (name, std::fs::read_to_string(p).unwrap())
                })
                .collect();
            bad.extend(forbidden(room, &files));
        }
        assert!(
            bad.is_empty(),
            "arrows the layers forbid:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn the_mcp_wire_is_spoken_in_transport_only() {
        // ADR 0014: rmcp's client API (a request sent, a request built, the
        // session's handle taken out of an `McpClient`) has one home.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut bad = Vec::new();
        for (room, _) in ARROWS.iter().filter(|(r, _)| *r != "transport") {
            let mut paths = Vec::new();
            sources(&root.join(room), &mut paths);
            for p in paths {
                if is_test_file(&p.display().to_string()) {
                    continue;
                }
                let code = std::fs::read_to_string(&p).unwrap();
                let product = code.split("#[cfg(test)]").next().unwrap_or("");
                for needle in ["send_request", "ClientRequest::", ".peer()"] {
                    if product
                        .lines()
                        .any(|l| l.split("//").next().unwrap_or("").contains(needle))
                    {
                        bad.push(format!("{}: {needle}", p.display()));
                    }
                }
            }
        }
        assert!(
            bad.is_empty(),
            "the MCP wire outside transport/:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn the_facade_asks_the_tree_through_typed_handles_only() {
        // ADR 0014: `runtime/` builds no actor message; each request is a
        // method of a handle in `supervisors/` (RootHandle, ServerHandle,
        // SeatHandle, HooksHandle).
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = Vec::new();
        sources(&root.join("runtime"), &mut paths);
        let mut bad = Vec::new();
        for p in paths {
            if is_test_file(&p.display().to_string()) {
                continue;
            }
            let code = std::fs::read_to_string(&p).unwrap();
            let product = code.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in product.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("Msg::") {
                    bad.push(format!("{}:{}: {}", p.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "actor messages built in runtime/:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn every_directory_of_library_code_is_a_room() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let rooms: Vec<&str> = ARROWS.iter().map(|(r, _)| *r).collect();
        let outside = ["bin", "chaos-tests", "fuzz", "target", "docs"];
        for entry in std::fs::read_dir(root).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.path().is_dir() || name.starts_with('.') || outside.contains(&name.as_str()) {
                continue;
            }
            let mut paths = Vec::new();
            sources(&entry.path(), &mut paths);
            assert!(
                paths.is_empty() || rooms.contains(&name.as_str()),
                "{name}/ holds Rust code but is no room of the layers"
            );
        }
    }

    #[test]
    fn the_check_fails_on_an_upward_arrow() {
        // What messages/import.rs did before the vocabulary was made pure
        // again: a call into the actors' layer.
        let files = vec![(
            "messages/import.rs".to_owned(),
            "use crate::messages::naming;\nlet s = crate::actors::stdio::looks_secret(k);\n\
             use crate::{Runtime, transport::stdio};\n// crate::supervisors in a comment\n\
             #[cfg(test)]\nmod tests { use crate::runtime::X; }\n"
                .to_owned(),
        )];
        assert_eq!(
            forbidden("messages", &files),
            [
                "messages/import.rs → crate::actors",
                "messages/import.rs → crate::transport"
            ]
        );
    }
}
