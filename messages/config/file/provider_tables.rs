use super::*;

fn err(text: &str) -> String {
    parse_config("/etc/mcp/mcpvisor.toml", text)
        .unwrap_err()
        .problems
        .join("\n")
}

#[test]
fn a_browser_provider_table_parses_and_its_paths_resolve_against_the_file() {
    let cfg = parse_config(
            "/etc/mcp/mcpvisor.toml",
            "[providers.browser]\nkind = \"browser-playwright-mcp\"\nversion = \"0.0.83\"\npackage_dir = \"peers\"\nexecutable = \"bin/chrome\"\ntrust = \"always\"\n",
        )
        .unwrap();
    let b = cfg.providers.browser.unwrap();
    assert_eq!(b.package_dir, Some(PathBuf::from("/etc/mcp/peers")));
    assert_eq!(b.executable, Some(PathBuf::from("/etc/mcp/bin/chrome")));
    assert_eq!(b.trust, Some(TrustMode::Always));
    assert!(cfg.servers.is_empty());
}

#[test]
fn provider_tables_with_bad_kinds_modes_and_sizes_say_what_and_where() {
    let e = err("[providers.browser]\nkind = \"browser-magic\"\n");
    assert!(
        e.contains("[providers.browser] kind = \"browser-magic\": expected one of"),
        "{e}"
    );
    assert!(e.contains("\"browser-native\""), "{e}");
    let e = err("[providers.computer]\nkind = \"browser-native\"\n");
    assert!(e.contains("belongs in [providers.browser]"), "{e}");
    let e = err("[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\n");
    assert!(e.contains("needs cdp_endpoint"), "{e}");
    // TRUST-3: the one endpoint validator.
    let e = err(
        "[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://10.0.0.5:9222\"\n",
    );
    assert!(e.contains("cdp_endpoint") && e.contains("10.0.0.5"), "{e}");
    let e = err(
        "[providers.computer]\nkind = \"computer-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n",
    );
    assert!(e.contains("is for the browser kinds"), "{e}");
    let e = err(
        "[providers.browser]\nkind = \"browser-native\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n",
    );
    assert!(e.contains("is for mode = \"attach\""), "{e}");
    assert!(
            parse_config(
                "x.toml",
                "[providers.browser]\nkind = \"browser-native\"\nmode = \"attach\"\ncdp_endpoint = \"http://127.0.0.1:9222\"\n"
            )
            .is_ok()
        );
    let e = err("[providers.browser]\nkind = \"browser-native\"\nmode = \"borrow\"\n");
    assert!(e.contains("expected \"launch\" or \"attach\""), "{e}");
    let e = err("[providers.browser]\nkind = \"browser-native\"\nwindow = [10, 10]\n");
    assert!(e.contains("window = [10, 10]"), "{e}");
    let e = err("[providers.browser]\nkind = \"browser-native\"\naction_timeout_ms = 0\n");
    assert!(e.contains("action_timeout_ms = 0"), "{e}");
    let e = err("[providers.browser]\nkind = \"browser-native\"\nwindwo = [1, 2]\n");
    assert!(e.contains("windwo"), "{e}");
    let e = err("[providers.tablet]\nkind = \"browser-native\"\n");
    assert!(e.contains("tablet"), "{e}");
}
