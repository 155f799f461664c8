//! `mcpvisor add | remove | list`: the commands users of `claude mcp add`
//! and `codex mcp add` type without thinking. They edit the config file in
//! place (`toml_edit`: comments, order and formatting of everything else
//! stay), validate the result with the same parser every command uses
//! before writing it, and never write a secret value: a variable or header
//! that looks like one must be given as a secret's name.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::json;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, value};

use crate::cli::Cli;

/// `add`'s flags.
pub(crate) struct AddFlags {
    pub(crate) name: String,
    pub(crate) url: Option<String>,
    pub(crate) env: Vec<String>,
    pub(crate) env_secret: Vec<String>,
    pub(crate) header: Vec<String>,
    pub(crate) header_secret: Vec<String>,
    pub(crate) cwd: Option<String>,
    pub(crate) trust: Option<String>,
    pub(crate) disabled: bool,
    pub(crate) no_check: bool,
    pub(crate) scope: Option<String>,
    pub(crate) startup_timeout_ms: Option<u64>,
    pub(crate) command: Vec<String>,
}

/// The `startup_timeout_ms` `add` writes for a package runner (`npx`,
/// `uvx`…) when none is given: its first start downloads the package.
const PACKAGE_RUNNER_STARTUP_MS: u64 = 120_000;

/// The file these commands edit: the one every command reads
/// (`--config`, else `$MCPVISOR_CONFIG`, else `./mcpvisor.toml`, else the
/// user's), or the one `scope` names; created by `add` when missing.
fn target(cli: &Cli, scope: Option<&str>) -> anyhow::Result<PathBuf> {
    match scope {
        None => Ok(crate::config::config_path(cli)),
        Some(_) if cli.config.is_some() || std::env::var_os("MCPVISOR_CONFIG").is_some() => {
            bail!(
                "--scope and --config (or $MCPVISOR_CONFIG) both say which file to edit: give one"
            )
        }
        Some("user") => {
            let path = crate::config::user_config_path()
                .context("--scope user: neither XDG_CONFIG_HOME nor HOME is set")?;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            Ok(path)
        }
        Some(_) => Ok(PathBuf::from("mcpvisor.toml")),
    }
}

fn read(path: &Path, missing_ok: bool) -> anyhow::Result<DocumentMut> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    // Not TOML: the config parser's error (with its explanation, a config
    // error's exit status and JSON `kind`).
    text.parse().map_err(
        |e| match mcpvisor::parse_config(&path.display().to_string(), &text) {
            Err(config) => anyhow::Error::from(config),
            Ok(_) => anyhow::anyhow!("{}: {e}", path.display()),
        },
    )
}

/// Write `doc` to `path` once mcpvisor's own parser accepts it (the error
/// names the file's line and key; nothing is written then).
fn write_checked(path: &Path, doc: &DocumentMut) -> anyhow::Result<()> {
    let text = doc.to_string();
    mcpvisor::parse_config(&path.display().to_string(), &text)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `K=V` pairs of a repeated flag.
fn pairs<'a>(flag: &str, items: &'a [String]) -> anyhow::Result<Vec<(&'a str, &'a str)>> {
    items
        .iter()
        .map(|p| {
            p.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| anyhow::anyhow!("{flag} {p:?}: expected KEY=VALUE"))
        })
        .collect()
}

fn inline(pairs: &[(&str, &str)]) -> InlineTable {
    let mut t = InlineTable::new();
    for (k, v) in pairs {
        t.insert(*k, (*v).into());
    }
    t
}

/// `add NAME [--env K=V]… [--env-secret K=SECRET]… -- COMMAND ARGS…` or
/// `add NAME --url URL [--header H=V]… [--header-secret H=SECRET]…`.
pub(crate) async fn add(cli: &Cli, f: AddFlags) -> anyhow::Result<u8> {
    mcpvisor::validate_server_name(&f.name)?;
    let path = target(cli, f.scope.as_deref())?;
    let mut doc = read(&path, true)?;
    let servers = doc
        .entry("servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_mut()
        .context("`servers` in the config is not a table")?;
    if servers.contains_key(&f.name) {
        bail!(
            "{}: a server named {:?} is already configured (`mcpvisor remove {}` first, or pick another name)",
            path.display(),
            f.name,
            f.name
        );
    }
    let mut t = Table::new();
    let env = pairs("--env", &f.env)?;
    let headers = pairs("--header", &f.header)?;
    // Never a secret value in the file (TRUST-2): it must come by name.
    for (k, _) in env.iter().chain(&headers) {
        if mcpvisor::looks_secret(k) {
            bail!(
                "{k} looks like a secret: its value would be written into {}; give the secret's name instead ({} {k}=SECRET_NAME) and put the value in your secret store",
                path.display(),
                if env.iter().any(|(e, _)| e == k) {
                    "--env-secret"
                } else {
                    "--header-secret"
                }
            );
        }
    }
    let env_secrets = pairs("--env-secret", &f.env_secret)?;
    let header_secrets = pairs("--header-secret", &f.header_secret)?;
    match (&f.url, f.command.split_first()) {
        (Some(_), Some(_)) => bail!("give either --url URL or -- COMMAND ARGS…, not both"),
        (None, None) => bail!(
            "nothing to run: `mcpvisor add {} -- COMMAND ARGS…` (stdio) or `mcpvisor add {} --url URL` (streamable HTTP)",
            f.name,
            f.name
        ),
        (Some(url), None) => {
            if !env.is_empty() || !env_secrets.is_empty() || f.cwd.is_some() {
                bail!(
                    "--env, --env-secret and --cwd are for stdio servers (-- COMMAND), not --url"
                );
            }
            t["url"] = value(url.as_str());
            if !headers.is_empty() {
                t["headers"] = value(inline(&headers));
            }
            if !header_secrets.is_empty() {
                t["header_secrets"] = value(inline(&header_secrets));
            }
        }
        (None, Some((command, args))) => {
            if !headers.is_empty() || !header_secrets.is_empty() {
                bail!("--header and --header-secret are for --url servers, not -- COMMAND");
            }
            t["command"] = value(command.as_str());
            t["args"] = value(args.iter().map(String::as_str).collect::<Array>());
            if let Some(cwd) = &f.cwd {
                t["cwd"] = value(cwd.as_str());
            }
            if !env.is_empty() {
                t["env"] = value(inline(&env));
            }
            if !env_secrets.is_empty() {
                t["env_secrets"] = value(inline(&env_secrets));
            }
        }
    }
    let runner = mcpvisor::package_runner_of(&f.command);
    let startup_ms = f
        .startup_timeout_ms
        .or(runner.as_ref().map(|_| PACKAGE_RUNNER_STARTUP_MS));
    if let Some(ms) = startup_ms {
        t["startup_timeout_ms"] = value(i64::try_from(ms).unwrap_or(i64::MAX));
    }
    if let Some(trust) = &f.trust {
        t["trust"] = value(trust.as_str());
    }
    if f.disabled {
        t["enabled"] = value(false);
    }
    servers.insert(&f.name, Item::Table(t));
    write_checked(&path, &doc)?;
    if cli.json && f.no_check {
        println!(
            "{}",
            json!({"added": f.name, "config": path.display().to_string()})
        );
    } else if !cli.json {
        eprintln!("added server {:?} to {}", f.name, path.display());
        if let (Some(r), None) = (&runner, f.startup_timeout_ms) {
            eprintln!(
                "  startup_timeout_ms = {PACKAGE_RUNNER_STARTUP_MS}: `{r}` downloads the package on its first run (--startup-timeout MS sets another)"
            );
        }
    }
    if f.no_check || f.disabled {
        return Ok(0);
    }
    // Like `claude mcp add`: the entry stays whatever the handshake says.
    // `check` reads the same file (`--config`, `$MCPVISOR_CONFIG`, or
    // ./mcpvisor.toml, as here).
    let code = crate::cmd::check::run_at(cli, Some(&path), Some(&f.name), true).await?;
    if code != 0 && !cli.json {
        eprintln!(
            "the server was added, but its check failed; `mcpvisor remove {}` undoes the add",
            f.name
        );
    }
    Ok(code)
}

/// `remove NAME`: its `[servers.NAME]` table (and subtables) goes; every
/// other line of the file stays.
pub(crate) fn remove(cli: &Cli, name: &str, scope: Option<&str>) -> anyhow::Result<u8> {
    let path = target(cli, scope)?;
    let mut doc = read(&path, false)?;
    let servers = doc.get_mut("servers").and_then(Item::as_table_mut);
    let known = server_names(servers.as_deref());
    if servers.and_then(|s| s.remove(name)).is_none() {
        bail!(no_such_server(&path, name, &known));
    }
    write_checked(&path, &doc)?;
    if cli.json {
        println!(
            "{}",
            json!({"removed": name, "config": path.display().to_string()})
        );
    } else {
        eprintln!("removed server {name:?} from {}", path.display());
    }
    Ok(0)
}

/// `enable NAME…` / `disable NAME…`: set each server's `enabled`, keeping
/// the file's comments and order. Every name is checked before anything is
/// written.
pub(crate) fn set_enabled(
    cli: &Cli,
    names: &[String],
    enabled: bool,
    scope: Option<&str>,
) -> anyhow::Result<u8> {
    let path = target(cli, scope)?;
    let mut doc = read(&path, false)?;
    let servers = doc.get_mut("servers").and_then(Item::as_table_mut);
    let known = server_names(servers.as_deref());
    if let Some(unknown) = names.iter().find(|n| !known.contains(n)) {
        bail!(no_such_server(&path, unknown, &known));
    }
    let mut changed = Vec::new();
    if let Some(servers) = servers {
        for name in names {
            let Some(table) = servers.get_mut(name).and_then(Item::as_table_like_mut) else {
                bail!(
                    "{}: servers.{name} is not a table: cannot set its `enabled`",
                    path.display()
                );
            };
            let was = table.get("enabled").and_then(Item::as_bool).unwrap_or(true);
            if was != enabled {
                changed.push(name.clone());
            }
            table.insert("enabled", value(enabled));
        }
    }
    write_checked(&path, &doc)?;
    let verb = if enabled { "enabled" } else { "disabled" };
    if cli.json {
        println!(
            "{}",
            json!({verb: names, "changed": changed, "config": path.display().to_string()})
        );
        return Ok(0);
    }
    for name in names {
        let already = if changed.contains(name) {
            ""
        } else {
            " (it already was)"
        };
        eprintln!("{verb} server {name:?} in {}{already}", path.display());
    }
    if enabled {
        let check = match names {
            [one] => format!("mcpvisor check {one}"),
            _ => "mcpvisor check".to_owned(),
        };
        eprintln!("  `{check}` connects once and lists the tools");
    }
    Ok(0)
}

/// The names of a `[servers]` table.
fn server_names(servers: Option<&toml_edit::Table>) -> Vec<String> {
    servers
        .map(|s| s.iter().map(|(k, _)| k.to_owned()).collect())
        .unwrap_or_default()
}

/// "no server named …", with the closest name and the configured ones.
fn no_such_server(path: &Path, name: &str, known: &[String]) -> String {
    let hint = mcpvisor::closest(name, known.iter().map(String::as_str))
        .map(|c| format!(" (did you mean {c:?}?)"))
        .unwrap_or_default();
    format!(
        "{}: no server named {name:?}{hint}; configured: {}",
        path.display(),
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        }
    )
}

/// `list`: every configured server, without starting any (`status` shows
/// live states, `check` does a handshake).
pub(crate) fn list(cli: &Cli) -> anyhow::Result<u8> {
    let cfg = crate::config::load_config(cli, false)?;
    let rows: Vec<_> = cfg
        .servers
        .iter()
        .map(|s| {
            let transport = match &s.transport {
                mcpvisor::TransportConfig::Stdio(st) => {
                    let mut line = st.command.clone();
                    for a in &st.args {
                        line.push(' ');
                        line.push_str(a);
                    }
                    ("stdio", line)
                }
                mcpvisor::TransportConfig::StreamableHttp(h) => ("http", h.url.to_string()),
                _ => ("in-process", String::new()),
            };
            (s, transport)
        })
        .collect();
    // The last known state of each server: what the event log (OBS-2)
    // recorded before the last run shut it down.
    let last = cfg
        .event_log
        .as_deref()
        .map(last_states)
        .unwrap_or_default();
    if cli.json {
        let arr: Vec<_> = rows
            .iter()
            .map(|(s, (kind, target))| {
                let known = last.get(&s.server_name).map(|l| {
                    json!({"state": l.state, "error": l.error, "ts_ms": l.ts_ms})
                });
                json!({"name": s.server_name, "transport": kind, "target": target, "enabled": s.enabled, "trust": trust_name(s.trust), "last_state": known})
            })
            .collect();
        println!("{}", serde_json::Value::Array(arr));
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!("no servers configured (`mcpvisor add NAME -- COMMAND ARGS…` adds one)");
        return Ok(0);
    }
    println!(
        "{:<20} {:<6} {:<8} {:<7} {:<22} TARGET",
        "NAME", "KIND", "ENABLED", "TRUST", "LAST KNOWN"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    for (s, (kind, target)) in &rows {
        let known = last
            .get(&s.server_name)
            .map(|l| format!("{} {}", l.state, ago(now.saturating_sub(l.ts_ms))))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<20} {:<6} {:<8} {:<7} {known:<22} {target}",
            s.server_name,
            kind,
            if s.enabled { "yes" } else { "no" },
            trust_name(s.trust)
        );
        if let Some(e) = last.get(&s.server_name).and_then(|l| l.error.as_deref()) {
            println!("{:<20} last error: {e}", "");
        }
    }
    if cfg.event_log.is_none() {
        eprintln!(
            "(LAST KNOWN needs an event log: set `[events] log = \"…\"` and the states of each run are kept)"
        );
    }
    Ok(0)
}

/// A server's last recorded state.
struct LastState {
    state: String,
    error: Option<String>,
    ts_ms: u64,
}

/// The last state other than `stopped` (every run ends by stopping its
/// servers) of each server in the event log at `path`; a missing or
/// unreadable log, or a bad line, is no state.
fn last_states(path: &std::path::Path) -> std::collections::HashMap<String, LastState> {
    use std::io::BufRead as _;
    let mut last = std::collections::HashMap::new();
    let Ok(file) = std::fs::File::open(path) else {
        return last;
    };
    for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let text = |k: &str| v.get(k).and_then(serde_json::Value::as_str);
        if text("event") != Some("server_status") {
            continue;
        }
        let (Some(server), Some(state)) = (text("server"), text("state")) else {
            continue;
        };
        if state == "stopped" {
            continue;
        }
        last.insert(
            server.to_owned(),
            LastState {
                state: state.to_owned(),
                error: text("error").map(str::to_owned),
                ts_ms: v
                    .get("ts_ms")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
            },
        );
    }
    last
}

/// `ms` as "just now", "5 min ago", "3 h ago", "2 d ago".
fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", s / 60),
        3600..86_400 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86_400),
    }
}

fn trust_name(t: mcpvisor::TrustMode) -> &'static str {
    match t {
        mcpvisor::TrustMode::Ask => "ask",
        mcpvisor::TrustMode::Always => "always",
        mcpvisor::TrustMode::Never => "never",
    }
}
