//! The config file a command reads (or the demo server when there is none),
//! and the runtime builder it asks for.

use std::path::PathBuf;

use anyhow::{Context, bail};
use std::sync::Arc;

use mcpvisor::{FileConfig, Runtime, SecretStore, ServerConfig, parse_config};

use crate::approver;
use crate::cli::Cli;
use crate::cmd::hooks;

/// The demo server as a config entry: this same binary, hidden subcommand.
pub(crate) fn demo_config(name: &str, extra_tools: usize) -> anyhow::Result<ServerConfig> {
    let exe = std::env::current_exe().context("cannot locate the mcpvisor executable")?;
    let mut args = vec!["serve-demo".to_owned()];
    if extra_tools > 0 {
        args.push("--tools".into());
        args.push(extra_tools.to_string());
    }
    // The built-in demo server is part of this binary: trusted.
    Ok(ServerConfig::stdio(name, exe.to_string_lossy(), args).trusted())
}

/// The config file is missing or unreadable (exit 3, like a config error).
#[derive(Debug)]
pub(crate) struct ConfigFileError(pub(crate) String);

impl std::fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigFileError {}

/// True for an error of the config (exit 3): unreadable, invalid TOML, or
/// failed validation.
pub(crate) fn is_config_error(e: &anyhow::Error) -> bool {
    e.downcast_ref::<mcpvisor::ConfigError>().is_some()
        || e.downcast_ref::<ConfigFileError>().is_some()
}

/// The config file: `--config`, else `$MCPVISOR_CONFIG`, else
/// `./mcpvisor.toml`, else the user's (`add --scope user` writes it), else
/// `./mcpvisor.toml` (missing).
pub(crate) fn config_path(cli: &Cli) -> PathBuf {
    let project = PathBuf::from("mcpvisor.toml");
    cli.config
        .clone()
        .or_else(|| std::env::var_os("MCPVISOR_CONFIG").map(PathBuf::from))
        .or_else(|| {
            (!project.exists())
                .then(user_config_path)
                .flatten()
                .filter(|p| p.exists())
        })
        .unwrap_or(project)
}

/// The user's config: `$XDG_CONFIG_HOME/mcpvisor/mcpvisor.toml`, else
/// `~/.config/mcpvisor/mcpvisor.toml`.
pub(crate) fn user_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("mcpvisor").join("mcpvisor.toml"))
}

/// Load the servers. With no config file anywhere, `check`/`status` fall back
/// to the demo server (BIN-4).
pub(crate) fn load_config(cli: &Cli, allow_demo: bool) -> anyhow::Result<FileConfig> {
    load_config_at(cli, None, allow_demo)
}

/// [`load_config`] of `at` instead of the usual file, when given.
pub(crate) fn load_config_at(
    cli: &Cli,
    at: Option<&std::path::Path>,
    allow_demo: bool,
) -> anyhow::Result<FileConfig> {
    let path = at.map_or_else(|| config_path(cli), std::path::Path::to_path_buf);
    let explicit =
        at.is_some() || cli.config.is_some() || std::env::var_os("MCPVISOR_CONFIG").is_some();
    if !path.exists() {
        if allow_demo && !explicit {
            // Never quietly: what is shown is not the user's servers.
            if !cli.json {
                crate::render::errln!(
                    "mcpvisor: no config here ({} not found): using the built-in demo server. `mcpvisor add` or `mcpvisor import` writes one; --config FILE or MCPVISOR_CONFIG names another",
                    path.display()
                );
            }
            return Ok(FileConfig {
                servers: vec![demo_config("demo", 0)?],
                event_log: None,
                secrets_file: None,
                secrets_keyring: None,
                hooks: Default::default(),
                model: Default::default(),
                providers: Default::default(),
                mods: Default::default(),
            });
        }
        return Err(ConfigFileError(format!(
            "config file {} not found (use --config FILE or MCPVISOR_CONFIG)",
            path.display()
        ))
        .into());
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ConfigFileError(format!("cannot read {}: {e}", path.display())))?;
    Ok(parse_config(&path.display().to_string(), &text)?)
}

/// The config for a command that may name a one-shot target (`--url URL`
/// or `-- COMMAND…`): that one server instead of the config's (whose other
/// tables still apply when a config file is given), and its name.
pub(crate) fn load_for_target(
    cli: &Cli,
    target: &crate::cli::Target,
) -> anyhow::Result<(FileConfig, Option<String>)> {
    if target.url.is_none() && target.command.is_empty() {
        return Ok((load_config(cli, true)?, None));
    }
    let explicit = cli.config.is_some() || std::env::var_os("MCPVISOR_CONFIG").is_some();
    let mut cfg = if explicit {
        load_config(cli, false)?
    } else {
        FileConfig {
            servers: Vec::new(),
            event_log: None,
            secrets_file: None,
            secrets_keyring: None,
            hooks: Default::default(),
            model: Default::default(),
            providers: Default::default(),
            mods: Default::default(),
        }
    };
    let server = match (&target.url, target.command.split_first()) {
        (Some(url), _) => {
            let host = url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| "remote".into());
            ServerConfig::http(slug(&host), url.clone())
        }
        (None, Some((program, args))) => {
            ServerConfig::stdio(target_name(program, args), program.clone(), args.to_vec())
        }
        (None, None) => bail!("no target"),
    };
    let name = server.server_name.clone();
    cfg.servers = vec![server];
    Ok((cfg, Some(name)))
}

/// A server name for `-- PROGRAM ARGS…`: the script's file stem for an
/// interpreter or launcher (`node server.js` → `server`), else the program's.
fn target_name(program: &str, args: &[String]) -> String {
    let base = |p: &str| {
        std::path::Path::new(p)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.to_owned())
    };
    let launcher = matches!(
        base(program).as_str(),
        "node" | "python" | "python3" | "npx" | "uvx" | "deno" | "bun" | "uv" | "pipx"
    );
    let subject = if launcher {
        args.iter()
            .find(|a| !a.starts_with('-'))
            .map(|a| base(a.rsplit('/').next().unwrap_or(a)))
            .unwrap_or_else(|| base(program))
    } else {
        base(program)
    };
    slug(&subject)
}

fn slug(text: &str) -> String {
    mcpvisor::derive_slug(text, |_| false, || "0".into())
}

/// A runtime builder with what the config file asks for beyond servers, and
/// the terminal approver (TRUST-5).
pub(crate) fn builder_for(
    cfg: &FileConfig,
    strict_hooks: bool,
) -> anyhow::Result<mcpvisor::RuntimeBuilder> {
    Ok(base_builder(cfg, strict_hooks)?
        .approver(Arc::new(approver::TerminalApprover::new(cfg, None, false))))
}

/// For a command that runs tools: every hook file `[hooks]` names can be
/// loaded, unless `[hooks] optional = true` (then a file that cannot be
/// loaded is the warning every command prints). A policy that silently
/// vanished would let the calls it guards run.
pub(crate) fn require_hooks(cfg: &FileConfig) -> anyhow::Result<()> {
    if cfg.hooks.optional {
        return Ok(());
    }
    for (key, dialect, path) in [
        ("claude", mcpvisor::Dialect::Claude, &cfg.hooks.claude),
        ("codex", mcpvisor::Dialect::Codex, &cfg.hooks.codex),
    ] {
        let Some(path) = path else { continue };
        let set = mcpvisor::load_hook_file(dialect, path);
        if let Some(why) = set
            .warnings
            .first()
            .filter(|w| w.starts_with("could not load hook config"))
        {
            anyhow::bail!(
                "[hooks] {key} = {}: {why}, so the calls they guard would run unguarded. Fix the path (relative paths are the config file's directory's), or set `[hooks] optional = true` to run without them",
                path.display()
            );
        }
    }
    Ok(())
}

/// [`builder_for`] without an approver (the gateway brings its own: stdin
/// may be its MCP channel).
pub(crate) fn base_builder(
    cfg: &FileConfig,
    strict_hooks: bool,
) -> anyhow::Result<mcpvisor::RuntimeBuilder> {
    let mut b = Runtime::builder().hooks(hooks::settings(cfg, strict_hooks));
    if let Some(path) = &cfg.event_log {
        b = b.event_log(path.clone());
    }
    if let Some(store) = secret_store(cfg)? {
        b = b.secrets(store);
    }
    // JS mods (MOD-1): only when enabled, only the listed ones.
    if cfg.mods.enabled {
        b = b.mods(mod_settings(cfg));
    }
    // The providers' seats; the command's one run is one activation.
    let tables = [
        ("browser", &cfg.providers.browser),
        ("computer", &cfg.providers.computer),
    ];
    let mut any = false;
    for (name, raw) in tables {
        if let Some(raw) = raw {
            match mcpvisor::providers::from_config(name, raw)? {
                Some(p) => b = b.provider(p),
                None => eprintln!(
                    "mcpvisor: warning: [providers.{name}] names no display and $DISPLAY is not set: the computer_use seat stays empty"
                ),
            }
            any = true;
        }
    }
    if any {
        b = b.activate(mcpvisor::Scope::Global);
    }
    Ok(b)
}

/// The mod host's settings from `[mods]` (MOD-1): the listed mods, the
/// limits, and what `options.host.config()` shows (server names only).
pub(crate) fn mod_settings(cfg: &FileConfig) -> mcpvisor::mods::ModSettings {
    let specs = cfg
        .mods
        .load
        .iter()
        .map(|l| mcpvisor::mods::ModSpec {
            path: l.path.clone(),
            capabilities: l.capabilities.clone(),
        })
        .collect();
    let mut settings = mcpvisor::mods::ModSettings::new(specs);
    if let Some(mib) = cfg.mods.memory_mib {
        settings.memory_limit = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    }
    if let Some(ms) = cfg.mods.deadline_ms {
        settings.deadline = std::time::Duration::from_millis(ms);
    }
    settings.config = serde_json::json!({
        "servers": cfg.servers.iter().map(|s| s.server_name.clone()).collect::<Vec<_>>(),
    });
    settings
}

/// The names of the config's providers (`[providers.browser]` …): each
/// is the server its tools are mounted as.
pub(crate) fn provider_names(cfg: &FileConfig) -> Vec<String> {
    let mut names = Vec::new();
    if cfg.providers.browser.is_some() {
        names.push("browser".to_owned());
    }
    if cfg.providers.computer.is_some() {
        names.push("computer".to_owned());
    }
    names
}

/// The secret store the config names (`[secrets] file` or `keyring`), if any.
pub(crate) fn secret_store(cfg: &FileConfig) -> anyhow::Result<Option<Arc<dyn SecretStore>>> {
    if let Some(path) = &cfg.secrets_file {
        let store = mcpvisor::FileSecretStore::open(path).map_err(anyhow::Error::msg)?;
        return Ok(Some(Arc::new(store)));
    }
    if let Some(service) = &cfg.secrets_keyring {
        #[cfg(all(feature = "keyring", target_os = "linux"))]
        {
            return Ok(Some(Arc::new(mcpvisor::KeyringSecretStore::new(
                service.clone(),
            ))));
        }
        #[cfg(not(all(feature = "keyring", target_os = "linux")))]
        bail!(
            "[secrets] keyring = {service:?}: this mcpvisor was built without the keyring feature (cargo build --features keyring, Linux only)"
        );
    }
    Ok(None)
}
