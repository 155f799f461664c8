use super::*;

#[test]
fn an_oauth_table_is_checked_where_it_is_written() {
    // CONN-13: an empty table is enough; its mistakes say where.
    let cfg = parse_config(
        "m.toml",
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\n",
    )
    .unwrap();
    match &cfg.servers[0].transport {
        TransportConfig::StreamableHttp(h) => {
            assert_eq!(
                h.oauth.as_deref(),
                Some(&crate::messages::config::OAuthConfig::default())
            );
        }
        other => panic!("{other:?}"),
    }
    let bad = |text: &str| parse_config("m.toml", text).unwrap_err().to_string();
    let e = bad("[servers.n]\ncommand = \"x\"\n[servers.n.oauth]\n");
    assert!(
        e.contains("servers.n.oauth applies only to url servers"),
        "{e}"
    );
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"client_credentials\"\n",
    );
    assert!(e.contains("needs client_id"), "{e}");
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"enterprise\"\nclient_id = \"c\"\n",
    );
    assert!(e.contains("needs client_id, idp_issuer"), "{e}");
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\nclient_metadata_url = \"http://x/m.json\"\nsigning_algorithm = \"HS256\"\n",
    );
    assert!(
        e.contains("must be an https URL") && e.contains("expected ES256"),
        "{e}"
    );
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\nclient_sercet = \"S\"\n",
    );
    assert!(e.contains("client_sercet"), "{e}");
    // ERA-8: the workload-identity grant needs its JWT; DPoP does not
    // apply to the enterprise exchange.
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"jwt_bearer\"\n",
    );
    assert!(
        e.contains("servers.n.oauth: grant = \"jwt_bearer\" needs assertion"),
        "{e}"
    );
    let e = bad(
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"enterprise\"\nclient_id = \"c\"\nidp_issuer = \"i\"\nidp_token_endpoint = \"https://i/t\"\nidp_client_id = \"c\"\nidp_id_token = \"t\"\ndpop = true\n",
    );
    assert!(e.contains("dpop = true does not apply"), "{e}");
    let cfg = parse_config(
        "/etc/mcp/m.toml",
        "[servers.n]\nurl = \"https://n.example/mcp\"\n[servers.n.oauth]\ngrant = \"jwt_bearer\"\nassertion_file = \"tokens/wif.jwt\"\ndpop = true\n",
    )
    .unwrap();
    match &cfg.servers[0].transport {
        TransportConfig::StreamableHttp(h) => {
            let o = h.oauth.as_deref().unwrap();
            assert_eq!(o.grant, crate::messages::config::OAuthGrant::JwtBearer);
            assert_eq!(
                o.assertion_file.as_deref(),
                Some(std::path::Path::new("/etc/mcp/tokens/wif.jwt"))
            );
            assert_eq!(o.dpop, Some(true));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_relative_command_and_cwd_resolve_against_the_config_files_directory() {
    let cfg = parse_config(
            "/etc/mcp/mcpvisor.toml",
            "[servers.a]\ncommand = \"bin/server\"\ncwd = \"data\"\n[servers.b]\ncommand = \"node\"\nargs = [\"rel/server.js\"]\n",
        )
        .unwrap();
    let stdio = |i: usize| match &cfg.servers[i].transport {
        TransportConfig::Stdio(s) => s.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(stdio(0).command, "/etc/mcp/bin/server");
    assert_eq!(stdio(0).cwd, Some(PathBuf::from("/etc/mcp/data")));
    assert_eq!(stdio(1).command, "node", "a bare name is looked up in PATH");
    assert_eq!(stdio(1).args, vec!["rel/server.js".to_owned()]);
}

#[test]
fn config_file_with_both_transports_parses_with_defaults() {
    let cfg = parse_config_file(
        "t.toml",
        r#"
[servers.everything]
command = "node"
args = ["server.js", "stdio"]
tool_call_timeout_ms = 1000
idle_stop_after_s = 0
[servers.everything.reconnect]
max_attempts = 3
[servers.remote]
url = "https://example.com/mcp"
headers = { "x-tenant" = "acme" }
"#,
    )
    .unwrap();
    assert_eq!(cfg.len(), 2);
    assert_eq!(cfg[0].server_name, "everything");
    assert_eq!(cfg[0].tool_call_timeout, Duration::from_millis(1000));
    assert_eq!(cfg[0].idle_stop_after, None);
    assert_eq!(cfg[0].reconnect.max_attempts, 3);
    assert_eq!(cfg[0].reconnect.initial_delay, Duration::from_millis(500));
    assert_eq!(cfg[1].transport.kind(), "streamable-http");
    assert_eq!(cfg[1].request_timeout, Duration::from_millis(15000));
}

#[test]
fn invalid_reconnect_policy_is_rejected_naming_every_field() {
    // RECO-1: delays <= 0, initial > max, attempts < 1 rejected at load.
    let err = parse_config_file(
        "t.toml",
        r#"
[servers.bad]
command = "x"
[servers.bad.reconnect]
initial_delay_ms = 0
max_attempts = 0
[servers.worse]
command = "x"
[servers.worse.reconnect]
initial_delay_ms = 5000
max_delay_ms = 100
"#,
    )
    .unwrap_err();
    let all = err.problems.join("\n");
    assert!(
        all.contains("servers.bad.reconnect.initial_delay_ms must be greater than 0"),
        "{all}"
    );
    assert!(
        all.contains("servers.bad.reconnect.max_attempts must be at least 1"),
        "{all}"
    );
    assert!(
        all.contains(
            "servers.worse.reconnect.initial_delay_ms (5000) must not exceed max_delay_ms (100)"
        ),
        "{all}"
    );
}

#[test]
fn a_remote_plain_http_url_is_rejected_naming_the_field() {
    // TRUST-3
    let err =
        parse_config("t.toml", "[servers.r]\nurl = \"http://example.com/mcp\"\n").unwrap_err();
    let all = err.problems.join("\n");
    assert!(all.contains("servers.r.url"), "{all}");
    assert!(all.contains("use https://"), "{all}");
}

#[test]
fn tool_trust_overrides_the_server_trust_per_raw_tool_name() {
    let cfg = parse_config(
            "t.toml",
            "[servers.a]\ncommand = \"x\"\ntrust = \"always\"\ntool_trust = { delete = \"never\", write = \"ask\" }\n",
        )
        .unwrap();
    let s = &cfg.servers[0];
    assert_eq!(s.trust, TrustMode::Always);
    assert_eq!(s.tool_trust.get("delete"), Some(&TrustMode::Never));
    assert_eq!(s.tool_trust.get("write"), Some(&TrustMode::Ask));
    assert!(
        parse_config(
            "t.toml",
            "[servers.a]\ncommand = \"x\"\ntool_trust = { delete = \"maybe\" }\n"
        )
        .is_err()
    );
}

#[test]
fn secrets_come_from_a_file_or_a_keyring_never_both() {
    let cfg = parse_config("t.toml", "[secrets]\nkeyring = \"mcpvisor\"\n").unwrap();
    assert_eq!(cfg.secrets_keyring.as_deref(), Some("mcpvisor"));
    let e = parse_config(
        "t.toml",
        "[secrets]\nkeyring = \"mcpvisor\"\nfile = \"s.toml\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("both a file and a keyring"), "{e}");
}

#[test]
fn the_hooks_table_names_files_and_approved_hashes() {
    let cfg = parse_config(
        "t.toml",
        &format!(
            "[hooks]\nclaude = \"h/cc.json\"\ncodex = \"cx.json\"\napproved = [\"{}\"]\n",
            "a".repeat(64)
        ),
    )
    .unwrap();
    assert_eq!(cfg.hooks.claude, Some(PathBuf::from("h/cc.json")));
    assert_eq!(cfg.hooks.codex, Some(PathBuf::from("cx.json")));
    assert_eq!(cfg.hooks.approved.len(), 1);
    let e = parse_config("t.toml", "[hooks]\napproved = [\"abc\"]\n").unwrap_err();
    assert!(e.to_string().contains("t.toml: [hooks] approved"), "{e}");
    assert!(parse_config("t.toml", "[hooks]\nclaud = \"x\"\n").is_err());
}

#[test]
fn the_events_table_names_the_event_log() {
    // OBS-2
    let cfg = parse_config(
        "t.toml",
        "[events]\nlog = \"logs/events.jsonl\"\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    assert_eq!(cfg.event_log, Some(PathBuf::from("logs/events.jsonl")));
    // Relative to the config file's directory, `~/` at home.
    let other = parse_config(
        "/etc/mcp/m.toml",
        "[events]\nlog = \"logs/e.jsonl\"\n[secrets]\nfile = \"~/s.toml\"\n",
    )
    .unwrap();
    assert_eq!(
        other.event_log,
        Some(PathBuf::from("/etc/mcp/logs/e.jsonl"))
    );
    assert_eq!(
        other.secrets_file,
        Some(PathBuf::from(TEST_HOME).join("s.toml"))
    );
    assert_eq!(cfg.servers.len(), 1);
    assert!(parse_config("t.toml", "[events]\nlogs = 1\n").is_err());
}

#[test]
fn unknown_keys_are_rejected_with_position() {
    let err = parse_config_file(
        "t.toml",
        "[servers.a]\ncommand = \"x\"\n[servers.a.reconnect]\nbogus = 1\n",
    )
    .unwrap_err();
    let all = err.problems.join("\n");
    assert!(all.contains("t.toml"), "{all}");
    assert!(all.contains("bogus"), "{all}");
    assert!(all.contains("line 4"), "{all}");
}

#[test]
fn bad_server_name_and_missing_transport_are_reported() {
    // CONN-2: the error names the field.
    let err = parse_config_file(
        "t.toml",
        "[servers.\"my server\"]\ncommand = \"x\"\n[servers.b]\n",
    )
    .unwrap_err();
    let all = err.problems.join("\n");
    assert!(all.contains("server_name \"my server\""), "{all}");
    assert!(all.contains("servers.b: missing command"), "{all}");
}

#[test]
fn the_liveness_pings_are_set_from_the_file() {
    // CONN-14: interval, timeout and failure threshold per HTTP server.
    let cfg = parse_config_file(
            "t.toml",
            "[servers.r]\nurl = \"https://example.com/mcp\"\nping_interval_ms = 2000\nping_timeout_ms = 700\nping_failure_threshold = 5\n",
        )
        .unwrap();
    let TransportConfig::StreamableHttp(h) = &cfg[0].transport else {
        panic!("an HTTP server");
    };
    assert_eq!(h.ping_interval, Duration::from_millis(2000));
    assert_eq!(h.ping_timeout, Duration::from_millis(700));
    assert_eq!(h.ping_failure_threshold, 5);
    let zero = parse_config_file(
        "t.toml",
        "[servers.r]\nurl = \"https://example.com/mcp\"\nping_failure_threshold = 0\n",
    )
    .unwrap_err();
    assert!(
        zero.to_string().contains("ping_failure_threshold"),
        "{zero}"
    );
}

#[test]
fn model_tool_search_is_checked_where_it_is_written() {
    // Issue 36: `[model] tool_search` names one of three kinds (whether
    // the provider has a native search is `chat`'s to check, once its
    // flags are merged).
    let ok = parse_config(
        "m.toml",
        "[model]\nprovider = \"anthropic\"\ntool_search = \"native\"\n",
    )
    .unwrap();
    assert_eq!(ok.model.tool_search.as_deref(), Some("native"));
    let bad = |text: &str| parse_config("m.toml", text).unwrap_err().to_string();
    let e = bad("[model]\ntool_search = \"server\"\n");
    assert!(
        e.contains(
            "m.toml: [model] tool_search = \"server\": expected \"auto\", \"native\" or \"local\""
        ),
        "{e}"
    );
}
