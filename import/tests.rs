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
            ("gh", "GITHUB_TOKEN", "GITHUB_TOKEN", Some("ghp_live")),
            ("web", "Authorization", "WEB_TOKEN", Some("sk_live")),
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
        got.toml.contains("\"GITHUB_TOKEN\" = \"GITHUB_TOKEN\"")
            && got
                .toml
                .contains("\"Authorization\" = \"Bearer ${WEB_TOKEN}\""),
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
            if t.starts_with("[hooks]") || t.starts_with("claude = ") || t.starts_with("codex = ") {
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
    let cfg =
        crate::messages::config::file::parse_config("out.toml", &uncommented(&got.toml)).unwrap();
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
        bad.as_ref()
            .is_err_and(|e| matches!(e, ImportError::Hooks(_)) && e.to_string().contains("x.json"))
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
    let beside = import_servers_beside("c.json", json, &["notes".to_owned()], &[]).unwrap();
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
fn a_codex_config_toml_keeps_its_timeouts_and_its_bearer_token_variable() {
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
    // The bearer token's variable is carried: the header keeps its scheme.
    assert!(
        got.toml
            .contains("header_secrets = { \"Authorization\" = \"Bearer ${LINEAR_TOKEN}\" }"),
        "{}",
        got.toml
    );
    assert!(
        got.secrets
            .iter()
            .any(|s| s.secret_name == "LINEAR_TOKEN" && s.value.is_none()),
        "{:?}",
        got.secrets
    );
    crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
}

#[test]
fn a_file_of_another_kind_is_named() {
    let err = import_servers("x.json", r#"{"a": 1}"#).unwrap_err();
    assert!(matches!(err, ImportError::NotAServersConfig(_)), "{err:?}");
    assert!(err.to_string().contains("no `mcpServers`"), "{err}");
    let err = import_servers("x.toml", "a = 1").unwrap_err();
    assert!(matches!(err, ImportError::NotAServersConfig(_)), "{err:?}");
    assert!(err.to_string().contains("not a Codex config.toml"), "{err}");
    let err = import_servers("x", "{oops").unwrap_err();
    assert!(matches!(err, ImportError::Unreadable(_)), "{err:?}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
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
    // capped at i64::MAX; a negative time is 0, which the config
    // refuses by name.
    let codex =
        "[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout_sec = 1e300\ntool_timeout_sec = -2.0\n";
    let got = import_servers("config.toml", codex).unwrap();
    assert!(
        got.toml
            .contains(&format!("startup_timeout_ms = {}\n", i64::MAX)),
        "{}",
        got.toml
    );
    // That server is kept commented out, under the reason.
    assert!(
        got.toml.contains(
            "refuses this server as written: servers.a.tool_call_timeout_ms must be greater than 0"
        ),
        "{}",
        got.toml
    );
    crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
}

// Issue 37, item 3: a variable's secret is stored under the variable's own
// name, the one its server's documentation names; a bearer header keeps
// its scheme; two servers with one variable name and different values do
// not share a secret.
#[test]
fn secrets_are_named_as_their_users_expect_and_never_shared_by_mistake() {
    let json = r#"{"mcpServers": {
            "github": {"command": "npx", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_1"}},
            "github-work": {"command": "npx", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_2"}},
            "github-copy": {"command": "npx", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_1"}},
            "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${REMOTE_KEY}"}}
        }}"#;
    let got = import_servers(".mcp.json", json).unwrap();
    let named: Vec<(&str, &str)> = got
        .secrets
        .iter()
        .map(|s| (s.server.as_str(), s.secret_name.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            ("github", "GITHUB_PERSONAL_ACCESS_TOKEN"),
            ("github-copy", "GITHUB_PERSONAL_ACCESS_TOKEN"),
            ("github-work", "GITHUB_WORK_GITHUB_PERSONAL_ACCESS_TOKEN"),
            ("remote", "REMOTE_KEY"),
        ]
    );
    assert!(
        got.toml
            .contains("header_secrets = { \"Authorization\" = \"Bearer ${REMOTE_KEY}\" }"),
        "{}",
        got.toml
    );
    // What an earlier file stored under the name is not reused either.
    let again = import_servers_beside(
        "other.json",
        r#"{"mcpServers": {"gh2": {"command": "npx", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_3"}}}}"#,
        &[],
        &got.secrets,
    )
    .unwrap();
    assert_eq!(
        again.secrets[0].secret_name,
        "GH2_GITHUB_PERSONAL_ACCESS_TOKEN"
    );
    crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
}

// Issue 37, item 2: a server mcpvisor would refuse as written (plain
// http:// to a remote host) is kept commented out under the reason; the
// file stays one every command accepts.
#[test]
fn a_server_the_config_would_refuse_is_written_commented_out_with_the_reason() {
    let json = r#"{"mcpServers": {
            "remote": {"type": "http", "url": "http://example.com/mcp"},
            "local": {"type": "http", "url": "http://127.0.0.1:8080/mcp"}
        }}"#;
    let got = import_servers("claude.json", json).unwrap();
    assert_eq!(got.servers, ["local"]);
    assert!(
        got.toml.contains("# Commented out: mcpvisor refuses this server as written: servers.remote.url: endpoint \"http://example.com/mcp\" uses plain http://")
            && got.toml.contains("# [servers.remote]\n# url = \"http://example.com/mcp\"\n"),
        "{}",
        got.toml
    );
    assert!(
        got.skipped
            .iter()
            .any(|s| s.starts_with("remote: written commented out")),
        "{:?}",
        got.skipped
    );
    let cfg = crate::messages::config::file::parse_config("imported", &got.toml).unwrap();
    assert_eq!(cfg.servers.len(), 1);
}
