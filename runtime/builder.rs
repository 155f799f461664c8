//! `RuntimeBuilder`: what a runtime is started with.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::messages::budget::ResultLimits;
use crate::messages::call::CallPolicy;
use crate::messages::capabilities::{ClientHandlers, ElicitationHandler};
use crate::messages::config::{Scope, ServerConfig};
use crate::messages::images::AttachmentStore;
use crate::supervisors::root::{RootArgs, RootSupervisor};

use super::{DEFAULT_SHUTDOWN_DEADLINE, Inner, Runtime, RuntimeError};

/// Builds a [`Runtime`].
#[derive(Default)]
pub struct RuntimeBuilder {
    servers: Vec<(Scope, ServerConfig)>,
    policies: Vec<Arc<dyn CallPolicy>>,
    handlers: ClientHandlers,
    attachments: Option<Arc<dyn AttachmentStore>>,
    limits: ResultLimits,
    event_log: Option<std::path::PathBuf>,
    approver: Option<Arc<dyn crate::messages::approval::Approver>>,
    hooks: crate::messages::hooks::engine::HookSettings,
    approval_timeout: Option<Duration>,
    chaos: crate::messages::config::ChaosSwitches,
    seed: Option<u64>,
    providers: Vec<Arc<dyn crate::messages::seat::SeatProvider>>,
    activate: Vec<Scope>,
    #[cfg(feature = "mods")]
    mods: Option<crate::mods::ModSettings>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("servers", &self.servers)
            .field("policies", &self.policies.len())
            .finish()
    }
}

impl RuntimeBuilder {
    /// Register a server in a scope at start.
    pub fn server(mut self, scope: Scope, config: ServerConfig) -> Self {
        self.servers.push((scope, config));
        self
    }

    /// Put a provider in its seat at start (SEAT-1); a second provider for
    /// the same seat makes `start` fail with the seat's error.
    pub fn provider(mut self, provider: Arc<dyn crate::messages::seat::SeatProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Open an activation in `scope` at start, held by the runtime until
    /// its shutdown (a one-process-one-activation host, like the CLI). An
    /// embedder with several agents opens its own with
    /// [`Runtime::open_activation`].
    pub fn activate(mut self, scope: Scope) -> Self {
        self.activate.push(scope);
        self
    }

    /// Load these JS mods (MOD-1): the turn raises `turn.start`,
    /// `prompt.submit` and `turn.complete`, and every call `tool.call`.
    #[cfg(feature = "mods")]
    pub fn mods(mut self, settings: crate::mods::ModSettings) -> Self {
        self.mods = Some(settings);
        self
    }

    /// Append a policy to the chain every call passes through (CALL-1).
    pub fn policy(mut self, policy: Arc<dyn CallPolicy>) -> Self {
        self.policies.push(policy);
        self
    }

    /// How long the approver may take before the answer is Don't Allow
    /// (TRUST-5; default 300 s).
    pub fn approval_timeout(mut self, limit: Duration) -> Self {
        self.approval_timeout = Some(limit);
        self
    }

    /// Command hooks of either or both dialects (HOOK-4): the files are read
    /// once, in `start`. PreToolUse / PostToolUse run for every call, right
    /// after the trust gate; the other events are `Runtime::hooks`.
    pub fn hooks(mut self, settings: crate::messages::hooks::engine::HookSettings) -> Self {
        self.hooks = settings;
        self
    }

    /// Append a native typed guard (HOOK-5) to the policy chain: unlike a
    /// command hook, its error or panic denies the call.
    pub fn guard(mut self, guard: Arc<dyn crate::messages::hooks::engine::ToolGuard>) -> Self {
        self.policies
            .push(Arc::new(crate::runtime::policies::hooks::GuardPolicy(
                guard,
            )));
        self
    }

    /// Where admitted images and spilled results are saved (CALL-7, CALL-8).
    /// Without a store, images are projected as placeholders.
    pub fn attachments(mut self, store: Arc<dyn AttachmentStore>) -> Self {
        self.attachments = Some(store);
        self
    }

    /// The approver asked when a server's trust is `ask` and the chat has no
    /// grant (TRUST-5). Without one, `ask` is Don't Allow.
    pub fn approver(mut self, approver: Arc<dyn crate::messages::approval::Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Append every runtime event as one JSON line to `path` (OBS-2): server
    /// states, catalog generations, calls and every model-visible text.
    pub fn event_log(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.event_log = Some(path.into());
        self
    }

    /// Byte limits of projections and canonical values (LOOP-3, CALL-8).
    pub fn result_limits(mut self, limits: ResultLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Where `env_secrets` and `header_secrets` values come from (TRUST-2).
    /// Without one, a secret name is read as an environment variable name.
    pub fn secrets(mut self, store: Arc<dyn crate::messages::trust::SecretStore>) -> Self {
        self.handlers.secrets = Some(store);
        self
    }

    /// Opt in to elicitation (CONN-11): the capability is declared in
    /// `initialize` and server requests go to `handler`. Without it they get -32601.
    pub fn elicitation(mut self, handler: Arc<dyn ElicitationHandler>) -> Self {
        self.handlers.elicitation = Some(handler);
        self
    }

    /// Declare elicitation, sampling and roots on every connection, so that
    /// a server's requests reach the client a call is made for
    /// ([`CallOptions::relay`](crate::CallOptions::relay), GW-2). For a
    /// runtime that serves MCP clients (the gateway); a request that comes
    /// with no relaying call under way gets the embedder's elicitation
    /// handler, or -32601.
    pub fn relay_client_requests(mut self) -> Self {
        self.handlers.relays = true;
        self
    }

    /// Seed every random choice of the runtime (reconnect jitter, slug
    /// suffixes) from `seed`, for reproducible runs (the chaos runner's
    /// seeds). Without one, a random seed is drawn at start.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Test-only: let a replacement connection start before the previous one
    /// confirmed its close. Exists so the chaos runner can show that its
    /// `no_overlap` invariant detects a broken close barrier.
    #[cfg(feature = "chaos")]
    pub fn skip_close_barrier_for_chaos(mut self) -> Self {
        self.chaos.skip_close_barrier = true;
        self
    }

    /// Test-only: start processes without the runtime's `MCPVISOR_TAG`, so
    /// a process that leaves its group is found neither when its connection
    /// closes nor at shutdown. Exists so the chaos runner can show that its
    /// `no_orphans` invariant detects an escaped process.
    #[cfg(feature = "chaos")]
    pub fn skip_escape_sweep_for_chaos(mut self) -> Self {
        self.chaos.untagged_children = true;
        self
    }

    /// Test-only: the other break switches of [`crate::ChaosSwitches`], each
    /// so that the chaos runner can show one invariant fails without it.
    #[cfg(feature = "chaos")]
    pub fn break_for_chaos(mut self, switches: crate::ChaosSwitches) -> Self {
        let keep = (
            self.chaos.skip_close_barrier(),
            self.chaos.untagged_children(),
        );
        self.chaos = switches;
        self.chaos.skip_close_barrier |= keep.0;
        self.chaos.untagged_children |= keep.1;
        self
    }

    /// Start the tree and every configured server. Servers with
    /// `fail_on_startup_error` are awaited; if one fails, everything is shut
    /// down again and its error returned (CONN-12).
    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let (events, _) = broadcast::channel(4096);
        let approval_timeout = self
            .approval_timeout
            .unwrap_or(crate::runtime::policies::trust::DEFAULT_APPROVAL_TIMEOUT);
        let trust = Arc::new(crate::runtime::policies::trust::TrustGate::new(
            self.approver.clone(),
            approval_timeout,
            events.clone(),
        ));
        let trust_gate: Arc<dyn CallPolicy> = trust.clone();
        // Without a store of the embedder's, secret names are environment
        // variable names (TRUST-2).
        let secrets: Arc<dyn crate::messages::trust::SecretStore> = self
            .handlers
            .secrets
            .clone()
            .unwrap_or_else(|| Arc::new(crate::runtime::stores::secrets::EnvSecretStore));
        // RECO-7: every process this runtime starts carries it (TAG_VAR).
        let tag = format!("{:016x}", rand::random::<u64>());
        #[cfg(feature = "mods")]
        let mods = match self.mods {
            Some(mut settings) => {
                // RECO-7: what mods spawn carries the runtime's tag.
                settings
                    .process_tag
                    .get_or_insert_with(|| format!("{tag}/mods"));
                Some(Arc::new(
                    crate::mods::ModHost::start(settings)
                        .map_err(|e| RuntimeError::Start(e.to_string()))?,
                ))
            }
            None => None,
        };
        let args = RootArgs {
            events: events.clone(),
            chaos: self.chaos,
            handlers: ClientHandlers {
                secrets: Some(secrets.clone()),
                ..self.handlers
            },
            event_log: self.event_log,
            seed: self.seed.unwrap_or_else(rand::random),
            #[cfg(feature = "mods")]
            mods: mods.clone(),
        };
        let (root, task) = RootSupervisor::start(args)
            .await
            .map_err(|e| RuntimeError::Start(e.to_string()))?;
        let hooks_supervisor = match root.hooks_supervisor().await {
            Ok(h) => h,
            Err(e) => {
                root.kill();
                return Err(RuntimeError::Unavailable {
                    actor: "root supervisor",
                    why: e,
                });
            }
        };
        let seats = match root.seats().await {
            Ok(s) => s,
            Err(e) => {
                root.kill();
                return Err(RuntimeError::Unavailable {
                    actor: "root supervisor",
                    why: e,
                });
            }
        };
        let hooks = Arc::new(crate::runtime::hooks::HookEngine::start(
            self.hooks,
            hooks_supervisor,
            events.clone(),
            &tag,
        ));
        let hooks_policy: Option<Arc<dyn CallPolicy>> = (hooks
            .has(crate::messages::hooks::config::HookEvent::PreToolUse)
            || hooks.has(crate::messages::hooks::config::HookEvent::PostToolUse)
            || hooks.has(crate::messages::hooks::config::HookEvent::PostToolUseFailure))
        .then(|| {
            Arc::new(crate::runtime::policies::hooks::HooksPolicy {
                engine: hooks.clone(),
                approver: self.approver.clone(),
                approval_timeout,
            }) as Arc<dyn CallPolicy>
        });
        #[allow(unused_mut)]
        let mut policies = self.policies;
        // `tool.call` (MOD-2): a link of the chain, when a mod listens.
        #[cfg(feature = "mods")]
        if let Some(host) = &mods {
            let h = host.clone();
            let listens = tokio::task::spawn_blocking(move || {
                h.list().0.iter().any(|r| r.event == "tool.call")
            })
            .await
            .unwrap_or(false);
            if listens {
                policies.push(Arc::new(crate::runtime::policies::mods::ModsPolicy {
                    host: host.clone(),
                }));
            }
        }
        let runtime = Runtime {
            inner: Arc::new(Inner {
                root,
                root_task: Mutex::new(Some(task)),
                scopes: RwLock::new(HashMap::new()),
                events,
                call_ids: std::sync::atomic::AtomicU64::new(1),
                trust_gate,
                trust,
                hooks,
                hooks_policy,
                policies,
                attachments: self.attachments,
                limits: self.limits,
                tag,
                chaos: self.chaos,
                secrets,
                seats,
                activations: Mutex::new(HashMap::new()),
                activation_ids: std::sync::atomic::AtomicU64::new(1),
                held_activations: Mutex::new(Vec::new()),
                #[cfg(feature = "mods")]
                mods,
                shut_down: std::sync::atomic::AtomicBool::new(false),
                tasks: Default::default(),
            }),
        };
        // `callTool` (MOD-6): through this runtime's call pipeline, held
        // weakly (the runtime owns the mod host, not the other way round).
        #[cfg(feature = "mods")]
        if let Some(host) = &runtime.inner.mods {
            host.set_caller(runtime.mod_caller());
        }
        for (scope, config) in self.servers {
            if let Err(e) = runtime.add_server(scope, config).await {
                runtime.shutdown(DEFAULT_SHUTDOWN_DEADLINE).await;
                return Err(e);
            }
        }
        for provider in self.providers {
            if let Err(e) = runtime.register_provider(provider).await {
                runtime.shutdown(DEFAULT_SHUTDOWN_DEADLINE).await;
                return Err(e);
            }
        }
        for scope in self.activate {
            match runtime.open_activation(scope).await {
                Ok(a) => {
                    if let Ok(mut held) = runtime.inner.held_activations.lock() {
                        held.push(a);
                    }
                }
                Err(e) => {
                    runtime.shutdown(DEFAULT_SHUTDOWN_DEADLINE).await;
                    return Err(e);
                }
            }
        }
        Ok(runtime)
    }
}
