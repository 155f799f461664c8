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
            .filter(|(k, _)| !JSON_KEYS.contains(&k.as_str()) && !CODEX_KEYS.contains(&k.as_str()))
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
