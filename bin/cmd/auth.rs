//! `mcpvisor auth login|logout|status NAME`: OAuth for streamable-HTTP
//! servers (CONN-13). The tokens go to the config's secret store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::future::BoxFuture;
use mcpvisor::oauth::{AuthorizationUi, Authorized, LoginRequest};
use mcpvisor::{HttpConfig, SecretStore, TransportConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cli::{AuthCommand, Cli};
use crate::config::{load_config, secret_store};

/// How long a login waits for the browser to come back.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

pub(crate) async fn run(cli: &Cli, what: &AuthCommand) -> anyhow::Result<u8> {
    let cfg = load_config(cli, false)?;
    let name = match what {
        AuthCommand::Login { server, .. }
        | AuthCommand::Logout { server }
        | AuthCommand::Status { server } => server,
    };
    let Some(server) = cfg.servers.iter().find(|s| &s.server_name == name) else {
        bail!("no server named \"{name}\" in the config");
    };
    let TransportConfig::StreamableHttp(http) = &server.transport else {
        bail!("server \"{name}\" is not a url server: OAuth applies to streamable HTTP only");
    };
    let store = secret_store(&cfg)?.context(
        "OAuth tokens are kept in the secret store, and none is configured: add `[secrets] file = \"…\"` (or `keyring = \"mcpvisor\"`) to the config",
    )?;
    match what {
        AuthCommand::Login {
            scope, no_browser, ..
        } => login(cli, name, http, store, scope.as_deref(), *no_browser).await,
        AuthCommand::Logout { .. } => {
            mcpvisor::oauth::logout(name, store)
                .await
                .map_err(anyhow::Error::msg)?;
            if cli.json {
                println!("{}", json!({"server": name, "logged_in": false}));
            } else {
                println!("{name}: logged out (its tokens and client registration are forgotten)");
            }
            Ok(0)
        }
        AuthCommand::Status { .. } => {
            let found = mcpvisor::oauth::status(name, &http.url, store)
                .await
                .map_err(anyhow::Error::msg)?;
            if cli.json {
                println!("{}", status_json(name, found.as_ref()));
            } else {
                match &found {
                    Some(a) => println!("{name}: logged in; {}", describe(a)),
                    None => println!("{name}: not logged in (run `mcpvisor auth login {name}`)"),
                }
            }
            Ok(u8::from(found.is_none()))
        }
    }
}

async fn login(
    cli: &Cli,
    name: &str,
    http: &HttpConfig,
    store: Arc<dyn SecretStore>,
    scope: Option<&str>,
    no_browser: bool,
) -> anyhow::Result<u8> {
    if http.oauth.is_none() {
        bail!(
            "server \"{name}\" has no [servers.{name}.oauth] table: add one (it may be empty) so that its connections send the token"
        );
    }
    let port = http
        .oauth
        .as_ref()
        .and_then(|o| o.redirect_port)
        .unwrap_or(0);
    let ui = LoopbackUi {
        port,
        no_browser,
        listener: Mutex::new(None),
    };
    let request = LoginRequest {
        scopes: scope
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
    };
    let got = mcpvisor::oauth::login(name, http, store, &ui, &request)
        .await
        .map_err(anyhow::Error::msg)?;
    if cli.json {
        println!("{}", status_json(name, Some(&got)));
    } else {
        println!("{name}: logged in; {}", describe(&got));
    }
    Ok(0)
}

fn describe(a: &Authorized) -> String {
    let scopes = if a.scopes.is_empty() {
        "no scope named".to_owned()
    } else {
        format!("scopes {}", a.scopes.join(" "))
    };
    let expiry = a
        .expires_in
        .map(|s| format!(", the access token was valid for {s} s when issued"))
        .unwrap_or_default();
    let refresh = if a.refreshable {
        ", refreshed automatically"
    } else {
        ", not refreshable (log in again when it expires)"
    };
    format!("client id {}, {scopes}{expiry}{refresh}", a.client_id)
}

fn status_json(name: &str, a: Option<&Authorized>) -> serde_json::Value {
    match a {
        Some(a) => json!({
            "server": name, "logged_in": true, "client_id": a.client_id,
            "scopes": a.scopes, "expires_in": a.expires_in, "refreshable": a.refreshable,
        }),
        None => json!({"server": name, "logged_in": false}),
    }
}

/// The binary's authorization step: the redirect comes back to a
/// listener on 127.0.0.1; the URL is printed, and opened in a browser
/// when one is there.
struct LoopbackUi {
    port: u16,
    no_browser: bool,
    listener: Mutex<Option<tokio::net::TcpListener>>,
}

impl AuthorizationUi for LoopbackUi {
    fn redirect_uri(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
                .await
                .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", self.port))?;
            let port = listener
                .local_addr()
                .map_err(|e| format!("the redirect listener has no address: {e}"))?
                .port();
            if let Ok(mut l) = self.listener.lock() {
                *l = Some(listener);
            }
            Ok(format!("http://127.0.0.1:{port}/callback"))
        })
    }

    fn authorize<'a>(
        &'a self,
        server: &'a str,
        url: &'a str,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let listener = self
                .listener
                .lock()
                .ok()
                .and_then(|mut l| l.take())
                .ok_or_else(|| "the redirect listener is gone".to_owned())?;
            eprintln!("To authorize mcpvisor for {server}, open:\n  {url}");
            let browser = if self.no_browser {
                None
            } else {
                open_browser(url)
            };
            eprintln!(
                "waiting for the authorization server's redirect (at most {} s)…",
                LOGIN_WAIT.as_secs()
            );
            let state = url::Url::parse(url).ok().and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "state")
                    .map(|(_, v)| v.into_owned())
            });
            let back =
                tokio::time::timeout(LOGIN_WAIT, callback(&listener, state.as_deref())).await;
            // xdg-open has long handed the URL over and is reaped here. A
            // browser run directly ($BROWSER) is the user's: it keeps
            // running in its own session, and its exit is reaped by a
            // task while this process lives.
            if let Some(mut child) = browser {
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
            }
            back.map_err(|_| {
                format!(
                    "no redirect came back within {} s: run the login again",
                    LOGIN_WAIT.as_secs()
                )
            })?
        })
    }
}

/// Start the desktop's browser on `url` when there is one (`$BROWSER`,
/// else `xdg-open` with a display); the caller reaps it.
fn open_browser(url: &str) -> Option<tokio::process::Child> {
    let program = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.is_empty())
        .or_else(|| {
            let display = std::env::var_os("DISPLAY").is_some()
                || std::env::var_os("WAYLAND_DISPLAY").is_some();
            display.then(|| "xdg-open".to_owned())
        });
    let program = program?;
    let started = tokio::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // The user's browser, not a child of ours to kill: its own group.
        .process_group(0)
        .spawn();
    match started {
        Ok(child) => Some(child),
        Err(e) => {
            eprintln!("(could not start {program}: {e}; open the URL yourself)");
            None
        }
    }
}

/// Whether the request path `path` is this login's redirect: exactly
/// `/callback`, with the login's `state` when it has one.
fn is_our_callback(path: &str, state: Option<&str>) -> bool {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    route == "/callback"
        && state.is_none_or(|want| {
            url::form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "state" && v == want)
        })
}

/// Accept on `listener` until a request for exactly `/callback` carrying
/// the login's `state` arrives (anything else is answered 404 and
/// ignored: a stray local request cannot end the login); answer it and
/// return its URL.
async fn callback(
    listener: &tokio::net::TcpListener,
    state: Option<&str>,
) -> Result<String, String> {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    loop {
        let (mut conn, _) = listener
            .accept()
            .await
            .map_err(|e| format!("the redirect listener failed: {e}"))?;
        // GW-6: every accepted socket answers without waiting for an ACK.
        let _ = conn.set_nodelay(true);
        let mut buf = vec![0u8; 8192];
        let n = match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => continue,
        };
        let head = String::from_utf8_lossy(&buf[..n]);
        let path = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("");
        if !is_our_callback(path, state) {
            let _ = conn
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let body = if path.contains("code=") {
            "mcpvisor received the authorization; the terminal says whether the login succeeded. You can close this tab."
        } else {
            "mcpvisor: the authorization did not succeed; see the terminal."
        };
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(reply.as_bytes()).await;
        return Ok(format!("http://127.0.0.1:{port}{path}"));
    }
}

#[cfg(test)]
mod tests {
    use super::is_our_callback;

    #[test]
    fn only_exactly_callback_with_the_logins_state_ends_the_login() {
        // CONN-13 / TRUST-3: a stray local request cannot end the login.
        assert!(is_our_callback("/callback?code=c&state=s1", Some("s1")));
        assert!(is_our_callback("/callback?state=a%20b&code=c", Some("a b")));
        assert!(!is_our_callback("/callback?code=c&state=s2", Some("s1")));
        assert!(!is_our_callback("/callback?code=c", Some("s1")));
        assert!(!is_our_callback("/callbackx?state=s1", Some("s1")));
        assert!(!is_our_callback("/other/callback?state=s1", Some("s1")));
        assert!(!is_our_callback("/favicon.ico", Some("s1")));
        assert!(is_our_callback("/callback?code=c", None));
        assert!(!is_our_callback("/", None));
    }
}
