use super::authorization_refused;

#[test]
fn a_refused_call_names_the_scope_and_the_fix_for_oauth_and_plain_servers() {
    // CONN-13: a step-up names the scope and the login that gets it.
    let step_up = authorization_refused(
        "notes",
        true,
        r#"Bearer error="insufficient_scope", scope="files:write""#,
    );
    assert_eq!(
        step_up,
        "the server requires more authorization for this call (HTTP 403 insufficient_scope, scope \"files:write\"); nothing was executed: run `mcpvisor auth login notes --scope \"files:write\"`, then call again"
    );
    // No scope in the challenge: the login, without --scope.
    let plain_401 = authorization_refused("notes", true, "Bearer");
    assert!(plain_401.contains("(HTTP 401/403)"), "{plain_401}");
    assert!(
        plain_401.ends_with("run `mcpvisor auth login notes`, then call again"),
        "{plain_401}"
    );
    // A server without [oauth]: its credentials, or an [oauth] table.
    let no_oauth = authorization_refused("api", false, r#"Bearer scope="x""#);
    assert!(
        no_oauth.contains("scope \"x\"")
            && no_oauth.contains("[servers.api] (`headers`, `header_secrets`)")
            && no_oauth.contains("[servers.api.oauth]")
            && !no_oauth.contains("auth login"),
        "{no_oauth}"
    );
}
