//! `mcpvisor gateway`: every tool of the config served as ONE MCP server,
//! over stdio (`--stdio`) or streamable HTTP (`--http ADDR`, `/mcp`,
//! `/health`, and the probes `/livez` and `/readyz`). Logs go to stderr
//! only. SIGINT, SIGTERM and (stdio) the client closing stdin end it with
//! the quiescent shutdown; over HTTP a SIGTERM drains first
//! (`--drain-timeout-s`). SIGHUP reloads the config's servers.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use mcpvisor::gateway::{ClientApprover, Gateway, GatewayOptions};
use mcpvisor::{EnvSecretStore, Scope, SecretStore, ServerConfig};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cli::Cli;
use crate::config::{base_builder, load_config, secret_store};
use crate::lifecycle::{finish, settle};

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
    /// Session-era client sessions at most (`--http`).
    pub(crate) max_sessions: usize,
    /// A session-era client session idle this long ends (`--http`).
    pub(crate) session_idle: std::time::Duration,
    /// Serve the servers' own tool names (GW-4).
    pub(crate) raw_names: bool,
    /// SIGTERM drains for at most this long (`--http`).
    pub(crate) drain_timeout: Duration,
    /// This replica's name behind a balancer.
    pub(crate) replica: Option<String>,
    /// The other replicas, `NAME=URL` each.
    pub(crate) peers: Vec<String>,
    /// Servers whose state lives in their process, beside the seats.
    pub(crate) stateful: Vec<String>,
}

/// Run the gateway until the client leaves (stdio) or a signal; exit 0 when
/// the shutdown confirmed everything.
pub(crate) async fn run(cli: &Cli, flags: GatewayFlags) -> anyhow::Result<u8> {
    if flags.stdio == flags.http.is_some() {
        bail!("give exactly one of --stdio or --http ADDR (e.g. --http 127.0.0.1:8931)");
    }
    if let Some(name) = &flags.replica
        && (name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        bail!(
            "--replica-id {name:?}: use 1 to 64 letters, digits, '-', '_' or '.' (it ends every request state this replica hands out, after '@')"
        );
    }
    let peers = peer_urls(&flags)?;
    if flags.max_sessions == 0 {
        bail!("--max-sessions 0 would refuse every session-era client: give at least 1");
    }
    let cfg = load_config(cli, true)?;
    let mut pinned = crate::config::provider_names(&cfg);
    for server in &flags.stateful {
        if !cfg.servers.iter().any(|s| &s.server_name == server) {
            bail!(
                "--stateful {server:?}: the config has no server of that name (its servers: {})",
                cfg.servers
                    .iter()
                    .map(|s| s.server_name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        pinned.push(server.clone());
    }
    // Checked before anything starts: a remote bind needs --allow-remote,
    // and --allow-remote (on any address) needs a token.
    if let Some(addr) = flags.http
        && !addr.ip().is_loopback()
        && !flags.allow_remote
    {
        bail!(
            "--http {addr} is not a loopback address: pass --allow-remote to serve beyond this machine (a bearer token is then required)"
        );
    }
    if flags.allow_remote && flags.http.is_none() {
        bail!("--allow-remote is for --http");
    }
    let token = match flags.http {
        Some(_) if flags.allow_remote => {
            let store: Arc<dyn SecretStore> = match secret_store(&cfg)? {
                Some(s) => s,
                None => Arc::new(EnvSecretStore),
            };
            // The config's store first, then the environment (a container's
            // token comes from its environment beside a shared secrets file).
            let secret = match store.get(&flags.token_secret).await {
                Ok(secret) => secret,
                Err(e) => EnvSecretStore.get(&flags.token_secret).await.map_err(|_| {
                    anyhow::anyhow!(
                        "--allow-remote needs a bearer token in the secret {:?}: {e}; nor is it set in the environment",
                        flags.token_secret
                    )
                })?,
            };
            Some(secret.expose().to_owned())
        }
        _ => None,
    };
    // The first answer waits for the servers still starting, each bounded
    // by its own startup timeout (GW-3).
    let first_list_wait = cfg
        .servers
        .iter()
        .map(|s| s.startup_timeout)
        .max()
        .unwrap_or_default()
        + std::time::Duration::from_secs(1);
    let approver = Arc::new(ClientApprover::default());
    crate::config::require_hooks(&cfg)?;
    let mut builder = base_builder(&cfg, false)?
        .approver(approver.clone())
        .relay_client_requests();
    for s in cfg.servers.clone() {
        builder = builder.server(Scope::Global, s);
    }
    // Registered before any server starts (never the default kill).
    let mut signals = Signals::new()?;
    // Servers connect in the background; a client's first answer waits for
    // them (`first_list_wait`), later ones appear with a list_changed.
    let runtime = builder.start().await?;
    let gateway = Gateway::new(
        runtime.clone(),
        Some(approver),
        GatewayOptions {
            status_tool: flags.status_tool,
            first_list_wait,
            max_sessions: flags.max_sessions,
            session_idle: flags.session_idle,
            raw_names: flags.raw_names,
            replica: flags.replica.clone(),
            pinned,
            peers,
            ..GatewayOptions::default()
        },
    );
    // GW-4: raw names only where they do not collide, checked once the
    // servers that can start are up; a collision refuses to serve.
    if flags.raw_names {
        gateway.first_catalog().await;
        let collisions = gateway.raw_name_collisions();
        if !collisions.is_empty() {
            let named: Vec<String> = collisions
                .iter()
                .map(|(tool, servers)| format!("\"{tool}\" ({})", servers.join(", ")))
                .collect();
            gateway.close();
            let report = finish(runtime).await;
            drop(report);
            bail!(
                "--raw-names: these tool names are served by more than one server: {}; rename or drop one of the servers, or serve without --raw-names (the tools then have names mcp__<server>__<tool>)",
                named.join("; ")
            );
        }
    }
    let mut reloader = Reloader {
        cli,
        servers: cfg.servers,
    };
    let served = match flags.http {
        None => serve_stdio(&gateway, &mut signals, &mut reloader).await,
        Some(addr) => {
            let listen = Listen {
                addr,
                token,
                drain_timeout: flags.drain_timeout,
            };
            serve_http(&gateway, listen, &mut signals, &mut reloader).await
        }
    };
    gateway.close();
    let report = finish(runtime).await;
    served?;
    Ok(u8::from(!report.is_clean()))
}

/// The signals the gateway acts on, registered once.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

enum Got {
    /// SIGINT: stop.
    Stop(&'static str),
    /// SIGTERM: drain (`--http`), then stop.
    Term,
    /// SIGHUP: reload the config.
    Reload,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Got {
        tokio::select! {
            _ = self.int.recv() => Got::Stop("interrupted"),
            _ = self.term.recv() => Got::Term,
            _ = self.hup.recv() => Got::Reload,
        }
    }
}

/// Hot reload: re-read the config and restart only what changed.
struct Reloader<'a> {
    cli: &'a Cli,
    /// The `[servers.*]` running now, as the file said.
    servers: Vec<ServerConfig>,
}

impl Reloader<'_> {
    /// SIGHUP: re-read the config file. Servers that left it are removed,
    /// new ones added, and those whose section changed are removed and added
    /// again; the others keep running untouched. Clients get one
    /// list_changed once the added servers settled. A config that does not
    /// parse leaves everything as it is. Only `[servers.*]` is reloaded.
    async fn reload(&mut self, gateway: &Gateway) {
        let cfg = match load_config(self.cli, true) {
            Ok(cfg) => cfg,
            Err(e) => {
                eprintln!("mcpvisor gateway: reload failed, the running config stays: {e:#}");
                return;
            }
        };
        let runtime = gateway.runtime();
        let same = |a: &ServerConfig, b: &ServerConfig| {
            serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
        };
        let hold = gateway.hold_notifications().await;
        let (mut removed, mut added, mut restarted) = (0, 0, 0);
        for old in &self.servers {
            let kept = cfg.servers.iter().any(|n| n.server_name == old.server_name);
            if !kept {
                removed += 1;
                if let Err(e) = runtime
                    .remove_server(&Scope::Global, &old.server_name)
                    .await
                {
                    eprintln!("mcpvisor gateway: reload: {e}");
                }
            }
        }
        let mut started = Vec::new();
        for new in &cfg.servers {
            match self
                .servers
                .iter()
                .find(|o| o.server_name == new.server_name)
            {
                Some(old) if same(old, new) => continue,
                Some(_) => {
                    restarted += 1;
                    if let Err(e) = runtime
                        .remove_server(&Scope::Global, &new.server_name)
                        .await
                    {
                        eprintln!("mcpvisor gateway: reload: {e}");
                    }
                }
                None => added += 1,
            }
            match runtime.add_server(Scope::Global, new.clone()).await {
                Ok(name) => started.push(name),
                Err(e) => eprintln!("mcpvisor gateway: reload: {e}"),
            }
        }
        let limit = cfg
            .servers
            .iter()
            .map(|s| s.startup_timeout)
            .max()
            .unwrap_or_default()
            + Duration::from_secs(2);
        settle(runtime, &started, limit).await;
        drop(hold);
        let unchanged = cfg.servers.len() - added - restarted;
        eprintln!(
            "mcpvisor gateway: config reloaded: {added} added, {removed} removed, {restarted} restarted, {unchanged} unchanged"
        );
        self.servers = cfg.servers;
    }
}

async fn serve_stdio(
    gateway: &Gateway,
    signals: &mut Signals,
    reloader: &mut Reloader<'_>,
) -> anyhow::Result<()> {
    let serve = async {
        match stdio_pipes() {
            Some((read, write)) => {
                let served = gateway.serve_io(read, write).await;
                blocking_again();
                served
            }
            None => {
                gateway
                    .serve_io(tokio::io::stdin(), tokio::io::stdout())
                    .await
            }
        }
    };
    tokio::pin!(serve);
    loop {
        tokio::select! {
            r = &mut serve => {
                r.context("gateway on stdio")?;
                eprintln!("mcpvisor gateway: the client closed stdin; stopping every server");
                return Ok(());
            }
            got = signals.next() => match got {
                Got::Stop(why) => {
                    eprintln!("mcpvisor gateway: {why}; stopping every server");
                    return Ok(());
                }
                Got::Term => {
                    eprintln!("mcpvisor gateway: terminated; stopping every server");
                    return Ok(());
                }
                Got::Reload => reloader.reload(gateway).await,
            }
        }
    }
}

/// stdin and stdout as non-blocking pipes, when they are pipes (how an
/// MCP client starts a stdio server) and stderr is not the stdout pipe:
/// read and written by tokio's reactor. tokio's `Stdin`/`Stdout` hand every
/// read and write to a blocking thread, one at a time, which held 64
/// concurrent calls through the gateway to a fifth of a direct connection.
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // (a pipe?, its device and inode)
    let meta = |fd: std::os::fd::BorrowedFd<'_>| {
        std::fs::File::from(fd.try_clone_to_owned().ok()?)
            .metadata()
            .ok()
            .map(|m| (m.file_type().is_fifo(), m.dev(), m.ino()))
    };
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let (input_meta, output_meta) = (meta(stdin.as_fd())?, meta(stdout.as_fd())?);
    // O_NONBLOCK is shared by every descriptor of an open pipe: a stderr on
    // the same pipe would fail its writes.
    if !input_meta.0 || !output_meta.0 || meta(stderr.as_fd()) == Some(output_meta) {
        return None;
    }
    let input = stdin.as_fd().try_clone_to_owned().ok()?;
    let output = stdout.as_fd().try_clone_to_owned().ok()?;
    match (
        tokio::net::unix::pipe::Receiver::from_owned_fd(input),
        tokio::net::unix::pipe::Sender::from_owned_fd(output),
    ) {
        (Ok(read), Ok(write)) => Some((read, write)),
        _ => {
            blocking_again();
            None
        }
    }
}

/// stdin and stdout back in blocking mode (what [`stdio_pipes`] changed is
/// shared with whoever holds the same pipe ends).
#[allow(unsafe_code)]
fn blocking_again() {
    for fd in [0, 1] {
        // SAFETY: fcntl on fds 0 and 1, which stay open for the process's
        // life; F_GETFL/F_SETFL touch only their status flags.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
}

/// Where and how `--http` listens.
struct Listen {
    addr: SocketAddr,
    /// The bearer token every request must carry (`--allow-remote`).
    token: Option<String>,
    /// SIGTERM drains for at most this long.
    drain_timeout: Duration,
}

async fn serve_http(
    gateway: &Gateway,
    listen: Listen,
    signals: &mut Signals,
    reloader: &mut Reloader<'_>,
) -> anyhow::Result<()> {
    let Listen {
        addr,
        token,
        drain_timeout,
    } = listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    // Loopback: rmcp's default Host check (localhost, 127.0.0.1, ::1)
    // guards against DNS rebinding. Remote: the token guards instead.
    let hosts = token.as_ref().map(|_| Vec::new());
    let mut router = gateway.http_router(hosts);
    if let Some(token) = token {
        router = router.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                // The probes answer a balancer or an orchestrator, which
                // carry no token; they say only whether to send work here.
                let ok = bearer_matches(&req, &token)
                    || matches!(req.uri().path(), "/livez" | "/readyz");
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
    eprintln!(
        "mcpvisor gateway: serving http://{local}/mcp (status at http://{local}/health, probes at /livez and /readyz)"
    );
    // Open SSE streams end with their sessions when the gateway stops.
    let stop = gateway.stopped();
    let server = axum::serve(mcpvisor::gateway::no_delay(listener), router)
        .with_graceful_shutdown(stop.clone().cancelled_owned())
        .into_future();
    tokio::pin!(server);
    // A SIGTERM's drain, while it runs.
    let draining = futures::future::Fuse::terminated();
    tokio::pin!(draining);
    let mut drain_started = false;
    loop {
        tokio::select! {
            r = &mut server => {
                r.context("gateway on http")?;
                return Ok(());
            }
            left = &mut draining => {
                if left > 0 {
                    eprintln!("mcpvisor gateway: drain deadline ({} s) passed with {left} request(s) in flight; stopping every server", drain_timeout.as_secs());
                } else {
                    eprintln!("mcpvisor gateway: drained; stopping every server");
                }
                stop.cancel();
            }
            got = signals.next(), if !stop.is_cancelled() => match got {
                Got::Stop(why) => {
                    eprintln!("mcpvisor gateway: {why}; stopping every server");
                    stop.cancel();
                }
                Got::Term if !drain_started && !drain_timeout.is_zero() => {
                    drain_started = true;
                    gateway.drain();
                    eprintln!(
                        "mcpvisor gateway: terminated; draining: not ready, new work refused, {} request(s) in flight, for at most {} s",
                        gateway.in_flight(),
                        drain_timeout.as_secs()
                    );
                    let g = gateway.clone();
                    draining.set(futures::FutureExt::fuse(Box::pin(async move {
                        g.drained(drain_timeout).await
                    })));
                }
                Got::Term => {
                    eprintln!("mcpvisor gateway: terminated; stopping every server");
                    stop.cancel();
                }
                Got::Reload => reloader.reload(gateway).await,
            }
        }
    }
}

/// `--peer NAME=URL` flags as a map, each checked: a replica name and an
/// `http(s)://` base URL, not this replica's own name.
fn peer_urls(flags: &GatewayFlags) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut peers = std::collections::BTreeMap::new();
    if flags.peers.is_empty() {
        return Ok(peers);
    }
    let Some(here) = &flags.replica else {
        bail!("--peer needs --replica-id: the replicas know each other by name");
    };
    if flags.http.is_none() {
        bail!("--peer is for --http: requests are forwarded over HTTP");
    }
    for peer in &flags.peers {
        let Some((name, url)) = peer.split_once('=') else {
            bail!("--peer {peer:?}: give NAME=URL, e.g. r1=http://10.0.0.12:8931");
        };
        let parsed = url::Url::parse(url)
            .with_context(|| format!("--peer {peer:?}: {url:?} is not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            bail!("--peer {peer:?}: the URL must be http:// or https:// with a host");
        }
        if name == here {
            bail!("--peer {peer:?}: {name:?} is this replica's own name (--replica-id)");
        }
        if peers.insert(name.to_owned(), url.to_owned()).is_some() {
            bail!("--peer {name:?} is given twice");
        }
    }
    Ok(peers)
}

/// Whether `req` carries `Authorization: Bearer <token>`.
fn bearer_matches(req: &axum::extract::Request, token: &str) -> bool {
    req.headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        == Some(token)
}
