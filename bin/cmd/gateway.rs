//! `mcpvisor gateway`: every tool of the config served as ONE MCP server,
//! over stdio (`--stdio`) or streamable HTTP (`--http ADDR`, `/mcp` and
//! `/health`). Logs go to stderr only. SIGINT, SIGTERM and (stdio) the
//! client closing stdin end it with the quiescent shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use mcpvisor::gateway::{ClientApprover, Gateway, GatewayOptions};
use mcpvisor::{EnvSecretStore, Scope, SecretStore};

use crate::cli::Cli;
use crate::config::{base_builder, load_config, secret_store};
use crate::lifecycle::finish;

/// The gateway's flags.
pub(crate) struct GatewayFlags {
    /// Serve on stdin/stdout.
    pub(crate) stdio: bool,
    /// Serve streamable HTTP here.
    pub(crate) http: Option<SocketAddr>,
    /// A non-loopback `--http` address is allowed (a bearer token is then required).
    pub(crate) allow_remote: bool,
    /// The secret holding the bearer token.
    pub(crate) token_secret: String,
    /// List the `mcpvisor_status` tool.
    pub(crate) status_tool: bool,
}

/// Run the gateway until the client leaves (stdio) or a signal; exit 0 when
/// the shutdown confirmed everything.
pub(crate) async fn run(cli: &Cli, flags: GatewayFlags) -> anyhow::Result<u8> {
    if flags.stdio == flags.http.is_some() {
        bail!("give exactly one of --stdio or --http ADDR (e.g. --http 127.0.0.1:8931)");
    }
    let cfg = load_config(cli, true)?;
    // Checked before anything starts: a remote bind needs a token.
    let token = match flags.http {
        Some(addr) if !addr.ip().is_loopback() => {
            if !flags.allow_remote {
                bail!(
                    "--http {addr} is not a loopback address: pass --allow-remote to serve beyond this machine (a bearer token is then required)"
                );
            }
            let store: Arc<dyn SecretStore> = match secret_store(&cfg)? {
                Some(s) => s,
                None => Arc::new(EnvSecretStore),
            };
            let secret = store.get(&flags.token_secret).await.map_err(|e| {
                anyhow::anyhow!(
                    "--allow-remote needs a bearer token in the secret {:?}: {e}",
                    flags.token_secret
                )
            })?;
            Some(secret.expose().to_owned())
        }
        _ => None,
    };
    let approver = Arc::new(ClientApprover::default());
    let mut builder = base_builder(&cfg, false)?.approver(approver.clone());
    for s in cfg.servers {
        builder = builder.server(Scope::Global, s);
    }
    // Servers connect in the background; their tools appear (with a
    // list_changed) as each becomes ready.
    let runtime = builder.start().await?;
    let gateway = Gateway::new(
        runtime.clone(),
        Some(approver),
        GatewayOptions {
            status_tool: flags.status_tool,
            ..GatewayOptions::default()
        },
    );
    let served = match flags.http {
        None => serve_stdio(&gateway).await,
        Some(addr) => serve_http(&gateway, addr, token).await,
    };
    gateway.close();
    let report = finish(runtime).await;
    served?;
    Ok(u8::from(!report.is_clean()))
}

async fn serve_stdio(gateway: &Gateway) -> anyhow::Result<()> {
    tokio::select! {
        r = gateway.serve_io(tokio::io::stdin(), tokio::io::stdout()) => {
            r.context("gateway on stdio")?;
            eprintln!("mcpvisor gateway: the client closed stdin; stopping every server");
        }
        why = crate::interrupted() => {
            eprintln!("mcpvisor gateway: {why}; stopping every server");
        }
    }
    Ok(())
}

async fn serve_http(
    gateway: &Gateway,
    addr: SocketAddr,
    token: Option<String>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // Loopback: rmcp's default Host check (localhost, 127.0.0.1, ::1)
    // guards against DNS rebinding. Remote: the token guards instead.
    let hosts = token.as_ref().map(|_| Vec::new());
    let mut router = gateway.http_router(hosts);
    if let Some(token) = token {
        let expected = format!("Bearer {token}");
        router = router.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let ok = req
                    .headers()
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    == Some(expected.as_str());
                async move {
                    use axum::response::IntoResponse;
                    if ok {
                        next.run(req).await
                    } else {
                        (
                            axum::http::StatusCode::UNAUTHORIZED,
                            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                            "a bearer token is required",
                        )
                            .into_response()
                    }
                }
            },
        ));
    }
    eprintln!("mcpvisor gateway: serving http://{local}/mcp (status at http://{local}/health)");
    let stop = gateway.stopped();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                why = crate::interrupted() => {
                    eprintln!("mcpvisor gateway: {why}; stopping every server");
                }
                _ = stop.cancelled() => {}
            }
            // Open SSE streams end with their sessions.
            stop.cancel();
        })
        .await
        .context("gateway on http")?;
    Ok(())
}
