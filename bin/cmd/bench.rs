//! `mcpvisor bench` (PERF-1): tools/call latency through the runtime vs a
//! bare rmcp client on the demo server, in the same run; a 1 MiB result
//! with an event log, an attachment store and a policy installed; a call
//! through the gateway vs a direct one; and catalog sync of 1k and 10k
//! tools. Figures, never assertions.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use mcpvisor::{CallOptions, Runtime, Scope};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use serde_json::json;

/// Concurrent callers in the throughput row (PERF-1).
const CONCURRENCY: usize = 64;

struct Latency {
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
    concurrent_per_s: f64,
    /// This process's CPU time (user + system, every thread) per
    /// sequential call: the client's half of a call's cost, since the
    /// server is another process.
    cpu_us_per_call: f64,
    /// This process's context switches per sequential call.
    switches_per_call: f64,
}

/// A row of `bench --only` (every row when none is named): for profiling
/// one row, or re-measuring it alone. A row left out reads NaN (`null` in
/// `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Row {
    /// tools/call p50, p99, calls/s and 64-way throughput.
    Calls,
    /// Catalog sync of 1k and 10k tools.
    Catalog,
    /// The 1 MiB result.
    Large,
    /// A call through the gateway, over stdio and over HTTP.
    Gateway,
    /// Start to ready of 1, 10 and 100 servers.
    Ready,
    /// Memory per idle connection.
    Idle,
    /// Hook overhead.
    Hooks,
    /// A model round's calls, one after another vs together.
    Round,
    /// The bytes of a first request's tools on 1,000 tools, eager vs deferred.
    Defer,
    /// Calls through 1, 2 and 3 gateway replicas behind HAProxy.
    Replicas,
    /// Memory over a soak (`--soak SECONDS`, 600 when only named here).
    Soak,
}

impl Latency {
    /// A row not measured.
    fn none() -> Self {
        Self {
            p50_us: f64::NAN,
            cpu_us_per_call: f64::NAN,
            switches_per_call: f64::NAN,
            p99_us: f64::NAN,
            calls_per_s: f64::NAN,
            concurrent_per_s: f64::NAN,
        }
    }
}

fn summarize(mut samples: Vec<Duration>, total: Duration) -> Latency {
    samples.sort();
    let pick = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples.get(i).map(|d| d.as_secs_f64() * 1e6).unwrap_or(0.0)
    };
    Latency {
        p50_us: pick(0.50),
        p99_us: pick(0.99),
        calls_per_s: samples.len() as f64 / total.as_secs_f64().max(1e-9),
        concurrent_per_s: 0.0,
        cpu_us_per_call: f64::NAN,
        switches_per_call: f64::NAN,
    }
}

/// This process's CPU time so far (user + system, all threads), and its
/// context switches (voluntary and not).
#[allow(unsafe_code)]
fn process_cpu() -> (Duration, i64) {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (Duration::ZERO, 0);
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    (
        tv(usage.ru_utime) + tv(usage.ru_stime),
        usage.ru_nvcsw + usage.ru_nivcsw,
    )
}

/// The demo server (with `extra_tools` generated tools) under a bare rmcp
/// client: the baseline of every row.
async fn bare_client(
    extra_tools: usize,
) -> anyhow::Result<(
    rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    tokio::process::Child,
)> {
    bare_client_in(extra_tools, rmcp::ClientLifecycleMode::Initialize).await
}

/// [`bare_client`] opening with `lifecycle` (one protocol era or the other).
async fn bare_client_in(
    extra_tools: usize,
    lifecycle: rmcp::ClientLifecycleMode,
) -> anyhow::Result<(
    rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    tokio::process::Child,
)> {
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .args(["serve-demo", "--tools", &extra_tools.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        anyhow::bail!("no pipes");
    };
    let client = rmcp::ClientServiceExt::serve_with_lifecycle(
        ClientConfig::default(),
        (stdout, stdin),
        lifecycle,
    )
    .await?;
    Ok((client, child))
}

/// One `echo` call by a bare rmcp client: the baseline side of a row.
async fn bare_echo(
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
    args: &serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone()))
        .await?;
    Ok(())
}

/// One `echo` call through the runtime; a failed call fails the bench.
async fn runtime_echo(runtime: &Runtime, args: &serde_json::Value) -> anyhow::Result<()> {
    let o = runtime
        .call(
            &Scope::Global,
            "mcp__demo__echo",
            Some(args.clone()),
            CallOptions::default(),
        )
        .await;
    anyhow::ensure!(o.is_ok(), "call failed during bench: {}", o.projection);
    Ok(())
}

/// Bytes of the message echoed in the large-result row.
const LARGE_BYTES: usize = 1024 * 1024;

/// A policy that looks at every call and changes nothing: its presence is
/// what costs (the after half, the change check).
struct Bystander;

impl mcpvisor::CallPolicy for Bystander {
    fn before<'a>(
        &'a self,
        _: &'a mcpvisor::PolicyCall,
    ) -> futures::future::BoxFuture<'a, mcpvisor::PolicyVerdict> {
        Box::pin(async { mcpvisor::PolicyVerdict::Proceed })
    }
}

/// Median ms of a 1 MiB echo (a 1 MiB argument and a 1 MiB result): bare
/// rmcp, and the runtime with an event log, an attachment store and a
/// policy installed (design.md: a large result is materialised once).
async fn large_result(calls: usize) -> anyhow::Result<(f64, f64)> {
    let message = "x".repeat(LARGE_BYTES);
    let args = json!({ "message": message });
    let (client, mut child) = bare_client(0).await?;
    let map = args.as_object().cloned().unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("mcpvisor-bench-{}", std::process::id()));
    let mut demo = crate::config::demo_config("demo", 0)?;
    demo.protocol = mcpvisor::ProtocolChoice::Session;
    let runtime = Runtime::builder()
        .server(Scope::Global, demo)
        .event_log(dir.join("events.jsonl"))
        .attachments(std::sync::Arc::new(mcpvisor::FileAttachmentStore::new(
            dir.join("attachments"),
        )))
        .policy(std::sync::Arc::new(Bystander))
        .start()
        .await?;
    let measured = async {
        runtime
            .wait_ready(&Scope::Global, "demo", Duration::from_secs(30))
            .await?;
        median_ms_pair(
            calls,
            || bare_echo(&client, &map),
            || runtime_echo(&runtime, &args),
        )
        .await
    }
    .await;
    runtime.shutdown(Duration::from_secs(20)).await;
    let _ = client.cancel().await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

/// The MCP server behind a second hop: the demo server, or
/// server-everything (Node) where the peers are installed.
#[derive(Debug, Clone)]
enum Backend {
    Demo,
    /// server-everything's `dist/index.js`.
    Everything(std::path::PathBuf),
}

impl Backend {
    /// server-everything, when `chaos-tests/peers/install.sh` installed it
    /// (`$MCPVISOR_PEERS_DIR`, else `target/peers` under the working
    /// directory).
    fn everything() -> Option<Self> {
        let dir = std::env::var_os("MCPVISOR_PEERS_DIR")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from("target/peers"));
        let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        entry
            .is_file()
            .then(|| Self::Everything(std::fs::canonicalize(&entry).unwrap_or(entry)))
    }

    /// Its command line.
    fn command(&self) -> anyhow::Result<(String, Vec<String>)> {
        Ok(match self {
            Self::Demo => (
                std::env::current_exe()?.to_string_lossy().into_owned(),
                vec!["serve-demo".into()],
            ),
            Self::Everything(entry) => (
                "node".into(),
                vec![entry.to_string_lossy().into_owned(), "stdio".into()],
            ),
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Demo => "demo",
            Self::Everything(_) => "everything",
        }
    }

    /// An rmcp client of this server started as `program args` (the
    /// server itself, or a relay to it), over the child's pipes.
    async fn client_of(
        program: &str,
        args: &[String],
    ) -> anyhow::Result<(
        rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
        tokio::process::Child,
    )> {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            anyhow::bail!("no pipes");
        };
        Ok((ClientConfig::default().serve((stdout, stdin)).await?, child))
    }
}

/// `mcpvisor gateway` fronting a backend, over stdio (`http` false: its
/// pipes are the child's) or `--http 127.0.0.1:0` (its URL).
struct DemoGateway {
    child: tokio::process::Child,
    url: Option<String>,
    dir: std::path::PathBuf,
}

impl DemoGateway {
    async fn start(http: bool, tag: &str) -> anyhow::Result<Self> {
        Self::fronting(&Backend::Demo, http, tag).await
    }

    async fn fronting(backend: &Backend, http: bool, tag: &str) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let dir =
            std::env::temp_dir().join(format!("mcpvisor-bench-gw-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("mcpvisor.toml");
        let (program, args) = backend.command()?;
        std::fs::write(
            &config,
            format!(
                "[servers.{}]\ncommand = {program:?}\nargs = {args:?}\ntrust = \"always\"\n",
                backend.name()
            ),
        )?;
        let mut gateway = tokio::process::Command::new(&exe);
        gateway
            .arg("--config")
            .arg(&config)
            .arg("gateway")
            .env_remove("MCPVISOR_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if http {
            gateway
                .args(["--http", "127.0.0.1:0"])
                .stderr(Stdio::piped());
        } else {
            gateway.arg("--stdio").stderr(Stdio::null());
        }
        let mut child = gateway.spawn()?;
        let url = if http {
            let Some(stderr) = child.stderr.take() else {
                anyhow::bail!("no stderr of the gateway");
            };
            Some(
                tokio::time::timeout(Duration::from_secs(30), gateway_url(stderr))
                    .await
                    .map_err(|_| anyhow::anyhow!("the gateway never said where it serves"))??,
            )
        } else {
            None
        };
        Ok(Self { child, url, dir })
    }

    /// An rmcp client of it (over its pipes, or its URL), once it lists
    /// `tool`.
    async fn client(
        &mut self,
        tool: &str,
    ) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>> {
        let client = match &self.url {
            Some(url) => {
                ClientConfig::default()
                    .serve(pooled_http(url.clone())?)
                    .await?
            }
            None => {
                let (Some(stdin), Some(stdout)) =
                    (self.child.stdin.take(), self.child.stdout.take())
                else {
                    anyhow::bail!("no pipes to the gateway");
                };
                ClientConfig::default().serve((stdout, stdin)).await?
            }
        };
        // The backend connects in the background: wait until its tools are listed.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let tools = client.list_all_tools().await?;
            if tools.iter().any(|t| t.name == tool) {
                return Ok(client);
            }
            anyhow::ensure!(Instant::now() < deadline, "the gateway never listed {tool}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop it: its stdin closed (stdio) or SIGTERM (http), which reaps
    /// its backend.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        if self.url.is_some()
            && let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok())
        {
            // SAFETY: kill has no memory-safety preconditions; the pid is our
            // child's, not yet reaped.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// rmcp's client transport to `url` over a pooled reqwest client. rmcp's
/// own default client keeps no idle connection, so every request would
/// open a TCP connection: a cost of that client (no browser, SDK or
/// `mcpvisor`'s own HTTP transport pays it) that would be counted as the
/// gateway's.
fn pooled_http(
    url: String,
) -> anyhow::Result<rmcp::transport::StreamableHttpClientTransport<reqwest::Client>> {
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(
        reqwest::Client::builder().tcp_nodelay(true).build()?,
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url),
    ))
}

/// One 2026-07-28 `tools/call` posted by a plain HTTP client.
#[derive(Clone)]
struct PlainPost {
    client: reqwest::Client,
    url: String,
    body: Vec<u8>,
    tool: String,
}

impl PlainPost {
    fn new(
        url: String,
        tool: &str,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let body = serde_json::to_vec(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": args,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }))?;
        Ok(Self {
            client: reqwest::Client::builder().tcp_nodelay(true).build()?,
            url,
            body,
            tool: tool.to_owned(),
        })
    }

    async fn call(&self) -> anyhow::Result<()> {
        let reply = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", &self.tool)
            .body(self.body.clone())
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        // A result, not an error (the reply is JSON: nothing comes first).
        let reply: serde_json::Value = serde_json::from_slice(&reply)?;
        anyhow::ensure!(
            reply["result"]["content"].is_array() && reply["result"]["isError"] != true,
            "a plain echo failed: {reply}"
        );
        Ok(())
    }
}

/// `serve-relay COMMAND…`: COMMAND's stdin and stdout relayed byte for
/// byte, until either side ends; the child is reaped. The floor of any
/// second hop (PERF-1's gateway rows).
pub async fn relay(command: &[String]) -> anyhow::Result<u8> {
    let Some((program, args)) = command.split_first() else {
        anyhow::bail!("serve-relay needs a command");
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let (Some(mut to_child), Some(mut from_child)) = (child.stdin.take(), child.stdout.take())
    else {
        anyhow::bail!("no pipes to {program}");
    };
    let up = async {
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut to_child).await;
        drop(to_child);
    };
    let down = async {
        let mut out = tokio::io::stdout();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            match from_child.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out.write_all(&buf[..n]).await.is_err() || out.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            child.kill().await?;
            child.wait().await?
        }
    };
    Ok(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1))
}

/// A second hop in front of one backend (PERF-1's gateway rows): median ms
/// of a sequential `echo` straight to it, through a byte relay, through
/// `gateway --stdio` and through `gateway --http` (the four interleaved
/// call by call, their order rotating), and calls/s of 64 concurrent
/// callers straight to it and through each gateway.
struct SecondHop {
    direct: f64,
    relay: f64,
    stdio: f64,
    http: f64,
    /// `gateway --http` to a 2026-07-28 client (no session).
    http_stateless: f64,
    /// The same request from a plain HTTP client (no MCP client stack):
    /// what the gateway costs without rmcp's client.
    http_plain: f64,
    direct_64: f64,
    stdio_64: f64,
    http_64: f64,
    http_stateless_64: f64,
    http_plain_64: f64,
}

impl SecondHop {
    fn none() -> Self {
        Self {
            direct: f64::NAN,
            relay: f64::NAN,
            stdio: f64::NAN,
            http: f64::NAN,
            http_stateless: f64::NAN,
            http_plain: f64::NAN,
            direct_64: f64::NAN,
            stdio_64: f64::NAN,
            http_64: f64::NAN,
            http_stateless_64: f64::NAN,
            http_plain_64: f64::NAN,
        }
    }

    fn json(&self) -> serde_json::Value {
        let r = |a: f64, b: f64| a / b.max(1e-9);
        // The time a hop adds to a direct call, against the relay's.
        let added = |t: f64| (t - self.direct) / (self.relay - self.direct).max(1e-9);
        json!({
            "direct_us": self.direct * 1e3,
            "relay_us": self.relay * 1e3,
            "stdio_us": self.stdio * 1e3,
            "http_us": self.http * 1e3,
            "http_stateless_us": self.http_stateless * 1e3,
            "http_stateless_ratio": r(self.http_stateless, self.direct),
            "http_stateless_64_per_s": self.http_stateless_64,
            "http_stateless_64_ratio": r(self.http_stateless_64, self.direct_64),
            "http_plain_us": self.http_plain * 1e3,
            "http_plain_ratio": r(self.http_plain, self.direct),
            "http_plain_64_per_s": self.http_plain_64,
            "http_plain_64_ratio": r(self.http_plain_64, self.direct_64),
            "relay_ratio": r(self.relay, self.direct),
            "stdio_ratio": r(self.stdio, self.direct),
            "http_ratio": r(self.http, self.direct),
            "stdio_added_vs_relay": added(self.stdio),
            "http_added_vs_relay": added(self.http),
            "direct_64_per_s": self.direct_64,
            "stdio_64_per_s": self.stdio_64,
            "http_64_per_s": self.http_64,
            "stdio_64_ratio": r(self.stdio_64, self.direct_64),
            "http_64_ratio": r(self.http_64, self.direct_64),
        })
    }
}

async fn second_hop(backend: &Backend, calls: usize) -> anyhow::Result<SecondHop> {
    let args = json!({"message": "bench"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let (program, backend_args) = backend.command()?;
    let (direct, mut direct_child) = Backend::client_of(&program, &backend_args).await?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let mut relay_args = vec!["serve-relay".to_owned(), program.clone()];
    relay_args.extend(backend_args.iter().cloned());
    let (relayed, mut relay_child) = Backend::client_of(&exe, &relay_args).await?;
    let tool = format!("mcp__{}__echo", backend.name());
    let mut stdio_gw =
        DemoGateway::fronting(backend, false, &format!("{}-s", backend.name())).await?;
    let mut http_gw =
        DemoGateway::fronting(backend, true, &format!("{}-h", backend.name())).await?;
    let stdio = stdio_gw.client(&tool).await?;
    let http = http_gw.client(&tool).await?;
    // A 2026-07-28 client of the same listener: no session.
    let stateless = rmcp::ClientServiceExt::serve_with_lifecycle(
        ClientConfig::default(),
        pooled_http(http_gw.url.clone().unwrap_or_default())?,
        rmcp::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await?;
    let peers = [
        (direct.peer().clone(), "echo".to_owned()),
        (relayed.peer().clone(), "echo".to_owned()),
        (stdio.peer().clone(), tool.clone()),
        (http.peer().clone(), tool.clone()),
        (stateless.peer().clone(), tool),
    ];
    // The stateless client's request, posted by a plain HTTP client (one
    // keep-alive pool, the body made once): the gateway's own cost, with
    // no MCP client stack on the calling side.
    let plain = PlainPost::new(http_gw.url.clone().unwrap_or_default(), &peers[4].1, &args)?;
    let one = |i: usize| {
        let target = peers.get(i).cloned();
        let (args, plain) = (args.clone(), plain.clone());
        async move {
            let Some((peer, name)) = target else {
                return plain.call().await;
            };
            let r = peer
                .call_tool(CallToolRequestParams::new(name.clone()).with_arguments(args))
                .await?;
            anyhow::ensure!(r.is_error != Some(true), "an echo failed ({name})");
            anyhow::Ok(())
        }
    };
    let mut samples = interleaved(peers.len() + 1, calls, one).await?;
    // 64 callers each, the targets in turn (direct, the gateway's three
    // clients, the plain HTTP client), ROUNDS times.
    let mut rate = [(0usize, Duration::ZERO); 4];
    let mut plain_rate = (0usize, Duration::ZERO);
    let n64 = (calls * 4).max(CONCURRENCY * 4);
    for _ in 0..ROUNDS {
        for (slot, i) in [(0, 0), (1, 2), (2, 3), (3, 4)] {
            let (peer, name) = peers[i].clone();
            let args = args.clone();
            let (ok, took) = concurrent_rate(n64, move || {
                let (peer, name, args) = (peer.clone(), name.clone(), args.clone());
                async move {
                    peer.call_tool(CallToolRequestParams::new(name).with_arguments(args))
                        .await
                        .is_ok_and(|r| r.is_error != Some(true))
                }
            })
            .await;
            rate[slot].0 += ok;
            rate[slot].1 += took;
        }
        let plain = plain.clone();
        let (ok, took) = concurrent_rate(n64, move || {
            let plain = plain.clone();
            async move { plain.call().await.is_ok() }
        })
        .await;
        plain_rate.0 += ok;
        plain_rate.1 += took;
    }
    let per_s = |(ok, took): (usize, Duration)| ok as f64 / took.as_secs_f64().max(1e-9);
    let hop = SecondHop {
        direct: median_ms(&mut samples[0]),
        relay: median_ms(&mut samples[1]),
        stdio: median_ms(&mut samples[2]),
        http: median_ms(&mut samples[3]),
        http_stateless: median_ms(&mut samples[4]),
        direct_64: per_s(rate[0]),
        stdio_64: per_s(rate[1]),
        http_64: per_s(rate[2]),
        http_stateless_64: per_s(rate[3]),
        http_plain: median_ms(&mut samples[5]),
        http_plain_64: per_s(plain_rate),
    };
    let _ = direct.cancel().await;
    let _ = relayed.cancel().await;
    let _ = stdio.cancel().await;
    let _ = http.cancel().await;
    let _ = stateless.cancel().await;
    let _ = direct_child.kill().await;
    let _ = relay_child.wait().await;
    stdio_gw.stop().await;
    http_gw.stop().await;
    Ok(hop)
}

/// An `echo` through the runtime to one streamable-HTTP server in each
/// protocol era: `mcpvisor gateway --http` fronting the demo server (it
/// serves both eras on one listener), one connection pinned to
/// 2025-11-25 and one to 2026-07-28, interleaved call by call: median
/// ms, (session era, stateless era).
async fn http_era_call(calls: usize) -> anyhow::Result<(f64, f64)> {
    let gateway = DemoGateway::start(true, "era").await?;
    let url = gateway.url.clone().unwrap_or_default();
    let config = |name: &str, protocol: mcpvisor::ProtocolChoice| {
        let mut cfg = mcpvisor::ServerConfig::http(name, url.clone()).trusted();
        cfg.protocol = protocol;
        cfg
    };
    let measured = era_pair(
        config("session", mcpvisor::ProtocolChoice::Session),
        config("stateless", mcpvisor::ProtocolChoice::Stateless),
        "mcp__demo__echo",
        calls,
    )
    .await;
    gateway.stop().await;
    measured
}

/// The URL `mcpvisor gateway --http` prints on stderr ("serving URL …").
async fn gateway_url(stderr: tokio::process::ChildStderr) -> anyhow::Result<String> {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(rest) = line.split("serving ").nth(1)
            && let Some(url) = rest.split_whitespace().next()
        {
            let url = url.to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(url);
        }
    }
    anyhow::bail!("the gateway exited before it served")
}

/// The median ms of `calls` runs of `bare` and of `ours`, after 3
/// warm-up runs of each, the two interleaved call by call (which goes
/// first flips every call): both sides of a ratio under the same
/// conditions. (bare, ours).
async fn median_ms_pair<A, AF, B, BF>(calls: usize, bare: A, ours: B) -> anyhow::Result<(f64, f64)>
where
    A: Fn() -> AF,
    AF: std::future::Future<Output = anyhow::Result<()>>,
    B: Fn() -> BF,
    BF: std::future::Future<Output = anyhow::Result<()>>,
{
    for _ in 0..3 {
        bare().await?;
        ours().await?;
    }
    let (mut a, mut b) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..calls {
        for bare_first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if bare_first {
                bare().await?;
                a.push(t.elapsed());
            } else {
                ours().await?;
                b.push(t.elapsed());
            }
        }
    }
    let median = |mut xs: Vec<Duration>| {
        xs.sort();
        xs.get(xs.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Ok((median(a), median(b)))
}

/// The sequential calls of the tools/call row interleave in blocks of this
/// many, bare then runtime, then runtime then bare: both sides of a ratio
/// are measured under the same conditions, and a noisy moment of the
/// machine costs both (PERF-1).
const BLOCK: usize = 100;
/// The 64-way throughput is measured in this many rounds per side,
/// alternating.
const ROUNDS: usize = 4;

/// One side of the tools/call row, as its blocks add up.
#[derive(Default)]
struct Tally {
    samples: Vec<Duration>,
    wall: Duration,
    cpu: Duration,
    switches: i64,
    concurrent_calls: usize,
    concurrent_wall: Duration,
}

impl Tally {
    /// `n` sequential calls of `one`, each timed; the process's CPU time
    /// and context switches over the block.
    async fn block<F, Fut>(&mut self, n: usize, one: F) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let before = process_cpu();
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            one().await?;
            self.samples.push(t.elapsed());
        }
        self.wall += start.elapsed();
        let (cpu, switches) = process_cpu();
        self.cpu += cpu.saturating_sub(before.0);
        self.switches += switches - before.1;
        Ok(())
    }

    fn latency(self) -> Latency {
        let n = self.samples.len().max(1) as f64;
        let (cpu, switches) = (self.cpu, self.switches);
        let mut l = summarize(self.samples, self.wall);
        l.cpu_us_per_call = cpu.as_secs_f64() * 1e6 / n;
        l.switches_per_call = switches as f64 / n;
        l.concurrent_per_s =
            self.concurrent_calls as f64 / self.concurrent_wall.as_secs_f64().max(1e-9);
        l
    }
}

/// The tools/call row: the demo server under a bare rmcp client and
/// through the runtime, both connected at once, their calls interleaved
/// (see [`BLOCK`]). (bare, runtime).
async fn tools_call(calls: usize) -> anyhow::Result<(Latency, Latency)> {
    let (client, mut child) = bare_client(0).await?;
    // The bare client speaks the session era: so does the runtime here,
    // for a ratio of like with like (the era row compares the two eras).
    let mut demo = crate::config::demo_config("demo", 0)?;
    demo.protocol = mcpvisor::ProtocolChoice::Session;
    let runtime = Runtime::builder()
        .server(Scope::Global, demo)
        .start()
        .await?;
    let measured = async {
        runtime
            .wait_ready(&Scope::Global, "demo", Duration::from_secs(30))
            .await?;
        let args = json!({"message": "bench"});
        let map = args.as_object().cloned().unwrap_or_default();
        // Sequential calls borrow their client, as a caller would; the
        // 64 concurrent callers each hold a clone.
        let peer = client.peer();
        let bare = || bare_echo(peer, &map);
        let ours = || runtime_echo(&runtime, &args);
        // Warm-up, then the sequential blocks.
        let (mut b, mut o) = (Tally::default(), Tally::default());
        Tally::default().block(100, &bare).await?;
        Tally::default().block(100, &ours).await?;
        for i in 0..calls.div_ceil(BLOCK) {
            let n = BLOCK.min(calls - i * BLOCK);
            if i % 2 == 0 {
                b.block(n, &bare).await?;
                o.block(n, &ours).await?;
            } else {
                o.block(n, &ours).await?;
                b.block(n, &bare).await?;
            }
        }
        let one_bare = {
            let (peer, map) = (peer.clone(), map.clone());
            move || {
                let (peer, map) = (peer.clone(), map.clone());
                async move {
                    peer.call_tool(CallToolRequestParams::new("echo").with_arguments(map))
                        .await
                        .is_ok()
                }
            }
        };
        let one_ours = {
            let (rt, args) = (runtime.clone(), args.clone());
            move || {
                let (rt, args) = (rt.clone(), args.clone());
                async move {
                    rt.call(
                        &Scope::Global,
                        "mcp__demo__echo",
                        Some(args),
                        CallOptions::default(),
                    )
                    .await
                    .is_ok()
                }
            }
        };
        let n = (calls / ROUNDS).max(CONCURRENCY);
        for round in 0..ROUNDS {
            // Alternate which side goes first.
            for is_bare in [round % 2 == 0, round % 2 != 0] {
                let (done, wall) = if is_bare {
                    concurrent_rate(n, one_bare.clone()).await
                } else {
                    concurrent_rate(n, one_ours.clone()).await
                };
                let tally = if is_bare { &mut b } else { &mut o };
                tally.concurrent_calls += done;
                tally.concurrent_wall += wall;
            }
        }
        anyhow::Ok((b.latency(), o.latency()))
    }
    .await;
    runtime.shutdown(Duration::from_secs(20)).await;
    let _ = client.cancel().await;
    let _ = child.kill().await;
    measured
}

/// An `echo` by a bare rmcp client to the demo server in each protocol era,
/// interleaved call by call: median ms, (session era, stateless era). What
/// the era costs without the runtime.
async fn bare_era_call(calls: usize) -> anyhow::Result<(f64, f64)> {
    let (session, mut a) = bare_client(0).await?;
    let (stateless, mut b) = bare_client_in(
        0,
        rmcp::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await?;
    let map = json!({"message": "bench"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let measured = median_ms_pair(
        calls,
        || bare_echo(session.peer(), &map),
        || bare_echo(stateless.peer(), &map),
    )
    .await;
    let _ = session.cancel().await;
    let _ = stateless.cancel().await;
    let _ = a.kill().await;
    let _ = b.kill().await;
    measured
}

/// An `echo` through the runtime to the same demo server in each protocol
/// era (ERA-1: the demo server speaks both), interleaved call by call:
/// median ms, (session era, stateless era).
async fn era_call(calls: usize) -> anyhow::Result<(f64, f64)> {
    let config = |name: &str, protocol: mcpvisor::ProtocolChoice| -> anyhow::Result<_> {
        let mut cfg = crate::config::demo_config(name, 0)?;
        cfg.protocol = protocol;
        Ok(cfg)
    };
    era_pair(
        config("session", mcpvisor::ProtocolChoice::Session)?,
        config("stateless", mcpvisor::ProtocolChoice::Stateless)?,
        "echo",
        calls,
    )
    .await
}

/// The servers `session` and `stateless` (the same server, each pinned to
/// one era) in one runtime, and `raw_tool` of each called through it,
/// interleaved call by call: median ms, (session era, stateless era).
async fn era_pair(
    session: mcpvisor::ServerConfig,
    stateless: mcpvisor::ServerConfig,
    raw_tool: &str,
    calls: usize,
) -> anyhow::Result<(f64, f64)> {
    let names = [session.server_name.clone(), stateless.server_name.clone()];
    let runtime = Runtime::builder()
        .server(Scope::Global, session)
        .server(Scope::Global, stateless)
        .start()
        .await?;
    let measured = async {
        for name in &names {
            runtime
                .wait_ready(&Scope::Global, name, Duration::from_secs(30))
                .await?;
        }
        let args = json!({"message": "bench"});
        let call = |server: &str| {
            let tool = mcpvisor::public_tool_name(server, raw_tool);
            let (runtime, args) = (&runtime, args.clone());
            move || {
                let (tool, args) = (tool.clone(), args.clone());
                async move {
                    let o = runtime
                        .call(&Scope::Global, &tool, Some(args), CallOptions::default())
                        .await;
                    if o.is_ok() {
                        Ok(())
                    } else {
                        anyhow::bail!("{tool}: {}", o.projection)
                    }
                }
            }
        };
        median_ms_pair(calls, call(&names[0]), call(&names[1])).await
    }
    .await;
    runtime.shutdown(Duration::from_secs(20)).await;
    measured
}

/// `calls` sequential calls of each of `targets` targets through `one(i)`,
/// interleaved call by call (the order rotating), after 20 warm-up calls
/// of each: every target's latencies.
async fn interleaved<F, Fut>(
    targets: usize,
    calls: usize,
    one: F,
) -> anyhow::Result<Vec<Vec<Duration>>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for i in 0..targets {
        for _ in 0..20 {
            one(i).await?;
        }
    }
    let mut samples = vec![Vec::with_capacity(calls); targets];
    for n in 0..calls {
        for k in 0..targets {
            let i = (n + k) % targets;
            let t = Instant::now();
            one(i).await?;
            samples[i].push(t.elapsed());
        }
    }
    Ok(samples)
}

/// The median of `xs` in ms (NaN for none).
fn median_ms(xs: &mut [Duration]) -> f64 {
    xs.sort();
    xs.get(xs.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// 64 callers sharing `calls` calls: how many succeeded, in how long.
async fn concurrent_rate<F, Fut>(calls: usize, one: F) -> (usize, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let per_task = (calls / CONCURRENCY).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let one = one.clone();
            tokio::spawn(async move {
                let mut ok = 0usize;
                for _ in 0..per_task {
                    ok += usize::from(one().await);
                }
                ok
            })
        })
        .collect();
    let mut done = 0usize;
    for t in tasks {
        done += t.await.unwrap_or(0);
    }
    (done, start.elapsed())
}

async fn catalog_sync(n: usize) -> anyhow::Result<(f64, f64)> {
    // Through the runtime: add_server → ready with the whole catalog registered.
    let runtime = Runtime::builder().start().await?;
    let t = Instant::now();
    runtime
        .add_server(Scope::Global, crate::config::demo_config("cat", n)?)
        .await?;
    runtime
        .wait_ready(&Scope::Global, "cat", Duration::from_secs(60))
        .await?;
    let ours = t.elapsed();
    let count = runtime.tools(&Scope::Global).len();
    runtime.shutdown(Duration::from_secs(20)).await;
    anyhow::ensure!(count == n + 4, "expected {} tools, got {count}", n + 4);
    // Bare rmcp: spawn + initialize + list_all_tools.
    let t = Instant::now();
    let (client, mut child) = bare_client(n).await?;
    let tools = client
        .list_all_tools()
        .await
        .context("bare list_all_tools")?;
    let bare = t.elapsed();
    anyhow::ensure!(tools.len() == n + 4);
    let _ = client.cancel().await;
    let _ = child.kill().await;
    Ok((ours.as_secs_f64() * 1e3, bare.as_secs_f64() * 1e3))
}

/// Start-to-ready of `n` demo servers: through the runtime (start → every
/// server ready with its catalog), and bare (spawn + initialize each with
/// rmcp, concurrently). Milliseconds: (bare, runtime).
async fn start_to_ready(n: usize) -> anyhow::Result<(f64, f64)> {
    let t = Instant::now();
    let bare = futures::future::try_join_all((0..n).map(|_| bare_client(0))).await?;
    let bare_ms = t.elapsed().as_secs_f64() * 1e3;
    for (client, mut child) in bare {
        let _ = client.cancel().await;
        let _ = child.kill().await;
    }
    let mut b = Runtime::builder();
    for i in 0..n {
        b = b.server(
            Scope::Global,
            crate::config::demo_config(&format!("d{i}"), 0)?,
        );
    }
    let t = Instant::now();
    let runtime = b.start().await?;
    for i in 0..n {
        runtime
            .wait_ready(&Scope::Global, &format!("d{i}"), Duration::from_secs(60))
            .await?;
    }
    let ours_ms = t.elapsed().as_secs_f64() * 1e3;
    runtime.shutdown(Duration::from_secs(30)).await;
    Ok((bare_ms, ours_ms))
}

/// Bytes the allocator counts as in use (glibc's `mallinfo2`: in-use
/// small blocks plus mmapped ones), KiB: the heap part of the RSS. This
/// includes chunks glibc keeps in its per-thread caches after a free, so
/// it can grow while the live heap stays flat (docs/performance.md).
/// 0 where there is no glibc.
fn heap_kib() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        #[allow(unsafe_code)]
        let m = unsafe { libc::mallinfo2() };
        ((m.uordblks + m.hblkhd) / 1024) as u64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    0
}

/// This process's resident set, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Runtime-side memory per idle connection: the RSS growth of this process
/// (the runtime's half; the servers are other processes) over `n` added
/// demo servers, per server, in KiB. RSS is page-granular and the
/// allocator first reuses what it already has, so it is measured first in
/// a run, over 100 servers (20 with `--quick`), once they have been quiet
/// for 3 s. Also the allocator's heap in use, per server, over the same
/// span: (RSS, heap).
async fn idle_connection_kib(n: usize) -> anyhow::Result<(f64, f64)> {
    let runtime = Runtime::builder().start().await?;
    // One server first, so the growth counts connections, not first use.
    runtime
        .add_server(Scope::Global, crate::config::demo_config("warm", 0)?)
        .await?;
    runtime
        .wait_ready(&Scope::Global, "warm", Duration::from_secs(30))
        .await?;
    let before = rss_kib();
    let heap_before = heap_kib();
    for i in 0..n {
        runtime
            .add_server(
                Scope::Global,
                crate::config::demo_config(&format!("i{i}"), 0)?,
            )
            .await?;
    }
    for i in 0..n {
        runtime
            .wait_ready(&Scope::Global, &format!("i{i}"), Duration::from_secs(60))
            .await?;
    }
    // Idle: quiet long enough for the stdio readers to give their buffers
    // back (2 s, actors/stdio.rs).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss_kib();
    let heap_after = heap_kib();
    runtime.shutdown(Duration::from_secs(30)).await;
    Ok((
        after.saturating_sub(before) as f64 / n as f64,
        heap_after.saturating_sub(heap_before) as f64 / n as f64,
    ))
}

/// Memory over a soak of `secs` seconds (PERF-1: flat within 5 % over
/// 10 minutes): one runtime and the demo server under a steady load
/// (100 sequential echo calls, then 64 concurrent ones, then a tools
/// listing, over and over) with a restart of the server every 30 s, so
/// every reconnect path runs many times. This process's RSS and heap in
/// use are sampled every 10 s. The first tenth (at least 10 s) is warm-up;
/// growth is the last sample against the first one after it.
async fn memory_soak(secs: u64) -> anyhow::Result<serde_json::Value> {
    let runtime = Runtime::builder()
        .server(Scope::Global, crate::config::demo_config("soak", 0)?)
        .start()
        .await?;
    let scope = Scope::Global;
    runtime
        .wait_ready(&scope, "soak", Duration::from_secs(30))
        .await?;
    let args = json!({"message": "soak"});
    let started = Instant::now();
    let total = Duration::from_secs(secs.max(20));
    let warm_up = (total / 10).max(Duration::from_secs(10));
    let (mut samples, mut next_sample, mut next_restart) =
        (Vec::new(), Duration::from_secs(10), Duration::from_secs(30));
    let (mut calls, mut failed, mut restarts) = (0u64, 0u64, 0u64);
    while started.elapsed() < total {
        for _ in 0..100 {
            let o = runtime
                .call(
                    &scope,
                    "mcp__soak__echo",
                    Some(args.clone()),
                    CallOptions::default(),
                )
                .await;
            calls += 1;
            failed += u64::from(!o.is_ok());
        }
        let batch = (0..CONCURRENCY).map(|_| {
            runtime.call(
                &scope,
                "mcp__soak__echo",
                Some(args.clone()),
                CallOptions::default(),
            )
        });
        for o in futures::future::join_all(batch).await {
            calls += 1;
            failed += u64::from(!o.is_ok());
        }
        let _ = runtime.tools(&scope);
        let now = started.elapsed();
        if now >= next_restart {
            runtime.restart_server(&scope, "soak").await?;
            runtime
                .wait_ready(&scope, "soak", Duration::from_secs(30))
                .await?;
            restarts += 1;
            next_restart += Duration::from_secs(30);
        }
        if now >= next_sample {
            samples.push((now.as_secs_f64(), rss_kib(), heap_kib()));
            next_sample += Duration::from_secs(10);
        }
    }
    samples.push((started.elapsed().as_secs_f64(), rss_kib(), heap_kib()));
    runtime.shutdown(Duration::from_secs(20)).await;
    let base = samples
        .iter()
        .find(|(t, _, _)| *t >= warm_up.as_secs_f64())
        .or(samples.first())
        .copied()
        .unwrap_or((0.0, 0, 0));
    let last = samples.last().copied().unwrap_or(base);
    let growth = |a: u64, b: u64| (b as f64 - a as f64) / (a.max(1) as f64) * 100.0;
    Ok(json!({
        "seconds": secs,
        "calls": calls,
        "failed_calls": failed,
        "restarts": restarts,
        "rss_kib": {"after_warm_up": base.1, "end": last.1, "max": samples.iter().map(|s| s.1).max()},
        "heap_kib": {"after_warm_up": base.2, "end": last.2, "max": samples.iter().map(|s| s.2).max()},
        "rss_growth_pct": growth(base.1, last.1),
        "heap_growth_pct": growth(base.2, last.2),
        "samples": samples.iter().map(|(t, r, h)| json!([t, r, h])).collect::<Vec<_>>(),
    }))
}

/// A hook run against a bare `sh -c true`, median ms of `n` each: the
/// runtime runs one PreToolUse command hook `true` (spawn in its own group,
/// payload on stdin, output parsed, group reaped). (bare, runtime).
async fn hook_overhead(n: usize) -> anyhow::Result<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!("mcpvisor-bench-hook-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("hooks.json");
    std::fs::write(
        &file,
        r#"{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"true"}]}]}}"#,
    )?;
    let runtime = Runtime::builder()
        .hooks(mcpvisor::HookSettings {
            claude: Some(file),
            ..mcpvisor::HookSettings::default()
        })
        .start()
        .await?;
    let hooks = runtime.hooks();
    let input = mcpvisor::HookInput::PreToolUse {
        tool_name: "mcp__demo__echo".into(),
        tool_input: json!({}),
        tool_use_id: "bench".into(),
    };
    let cancel = mcpvisor::CancellationToken::new();
    let measured = median_ms_pair(
        n,
        || async {
            tokio::process::Command::new("sh")
                .args(["-c", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .await?;
            Ok(())
        },
        || async {
            let _ = hooks.run(hooks.session(), &input, None, &cancel).await;
            Ok(())
        },
    )
    .await;
    runtime.shutdown(Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

/// Calls of one model round (issue 36): `ROUND_CALLS` calls of the demo
/// server's `sleep` (`ROUND_SLEEP_MS` each) through the runtime's call
/// pipeline, one after another vs together (`RoundGate`, all in flight):
/// median ms of each. Together is about the slowest call, not the sum.
async fn round_calls(n: usize) -> anyhow::Result<(f64, f64)> {
    const ROUND_CALLS: usize = 4;
    const ROUND_SLEEP_MS: u64 = 50;
    let mut cfg = crate::config::demo_config("demo", 0)?;
    cfg.parallel_calls = Some(true);
    let runtime = Runtime::builder().start().await?;
    runtime.add_server(Scope::Global, cfg).await?;
    runtime
        .wait_ready(&Scope::Global, "demo", Duration::from_secs(20))
        .await?;
    let round = |parallel: usize| {
        let runtime = &runtime;
        async move {
            let slots = mcpvisor::RoundGate::slots(parallel, &[false; ROUND_CALLS]);
            let calls = slots.into_iter().map(|slot| {
                runtime.call(
                    &Scope::Global,
                    "mcp__demo__sleep",
                    Some(json!({"ms": ROUND_SLEEP_MS})),
                    CallOptions {
                        round: Some(slot),
                        ..CallOptions::default()
                    },
                )
            });
            for o in futures::future::join_all(calls).await {
                anyhow::ensure!(
                    o.kind == mcpvisor::OutcomeKind::Ok,
                    "a round's call failed: {}",
                    o.projection
                );
            }
            Ok(())
        }
    };
    let measured = median_ms_pair(n, || round(1), || round(ROUND_CALLS)).await;
    runtime.shutdown(Duration::from_secs(20)).await;
    measured
}

/// The bytes of the tool definitions a turn's first request carries on
/// the demo server's 1,004 tools (issue 36): every tool, against the
/// search tool of deferred loading. Measured through `Runtime::turn`
/// against a model endpoint on 127.0.0.1 that answers every request with
/// text (its `Round` event carries the bytes). Bytes, not time: one run
/// says it all.
async fn defer_bytes() -> anyhow::Result<(f64, f64)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(|| async {
        (
            [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        )
    });
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let runtime = Runtime::builder().start().await?;
    runtime
        .add_server(Scope::Global, crate::config::demo_config("demo", 1000)?)
        .await?;
    runtime
        .wait_ready(&Scope::Global, "demo", Duration::from_secs(30))
        .await?;
    let mut bytes = Vec::new();
    for defer in [mcpvisor::Defer::Never, mcpvisor::Defer::Always] {
        let route = mcpvisor::ModelRoute::new(
            mcpvisor::Provider::OpenAi,
            format!("http://{addr}/v1"),
            "bench",
        );
        let mut request = mcpvisor::TurnRequest::new(Scope::Global, route, "hi");
        request.defer = defer;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let outcome = runtime.turn(request, Some(tx)).await;
        anyhow::ensure!(
            outcome.error.is_none(),
            "the bench turn failed: {:?}",
            outcome.error
        );
        while let Ok(e) = rx.try_recv() {
            if let mcpvisor::TurnEvent::Round { tool_bytes, .. } = e {
                bytes.push(tool_bytes as f64);
                break;
            }
        }
    }
    runtime.shutdown(Duration::from_secs(20)).await;
    server.abort();
    match bytes[..] {
        [eager, deferred] => Ok((eager, deferred)),
        _ => anyhow::bail!("the bench turns reported no round"),
    }
}

/// Calls through HAProxy in front of 1, 2 and 3 `gateway --http` replicas
/// of the demo server (docs/deploy.md's configuration, one frontend per
/// replica count), from stateless (2026-07-28) rmcp clients: the
/// sequential p50 through the balancer to one replica against a direct
/// call to that replica (interleaved), and 64-way calls/s direct and
/// through each frontend. On one machine the replicas share its cores:
/// this measures the balancer's cost and that more replicas do not lose
/// throughput, not a multi-machine speed-up. NaN without HAProxy.
async fn replicas_row(calls: usize) -> anyhow::Result<serde_json::Value> {
    let Some(haproxy) = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
    else {
        eprintln!("bench: no HAProxy here (Debian package haproxy): the replicas row is left out");
        return Ok(json!({"note": "HAProxy not installed"}));
    };
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(DemoGateway::start(true, &format!("replica-{i}")).await?);
    }
    let addrs: Vec<String> = replicas
        .iter()
        .map(|r| {
            r.url
                .as_deref()
                .unwrap_or_default()
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_owned()
        })
        .collect();
    let port = || -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let fronts = [port()?, port()?, port()?];
    let mut config = String::from(
        "global\n    nbthread 1\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 90s\n    timeout server 90s\n    option http-buffer-request\n    retries 2\n    option redispatch 1\n    retry-on conn-failure 503\n",
    );
    for (n, front) in fronts.iter().enumerate() {
        config.push_str(&format!(
            "frontend f{n}\n    bind 127.0.0.1:{front}\n    default_backend b{n}\nbackend b{n}\n    balance roundrobin\n"
        ));
        for (i, a) in addrs.iter().take(n + 1).enumerate() {
            config.push_str(&format!("    server r{i} {a}\n"));
        }
    }
    let dir = std::env::temp_dir().join(format!("mcpvisor-bench-haproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("haproxy.cfg"), config)?;
    let mut lb = tokio::process::Command::new(haproxy)
        .arg("-db")
        .arg("-f")
        .arg(dir.join("haproxy.cfg"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    // Measured in a block of its own: the replicas and the balancer are
    // stopped whatever happens in it.
    let measured = async {
        let stateless = |url: String| async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let client = rmcp::ClientServiceExt::serve_with_lifecycle(
                    ClientConfig::default(),
                    pooled_http(url.clone())?,
                    rmcp::ClientLifecycleMode::Discover {
                        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                    },
                )
                .await;
                match client {
                    Ok(c) => {
                        let tools = c.list_all_tools().await.unwrap_or_default();
                        if tools.iter().any(|t| t.name == "mcp__demo__echo") {
                            return anyhow::Ok(c);
                        }
                        let _ = c.cancel().await;
                    }
                    Err(e) if Instant::now() >= deadline => return Err(e.into()),
                    Err(_) => {}
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{url} never listed the demo's echo"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let mut clients = vec![stateless(format!("http://{}/mcp", addrs[0])).await?];
        for front in fronts {
            clients.push(stateless(format!("http://127.0.0.1:{front}/mcp")).await?);
        }
        let args = json!({"message": "bench"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let one = |i: usize| {
            let peer = clients[i].peer().clone();
            let args = args.clone();
            async move {
                let r = peer
                    .call_tool(CallToolRequestParams::new("mcp__demo__echo").with_arguments(args))
                    .await?;
                anyhow::ensure!(r.is_error != Some(true), "an echo failed");
                anyhow::Ok(())
            }
        };
        // Direct to r0 and through the one-replica frontend, interleaved.
        let mut samples = interleaved(2, calls, one).await?;
        let mut rate = [(0usize, Duration::ZERO); 4];
        let n64 = (calls * 4).max(CONCURRENCY * 4);
        for _ in 0..ROUNDS {
            for (i, slot) in rate.iter_mut().enumerate() {
                let peer = clients[i].peer().clone();
                let args = args.clone();
                let (ok, took) = concurrent_rate(n64, move || {
                    let (peer, args) = (peer.clone(), args.clone());
                    async move {
                        peer.call_tool(
                            CallToolRequestParams::new("mcp__demo__echo").with_arguments(args),
                        )
                        .await
                        .is_ok_and(|r| r.is_error != Some(true))
                    }
                })
                .await;
                slot.0 += ok;
                slot.1 += took;
            }
        }
        let per_s = |(ok, took): (usize, Duration)| ok as f64 / took.as_secs_f64().max(1e-9);
        let (direct_ms, through_ms) = (median_ms(&mut samples[0]), median_ms(&mut samples[1]));
        let row = json!({
            "p50_ms": {"direct": direct_ms, "through_haproxy": through_ms, "ratio": through_ms / direct_ms.max(1e-9)},
            "calls_per_s_64": {
                "direct": per_s(rate[0]),
                "replicas_1": per_s(rate[1]),
                "replicas_2": per_s(rate[2]),
                "replicas_3": per_s(rate[3]),
                "ratio_3_to_1": per_s(rate[3]) / per_s(rate[1]).max(1e-9),
            },
        });
        for c in clients {
            let _ = c.cancel().await;
        }
        anyhow::Ok(row)
    }
    .await;
    let _ = lb.kill().await;
    for r in replicas {
        r.stop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

/// The rows whose ratios a `--runs K` summary reports: label, JSON pointer.
const RATIO_ROWS: &[(&str, &str)] = &[
    ("tools/call p50", "/tools_call/ratio_p50"),
    ("tools/call p99", "/tools_call/ratio_p99"),
    ("64-way calls/s", "/tools_call/ratio_concurrent_64"),
    ("client CPU per call", "/tools_call/ratio_client_cpu"),
    ("stateless/session era call p50", "/era_call_p50_ms/ratio"),
    ("the same, bare rmcp", "/bare_era_call_p50_ms/ratio"),
    (
        "the same over HTTP (gateway)",
        "/http_era_call_p50_ms/ratio",
    ),
    ("1 MiB result", "/large_result_ms/ratio"),
    ("gateway call p50", "/gateway_call_p50_us/ratio"),
    ("gateway --http call p50", "/gateway_http_call_p50_us/ratio"),
    ("second hop, demo: relay", "/second_hop/demo/relay_ratio"),
    (
        "second hop, demo: stdio added vs relay",
        "/second_hop/demo/stdio_added_vs_relay",
    ),
    (
        "second hop, demo: http added vs relay",
        "/second_hop/demo/http_added_vs_relay",
    ),
    (
        "second hop, demo: 64-way stdio",
        "/second_hop/demo/stdio_64_ratio",
    ),
    (
        "second hop, demo: 64-way http",
        "/second_hop/demo/http_64_ratio",
    ),
    (
        "second hop, everything: stdio",
        "/second_hop/everything/stdio_ratio",
    ),
    (
        "second hop, everything: http",
        "/second_hop/everything/http_ratio",
    ),
    (
        "second hop, everything: http, stateless client",
        "/second_hop/everything/http_stateless_ratio",
    ),
    (
        "second hop, everything: http, plain client",
        "/second_hop/everything/http_plain_ratio",
    ),
    (
        "second hop, everything: 64-way stdio",
        "/second_hop/everything/stdio_64_ratio",
    ),
    (
        "second hop, everything: 64-way http",
        "/second_hop/everything/http_64_ratio",
    ),
    (
        "second hop, everything: 64-way http, plain client",
        "/second_hop/everything/http_plain_64_ratio",
    ),
    ("start to ready, 1", "/start_to_ready_ms/1/ratio"),
    ("start to ready, 10", "/start_to_ready_ms/10/ratio"),
    ("start to ready, 100", "/start_to_ready_ms/100/ratio"),
    ("hook overhead", "/hook_overhead_ms/ratio"),
    (
        "a round's 4 calls together vs one after another",
        "/round_calls_ms/ratio",
    ),
    (
        "first request's tool bytes, deferred vs eager",
        "/first_request_tool_bytes/ratio",
    ),
    (
        "call p50 through HAProxy vs direct to the replica",
        "/replicas/p50_ms/ratio",
    ),
    (
        "64-way calls/s, 3 replicas vs 1",
        "/replicas/calls_per_s_64/ratio_3_to_1",
    ),
    ("catalog sync 1k", "/catalog_sync_ms/1k/ratio"),
    ("catalog sync 10k", "/catalog_sync_ms/10k/ratio"),
];

/// `bench [--runs K]`: K runs one after the other, each measuring every row
/// with its bare baseline back to back (so bare and runtime figures of a
/// row are interleaved across runs), then, for K > 1, the median ratio of
/// each row with its min–max. With `--json`, one object: the last run's
/// rows at the top level (as a single run prints them), every run in
/// `runs`, and `summary` (row → `{median, min, max, runs}`).
pub async fn run(
    calls: usize,
    quick: bool,
    runs: usize,
    only: &[Row],
    soak: Option<u64>,
    as_json: bool,
) -> anyhow::Result<u8> {
    let runs = runs.max(1);
    let mut all = Vec::with_capacity(runs);
    for i in 0..runs {
        let figures = measure(calls, quick, only, soak).await?;
        if !as_json {
            if runs > 1 {
                println!("── run {} of {runs}", i + 1);
            }
            print_human(&figures);
        }
        all.push(figures);
    }
    let summary = summarize_runs(&all);
    if as_json {
        let mut out = all.last().cloned().unwrap_or_else(|| json!({}));
        if let Some(o) = out.as_object_mut() {
            o.insert("runs".into(), serde_json::Value::Array(all.clone()));
            o.insert("summary".into(), summary);
        }
        println!("{out}");
    } else if runs > 1 {
        println!("median ratio (mcpvisor / bare) of {runs} runs, with min–max:");
        if let Some(rows) = summary.as_object() {
            for (label, _) in RATIO_ROWS {
                if let Some(r) = rows.get(*label) {
                    println!(
                        "  {label:<22} {:>6.2}  ({:.2}–{:.2})",
                        r["median"].as_f64().unwrap_or(f64::NAN),
                        r["min"].as_f64().unwrap_or(f64::NAN),
                        r["max"].as_f64().unwrap_or(f64::NAN)
                    );
                }
            }
        }
    }
    Ok(0)
}

/// Row → `{median, min, max, runs}` over the runs where the row has a
/// finite ratio (a `--quick` run has no 10k or 100-server rows).
fn summarize_runs(all: &[serde_json::Value]) -> serde_json::Value {
    let mut rows = serde_json::Map::new();
    for (label, pointer) in RATIO_ROWS {
        let mut xs: Vec<f64> = all
            .iter()
            .filter_map(|f| f.pointer(pointer)?.as_f64())
            .filter(|x| x.is_finite())
            .collect();
        if xs.is_empty() {
            continue;
        }
        xs.sort_by(f64::total_cmp);
        let median = if xs.len() % 2 == 1 {
            xs[xs.len() / 2]
        } else {
            (xs[xs.len() / 2 - 1] + xs[xs.len() / 2]) / 2.0
        };
        rows.insert(
            (*label).to_owned(),
            json!({"median": median, "min": xs[0], "max": xs[xs.len() - 1], "runs": xs.len()}),
        );
    }
    serde_json::Value::Object(rows)
}

/// One run of every row, as the JSON `bench --json` prints.
async fn measure(
    calls: usize,
    quick: bool,
    only: &[Row],
    soak: Option<u64>,
) -> anyhow::Result<serde_json::Value> {
    let calls = if quick { calls.min(200) } else { calls };
    let want = |row: Row| (only.is_empty() && row != Row::Soak) || only.contains(&row);
    let none = (f64::NAN, f64::NAN);
    // First, while the allocator holds little it could reuse: a growth
    // measured after the other rows is absorbed by what they freed.
    let (idle_kib, idle_heap_kib) = if want(Row::Idle) {
        idle_connection_kib(if quick { 20 } else { 100 }).await?
    } else {
        none
    };
    let (bare, ours) = if want(Row::Calls) {
        tools_call(calls).await?
    } else {
        (Latency::none(), Latency::none())
    };
    let (era_session, era_stateless) = if want(Row::Calls) {
        era_call(calls).await?
    } else {
        none
    };
    let (bare_era_session, bare_era_stateless) = if want(Row::Calls) {
        bare_era_call(calls).await?
    } else {
        none
    };
    let (http_era_session, http_era_stateless) = if want(Row::Calls) {
        http_era_call((calls / 2).max(100)).await?
    } else {
        none
    };
    let (c1k, b1k) = if want(Row::Catalog) {
        catalog_sync(1_000).await?
    } else {
        none
    };
    let (c10k, b10k) = if quick || !want(Row::Catalog) {
        none
    } else {
        catalog_sync(10_000).await?
    };
    let (large_bare, large_ours) = if want(Row::Large) {
        large_result((calls / 40).clamp(5, 50)).await?
    } else {
        none
    };
    let hop_calls = (calls / 4).max(50);
    let demo_hop = if want(Row::Gateway) {
        second_hop(&Backend::Demo, hop_calls).await?
    } else {
        SecondHop::none()
    };
    let everything_hop = match Backend::everything() {
        Some(b) if want(Row::Gateway) => second_hop(&b, hop_calls).await?,
        _ => SecondHop::none(),
    };
    let (gw_direct, gw_through, gw_http_direct, gw_http_through) = (
        demo_hop.direct,
        demo_hop.stdio,
        demo_hop.direct,
        demo_hop.http,
    );
    let mut ready = Vec::new();
    if want(Row::Ready) {
        for n in if quick { vec![1, 10] } else { vec![1, 10, 100] } {
            ready.push((n, start_to_ready(n).await?));
        }
    }
    let (hook_bare, hook_ours) = if want(Row::Hooks) {
        hook_overhead(if quick { 10 } else { 50 }).await?
    } else {
        none
    };
    let (round_serial, round_together) = if want(Row::Round) {
        round_calls(if quick { 4 } else { 20 }).await?
    } else {
        none
    };
    let (defer_eager, defer_deferred) = if want(Row::Defer) {
        defer_bytes().await?
    } else {
        none
    };
    let replicas = if want(Row::Replicas) {
        replicas_row(calls).await?
    } else {
        serde_json::Value::Null
    };
    let soak = match soak {
        Some(secs) if only.is_empty() || only.contains(&Row::Soak) => memory_soak(secs).await?,
        None if only.contains(&Row::Soak) => memory_soak(600).await?,
        _ => serde_json::Value::Null,
    };
    let ready_json: serde_json::Map<String, serde_json::Value> = ready
        .iter()
        .map(|(n, (b, o))| {
            (
                n.to_string(),
                json!({"bare": b, "runtime": o, "ratio": o / b.max(1e-9)}),
            )
        })
        .collect();
    Ok(json!({
        "calls": calls,
        "tools_call": {
            "runtime": {"p50_us": ours.p50_us, "p99_us": ours.p99_us, "calls_per_s": ours.calls_per_s, "concurrent_64_calls_per_s": ours.concurrent_per_s, "client_cpu_us_per_call": ours.cpu_us_per_call, "client_switches_per_call": ours.switches_per_call},
            "bare_rmcp": {"p50_us": bare.p50_us, "p99_us": bare.p99_us, "calls_per_s": bare.calls_per_s, "concurrent_64_calls_per_s": bare.concurrent_per_s, "client_cpu_us_per_call": bare.cpu_us_per_call, "client_switches_per_call": bare.switches_per_call},
            "ratio_p50": ours.p50_us / bare.p50_us.max(1e-9),
            "ratio_p99": ours.p99_us / bare.p99_us.max(1e-9),
            "ratio_concurrent_64": ours.concurrent_per_s / bare.concurrent_per_s.max(1e-9),
            "ratio_client_cpu": ours.cpu_us_per_call / bare.cpu_us_per_call.max(1e-9),
        },
        "era_call_p50_ms": {"session": era_session, "stateless": era_stateless, "ratio": era_stateless / era_session.max(1e-9)},
        "bare_era_call_p50_ms": {"session": bare_era_session, "stateless": bare_era_stateless, "ratio": bare_era_stateless / bare_era_session.max(1e-9)},
        "http_era_call_p50_ms": {"session": http_era_session, "stateless": http_era_stateless, "ratio": http_era_stateless / http_era_session.max(1e-9)},
        "large_result_ms": {"bare": large_bare, "runtime": large_ours, "ratio": large_ours / large_bare.max(1e-9)},
        // gateway_call measures ms; these keys are µs.
        "gateway_call_p50_us": {"bare": gw_direct * 1e3, "runtime": gw_through * 1e3, "ratio": gw_through / gw_direct.max(1e-9)},
        "gateway_http_call_p50_us": {"bare": gw_http_direct * 1e3, "runtime": gw_http_through * 1e3, "ratio": gw_http_through / gw_http_direct.max(1e-9)},
        "second_hop": {"demo": demo_hop.json(), "everything": everything_hop.json()},
        "start_to_ready_ms": ready_json,
        "idle_connection_kib": {"runtime": idle_kib, "heap": idle_heap_kib},
        "hook_overhead_ms": {"bare": hook_bare, "runtime": hook_ours, "ratio": hook_ours / hook_bare.max(1e-9)},
        "first_request_tool_bytes": {"eager": defer_eager, "deferred": defer_deferred, "ratio": defer_deferred / defer_eager.max(1e-9)},
        "round_calls_ms": {"one_after_another": round_serial, "together": round_together, "ratio": round_together / round_serial.max(1e-9)},
        "replicas": replicas,
        "quick": quick,
        "memory_soak": soak,
        "catalog_sync_ms": {
            "1k": {"runtime": c1k, "bare_rmcp": b1k, "ratio": c1k / b1k.max(1e-9)},
            "10k": {"runtime": c10k, "bare_rmcp": b10k, "ratio": c10k / b10k.max(1e-9)},
        },
    }))
}

/// One run's figures as the human table.
fn print_human(f: &serde_json::Value) {
    let n = |p: &str| {
        f.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    println!(
        "tools/call echo, {} sequential calls each side, demo server over stdio, bare and runtime interleaved in blocks of {BLOCK}",
        f["calls"]
    );
    println!(
        "  {:<12} {:>10} {:>10} {:>12} {:>14} {:>13}",
        "", "p50 µs", "p99 µs", "calls/s", "64-way calls/s", "client CPU µs"
    );
    for (label, key) in [("bare rmcp", "bare_rmcp"), ("mcpvisor", "runtime")] {
        let at = |field: &str| n(&format!("/tools_call/{key}/{field}"));
        println!(
            "  {:<12} {:>10.1} {:>10.1} {:>12.0} {:>14.0} {:>13.1}",
            label,
            at("p50_us"),
            at("p99_us"),
            at("calls_per_s"),
            at("concurrent_64_calls_per_s"),
            at("client_cpu_us_per_call")
        );
    }
    println!(
        "  ratio p50 (mcpvisor / bare): {:.2}; p99: {:.2}; 64-way throughput ratio: {:.2}",
        n("/tools_call/ratio_p50"),
        n("/tools_call/ratio_p99"),
        n("/tools_call/ratio_concurrent_64")
    );
    println!(
        "echo through mcpvisor to the demo server in each protocol era, median µs: 2025-11-25 {:.1}, 2026-07-28 {:.1}, ratio {:.2}",
        n("/era_call_p50_ms/session") * 1e3,
        n("/era_call_p50_ms/stateless") * 1e3,
        n("/era_call_p50_ms/ratio")
    );
    println!(
        "the same by a bare rmcp client, median µs: 2025-11-25 {:.1}, 2026-07-28 {:.1}, ratio {:.2}",
        n("/bare_era_call_p50_ms/session") * 1e3,
        n("/bare_era_call_p50_ms/stateless") * 1e3,
        n("/bare_era_call_p50_ms/ratio")
    );
    println!(
        "echo through mcpvisor to one HTTP server in each era (gateway --http fronting the demo server), median µs: 2025-11-25 {:.1}, 2026-07-28 {:.1}, ratio {:.2}",
        n("/http_era_call_p50_ms/session") * 1e3,
        n("/http_era_call_p50_ms/stateless") * 1e3,
        n("/http_era_call_p50_ms/ratio")
    );
    println!(
        "1 MiB echo (event log + attachment store + a policy installed), median ms: bare rmcp {:.1}, mcpvisor {:.1}, ratio {:.2}",
        n("/large_result_ms/bare"),
        n("/large_result_ms/runtime"),
        n("/large_result_ms/ratio")
    );
    println!(
        "echo through `mcpvisor gateway --stdio` vs straight to the demo server (bare rmcp client both), median µs: direct {:.1}, gateway {:.1}, ratio {:.2}",
        n("/gateway_call_p50_us/bare"),
        n("/gateway_call_p50_us/runtime"),
        n("/gateway_call_p50_us/ratio")
    );
    println!(
        "echo through `mcpvisor gateway --http` (loopback) vs straight to the demo server over stdio (bare rmcp client both), median µs: direct {:.1}, gateway {:.1}, ratio {:.2}",
        n("/gateway_http_call_p50_us/bare"),
        n("/gateway_http_call_p50_us/runtime"),
        n("/gateway_http_call_p50_us/ratio")
    );
    for (name, what) in [
        ("demo", "the demo server"),
        ("everything", "server-everything (Node)"),
    ] {
        let h = |k: &str| n(&format!("/second_hop/{name}/{k}"));
        if h("direct_us").is_nan() {
            println!(
                "second hop in front of {what}: not measured (chaos-tests/peers/install.sh installs it)"
            );
            continue;
        }
        println!(
            "second hop in front of {what}, echo median µs: direct {:.1}, byte relay {:.1} ({:.2}), gateway --stdio {:.1} ({:.2}), gateway --http {:.1} ({:.2}); time added against the relay's: stdio {:.2}, http {:.2}",
            h("direct_us"),
            h("relay_us"),
            h("relay_ratio"),
            h("stdio_us"),
            h("stdio_ratio"),
            h("http_us"),
            h("http_ratio"),
            h("stdio_added_vs_relay"),
            h("http_added_vs_relay"),
        );
        println!(
            "  a 2026-07-28 client of gateway --http (no session): median µs {:.1} ({:.2})",
            h("http_stateless_us"),
            h("http_stateless_ratio"),
        );
        println!(
            "  the same request from a plain HTTP client (reqwest, no MCP client stack): median µs {:.1} ({:.2})",
            h("http_plain_us"),
            h("http_plain_ratio"),
        );
        println!(
            "  64 concurrent callers, calls/s: direct {:.0}, gateway --stdio {:.0} ({:.2}), gateway --http {:.0} ({:.2}), the same stateless {:.0} ({:.2}), from a plain HTTP client {:.0} ({:.2})",
            h("direct_64_per_s"),
            h("stdio_64_per_s"),
            h("stdio_64_ratio"),
            h("http_64_per_s"),
            h("http_64_ratio"),
            h("http_stateless_64_per_s"),
            h("http_stateless_64_ratio"),
            h("http_plain_64_per_s"),
            h("http_plain_64_ratio"),
        );
    }
    println!("start to ready (spawn → initialize → catalog registered), ms");
    if let Some(rows) = f["start_to_ready_ms"].as_object() {
        let mut rows: Vec<(u64, &serde_json::Value)> = rows
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect();
        rows.sort_by_key(|(k, _)| *k);
        for (k, v) in rows {
            println!(
                "  {k:>4} server(s): bare rmcp {:.1}, mcpvisor {:.1}, ratio {:.2}",
                v["bare"].as_f64().unwrap_or(f64::NAN),
                v["runtime"].as_f64().unwrap_or(f64::NAN),
                v["ratio"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    println!(
        "runtime-side memory per idle connection: {:.1} KiB RSS, of which {:.1} KiB heap in use (glibc's count, caches included)",
        n("/idle_connection_kib/runtime"),
        n("/idle_connection_kib/heap")
    );
    println!(
        "a PreToolUse hook `true` vs a bare `sh -c true`, median ms: bare {:.2}, mcpvisor {:.2}, ratio {:.2}",
        n("/hook_overhead_ms/bare"),
        n("/hook_overhead_ms/runtime"),
        n("/hook_overhead_ms/ratio")
    );
    println!(
        "a model round's 4 calls of a 50 ms tool, median ms: one after another {:.1}, together {:.1}, ratio {:.2}",
        n("/round_calls_ms/one_after_another"),
        n("/round_calls_ms/together"),
        n("/round_calls_ms/ratio")
    );
    println!(
        "a first request's tool definitions on 1,004 tools, bytes: every tool {:.0}, deferred (the search tool) {:.0}, ratio {:.3}",
        n("/first_request_tool_bytes/eager"),
        n("/first_request_tool_bytes/deferred"),
        n("/first_request_tool_bytes/ratio")
    );
    if f["replicas"]["p50_ms"].is_object() {
        println!(
            "gateway replicas behind HAProxy (stateless clients, demo server): p50 ms direct {:.3}, through HAProxy {:.3}, ratio {:.2}; 64-way calls/s direct {:.0}, 1 replica {:.0}, 2 {:.0}, 3 {:.0} (3 vs 1: {:.2}; one machine's cores shared)",
            n("/replicas/p50_ms/direct"),
            n("/replicas/p50_ms/through_haproxy"),
            n("/replicas/p50_ms/ratio"),
            n("/replicas/calls_per_s_64/direct"),
            n("/replicas/calls_per_s_64/replicas_1"),
            n("/replicas/calls_per_s_64/replicas_2"),
            n("/replicas/calls_per_s_64/replicas_3"),
            n("/replicas/calls_per_s_64/ratio_3_to_1"),
        );
    }
    println!("catalog sync (spawn → initialize → all pages → registered), ms");
    println!(
        "  {:<12} {:>10} {:>10} {:>8}",
        "tools", "mcpvisor", "bare rmcp", "ratio"
    );
    for k in ["1k", "10k"] {
        println!(
            "  {:<12} {:>10.1} {:>10.1} {:>8.2}",
            k,
            n(&format!("/catalog_sync_ms/{k}/runtime")),
            n(&format!("/catalog_sync_ms/{k}/bare_rmcp")),
            n(&format!("/catalog_sync_ms/{k}/ratio"))
        );
    }
    if f["memory_soak"].is_object() {
        println!(
            "memory soak, {} s ({} calls, {} failed, {} restarts): RSS {} → {} KiB ({:+.1} %), glibc's heap in use {} → {} KiB ({:+.1} %; caches included) after the warm-up (PERF-1: RSS flat within 5 %)",
            f["memory_soak"]["seconds"],
            f["memory_soak"]["calls"],
            f["memory_soak"]["failed_calls"],
            f["memory_soak"]["restarts"],
            f["memory_soak"]["rss_kib"]["after_warm_up"],
            f["memory_soak"]["rss_kib"]["end"],
            n("/memory_soak/rss_growth_pct"),
            f["memory_soak"]["heap_kib"]["after_warm_up"],
            f["memory_soak"]["heap_kib"]["end"],
            n("/memory_soak/heap_growth_pct"),
        );
    }
}
