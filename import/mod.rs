//! `mcpvisor import` (BIN-1, TRUST-5): the server configs users already
//! have, as mcpvisor TOML — the `mcpServers` JSON of `.mcp.json` and the
//! desktop apps (also VS Code's `servers`), and Codex's `config.toml`
//! `[mcp_servers.*]`. Every imported server arrives `enabled = false` with
//! `trust = "ask"`: importing grants nothing by itself. Pure: text in, text out.

use std::collections::BTreeMap;

use serde_json::Value;

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

/// The secret name a value of `server`'s `key` is stored under: both in
/// capitals, `_` for anything else (`fs`, `API_KEY` → `FS_API_KEY`).
fn secret_name(server: &str, key: &str) -> String {
    format!("{server}_{key}")
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

/// Split `map` into what may be written as it is and what is a secret
/// (`is_secret(key)`): the secrets go to `found`, by name.
fn split_secrets(
    server: &str,
    field: &'static str,
    map: &BTreeMap<String, String>,
    is_secret: impl Fn(&str) -> bool,
    found: &mut Vec<FoundSecret>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut plain, mut named) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in map {
        if !is_secret(k) {
            plain.insert(k.clone(), v.clone());
            continue;
        }
        let (name, value) = match variable_reference(v) {
            Some(var) => (var.to_owned(), None),
            None => (secret_name(server, k), Some(v.clone())),
        };
        named.insert(k.clone(), name.clone());
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
) -> Result<Imported, String> {
    import_file_beside(origin, hooks_path, text, from, &[])
}

/// [`import_file`], leaving out the servers named in `existing` (see
/// [`import_servers_beside`]).
pub fn import_file_beside(
    origin: &str,
    hooks_path: &str,
    text: &str,
    from: Option<HooksFrom>,
    existing: &[String],
) -> Result<Imported, String> {
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
    let mut got = import_servers_beside(origin, text, existing)?;
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
) -> Result<Imported, String> {
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
    let set = HookSet::parse(dialect, origin, text).map_err(|e| e.to_string())?;
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
pub fn import_servers(origin: &str, text: &str) -> Result<Imported, String> {
    import_servers_beside(origin, text, &[])
}

/// [`import_servers`], leaving out the servers named in `existing` (those
/// of the config merged into, or of a file imported before): each is
/// reported in `skipped`. Two servers of the same name within this file
/// (two projects of `~/.claude.json`) are both kept, the second renamed.
pub fn import_servers_beside(
    origin: &str,
    text: &str,
    existing: &[String],
) -> Result<Imported, String> {
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
        out.push_str(&format!("[servers.{name}]\n"));
        if let Some(c) = &entry.command {
            out.push_str(&format!("command = {}\n", quote(c)));
            let args: Vec<String> = entry.args.iter().map(|a| quote(a)).collect();
            out.push_str(&format!("args = [{}]\n", args.join(", ")));
            if let Some(cwd) = &entry.cwd {
                out.push_str(&format!("cwd = {}\n", quote(cwd)));
            }
            let (env, named) = split_secrets(
                &name,
                "env",
                &entry.env,
                crate::messages::trust::looks_secret,
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
                    out.push_str(&format!(
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
                out.push_str("# the command line holds ${…}, which mcpvisor does not expand: write the values in\n");
            }
            if !env.is_empty() {
                out.push_str(&format!("env = {}\n", inline_table(&env)));
            }
            passthrough.extend(entry.passthrough.iter().map(|v| quote(v)));
            if !passthrough.is_empty() {
                out.push_str(&format!("env_passthrough = [{}]\n", passthrough.join(", ")));
            }
            if !named.is_empty() {
                out.push_str(&format!("env_secrets = {}\n", inline_table(&named)));
            }
        } else if let Some(u) = &entry.url {
            out.push_str(&format!("url = {}\n", quote(u)));
            let (headers, mut named) = split_secrets(
                &name,
                "header",
                &entry.headers,
                |h| {
                    h.eq_ignore_ascii_case("authorization")
                        || crate::messages::trust::looks_secret(h)
                },
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
                out.push_str(&format!("headers = {}\n", inline_table(&headers)));
            }
            if !named.is_empty() {
                out.push_str(&format!("header_secrets = {}\n", inline_table(&named)));
            }
        }
        if let Some(ms) = entry.startup_timeout_ms {
            out.push_str(&format!("startup_timeout_ms = {ms}\n"));
        }
        if let Some(ms) = entry.tool_call_timeout_ms {
            out.push_str(&format!("tool_call_timeout_ms = {ms}\n"));
        }
        if !entry.refused_tools.is_empty() {
            let never: BTreeMap<String, String> = entry
                .refused_tools
                .iter()
                .map(|t| (t.clone(), "never".to_owned()))
                .collect();
            out.push_str(&format!("tool_trust = {}\n", inline_table(&never)));
        }
        out.push_str("enabled = false\ntrust = \"ask\"\n");
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

fn from_json(origin: &str, text: &str) -> Result<Vec<(String, Entry)>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("{origin}: not valid JSON: {e}"))?;
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
        return Err(format!(
            "{origin}: no `mcpServers` (or `servers`) object: not an MCP servers config"
        ));
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

fn from_codex(origin: &str, text: &str) -> Result<Vec<(String, Entry)>, String> {
    let v: toml::Table =
        toml::from_str(text).map_err(|e| format!("{origin}: neither JSON nor valid TOML: {e}"))?;
    let table = v
        .get("mcp_servers")
        .and_then(toml::Value::as_table)
        .ok_or_else(|| format!("{origin}: no `[mcp_servers]` table: not a Codex config.toml"))?;
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
        if let Some(var) = get("bearer_token_env_var").and_then(toml::Value::as_str) {
            e.notes.push(format!(
                "bearer_token_env_var = {var:?}: put `Bearer <token>` in a secret and name it in header_secrets = {{ Authorization = \"…\" }}"
            ));
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
mod tests {
    use super::*;

    #[test]
    fn a_variable_passed_as_itself_is_passed_through_and_other_references_are_flagged() {
        let json = r#"{"mcpServers": {"x": {"command": "srv", "args": ["--root", "${HOME}/data"],
            "env": {"LANGUAGE": "${LANGUAGE}", "MODE": "${MODE:-fast}", "PLAIN": "1"}}}}"#;
        let got = import_servers(".mcp.json", json).unwrap();
        let cfg = crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
        let crate::messages::config::TransportConfig::Stdio(st) = &cfg.servers[0].transport else {
            panic!("stdio")
        };
        assert_eq!(st.env_passthrough, vec!["LANGUAGE".to_owned()]);
        assert!(!st.env.contains_key("LANGUAGE"));
        assert_eq!(st.env.get("PLAIN").map(String::as_str), Some("1"));
        assert!(
            got.toml.contains("# MODE: mcpvisor does not expand"),
            "{}",
            got.toml
        );
        assert!(
            got.toml.contains("the command line holds ${…}"),
            "{}",
            got.toml
        );
    }

    #[test]
    fn secret_values_never_reach_the_toml_and_references_keep_their_variable() {
        // TRUST-2: an env value or a header whose name looks
        // secret (and Authorization) is named, not written; `${VAR}` keeps
        // its variable as the secret's name; the rest is written as it is.
        let json = r#"{"mcpServers": {
            "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp_live", "DEBUG": "1", "API_KEY": "${MY_KEY:-none}"}},
            "web": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer sk_live", "X-Tenant": "acme"}}
        }}"#;
        let got = import_servers(".mcp.json", json).unwrap();
        for leaked in ["ghp_live", "sk_live", "MY_KEY:-none"] {
            assert!(!got.toml.contains(leaked), "{leaked} in:\n{}", got.toml);
        }
        let found: Vec<(&str, &str, &str, Option<&str>)> = got
            .secrets
            .iter()
            .map(|s| {
                (
                    s.server.as_str(),
                    s.key.as_str(),
                    s.secret_name.as_str(),
                    s.value.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![
                ("gh", "API_KEY", "MY_KEY", None),
                ("gh", "GITHUB_TOKEN", "GH_GITHUB_TOKEN", Some("ghp_live")),
                (
                    "web",
                    "Authorization",
                    "WEB_AUTHORIZATION",
                    Some("Bearer sk_live")
                ),
            ]
        );
        let cfg = crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
        let gh = cfg.servers.iter().find(|s| s.server_name == "gh").unwrap();
        let crate::messages::config::TransportConfig::Stdio(st) = &gh.transport else {
            panic!("stdio")
        };
        assert_eq!(st.env.get("DEBUG").map(String::as_str), Some("1"));
        assert!(!st.env.contains_key("GITHUB_TOKEN"));
        assert!(
            got.toml.contains("env_secrets = ") && got.toml.contains("\"GH_GITHUB_TOKEN\""),
            "{}",
            got.toml
        );
        assert!(
            got.toml.contains("header_secrets") && got.toml.contains("X-Tenant"),
            "{}",
            got.toml
        );
    }

    /// The output with its `# [hooks]` table uncommented, as a user would.
    fn uncommented(toml: &str) -> String {
        toml.lines()
            .map(|l| {
                let t = l.strip_prefix("# ").unwrap_or(l);
                if t.starts_with("[hooks]")
                    || t.starts_with("claude = ")
                    || t.starts_with("codex = ")
                {
                    t.to_owned()
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    const CLAUDE_SETTINGS: &str = r#"{
      "$schema": "https://json.schemastore.org/claude-code-settings.json",
      "permissions": {"allow": ["Bash(npm run lint)"]},
      "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./scripts/check.sh", "timeout": 30}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUes": [{"hooks": [{"type": "command", "command": "typo"}]}]
      }
    }"#;

    #[test]
    fn a_claude_settings_file_becomes_a_commented_hooks_table_with_each_command_and_hash() {
        // Hooks files import into [hooks]; like servers (TRUST-5)
        // nothing imported runs until the user turns it on.
        let got = import_file(
            ".claude/settings.json",
            "/home/u/p/.claude/settings.json",
            CLAUDE_SETTINGS,
            None,
        )
        .unwrap();
        assert!(got.servers.is_empty());
        assert_eq!(
            got.hooks,
            vec![
                "PreToolUse (matcher \"Bash\"): ./scripts/check.sh".to_owned(),
                "Stop: notify-send done".to_owned()
            ]
        );
        let hash = crate::messages::hooks::config::command_hash("./scripts/check.sh");
        assert!(
            got.toml.contains(&format!("#     sha256 {hash}")),
            "{}",
            got.toml
        );
        assert!(
            got.skipped.iter().any(|s| s.contains("PreToolUes")),
            "{:?}",
            got.skipped
        );
        // As written, the TOML configures no hooks at all.
        let cfg = crate::messages::config::file::parse_config("out.toml", &got.toml).unwrap();
        assert_eq!(cfg.hooks.claude, None);
        // Uncommented, it points at the file, absolutely, in its dialect.
        let cfg = crate::messages::config::file::parse_config("out.toml", &uncommented(&got.toml))
            .unwrap();
        assert_eq!(
            cfg.hooks.claude.as_deref(),
            Some(std::path::Path::new("/home/u/p/.claude/settings.json")),
            "{}",
            uncommented(&got.toml)
        );
        assert!(
            cfg.hooks.approved.is_empty(),
            "nothing is approved for the user"
        );
    }

    #[test]
    fn a_codex_hooks_file_is_told_by_its_path_or_by_from_and_servers_and_hooks_come_together() {
        let hooks = r#"{"hooks": {"PreToolUse": [{"matcher": "shell", "hooks": [{"type": "command", "command": "guard"}]}]}}"#;
        let got = import_file("hooks.json", "/home/u/.codex/hooks.json", hooks, None).unwrap();
        assert!(
            got.toml.contains("# codex = \"/home/u/.codex/hooks.json\""),
            "{}",
            got.toml
        );
        let forced = import_file("h.json", "/tmp/h.json", hooks, Some(HooksFrom::Codex)).unwrap();
        assert!(forced.toml.contains("# codex = "), "{}", forced.toml);
        let claude = import_file("h.json", "/tmp/h.json", hooks, None).unwrap();
        assert!(claude.toml.contains("# claude = "), "{}", claude.toml);
        // A settings file with servers and hooks: both, each held back.
        let both = r#"{"mcpServers": {"fs": {"command": "npx", "args": ["fs"]}},
                       "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "bye"}]}]}}"#;
        let got = import_file("s.json", "/tmp/s.json", both, None).unwrap();
        assert_eq!(got.servers, vec!["fs".to_owned()]);
        assert_eq!(got.hooks, vec!["Stop: bye".to_owned()]);
        let cfg = crate::messages::config::file::parse_config("out.toml", &got.toml).unwrap();
        assert!(cfg.servers.iter().all(|s| !s.enabled));
        assert_eq!(cfg.hooks.claude, None);
        // Not a hooks shape at all: the hook parser's error, naming the file.
        let bad = import_file("x.json", "/tmp/x.json", r#"{"hooks": {"Stop": 3}}"#, None);
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("x.json"))
                || bad.as_ref().is_ok_and(|g| !g.skipped.is_empty()),
            "{bad:?}"
        );
    }

    #[test]
    fn an_mcp_json_arrives_disabled_and_asking_and_parses_as_mcpvisor_config() {
        let json = r#"{"mcpServers": {
            "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"API_KEY": "k"}},
            "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Tenant": "acme"}},
            "old": {"type": "sse", "url": "https://example.com/sse"},
            "My Files!": {"command": "files-server"}
        }}"#;
        let got = import_servers(".mcp.json", json).unwrap();
        assert_eq!(got.servers, ["my-files", "everything", "remote"]);
        assert_eq!(got.skipped.len(), 1);
        assert!(
            got.skipped[0].contains("legacy HTTP+SSE"),
            "{:?}",
            got.skipped
        );
        let cfg = crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
        assert_eq!(cfg.servers.len(), 3);
        for s in &cfg.servers {
            assert!(!s.enabled, "{}", s.server_name);
            assert_eq!(s.trust, crate::messages::trust::TrustMode::Ask);
        }
        assert!(got.toml.contains("# was \"My Files!\""), "{}", got.toml);
    }

    #[test]
    fn a_claude_json_brings_the_users_and_every_projects_servers_and_names_each_origin() {
        // `~/.claude.json` keeps per-project servers under
        // `projects.<path>.mcpServers`; two of the same name are both kept.
        let json = r#"{
  "numStartups": 12,
  "mcpServers": {"notes": {"type": "http", "url": "https://notes.example/mcp"}},
  "projects": {
    "/home/u/a": {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "fs-server", "/home/u/a"]}}},
    "/home/u/b": {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "fs-server", "/home/u/b"], "envFile": ".env"}}},
    "/home/u/c": {"allowedTools": []}
  }
}"#;
        let got = import_servers("/home/u/.claude.json", json).unwrap();
        assert_eq!(got.servers, ["notes", "fs", "fs-2"]);
        assert!(
            got.toml.contains("# from the project /home/u/a"),
            "{}",
            got.toml
        );
        assert!(
            got.toml
                .contains("# was \"fs\" (an earlier server of this file has that name)"),
            "{}",
            got.toml
        );
        assert!(
            got.toml
                .contains("# `envFile` is not supported by mcpvisor: left out"),
            "nothing is dropped silently: {}",
            got.toml
        );
        crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
        // Beside a config that already has `notes`: that one is left out.
        let beside = import_servers_beside("c.json", json, &["notes".to_owned()]).unwrap();
        assert_eq!(beside.servers, ["fs", "fs-2"]);
        assert!(
            beside
                .skipped
                .iter()
                .any(|s| s.contains("notes") && s.contains("already configured")),
            "{:?}",
            beside.skipped
        );
    }

    #[test]
    fn claude_desktop_and_cursor_samples_import_with_names_fixed_and_references_kept() {
        // Claude Desktop's `claude_desktop_config.json` (display
        // names with spaces) and Cursor's `mcp.json` (`${env:VAR}`,
        // `type: "http"`).
        let desktop = r#"{
  "mcpServers": {
    "Brave Search": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-brave-search"], "env": {"BRAVE_API_KEY": "BSA-123"}},
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]}
  }
}"#;
        let got = import_servers("claude_desktop_config.json", desktop).unwrap();
        assert_eq!(got.servers, ["brave-search", "filesystem"], "{}", got.toml);
        assert_eq!(
            got.renamed,
            [("Brave Search".to_owned(), "brave-search".to_owned())]
        );
        assert!(!got.toml.contains("BSA-123"), "{}", got.toml);
        let cursor = r#"{
  "mcpServers": {
    "linear": {"type": "http", "url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "${env:LINEAR_TOKEN}"}}
  }
}"#;
        let got = import_servers("mcp.json", cursor).unwrap();
        assert!(
            got.secrets
                .iter()
                .any(|s| s.secret_name == "LINEAR_TOKEN" && s.value.is_none()),
            "Cursor's ${{env:VAR}} names the variable: {:?}",
            got.secrets
        );
        crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
    }

    #[test]
    fn codex_env_vars_header_variables_and_tool_lists_are_carried_or_named() {
        // env_vars, env_http_headers, disabled_tools,
        // enabled_tools, startup_timeout_ms, and an unknown key.
        let codex = r#"
[mcp_servers.gh]
command = "gh-mcp"
env_vars = ["GH_HOST"]
startup_timeout_ms = 7000
disabled_tools = ["delete_repo"]
enabled_tools = ["list_issues"]
experimental_flag = true
[mcp_servers.api]
url = "https://api.example/mcp"
env_http_headers = { "X-Api-Key" = "API_KEY_VAR" }
"#;
        let got = import_servers("config.toml", codex).unwrap();
        let t = &got.toml;
        assert!(t.contains("env_passthrough = [\"GH_HOST\"]"), "{t}");
        assert!(t.contains("startup_timeout_ms = 7000"), "{t}");
        assert!(
            t.contains("tool_trust = { \"delete_repo\" = \"never\" }"),
            "{t}"
        );
        assert!(
            t.contains("enabled_tools = [\"list_issues\"]: mcpvisor has no allowlist"),
            "{t}"
        );
        assert!(t.contains("`experimental_flag` is not supported"), "{t}");
        assert!(
            t.contains("header_secrets = { \"X-Api-Key\" = \"API_KEY_VAR\" }"),
            "{t}"
        );
        assert!(
            got.secrets
                .iter()
                .any(|s| s.secret_name == "API_KEY_VAR" && s.value.is_none()),
            "{:?}",
            got.secrets
        );
        crate::messages::config::file::parse_config("imported", t).unwrap();
    }

    #[test]
    fn a_codex_config_toml_keeps_its_timeouts_and_says_what_it_could_not_carry() {
        let codex = r#"
model = "o3"
[mcp_servers.time]
command = "uvx"
args = ["mcp-server-time"]
startup_timeout_sec = 20
tool_timeout_sec = 90.5
[mcp_servers.linear]
url = "https://mcp.linear.app/mcp"
bearer_token_env_var = "LINEAR_TOKEN"
"#;
        let got = import_servers("config.toml", codex).unwrap();
        assert_eq!(got.servers, ["linear", "time"]);
        assert!(
            got.toml.contains("startup_timeout_ms = 20000"),
            "{}",
            got.toml
        );
        assert!(
            got.toml.contains("tool_call_timeout_ms = 90500"),
            "{}",
            got.toml
        );
        assert!(
            got.toml.contains("bearer_token_env_var = \"LINEAR_TOKEN\""),
            "{}",
            got.toml
        );
        crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
    }

    #[test]
    fn a_file_of_another_kind_is_named() {
        assert!(
            import_servers("x.json", r#"{"a": 1}"#)
                .unwrap_err()
                .contains("no `mcpServers`")
        );
        assert!(
            import_servers("x.toml", "a = 1")
                .unwrap_err()
                .contains("not a Codex config.toml")
        );
        assert!(
            import_servers("x", "{oops")
                .unwrap_err()
                .contains("not valid JSON")
        );
    }

    #[test]
    fn a_name_with_a_newline_stays_in_its_comment_and_imports_no_server_of_its_own() {
        // TRUST-5 (found by the import property): an unsupported
        // key, a project path or an env name was written raw into a `#`
        // comment, so a newline in it ended the comment and the rest became
        // TOML: here a server of the file's choosing, enabled and trusted.
        // A key with a newline was written as a multi-line string, which no
        // TOML key can be. Now each is escaped and stays text.
        let evil = "x\n[servers.evil]\ncommand = \"sh\"\nenabled = true\ntrust = \"always\"\n#";
        use serde_json::json;
        let json = json!({
            "mcpServers": {"fs": {"command": "fs-server", evil: 1,
                "env": {"\r": "${HOME}", "MODE\n": "${X}"}}},
            "projects": {evil: {"mcpServers": {"web": {"url": "https://web.example/mcp",
                "headers": {"\nAPI_KEY": "s3cr3t", "X-\u{7f}": "v"}}}}}
        });
        let got = import_servers("mcp\n.json", &json.to_string()).unwrap();
        let cfg = crate::messages::config::file::parse_config("imported", &got.toml)
            .unwrap_or_else(|e| panic!("{e}\n{}", got.toml));
        let names: Vec<&str> = cfg.servers.iter().map(|s| s.server_name.as_str()).collect();
        assert_eq!(names, ["fs", "web"], "{}", got.toml);
        assert!(cfg.servers.iter().all(|s| !s.enabled), "{}", got.toml);
        assert!(
            got.toml.contains(r#"# `x\n[servers.evil]\ncommand = "sh""#),
            "{}",
            got.toml
        );
        assert!(!got.toml.contains("s3cr3t"), "{}", got.toml);
        // The same for a hook's command and the hooks file's path.
        let hooks = json!({"hooks": {"Stop": [{"hooks": [{"type": "command",
            "command": "bye\r\n[servers.evil]\ncommand = \"sh\""}]}]}});
        let got = import_file("h\n.json", "/tmp/h\n.json", &hooks.to_string(), None).unwrap();
        let cfg = crate::messages::config::file::parse_config("imported", &got.toml)
            .unwrap_or_else(|e| panic!("{e}\n{}", got.toml));
        assert!(cfg.servers.is_empty(), "{}", got.toml);
        assert!(
            got.toml.contains(r#"# claude = "/tmp/h\u000A.json""#),
            "{}",
            got.toml
        );
    }

    #[test]
    fn a_second_server_of_a_long_name_is_renamed_within_the_name_limit() {
        // Found by the import property: the second of two
        // servers named with 31 or 32 characters (`~/.claude.json`, the
        // user's and a project's) became `<name>-2`, past the 32-character
        // limit, and the imported config did not load.
        let long = "a".repeat(32);
        let json = serde_json::json!({
            "mcpServers": {long.as_str(): {"command": "x"}},
            "projects": {"/p": {"mcpServers": {long.as_str(): {"command": "y"}}}}
        });
        let got = import_servers("c.json", &json.to_string()).unwrap();
        assert_eq!(got.servers, [long.clone(), format!("{}-2", &long[..30])]);
        crate::messages::config::file::parse_config("imported", &got.toml)
            .unwrap_or_else(|e| panic!("{e}\n{}", got.toml));
    }

    #[test]
    fn a_codex_timeout_past_tomls_integers_is_capped_and_the_output_stays_toml() {
        // Found by the import property: `startup_timeout_sec =
        // 1e300` became `startup_timeout_ms = 18446744073709551615`, a u64
        // that is no TOML integer (they are i64): no file at all. Now it is
        // capped at i64::MAX; a negative time is 0, which the config then
        // refuses by name.
        let codex = "[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout_sec = 1e300\ntool_timeout_sec = -2.0\n";
        let got = import_servers("config.toml", codex).unwrap();
        assert!(
            got.toml
                .contains(&format!("startup_timeout_ms = {}\n", i64::MAX)),
            "{}",
            got.toml
        );
        let e = crate::messages::config::file::parse_config("imported", &got.toml).unwrap_err();
        assert_eq!(
            e.problems,
            ["imported: servers.a.tool_call_timeout_ms must be greater than 0"]
        );
    }
}

#[cfg(test)]
mod props {
    //! Property tests of `mcpvisor import`: whatever the source's names,
    //! keys and values, no secret value reaches the TOML, and the TOML is
    //! always TOML (and a config mcpvisor loads when the source's servers
    //! were usable).

    use super::*;
    use crate::messages::prop_gen::{any_name, config, json_value, key, tricky_text};
    use crate::messages::trust::looks_secret;
    use proptest::prelude::*;
    use serde_json::{Map, json};

    /// A secret value: a marker that nothing else generated contains.
    fn secret() -> impl Strategy<Value = String> {
        "[A-Za-z0-9]{12}".prop_map(|s| format!("s3cr3t-{s}"))
    }

    /// A name that looks secret (`KEY`, `TOKEN`, …, `Authorization`),
    /// maybe with more around it.
    fn secret_name() -> impl Strategy<Value = String> {
        let word = prop::sample::select(vec![
            "API_KEY",
            "GITHUB_TOKEN",
            "client_secret",
            "DB_PASSWORD",
            "passwd",
            "MY_CREDENTIAL",
            "Authorization",
            "X-Auth-Token",
            "key",
        ]);
        (
            prop_oneof!["", "[A-Z_]{1,4}", tricky_text()],
            word,
            prop_oneof!["", "[a-z_-]{1,4}"],
        )
            .prop_map(|(a, w, b)| format!("{a}{w}{b}"))
    }

    /// A name that does not look secret.
    fn plain_name() -> impl Strategy<Value = String> {
        prop_oneof!["[A-Z_]{1,10}", "X-[A-Za-z-]{1,10}", tricky_text()]
            .prop_filter("not secret-looking", |n| !looks_secret(n))
    }

    /// What a secret-looking name holds: the secret itself, or a reference
    /// to a variable (whose default, if any, is a secret too).
    fn secret_value() -> impl Strategy<Value = (String, String)> {
        prop_oneof![
            3 => secret().prop_map(|s| (s.clone(), s)),
            1 => (secret(), "[A-Z_]{1,8}", 0u8..3).prop_map(|(s, var, form)| {
                let v = match form {
                    0 => format!("${{{var}}}"),
                    1 => format!("${{env:{var}}}"),
                    _ => format!("${{{var}:-{s}}}"),
                };
                (v, s)
            }),
        ]
    }

    /// An `env` or `headers` map: (name, value, the secret it must hide).
    fn variables() -> impl Strategy<Value = Vec<(String, String, Option<String>)>> {
        let one = prop_oneof![
            2 => (secret_name(), secret_value()).prop_map(|(k, (v, s))| (k, v, Some(s))),
            2 => (plain_name(), prop_oneof![tricky_text(), Just("${HOME}".to_owned())])
                .prop_map(|(k, v)| (k, v, None)),
            // A variable passed as itself.
            1 => "[A-Z_]{1,8}".prop_filter("plain", |n| !looks_secret(n))
                .prop_map(|k| { let v = format!("${{{k}}}"); (k, v, None) }),
        ];
        prop::collection::vec(one, 0..5)
    }

    /// One server of the source: its name, its entry, the secrets in it.
    /// `usable`: a command that is not blank, an https URL, timeouts of a
    /// second or more (what the source's own tool would run).
    #[derive(Debug, Clone)]
    struct Source {
        name: String,
        stdio: bool,
        command: String,
        url: String,
        args: Vec<String>,
        cwd: Option<String>,
        vars: Vec<(String, String, Option<String>)>,
        extra: Vec<(String, Value)>,
        timeouts: (Option<f64>, Option<f64>),
    }

    impl Source {
        fn secrets(&self) -> impl Iterator<Item = &String> {
            self.vars.iter().filter_map(|(_, _, s)| s.as_ref())
        }

        fn vars_json(&self) -> Value {
            Value::Object(
                self.vars
                    .iter()
                    .map(|(k, v, _)| (k.clone(), json!(v)))
                    .collect(),
            )
        }

        /// As an `mcpServers` entry.
        fn json(&self) -> Value {
            let mut e: Map<String, Value> = self.extra.iter().cloned().collect();
            if self.stdio {
                e.insert("command".into(), json!(self.command));
                e.insert("args".into(), json!(self.args));
                e.insert("env".into(), self.vars_json());
                if let Some(cwd) = &self.cwd {
                    e.insert("cwd".into(), json!(cwd));
                }
            } else {
                e.insert("type".into(), json!("http"));
                e.insert("url".into(), json!(self.url));
                e.insert("headers".into(), self.vars_json());
            }
            Value::Object(e)
        }

        /// As a Codex `[mcp_servers.*]` table.
        fn codex(&self) -> toml::Table {
            let mut t = toml::Table::new();
            for (k, v) in &self.extra {
                if let Some(s) = v.as_str() {
                    t.insert(k.clone(), toml::Value::String(s.to_owned()));
                }
            }
            let vars: toml::Table = self
                .vars
                .iter()
                .map(|(k, v, _)| (k.clone(), toml::Value::String(v.clone())))
                .collect();
            if self.stdio {
                t.insert("command".into(), self.command.clone().into());
                t.insert(
                    "args".into(),
                    toml::Value::Array(self.args.iter().cloned().map(Into::into).collect()),
                );
                t.insert("env".into(), toml::Value::Table(vars));
                if let Some(cwd) = &self.cwd {
                    t.insert("cwd".into(), cwd.clone().into());
                }
            } else {
                t.insert("url".into(), self.url.clone().into());
                t.insert("http_headers".into(), toml::Value::Table(vars));
            }
            if let Some(s) = self.timeouts.0 {
                t.insert("startup_timeout_sec".into(), s.into());
            }
            if let Some(s) = self.timeouts.1 {
                t.insert("tool_timeout_sec".into(), s.into());
            }
            t
        }
    }

    fn source(usable: bool) -> impl Strategy<Value = Source> {
        let command = if usable {
            prop_oneof![
                "[a-z./~-]{0,8}[a-z]",
                tricky_text().prop_map(|t| format!("x{t}"))
            ]
            .boxed()
        } else {
            prop_oneof![Just(String::new()), Just("  ".to_owned()), tricky_text()].boxed()
        };
        let url = if usable {
            ("[a-z]{1,8}", "[a-z0-9/._~-]{0,12}")
                .prop_map(|(h, p)| format!("https://{h}.example/{p}"))
                .boxed()
        } else {
            prop_oneof![
                Just("http://example.com/mcp".to_owned()),
                Just("ftp://x".to_owned()),
                tricky_text()
            ]
            .boxed()
        };
        let seconds = if usable {
            prop::option::of(1.0..1e6f64).boxed()
        } else {
            prop::option::of(prop_oneof![
                Just(0.0),
                Just(0.0004),
                Just(-3.0),
                any::<f64>()
            ])
            .boxed()
        };
        let extra = prop::collection::vec(
            (
                prop_oneof![key(), tricky_text()],
                prop_oneof![tricky_text().prop_map(Value::String), json_value()],
            ),
            0..3,
        )
        .prop_map(|extra| {
            // Only keys import does not read: the others are generated.
            extra
                .into_iter()
                .filter(|(k, _)| {
                    !JSON_KEYS.contains(&k.as_str()) && !CODEX_KEYS.contains(&k.as_str())
                })
                .collect::<Vec<_>>()
        });
        (
            prop_oneof![3 => "[a-z][a-z0-9_-]{0,31}", 1 => "[a-z]{30,40}", 2 => any_name()],
            any::<bool>(),
            command,
            url,
            prop::collection::vec(tricky_text(), 0..3),
            prop::option::weighted(0.2, tricky_text()),
            variables(),
            extra,
            (seconds.clone(), seconds),
        )
            .prop_map(
                |(name, stdio, command, url, args, cwd, vars, extra, timeouts)| Source {
                    name,
                    stdio,
                    command,
                    url,
                    args,
                    cwd,
                    vars,
                    extra,
                    timeouts,
                },
            )
    }

    /// An `mcpServers` file: the user's servers and maybe projects' (whose
    /// names may repeat the user's), as `~/.claude.json` has them.
    fn json_file(servers: &[Source], projects: &[(String, usize)], hooks: &[String]) -> String {
        let table = |s: &[Source]| -> Value {
            Value::Object(s.iter().map(|s| (s.name.clone(), s.json())).collect())
        };
        let mut file = json!({"mcpServers": table(servers)});
        if !projects.is_empty() {
            let projects: Map<String, Value> = projects
                .iter()
                .map(|(path, n)| (path.clone(), json!({"mcpServers": table(&servers[..*n])})))
                .collect();
            file["projects"] = Value::Object(projects);
        }
        if !hooks.is_empty() {
            let handlers: Vec<Value> = hooks
                .iter()
                .map(|c| json!({"type": "command", "command": c}))
                .collect();
            file["hooks"] = json!({"Stop": [{"hooks": handlers}]});
        }
        file.to_string()
    }

    fn codex_file(servers: &[Source]) -> Result<String, toml::ser::Error> {
        let table: toml::Table = servers
            .iter()
            .map(|s| (s.name.clone(), toml::Value::Table(s.codex())))
            .collect();
        let mut file = toml::Table::new();
        file.insert("model".into(), "o3".into());
        file.insert("mcp_servers".into(), toml::Value::Table(table));
        toml::to_string(&file)
    }

    /// The checks every import must pass: no secret in the text, the text
    /// is TOML, and (for usable sources) a config mcpvisor loads with
    /// every server disabled and asking.
    fn check(got: &Imported, servers: &[Source], usable: bool) -> Result<(), TestCaseError> {
        for s in servers.iter().flat_map(Source::secrets) {
            prop_assert!(!got.toml.contains(s.as_str()), "{} in:\n{}", s, got.toml);
        }
        for found in &got.secrets {
            prop_assert!(found.value.as_ref().is_none_or(|v| !v.is_empty()));
        }
        let table = toml::from_str::<toml::Table>(&got.toml);
        prop_assert!(table.is_ok(), "{:?} in:\n{}", table.err(), got.toml);
        if usable {
            let cfg = crate::messages::config::file::parse_config("imported.toml", &got.toml);
            prop_assert!(cfg.is_ok(), "{:?} in:\n{}", cfg.err(), got.toml);
            let cfg = cfg.unwrap();
            prop_assert_eq!(cfg.servers.len(), got.servers.len());
            for s in &cfg.servers {
                prop_assert!(!s.enabled);
                prop_assert_eq!(s.trust, crate::messages::trust::TrustMode::Ask);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn an_mcp_servers_json_import_hides_every_secret_and_writes_toml_mcpvisor_loads(
            usable in prop::bool::weighted(0.7),
            servers in prop::collection::vec(source(true), 0..5),
            rough in prop::collection::vec(source(false), 0..2),
            projects in prop::collection::vec((prop_oneof!["/home/u/[a-z]{1,6}", tricky_text()], 0usize..3), 0..3),
            hooks in prop::collection::vec(tricky_text().prop_map(|c| format!("run {c}")), 0..3),
            hooks_path in prop_oneof!["/home/u/[a-z]{1,6}/settings.json", tricky_text()],
        ) {
            // TRUST-2, TRUST-5, BIN-1; a settings file's hooks come along,
            // commented out.
            let mut servers = servers;
            if !usable {
                servers.extend(rough);
            }
            let projects: Vec<(String, usize)> =
                projects.into_iter().map(|(p, n)| (p, n.min(servers.len()))).collect();
            let text = json_file(&servers, &projects, &hooks);
            let got = import_file("mcp.json", &hooks_path, &text, None);
            prop_assert!(got.is_ok(), "{:?}", got);
            check(&got.unwrap(), &servers, usable)?;
        }

        #[test]
        fn a_codex_config_import_hides_every_secret_and_writes_toml_mcpvisor_loads(
            usable in prop::bool::weighted(0.7),
            servers in prop::collection::vec(source(true), 0..5),
            rough in prop::collection::vec(source(false), 0..2),
        ) {
            // TRUST-2, TRUST-5, BIN-1.
            let mut servers = servers;
            if !usable {
                servers.extend(rough);
            }
            // A name TOML cannot write (none here: toml quotes any key).
            let Ok(text) = codex_file(&servers) else {
                return Ok(());
            };
            let got = import_servers("config.toml", &text);
            prop_assert!(got.is_ok(), "{:?}\n{}", got, text);
            check(&got.unwrap(), &servers, usable)?;
        }
    }
}
