//! `mcpvisor import` (BIN-1, TRUST-5): the server configs users already
//! have, as mcpvisor TOML — the `mcpServers` JSON of `.mcp.json` and the
//! desktop apps (also VS Code's `servers`), and Codex's `config.toml`
//! `[mcp_servers.*]`. Every imported server arrives `enabled = false` with
//! `trust = "ask"`: importing grants nothing by itself. Pure: text in, text out.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a file could not be imported; each text names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// It parses neither as JSON nor as TOML.
    #[error("{0}")]
    Unreadable(String),
    /// It parses, but holds no servers table an importer reads.
    #[error("{0}")]
    NotAServersConfig(String),
    /// A hooks file that is not a hooks file of its dialect.
    #[error("{0}")]
    Hooks(String),
}

/// What an import produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The mcpvisor TOML (comments included).
    pub toml: String,
    /// The server names written.
    pub servers: Vec<String>,
    /// What was left out, and why (one line each).
    pub skipped: Vec<String>,
    /// The hook commands of an imported hooks file, one line each
    /// (`event (matcher): command`), written commented out.
    pub hooks: Vec<String>,
    /// Secret values found in the source (an `env` value or a header whose
    /// name looks secret, an `Authorization` header): the TOML names each
    /// by its secret name, never by value (TRUST-2).
    pub secrets: Vec<FoundSecret>,
    /// Servers written under another name (SYNC-2 slugs, duplicates):
    /// `(as in the source, as written)`.
    pub renamed: Vec<(String, String)>,
}

/// A secret found in a source config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSecret {
    /// The (imported) server name.
    pub server: String,
    /// `env` or `header`.
    pub field: &'static str,
    /// The variable or header.
    pub key: String,
    /// The secret name the TOML holds (`env_secrets` / `header_secrets`).
    pub secret_name: String,
    /// The value to store under that name; `None` when the source already
    /// referred to a variable (`${VAR}`): its name is the secret's.
    pub value: Option<String>,
}

/// `${VAR}`, `${VAR:-default}` (Claude Code) or `${env:VAR}` (Cursor),
/// the whole value: `VAR`.
fn variable_reference(v: &str) -> Option<&str> {
    let inner = v.strip_prefix("${")?.strip_suffix('}')?;
    let inner = inner.strip_prefix("env:").unwrap_or(inner);
    let name = inner.split_once(":-").map_or(inner, |(n, _)| n);
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// `server` and `key` in capitals, `_` for anything else (`fs`, `API_KEY`
/// → `FS_API_KEY`).
fn secret_name(server: &str, key: &str) -> String {
    let joined = if server.is_empty() {
        key.to_owned()
    } else {
        format!("{server}_{key}")
    };
    joined
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The name a secret value found in `server`'s `field` `key` is stored
/// under. A variable is stored under its own name, the one its server's
/// documentation tells users to set (`GITHUB_PERSONAL_ACCESS_TOKEN`); a
/// header under `<SERVER>_<HEADER>` (a bearer token's `key` is `TOKEN`).
/// A name already held with another value — by `earlier` (an earlier
/// file's secrets, the names the config merged into uses, what the secret
/// file holds) or by an earlier server of this file — gets the server's
/// prefix, then a number.
fn store_name(
    server: &str,
    field: &str,
    key: &str,
    value: &str,
    earlier: &[FoundSecret],
    found: &[FoundSecret],
) -> String {
    let own = if field == "env" && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_owned()
    } else if field == "env" {
        secret_name("", key)
    } else {
        secret_name(server, key)
    };
    let clash = |name: &str| {
        earlier
            .iter()
            .chain(found)
            .any(|f| f.secret_name == name && f.value.as_deref() != Some(value))
    };
    let prefixed = secret_name(server, key);
    std::iter::once(own)
        .chain(std::iter::once(prefixed.clone()))
        .chain((2..).map(|n| format!("{prefixed}_{n}")))
        .find(|n| !clash(n))
        .unwrap_or(prefixed)
}

/// Split `map` into what may be written as it is and what is a secret
/// (`is_secret(key)`): the secrets go to `found`, by name. What `named`
/// maps a key to is a secret's name, or for a value that keeps a scheme
/// (`Bearer …`) the scheme and a `${NAME}` reference.
fn split_secrets(
    server: &str,
    field: &'static str,
    map: &BTreeMap<String, String>,
    is_secret: impl Fn(&str) -> bool,
    earlier: &[FoundSecret],
    found: &mut Vec<FoundSecret>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut plain, mut named) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in map {
        if !is_secret(k) {
            plain.insert(k.clone(), v.clone());
            continue;
        }
        // `Bearer ${VAR}` keeps its scheme and names the variable; a literal
        // `Bearer sk-…` keeps its scheme and stores the token alone.
        let scheme = (field == "header")
            .then(|| v.strip_prefix("Bearer "))
            .flatten();
        let (reference, name, value) = match (variable_reference(v), scheme) {
            (Some(var), _) => (var.to_owned(), var.to_owned(), None),
            (None, Some(rest)) => match variable_reference(rest) {
                Some(var) => (format!("Bearer ${{{var}}}"), var.to_owned(), None),
                None => {
                    let name = store_name(server, field, "TOKEN", rest, earlier, found);
                    (format!("Bearer ${{{name}}}"), name, Some(rest.to_owned()))
                }
            },
            (None, None) => {
                let name = store_name(server, field, k, v, earlier, found);
                (name.clone(), name, Some(v.clone()))
            }
        };
        named.insert(k.clone(), reference);
        found.push(FoundSecret {
            server: server.to_owned(),
            field,
            key: k.clone(),
            secret_name: name,
            value,
        });
    }
    (plain, named)
}

/// Which tool a hooks file belongs to (its dialect, HOOK-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HooksFrom {
    /// Claude Code (`settings.json`, `{"hooks": …}`).
    Claude,
    /// Codex (`hooks.json`).
    Codex,
}

/// Convert the file at `origin` (its text), whatever it holds: the servers
/// of an MCP servers config ([`import_servers`]), and the hooks of a file
/// with a `"hooks"` object, as a commented-out `[hooks]` table pointing at
/// `hooks_path` (the file's absolute path: `[hooks]` paths resolve against
/// the working directory). The hooks' dialect is `from`, else guessed from
/// the path (`.codex/` or a file named `hooks.json`: Codex; otherwise
/// Claude Code). Nothing imported runs until the user turns it on
/// (TRUST-5): servers arrive disabled, hooks commented out.
pub fn import_file(
    origin: &str,
    hooks_path: &str,
    text: &str,
    from: Option<HooksFrom>,
) -> Result<Imported, ImportError> {
    import_file_beside(origin, hooks_path, text, from, &[], &[])
}

/// [`import_file`], leaving out the servers named in `existing` and
/// naming secrets apart from `earlier_secrets` (see
/// [`import_servers_beside`]).
pub fn import_file_beside(
    origin: &str,
    hooks_path: &str,
    text: &str,
    from: Option<HooksFrom>,
    existing: &[String],
    earlier_secrets: &[FoundSecret],
) -> Result<Imported, ImportError> {
    let json: Option<Value> = text
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str(text).ok())
        .flatten();
    let has = |k: &str| {
        json.as_ref()
            .is_some_and(|v| v.get(k).is_some_and(Value::is_object))
    };
    let hooks = has("hooks");
    if hooks && !has("mcpServers") && !has("servers") {
        return import_hooks(origin, hooks_path, text, from);
    }
    let mut got = import_servers_beside(origin, text, existing, earlier_secrets)?;
    if hooks {
        let h = import_hooks(origin, hooks_path, text, from)?;
        got.toml.push_str(&h.toml);
        got.hooks = h.hooks;
        got.skipped.extend(h.skipped);
    }
    Ok(got)
}

/// A hooks file as a commented `[hooks]` table: each command listed with
/// its event, matcher and SHA-256 (what `--strict-hooks` approves,
/// HOOK-12), and the table to uncomment once they have been read.
fn import_hooks(
    origin: &str,
    hooks_path: &str,
    text: &str,
    from: Option<HooksFrom>,
) -> Result<Imported, ImportError> {
    use crate::messages::hooks::Dialect;
    use crate::messages::hooks::config::HookSet;
    let from = from.unwrap_or_else(|| {
        let p = hooks_path.replace('\\', "/");
        if p.contains("/.codex/") || p.ends_with("/hooks.json") || p == "hooks.json" {
            HooksFrom::Codex
        } else {
            HooksFrom::Claude
        }
    });
    let (dialect, key, name) = match from {
        HooksFrom::Claude => (Dialect::Claude, "claude", "Claude Code"),
        HooksFrom::Codex => (Dialect::Codex, "codex", "Codex"),
    };
    let set =
        HookSet::parse(dialect, origin, text).map_err(|e| ImportError::Hooks(e.to_string()))?;
    let mut hooks = Vec::new();
    let mut listing = String::new();
    let mut hashes = Vec::new();
    for (event, group, handler) in set.handlers() {
        let matcher = group
            .pattern
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| format!(" (matcher {p:?})"))
            .unwrap_or_default();
        let line = format!("{event}{matcher}: {}", handler.command);
        listing.push_str(&format!(
            "#   {}\n#     sha256 {}\n",
            comment_text(&line),
            handler.hash
        ));
        hashes.push(format!("{:?}", handler.hash));
        hooks.push(line);
    }
    let toml = format!(
        "\n# Hooks from {} ({name} dialect): {} command(s). Once on, they run on\n\
         # matching tool calls, prompts and sessions with your privileges: read each\n\
         # one, then uncomment the table. Under `--strict-hooks` only the hashes in\n\
         # `approved` run; it lists none until you add them (`mcpvisor hooks list`).\n\
         {listing}\
         # [hooks]\n\
         # {key} = {}\n\
         # approved = []  # e.g. [{}]\n",
        comment_text(origin),
        hooks.len(),
        quote_key(hooks_path),
        hashes.first().cloned().unwrap_or_default(),
    );
    Ok(Imported {
        toml,
        servers: Vec::new(),
        skipped: set.warnings.iter().map(|w| format!("hook: {w}")).collect(),
        hooks,
        secrets: Vec::new(),
        renamed: Vec::new(),
    })
}

/// One server, format-neutral.
#[derive(Debug, Default)]
struct Entry {
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    headers: BTreeMap<String, String>,
    startup_timeout_ms: Option<u64>,
    tool_call_timeout_ms: Option<u64>,
    /// Variables of the runtime passed through (Codex `env_vars`).
    passthrough: Vec<String>,
    /// Header → the variable its value comes from (Codex `env_http_headers`).
    header_vars: BTreeMap<String, String>,
    /// Tools refused (Codex `disabled_tools`).
    refused_tools: Vec<String>,
    notes: Vec<String>,
}

/// The keys of a `mcpServers` entry mcpvisor reads.
const JSON_KEYS: [&str; 9] = [
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "serverUrl",
    "headers",
    "disabled",
];

/// The keys of a Codex `[mcp_servers.*]` table mcpvisor reads.
const CODEX_KEYS: [&str; 15] = [
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "bearer_token_env_var",
    "http_headers",
    "env_http_headers",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "tool_timeout_sec",
    "enabled",
    "enabled_tools",
    "disabled_tools",
];

/// A note for every key of `keys` that is not in `known`: nothing is
/// dropped silently.
fn unsupported<'a>(keys: impl Iterator<Item = &'a String>, known: &[&str]) -> Vec<String> {
    keys.filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("`{k}` is not supported by mcpvisor: left out"))
        .collect()
}

/// Convert the config at `origin` (its text): JSON with `mcpServers` or
/// `servers` (and `~/.claude.json`'s per-project `projects.*.mcpServers`),
/// or TOML with `mcp_servers`. An error says what the file is not.
pub fn import_servers(origin: &str, text: &str) -> Result<Imported, ImportError> {
    import_servers_beside(origin, text, &[], &[])
}

/// [`import_servers`], leaving out the servers named in `existing` (those
/// of the config merged into, or of a file imported before): each is
/// reported in `skipped`. Two servers of the same name within this file
/// (two projects of `~/.claude.json`) are both kept, the second renamed.
/// A secret name that `earlier_secrets` (those of a file imported before)
/// hold with another value is not reused: the server's name prefixes it.
///
/// The TOML is always a config mcpvisor accepts: a server it would refuse
/// as written (plain `http://` to a remote host, say) is written commented
/// out, under the reason, and reported in `skipped`.
pub fn import_servers_beside(
    origin: &str,
    text: &str,
    existing: &[String],
    earlier_secrets: &[FoundSecret],
) -> Result<Imported, ImportError> {
    let entries = if text.trim_start().starts_with('{') {
        from_json(origin, text)?
    } else {
        from_codex(origin, text)?
    };
    let mut out = format!(
        "# Imported from {} by `mcpvisor import`.\n\
         # Every server arrives disabled, with trust \"ask\": review each one, then\n\
         # set `enabled = true` (and `trust = \"always\"` only for servers you trust).\n\
         # Secret values (an `env` or header name that looks secret, Authorization)\n\
         # are not in this file: `env_secrets` / `header_secrets` name them\n\
         # (docs/security.md).\n",
        comment_text(origin)
    );
    let mut servers = Vec::new();
    let mut skipped = Vec::new();
    let mut secrets = Vec::new();
    let mut renames = Vec::new();
    for (original, entry) in entries {
        let valid = crate::messages::naming::validate_server_name(&original).is_ok();
        let mut name = if valid {
            original.clone()
        } else {
            crate::messages::naming::derive_slug(
                &original,
                |n| servers.iter().any(|s: &String| s == n),
                || "0".into(),
            )
        };
        if existing.contains(&name) {
            skipped.push(format!(
                "{original}: a server of that name is already configured; left as it is"
            ));
            continue;
        }
        let mut renamed =
            (!valid).then(|| format!("# was {original:?} (not a valid server_name)\n"));
        if servers.contains(&name) {
            let base = name.clone();
            let mut n = 2;
            while servers.contains(&name) || existing.contains(&name) {
                // The base cut so that the name stays a valid server_name
                // (a valid name is ASCII: any cut is a char boundary).
                let suffix = format!("-{n}");
                let keep = base
                    .len()
                    .min(crate::messages::naming::SERVER_NAME_MAX.saturating_sub(suffix.len()));
                name = format!("{}{suffix}", &base[..keep]);
                n += 1;
            }
            renamed = Some(format!(
                "# was {original:?} (an earlier server of this file has that name)\n"
            ));
        }
        if entry.command.is_none() && entry.url.is_none() {
            skipped.push(format!("{original}: {}", entry.notes.join("; ")));
            continue;
        }
        out.push('\n');
        if let Some(r) = &renamed {
            out.push_str(r);
            renames.push((original.clone(), name.clone()));
        }
        for n in &entry.notes {
            out.push_str(&format!("# {}\n", comment_text(n)));
        }
        let mut section = String::new();
        section.push_str(&format!("[servers.{name}]\n"));
        if let Some(c) = &entry.command {
            section.push_str(&format!("command = {}\n", quote(c)));
            let args: Vec<String> = entry.args.iter().map(|a| quote(a)).collect();
            section.push_str(&format!("args = [{}]\n", args.join(", ")));
            if let Some(cwd) = &entry.cwd {
                section.push_str(&format!("cwd = {}\n", quote(cwd)));
            }
            let (env, named) = split_secrets(
                &name,
                "env",
                &entry.env,
                crate::messages::trust::looks_secret,
                earlier_secrets,
                &mut secrets,
            );
            // `KEY = "${KEY}"` passes the runtime's own variable through (a
            // default, `${KEY:-x}`, would be lost: that one is flagged);
            // mcpvisor expands no other `${…}`: the user is told.
            let mut env = env;
            let mut passthrough = Vec::new();
            env.retain(|k, v| {
                let same = *v == format!("${{{k}}}");
                if same {
                    passthrough.push(quote(k));
                }
                !same
            });
            for (k, v) in &env {
                if v.contains("${") {
                    section.push_str(&format!(
                        "# {}: mcpvisor does not expand ${{…}}: the value is kept literally; set it here\n",
                        comment_text(k)
                    ));
                }
            }
            if entry
                .args
                .iter()
                .chain(entry.command.iter())
                .any(|a| a.contains("${"))
            {
                section.push_str("# the command line holds ${…}, which mcpvisor does not expand: write the values in\n");
            }
            if !env.is_empty() {
                section.push_str(&format!("env = {}\n", inline_table(&env)));
            }
            passthrough.extend(entry.passthrough.iter().map(|v| quote(v)));
            if !passthrough.is_empty() {
                section.push_str(&format!("env_passthrough = [{}]\n", passthrough.join(", ")));
            }
            if !named.is_empty() {
                section.push_str(&format!("env_secrets = {}\n", inline_table(&named)));
            }
        } else if let Some(u) = &entry.url {
            section.push_str(&format!("url = {}\n", quote(u)));
            let (headers, mut named) = split_secrets(
                &name,
                "header",
                &entry.headers,
                |h| {
                    h.eq_ignore_ascii_case("authorization")
                        || crate::messages::trust::looks_secret(h)
                },
                earlier_secrets,
                &mut secrets,
            );
            // Codex `env_http_headers`: the value is a variable's; the
            // secret of that name (the default store reads variables).
            for (header, var) in &entry.header_vars {
                named.insert(header.clone(), var.clone());
                secrets.push(FoundSecret {
                    server: name.clone(),
                    field: "header",
                    key: header.clone(),
                    secret_name: var.clone(),
                    value: None,
                });
            }
            if !headers.is_empty() {
                section.push_str(&format!("headers = {}\n", inline_table(&headers)));
            }
            if !named.is_empty() {
                section.push_str(&format!("header_secrets = {}\n", inline_table(&named)));
            }
        }
        if let Some(ms) = entry.startup_timeout_ms {
            section.push_str(&format!("startup_timeout_ms = {ms}\n"));
        }
        if let Some(ms) = entry.tool_call_timeout_ms {
            section.push_str(&format!("tool_call_timeout_ms = {ms}\n"));
        }
        if !entry.refused_tools.is_empty() {
            let never: BTreeMap<String, String> = entry
                .refused_tools
                .iter()
                .map(|t| (t.clone(), "never".to_owned()))
                .collect();
            section.push_str(&format!("tool_trust = {}\n", inline_table(&never)));
        }
        section.push_str("enabled = false\ntrust = \"ask\"\n");
        // What mcpvisor would refuse is kept, commented out, under the
        // reason: the file stays one every command accepts.
        if let Err(e) = crate::messages::config::file::parse_config_at(&name, &section, None) {
            let reason = e
                .problems
                .iter()
                .map(|p| p.strip_prefix(&format!("{name}: ")).unwrap_or(p))
                .collect::<Vec<_>>()
                .join("; ");
            out.push_str(&format!(
                "# Commented out: mcpvisor refuses this server as written: {}\n\
                 # Fix it, then uncomment the table.\n",
                comment_text(&reason)
            ));
            for line in section.lines() {
                out.push_str(&format!("# {line}\n"));
            }
            skipped.push(format!(
                "{original}: written commented out, since mcpvisor refuses it as written: {reason}"
            ));
            continue;
        }
        out.push_str(&section);
        servers.push(name);
    }
    Ok(Imported {
        toml: out,
        servers,
        skipped,
        hooks: Vec::new(),
        secrets,
        renamed: renames,
    })
}

fn from_json(origin: &str, text: &str) -> Result<Vec<(String, Entry)>, ImportError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ImportError::Unreadable(format!("{origin}: not valid JSON: {e}")))?;
    let top = v
        .get("mcpServers")
        .or_else(|| v.get("servers"))
        .and_then(Value::as_object);
    // `~/.claude.json`: the user's servers at the top, each project's
    // under `projects.<path>.mcpServers`.
    let projects: Vec<(&String, &serde_json::Map<String, Value>)> = v
        .get("projects")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter_map(|(path, proj)| {
                    proj.get("mcpServers")
                        .and_then(Value::as_object)
                        .filter(|m| !m.is_empty())
                        .map(|m| (path, m))
                })
                .collect()
        })
        .unwrap_or_default();
    if top.is_none() && projects.is_empty() {
        return Err(ImportError::NotAServersConfig(format!(
            "{origin}: no `mcpServers` (or `servers`) object: not an MCP servers config"
        )));
    }
    let mut out = Vec::new();
    let sections = top
        .into_iter()
        .map(|t| (None, t))
        .chain(projects.into_iter().map(|(p, t)| (Some(p), t)));
    for (project, table) in sections {
        for (name, s) in table {
            let mut e = json_entry(s);
            if let Some(p) = project {
                e.notes.insert(0, format!("from the project {p}"));
            }
            out.push((name.clone(), e));
        }
    }
    Ok(out)
}

/// One `mcpServers` entry.
fn json_entry(s: &Value) -> Entry {
    let mut e = Entry::default();
    let kind = s.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "sse" {
        e.notes
            .push("the legacy HTTP+SSE transport is not supported (streamable HTTP only)".into());
        return e;
    }
    if !matches!(
        kind,
        "" | "stdio" | "http" | "streamable-http" | "streamableHttp"
    ) {
        e.notes.push(format!(
            "`type` = {kind:?} is not a transport mcpvisor knows"
        ));
    }
    if let Some(o) = s.as_object() {
        e.notes.extend(unsupported(o.keys(), &JSON_KEYS));
    }
    e.command = s.get("command").and_then(Value::as_str).map(str::to_owned);
    e.url = s
        .get("url")
        .or_else(|| s.get("serverUrl"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    e.args = strings(s.get("args"));
    e.env = string_map(s.get("env"));
    e.headers = string_map(s.get("headers"));
    e.cwd = s.get("cwd").and_then(Value::as_str).map(str::to_owned);
    if e.command.is_none() && e.url.is_none() {
        e.notes.push("neither `command` nor `url`".into());
    }
    if s.get("disabled").and_then(Value::as_bool) == Some(true) {
        e.notes.push("it was disabled in the source".into());
    }
    e
}

fn from_codex(origin: &str, text: &str) -> Result<Vec<(String, Entry)>, ImportError> {
    let v: toml::Table = toml::from_str(text).map_err(|e| {
        ImportError::Unreadable(format!("{origin}: neither JSON nor valid TOML: {e}"))
    })?;
    let table = v
        .get("mcp_servers")
        .and_then(toml::Value::as_table)
        .ok_or_else(|| {
            ImportError::NotAServersConfig(format!(
                "{origin}: no `[mcp_servers]` table: not a Codex config.toml"
            ))
        })?;
    let mut out = Vec::new();
    for (name, s) in table {
        let mut e = Entry::default();
        let get = |k: &str| s.get(k);
        e.command = get("command")
            .and_then(toml::Value::as_str)
            .map(str::to_owned);
        e.url = get("url").and_then(toml::Value::as_str).map(str::to_owned);
        e.args = get("args")
            .and_then(toml::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let map = |k: &str| -> BTreeMap<String, String> {
            get(k)
                .and_then(toml::Value::as_table)
                .map(|t| {
                    t.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                        .collect()
                })
                .unwrap_or_default()
        };
        e.env = map("env");
        e.headers = map("http_headers");
        e.header_vars = map("env_http_headers");
        let list = |k: &str| -> Vec<String> {
            get(k)
                .and_then(toml::Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        e.passthrough = list("env_vars");
        e.refused_tools = list("disabled_tools");
        let allowed = list("enabled_tools");
        if !allowed.is_empty() {
            e.notes.push(format!(
                "enabled_tools = {allowed:?}: mcpvisor has no allowlist; every other tool of the server is listed too: refuse them with tool_trust = {{ NAME = \"never\" }}"
            ));
        }
        if let Some(t) = s.as_table() {
            e.notes.extend(unsupported(t.keys(), &CODEX_KEYS));
        }
        e.cwd = get("cwd").and_then(toml::Value::as_str).map(str::to_owned);
        // Milliseconds within TOML's integers (i64): `as i64` saturates
        // (a u64 past i64::MAX would make the output no TOML at all); a
        // negative or NaN time is 0, which the config then refuses by name.
        let secs = |k: &str| {
            get(k).and_then(|v| {
                v.as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .map(|s| u64::try_from((s * 1000.0) as i64).unwrap_or(0))
            })
        };
        e.startup_timeout_ms = get("startup_timeout_ms")
            .and_then(toml::Value::as_integer)
            .and_then(|ms| u64::try_from(ms).ok())
            .or_else(|| secs("startup_timeout_sec"));
        e.tool_call_timeout_ms = secs("tool_timeout_sec");
        // The bearer token from a variable: `Authorization: Bearer ${VAR}`,
        // which the header's secret reference keeps.
        if let Some(var) = get("bearer_token_env_var").and_then(toml::Value::as_str) {
            e.headers
                .insert("Authorization".to_owned(), format!("Bearer ${{{var}}}"));
        }
        if get("enabled").and_then(toml::Value::as_bool) == Some(false) {
            e.notes.push("it was disabled in the source".into());
        }
        if e.command.is_none() && e.url.is_none() {
            e.notes.push("neither `command` nor `url`".into());
        }
        out.push((name.clone(), e));
    }
    Ok(out)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A TOML basic string on one line: a key (which [`quote`] cannot write
/// when the text has a newline: it makes a multi-line string, and no key
/// can be one), or a value within a comment line.
fn quote_key(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push('\t'),
            // TOML refuses every other control character in a basic string.
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` fit for one comment line: each control character but tab is
/// written as its escape (`\n`, `\u{7f}`). A newline would end the comment
/// and make the rest of the text TOML (a server of the source's choosing,
/// enabled and trusted); TOML refuses the others in a comment.
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `{ "K" = "v", … }` (keys quoted: any header or variable name is valid).
fn inline_table(m: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{} = {}", quote_key(k), quote(v)))
        .collect();
    format!("{{ {} }}", parts.join(", "))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod props;
