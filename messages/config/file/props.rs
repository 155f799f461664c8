//! Property tests of the TOML config parser.

use super::*;
use crate::messages::prop_gen::{config, tricky_text};
use proptest::prelude::*;
use toml::{Table, Value as Toml};

/// Where the config came from.
fn origin() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z/._-]{1,20}", tricky_text()]
}

/// A server name: valid (CONN-2) or not.
fn server_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9_-]{1,32}",
        1 => "[A-Za-z0-9_-]{33,40}",
        1 => Just(String::new()),
        1 => "[a-z .é/\"]{1,10}",
    ]
}

fn toml_scalar() -> impl Strategy<Value = Toml> {
    prop_oneof![
        "[a-z:/.$ -]{0,12}".prop_map(Toml::String),
        Just(Toml::String("https://example.com/mcp".into())),
        Just(Toml::String("http://example.com/mcp".into())),
        Just(Toml::String("http://localhost:8080/mcp".into())),
        prop::sample::select(vec![
            "ask", "always", "never", "keep", "remove", "fail", "truncate", "warn"
        ])
        .prop_map(|s| Toml::String(s.into())),
        any::<i64>().prop_map(Toml::Integer),
        (-2i64..5).prop_map(Toml::Integer),
        (0i64..100_000).prop_map(Toml::Integer),
        any::<f64>().prop_map(Toml::Float),
        any::<bool>().prop_map(Toml::Boolean),
    ]
}

fn toml_value() -> impl Strategy<Value = Toml> {
    toml_scalar().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Toml::Array),
            prop::collection::btree_map("[A-Za-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Toml::Table(m.into_iter().collect())),
        ]
    })
}

const SERVER_KEYS: [&str; 25] = [
    "command",
    "args",
    "env",
    "env_passthrough",
    "env_secrets",
    "header_secrets",
    "cwd",
    "url",
    "headers",
    "ping_interval_ms",
    "ping_timeout_ms",
    "ping_failure_threshold",
    "tool_call_timeout_ms",
    "startup_timeout_ms",
    "request_timeout_ms",
    "fail_on_startup_error",
    "max_instruction_bytes",
    "oversized_instructions",
    "enabled",
    "trust",
    "tool_trust",
    "idle_stop_after_s",
    "on_disconnect",
    "reconnect",
    "bogus",
];

const RECONNECT_KEYS: [&str; 6] = [
    "enabled",
    "initial_delay_ms",
    "max_delay_ms",
    "max_attempts",
    "jitter",
    "bogus",
];

/// A value for `key`: mostly of the type the field takes (so that the
/// validation behind the TOML layer is reached), sometimes anything.
fn value_for(key: &'static str) -> BoxedStrategy<Toml> {
    let s = |v: &str| Toml::String(v.to_owned());
    let strings = || prop::collection::vec("[a-zA-Z_ -]{0,6}".prop_map(Toml::String), 0..3);
    let string_map = |values: Vec<&'static str>| {
        prop::collection::btree_map("[A-Za-z_-]{1,6}", prop::sample::select(values), 0..3).prop_map(
            |m| {
                Toml::Table(
                    m.into_iter()
                        .map(|(k, v)| (k, Toml::String(v.into())))
                        .collect(),
                )
            },
        )
    };
    let typed: BoxedStrategy<Toml> = match key {
        "command" | "cwd" => prop_oneof![
            "[a-z./-]{1,10}".prop_map(Toml::String),
            Just(s("")),
            Just(s("  ")),
        ]
        .boxed(),
        "url" => prop::sample::select(vec![
            "https://example.com/mcp",
            "http://example.com/mcp",
            "http://localhost:8080/mcp",
            "http://[::1]/mcp",
            "ftp://example.com",
            "not a url",
            "",
        ])
        .prop_map(s)
        .boxed(),
        "args" | "env_passthrough" => strings().prop_map(Toml::Array).boxed(),
        "env" | "headers" | "env_secrets" | "header_secrets" => {
            string_map(vec!["a", "SECRET_NAME", ""]).boxed()
        }
        "tool_trust" => string_map(vec!["ask", "always", "never", "maybe"]).boxed(),
        "trust" => prop::sample::select(vec!["ask", "always", "never", "maybe"])
            .prop_map(s)
            .boxed(),
        "on_disconnect" => prop::sample::select(vec!["keep", "remove", "drop"])
            .prop_map(s)
            .boxed(),
        "oversized_instructions" => prop::sample::select(vec!["fail", "truncate", "warn", "nope"])
            .prop_map(s)
            .boxed(),
        "fail_on_startup_error" | "enabled" | "jitter" => {
            any::<bool>().prop_map(Toml::Boolean).boxed()
        }
        "reconnect" => prop::collection::btree_map(
            prop::sample::select(RECONNECT_KEYS.to_vec()),
            Just(()),
            0..5,
        )
        .prop_flat_map(|keys| {
            keys.into_keys()
                .map(|k| (Just(k.to_owned()), value_for(k)))
                .collect::<Vec<_>>()
        })
        .prop_map(|kv| Toml::Table(kv.into_iter().collect()))
        .boxed(),
        // The numbers: milliseconds, seconds, counts, bytes.
        _ => prop_oneof![
            3 => (0i64..100_000).prop_map(Toml::Integer),
            1 => Just(Toml::Integer(0)),
            1 => (i64::from(u32::MAX) - 1..i64::from(u32::MAX) + 2).prop_map(Toml::Integer),
            1 => any::<i64>().prop_map(Toml::Integer),
        ]
        .boxed(),
    };
    prop_oneof![12 => typed, 1 => toml_value()].boxed()
}

/// A `[servers.NAME]` table of random known (and unknown) keys of
/// random types.
fn server_table() -> impl Strategy<Value = Table> {
    let transport = prop::sample::select(vec![
        vec!["command"],
        vec!["url"],
        vec!["command", "url"],
        vec![],
    ]);
    (
        prop::collection::btree_map(prop::sample::select(SERVER_KEYS.to_vec()), Just(()), 0..5),
        transport,
    )
        .prop_flat_map(|(mut keys, transport)| {
            keys.extend(transport.into_iter().map(|k| (k, ())));
            keys.into_keys()
                .map(|k| (Just(k.to_owned()), value_for(k)))
                .collect::<Vec<_>>()
        })
        .prop_map(|kv| kv.into_iter().collect())
}

/// A whole file of `[servers.NAME]` tables (and sometimes other tables).
fn config_text() -> impl Strategy<Value = String> {
    let other = prop::sample::select(vec!["events", "secrets", "hooks", "bogus"]);
    (
        prop::collection::btree_map(server_name(), server_table(), 0..4),
        prop::option::weighted(0.2, (other, toml_value())),
    )
        .prop_filter_map("TOML the toml crate can write", |(servers, other)| {
            let mut root = Table::new();
            root.insert(
                "servers".into(),
                Toml::Table(
                    servers
                        .into_iter()
                        .map(|(k, v)| (k, Toml::Table(v)))
                        .collect(),
                ),
            );
            if let Some((k, v)) = other {
                root.insert(k.to_owned(), v);
            }
            toml::to_string(&root).ok()
        })
}

/// One valid server: its name, and its command or its URL.
#[derive(Debug, Clone)]
struct ValidServer {
    name: String,
    command: Option<String>,
    url: String,
    args: Vec<String>,
    timeouts: [Option<u32>; 3],
    reconnect: Option<(u32, u32, u32)>,
}

fn valid_server() -> impl Strategy<Value = ValidServer> {
    (
        "[A-Za-z0-9_-]{1,32}",
        prop::option::of("[a-z./-]{0,10}[a-z]"),
        "https://[a-z]{1,10}\\.example(:[0-9]{2,4})?/[a-z/]{0,10}",
        prop::collection::vec("[a-z é-]{0,8}", 0..3),
        [
            prop::option::of(1u32..),
            prop::option::of(1u32..),
            prop::option::of(1u32..),
        ],
        prop::option::of((1u32..10_000, 0u32..10_000, 1u32..100)),
    )
        .prop_map(
            |(name, command, url, args, timeouts, reconnect)| ValidServer {
                name,
                command,
                url,
                args,
                timeouts,
                reconnect: reconnect
                    .map(|(initial, extra, attempts)| (initial, initial + extra, attempts)),
            },
        )
}

fn valid_text(servers: &[ValidServer]) -> String {
    let mut table = Table::new();
    for s in servers {
        let mut t = Table::new();
        match &s.command {
            Some(c) => {
                t.insert("command".into(), Toml::String(c.clone()));
                t.insert(
                    "args".into(),
                    Toml::Array(s.args.iter().cloned().map(Toml::String).collect()),
                );
            }
            None => {
                t.insert("url".into(), Toml::String(s.url.clone()));
            }
        }
        for (key, v) in [
            "tool_call_timeout_ms",
            "startup_timeout_ms",
            "request_timeout_ms",
        ]
        .into_iter()
        .zip(s.timeouts)
        {
            if let Some(v) = v {
                t.insert(key.into(), Toml::Integer(v.into()));
            }
        }
        if let Some((initial, max, attempts)) = s.reconnect {
            let mut r = Table::new();
            r.insert("initial_delay_ms".into(), Toml::Integer(initial.into()));
            r.insert("max_delay_ms".into(), Toml::Integer(max.into()));
            r.insert("max_attempts".into(), Toml::Integer(attempts.into()));
            t.insert("reconnect".into(), Toml::Table(r));
        }
        table.insert(s.name.clone(), Toml::Table(t));
    }
    let mut root = Table::new();
    root.insert("servers".into(), Toml::Table(table));
    toml::to_string(&root).unwrap()
}

/// Every problem names the file; a TOML-level one gives the position and
/// quotes the line (so the key); a validation one names the server and
/// the field.
fn check_problems(
    origin: &str,
    text: &str,
    names: &[String],
    e: &ConfigError,
) -> Result<(), TestCaseError> {
    let named = format!("{origin}: ");
    let lines: Vec<&str> = text.lines().collect();
    for p in &e.problems {
        prop_assert!(p.starts_with(&named), "{}", p);
        let p = &p[named.len()..];
        if let Some(at) = p.strip_prefix("TOML parse error at line ") {
            let line: usize = at.split(',').next().unwrap_or("").parse().unwrap();
            prop_assert!(at.contains(", column "), "{}", p);
            let quoted = lines.get(line - 1).copied().unwrap_or("");
            prop_assert!(
                p.contains(quoted.trim_end()),
                "line {} not quoted: {}",
                line,
                p
            );
        } else if !p.starts_with("[") {
            prop_assert!(
                names.iter().any(|n| {
                    p.starts_with(&format!("servers.{n}."))
                        || p.starts_with(&format!("servers.{n}:"))
                        || p.starts_with(&format!("server_name {n:?} is invalid"))
                }),
                "the server is not named: {}",
                p
            );
            let fields = SERVER_KEYS
                .iter()
                .chain(&RECONNECT_KEYS)
                .chain(&["server_name"]);
            prop_assert!(
                fields.into_iter().any(|f| p.contains(f)),
                "no field named: {}",
                p
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_text_parses_or_fails_naming_its_file(origin in origin(), text in prop_oneof![tricky_text(), "[\\[\\]a-z=\" .\n{},0-9]{0,60}"]) {
        if let Err(e) = parse_config(&origin, &text) {
            prop_assert!(!e.problems.is_empty());
            check_problems(&origin, &text, &[], &e)?;
        }
    }

    #[test]
    fn a_generated_config_parses_or_every_problem_names_file_server_and_field(
        origin in origin(),
        text in config_text(),
    ) {
        // CONN-2: the error names the field; the TOML layer gives the
        // position. Nothing panics on any key of any type.
        let parsed: Table = toml::from_str(&text).unwrap();
        let names: Vec<String> = parsed
            .get("servers")
            .and_then(Toml::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        match parse_config(&origin, &text) {
            Ok(cfg) => {
                let got: Vec<&str> = cfg.servers.iter().map(|s| s.server_name.as_str()).collect();
                prop_assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
                for s in &cfg.servers {
                    prop_assert_eq!(s.validate(), Ok(()));
                }
            }
            Err(e) => check_problems(&origin, &text, &names, &e)?,
        }
    }

    #[test]
    fn a_valid_config_parses_to_the_servers_written(
        servers in prop::collection::btree_map("[A-Za-z0-9_-]{1,32}", valid_server(), 0..5),
    ) {
        // CONN-2, CONN-3, RECO-1.
        let servers: Vec<ValidServer> = servers
            .into_iter()
            .map(|(name, s)| ValidServer { name, ..s })
            .collect();
        let text = valid_text(&servers);
        let cfg = parse_config_file("mcpvisor.toml", &text).unwrap();
        prop_assert_eq!(cfg.len(), servers.len());
        for (c, s) in cfg.iter().zip(&servers) {
            prop_assert_eq!(&c.server_name, &s.name);
            match (&c.transport, &s.command) {
                (TransportConfig::Stdio(io), Some(command)) => {
                    prop_assert_eq!(&io.command, command);
                    prop_assert_eq!(&io.args, &s.args);
                }
                (TransportConfig::StreamableHttp(h), None) => prop_assert_eq!(&h.url, &s.url),
                (t, _) => prop_assert!(false, "wrong transport {:?} for {:?}", t, s),
            }
            let ms = |v: Option<u32>, default: u64| Duration::from_millis(v.map_or(default, u64::from));
            prop_assert_eq!(c.tool_call_timeout, ms(s.timeouts[0], DEFAULT_TOOL_CALL_TIMEOUT_MS));
            prop_assert_eq!(c.startup_timeout, ms(s.timeouts[1], DEFAULT_STARTUP_TIMEOUT_MS));
            prop_assert_eq!(c.request_timeout, ms(s.timeouts[2], DEFAULT_REQUEST_TIMEOUT_MS));
            if let Some((initial, max, attempts)) = s.reconnect {
                prop_assert_eq!(c.reconnect.initial_delay, Duration::from_millis(initial.into()));
                prop_assert_eq!(c.reconnect.max_delay, Duration::from_millis(max.into()));
                prop_assert_eq!(c.reconnect.max_attempts, attempts);
            }
        }
    }
}
