//! Setting a run up: the hook files its faults install, the runtime, the
//! servers it supervises (stdio, or a runner-owned HTTP fault-server), and the
//! observers that watch them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use futures::future::BoxFuture;
use mcpvisor::{
    Dialect, HookSettings, ReconnectPolicy, Runtime, Scope, Secret, SecretStore, ServerConfig,
    ServerState, StdioConfig, StoreError, TransportConfig,
};
use serde_json::{Value, json};

use super::fault::{FaultHook, SECRET_ENV};
use super::observe::{Recorder, Sampler};
use super::run::{CHAOS_TAG, Observers, Run, RunIds, RunOptions};
use super::scenario::Scenario;
use super::workload::settle;
use crate::{
    HttpFaultServer, fault_server_config, fault_server_path, unique_temp_path, wait_for_status,
};

/// The reconnect policy every server of a run gets.
pub(super) fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        enabled: true,
        // Delays well above what a restart costs without any backoff
        // (about 10–50 ms from a crash to the next start), so that
        // budget_respected tells the two apart.
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(400),
        max_attempts: 3,
        jitter: false,
    }
}

/// Start the observers, the runtime and its servers, and wait until every
/// server is ready, or failed/exhausted. Fails only when the runtime does not
/// start; every other problem is kept in [`Run::problems`].
pub(super) async fn setup<'a>(
    sc: &'a Scenario,
    opts: &'a RunOptions,
) -> Result<(Run<'a>, Observers), String> {
    let ids = RunIds::new(sc);
    let _ = std::fs::remove_file(&ids.log);
    let sampler = Sampler::start(
        vec![ids.main_tag.clone(), ids.other_tag.clone()],
        vec![ids.hook_tag.clone()],
        opts.procs.clone(),
    );
    let mut builder = Runtime::builder()
        .event_log(&ids.event_log)
        .secrets(Arc::new(OneSecret(ids.secret.clone())));
    let mut hook_files = Vec::new();
    if let Some((settings, files)) = write_hooks(sc, &ids.hook_tag) {
        builder = builder.hooks(settings);
        hook_files = files;
    }
    if opts.break_close_barrier {
        builder = builder.skip_close_barrier_for_chaos();
    }
    if opts.break_escape_sweep {
        builder = builder.skip_escape_sweep_for_chaos();
    }
    if opts.breaks != mcpvisor::ChaosSwitches::default() {
        builder = builder.break_for_chaos(opts.breaks);
    }
    let mut problems: Vec<String> = Vec::new();
    for fault in &sc.faults {
        if let Some(src) = super::fault::mod_source(fault) {
            let file = ids.browser_dir.join(format!("{}.js", fault.name()));
            let written =
                std::fs::create_dir_all(&ids.browser_dir).and_then(|()| std::fs::write(&file, src));
            match written {
                Ok(()) => {
                    let mut settings =
                        mcpvisor::mods::ModSettings::new(vec![mcpvisor::mods::ModSpec {
                            path: file,
                            capabilities: Vec::new(),
                        }]);
                    settings.deadline = Duration::from_millis(200);
                    settings.memory_limit = 16 << 20;
                    builder = builder.mods(settings);
                }
                Err(e) => problems.push(format!("cannot write the mod {}: {e}", file.display())),
            }
        }
    }
    if sc.has_browser() {
        match stubborn_browser(&ids) {
            Ok(p) => builder = builder.provider(p).activate(Scope::Global),
            Err(e) => problems.push(e),
        }
    }
    if !fault_server_path().exists() {
        problems.push(format!(
            "{} does not exist: build it with cargo build -p mcpvisor-chaos --bins",
            fault_server_path().display()
        ));
    }
    let runtime = match builder.start().await {
        Ok(r) => r,
        Err(e) => {
            let _ = sampler.stop().await;
            return Err(format!("runtime did not start: {e}"));
        }
    };
    let recorder = Recorder::start(
        runtime.clone(),
        runtime.subscribe(),
        sampler.observed(),
        sc.expected_catalog(),
    );
    let mut run = Run {
        sc,
        opts,
        ids,
        runtime,
        peer: None,
        hook_files,
        problems,
        main_config: None,
    };
    add_servers(&mut run, &sampler).await;
    // Settle: every server ready, or failed/exhausted.
    settle(&run.runtime, Duration::from_secs(15)).await;
    Ok((run, Observers { sampler, recorder }))
}

/// Write one hook file per dialect the faults of `sc` install hooks for;
/// the settings naming them and the files, or `None` when no fault installs
/// a hook.
fn write_hooks(sc: &Scenario, tag: &str) -> Option<(HookSettings, Vec<PathBuf>)> {
    let hooks = sc.hooks();
    if hooks.is_empty() {
        return None;
    }
    let mut settings = HookSettings::default();
    let mut files = Vec::new();
    for dialect in [Dialect::Claude, Dialect::Codex] {
        let mine: Vec<&FaultHook> = hooks.iter().filter(|h| h.dialect == dialect).collect();
        if mine.is_empty() {
            continue;
        }
        let path = unique_temp_path(&format!("{}-hooks-{dialect:?}.json", sc.name));
        let _ = std::fs::write(&path, hook_file(&mine, tag).to_string());
        match dialect {
            Dialect::Claude => settings.claude = Some(path.clone()),
            Dialect::Codex => settings.codex = Some(path.clone()),
        }
        files.push(path);
    }
    Some((settings, files))
}

/// A hooks file (`{"hooks": {event: [group, …]}}`) holding `hooks`, one
/// group each, their lingering processes tagged `tag`.
fn hook_file(hooks: &[&FaultHook], tag: &str) -> Value {
    let mut events: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for h in hooks {
        events
            .entry(h.event)
            .or_default()
            .push(json!({"matcher": h.matcher,
            "hooks": [{"type": "command", "command": h.command(tag), "timeout": h.timeout_s}]}));
    }
    json!({ "hooks": events })
}

/// Add server `s` (over stdio, or over HTTP from a runner-owned
/// fault-server the sampler leaves out) and, for colliding names, `s__t`.
async fn add_servers(run: &mut Run<'_>, sampler: &Sampler) {
    let sc = run.sc;
    let ids = &run.ids;
    let mut configs = Vec::new();
    let mut main_args = tagged(&ids.main_tag, &sc.server_args(&ids.log));
    if run.opts.untagged_daemon {
        main_args.push("--daemon-env-clear".into());
    }
    if sc.is_http() {
        match HttpFaultServer::start(&main_args, Duration::from_secs(10)).await {
            Ok(p) => {
                if let Some(pid) = p.child.id() {
                    sampler.exclude(pid);
                }
                configs.push(ServerConfig::http("s", p.url.clone()));
                run.peer = Some(p);
            }
            Err(e) => run.problems.push(e),
        }
    } else {
        configs.push(fault_server_config("s", main_args));
        if sc.colliding() {
            let log_args = [
                "--log-requests".into(),
                ids.log.to_string_lossy().into_owned(),
            ];
            configs.push(fault_server_config(
                "s__t",
                tagged(&ids.other_tag, &log_args),
            ));
        }
    }
    for (i, cfg) in configs.into_iter().enumerate() {
        // SYNC-4 gives a contested name to the server that registered it
        // first: `s` is ready before `s__t` is added, so the same seed always
        // gives the same winner.
        if i > 0 {
            let mut events = run.runtime.subscribe();
            let _ = wait_for_status(
                &run.runtime,
                &mut events,
                "s",
                Duration::from_secs(10),
                |s| s.state == ServerState::Ready && s.tools > 0,
            )
            .await;
        }
        let mut cfg = supervised(cfg, sc.hangs_on_initialize(), sc.call_timeout());
        if let TransportConfig::Stdio(StdioConfig {
            env_secrets, env, ..
        }) = &mut cfg.transport
        {
            env_secrets.insert(SECRET_ENV.into(), SECRET_NAME.into());
            env.insert(CHAOS_TAG.into(), run.ids.run_id.clone());
        }
        if cfg.server_name == "s" {
            cfg.idle_stop_after = sc.idle_stop();
            run.main_config = Some(cfg.clone());
        }
        if let Err(e) = run.runtime.add_server(Scope::Global, cfg).await {
            run.problems.push(e.to_string());
        }
    }
}

/// The name of the run's one secret in its store.
const SECRET_NAME: &str = "chaos_api_key";

/// The run's secret store: one secret, [`SECRET_NAME`], whose value is
/// unique to the run (`no_secret_leak` looks for it everywhere).
struct OneSecret(String);

impl SecretStore for OneSecret {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, StoreError>> {
        Box::pin(async move {
            if name == SECRET_NAME {
                Ok(Secret::new(self.0.clone()))
            } else {
                Err(StoreError::Missing {
                    name: name.to_owned(),
                    place: "the chaos run's store".into(),
                })
            }
        })
    }
}

/// `--tag {tag}` followed by `extra`.
fn tagged(tag: &str, extra: &[String]) -> Vec<String> {
    let mut a = vec!["--tag".to_owned(), tag.to_owned()];
    a.extend(extra.iter().cloned());
    a
}

/// `cfg` as every run supervises it: trusted, the run's reconnect policy and
/// timeouts (a short startup timeout when `initialize` hangs), no idle stop.
fn supervised(cfg: ServerConfig, hang_on_initialize: bool, call_timeout: Duration) -> ServerConfig {
    let mut cfg = cfg.trusted();
    cfg.reconnect = policy();
    cfg.tool_call_timeout = call_timeout;
    cfg.startup_timeout = if hang_on_initialize {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(10)
    };
    cfg.request_timeout = Duration::from_secs(5);
    cfg.idle_stop_after = None;
    cfg
}

/// A browser-native provider whose browser will not die
/// (`Fault::BrowserWontDie`): its launcher ignores SIGTERM, runs Chromium,
/// and lingers (`sleep`, which inherits the ignored SIGTERM) after it
/// exits. The launcher and the profiles are under the run's own paths.
fn stubborn_browser(ids: &RunIds) -> Result<Arc<dyn mcpvisor::SeatProvider>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let chrome = ["/usr/bin/chromium", "/usr/lib/chromium/chromium"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or("browser_wont_die needs Chromium (Debian: apt-get install chromium)")?;
    let launcher = ids.browser_dir.join("launcher.sh");
    std::fs::create_dir_all(&ids.browser_dir)
        .map_err(|e| format!("cannot make {}: {e}", ids.browser_dir.display()))?;
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\ntrap '' TERM\n{} \"$@\"\nsleep 1000\n",
            chrome.display()
        ),
    )
    .map_err(|e| format!("cannot write {}: {e}", launcher.display()))?;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", launcher.display()))?;
    let mut c = mcpvisor::providers::browser_native::BrowserNativeConfig::new("browser");
    c.trust = mcpvisor::TrustMode::Always;
    c.executable = Some(launcher);
    c.profile_root = ids.browser_dir.clone();
    let p =
        mcpvisor::providers::browser_native::BrowserNative::new(c).map_err(|e| e.to_string())?;
    Ok(Arc::new(p))
}
