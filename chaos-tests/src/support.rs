//! Helpers the real-process tests share: a fault-server as a server config or
//! an HTTP process, a runtime started with one server, a call, the
//! fault-server's request log, a scripted approver, and waiting for a file to
//! say something.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use mcpvisor::{
    Approval, ApprovalRequest, Approver, CallOptions, Runtime, RuntimeBuilder, Scope, ServerConfig,
    ToolOutcome, TrustMode,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{fault_server_path, unique_temp_path};

/// A temporary directory holding `mcpvisor.toml`, for runs of the real
/// binary; removed at drop.
pub struct ConfigDir {
    /// The directory (the binary's working directory in the CLI tests).
    pub dir: PathBuf,
}

impl ConfigDir {
    /// A fresh directory whose `mcpvisor.toml` is `toml`.
    pub fn new(tag: &str, toml: &str) -> std::io::Result<Self> {
        let dir = unique_temp_path(tag);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("mcpvisor.toml"), toml)?;
        Ok(Self { dir })
    }

    /// Its `mcpvisor.toml`.
    pub fn config(&self) -> PathBuf {
        self.dir.join("mcpvisor.toml")
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `[servers.NAME]` TOML section running `fault-server {args}` with this
/// trust and no idle stop.
pub fn fault_server_section<S: AsRef<str>>(name: &str, args: &[S], trust: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{:?}", a.as_ref())).collect();
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = [{}]\nidle_stop_after_s = 0\ntrust = {trust:?}\n",
        fault_server_path().to_string_lossy(),
        args.join(", ")
    )
}

/// How long [`start_with_server`] waits for its server to be ready.
const READY_LIMIT: Duration = Duration::from_secs(20);

/// A stdio config running `fault-server {args}` as server `name` (trust and
/// timeouts as `ServerConfig::stdio` sets them).
pub fn fault_server_config<S: Into<String>>(
    name: &str,
    args: impl IntoIterator<Item = S>,
) -> ServerConfig {
    ServerConfig::stdio(
        name,
        fault_server_path().to_string_lossy(),
        args.into_iter().map(Into::into).collect(),
    )
}

/// Start `builder`, add `cfg` in `scope`, and wait (up to 20 s) until that
/// server is ready.
pub async fn start_with_server(
    builder: RuntimeBuilder,
    scope: Scope,
    cfg: ServerConfig,
) -> Result<Runtime, String> {
    let runtime = builder.start().await.map_err(|e| e.to_string())?;
    let name = cfg.server_name.clone();
    runtime
        .add_server(scope.clone(), cfg)
        .await
        .map_err(|e| e.to_string())?;
    runtime
        .wait_ready(&scope, &name, READY_LIMIT)
        .await
        .map_err(|e| e.to_string())?;
    Ok(runtime)
}

/// Start `builder` with one global fault-server `srv` of trust `trust` that
/// logs its requests, and wait until it is ready.
pub async fn start_logged_server(
    builder: RuntimeBuilder,
    trust: TrustMode,
) -> Result<(Runtime, RequestLog), String> {
    let log = RequestLog::new("srv-requests.log");
    let mut cfg = fault_server_config("srv", log.args());
    cfg.trust = trust;
    let runtime = start_with_server(builder, Scope::Global, cfg).await?;
    Ok((runtime, log))
}

/// Call the global tool `tool` with `args` and default options.
pub async fn call(runtime: &Runtime, tool: &str, args: serde_json::Value) -> ToolOutcome {
    runtime
        .call(&Scope::Global, tool, Some(args), CallOptions::default())
        .await
}

/// The file a fault-server logs every request to (`--log-requests`), one
/// line each starting with the method; removed on drop.
#[derive(Debug)]
pub struct RequestLog {
    /// Where the log is written.
    path: PathBuf,
}

impl RequestLog {
    /// A fresh log path in the temp directory (see [`unique_temp_path`]).
    pub fn new(tag: &str) -> Self {
        Self {
            path: unique_temp_path(tag),
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fault-server flags that write this log.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--log-requests".into(),
            self.path.to_string_lossy().into_owned(),
        ]
    }

    /// Everything logged so far (empty before the first request).
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    /// The `traceparent` the server was sent with the first request whose
    /// log line holds `marker` (None: no such line, or no traceparent).
    pub fn traceparent_of(&self, marker: &str) -> Option<String> {
        let text = self.text();
        let line = text.lines().find(|l| l.contains(marker))?;
        let sent = line.split(" traceparent=").nth(1)?.split(' ').next()?;
        Some(sent.to_owned())
    }

    /// How many `tools/call` requests arrived.
    pub fn tool_calls(&self) -> usize {
        self.text()
            .lines()
            .filter(|l| l.starts_with("tools/call"))
            .count()
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Wait until the file at `path` contains `needle`, for at most `limit` of
/// wall-clock time; true when it does. The file is written by another
/// process, so there is no event to wait on: it is re-read every 10 ms.
pub async fn wait_file_contains(path: &Path, needle: &str, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if std::fs::read_to_string(path).is_ok_and(|text| text.contains(needle)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A `fault-server --http 0` process and the endpoint it announced; the
/// process is killed when this is dropped.
#[derive(Debug)]
pub struct HttpFaultServer {
    /// The fault-server process.
    pub child: tokio::process::Child,
    /// Its streamable HTTP endpoint (`http://127.0.0.1:<port>/mcp`).
    pub url: String,
}

impl HttpFaultServer {
    /// Start `fault-server --http 0 {args}` and wait up to `limit` for the
    /// endpoint it announces on stderr (which is drained from then on).
    pub async fn start(args: &[String], limit: Duration) -> Result<Self, String> {
        let mut command = tokio::process::Command::new(fault_server_path());
        command
            .args(["--http", "0"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // kill_on_drop does not run when the runner itself is killed (a
        // `chaos --seeds` run stopped with SIGTERM left its HTTP servers
        // running): the server dies with the runner.
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the HTTP fault-server: {e}"))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let url = announced(stderr, "listening on ", limit)
            .await
            .ok_or("the HTTP fault-server did not announce its port")?;
        Ok(Self { child, url })
    }
}

/// What follows `prefix` on the first line of `output` that starts with it
/// (a child announcing where it listens), within `limit`; the lines after
/// it are drained in the background, so the child never blocks on them.
pub async fn announced<R>(output: R, prefix: &str, limit: Duration) -> Option<String>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let mut lines = BufReader::new(output).lines();
    let found = tokio::time::timeout(limit, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.trim().to_owned());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(found)
}

/// `mcpvisor --config CONFIG gateway --http 127.0.0.1:0 {extra}` and the
/// address it serves on; [`HttpGateway::stop`] ends it and checks that it
/// and every process it started are gone (it is killed on drop if a test
/// panics first).
#[derive(Debug)]
pub struct HttpGateway {
    /// The gateway process.
    child: tokio::process::Child,
    /// Where it serves: `127.0.0.1:<port>`.
    pub addr: String,
}

impl HttpGateway {
    /// Start it (building the binary when needed) and wait up to `limit`
    /// for the address it announces on stderr (drained from then on).
    pub async fn start(config: &Path, extra: &[&str], limit: Duration) -> Result<Self, String> {
        let mut child = tokio::process::Command::new(crate::ensure_mcpvisor_built()?)
            .arg("--config")
            .arg(config)
            .args(["gateway", "--http", "127.0.0.1:0"])
            .args(extra)
            .env_remove("MCPVISOR_CONFIG")
            .env_remove("MCPVISOR_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the gateway: {e}"))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let addr = tokio::time::timeout(limit, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("serving http://").nth(1) {
                    return rest.split('/').next().map(str::to_owned);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or("the gateway never said where it serves")?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, addr })
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// SIGTERM; Ok once it exited 0 within 20 s and every process below it
    /// (its backends) is gone within 5 s more.
    pub async fn stop(mut self) -> Result<(), String> {
        let pid = self.child.id().ok_or("the gateway was already reaped")?;
        let below = crate::descendants_of(pid);
        // SAFETY: kill(2) on our own child's pid; it has not been reaped yet.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .map_err(|_| "the gateway did not exit within 20 s of SIGTERM".to_owned())?
            .map_err(|e| format!("waiting for the gateway: {e}"))?;
        if status.code() != Some(0) {
            return Err(format!("the gateway exited with {status}"));
        }
        for p in below {
            if !crate::wait_gone(p, Duration::from_secs(5)).await {
                return Err(format!(
                    "process {p} ({}) outlived the gateway",
                    crate::cmdline_of(p)
                ));
            }
        }
        Ok(())
    }
}

/// An approver that answers from a script and records every request.
#[derive(Debug, Default)]
pub struct ScriptedApprover {
    /// The answers still to give, the last one first.
    answers: Mutex<Vec<Approval>>,
    /// Every request asked so far.
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl ScriptedApprover {
    /// An approver giving `answers` from the end (the last element is the
    /// first answer), then Don't Allow.
    pub fn new(answers: Vec<Approval>) -> Self {
        Self {
            answers: Mutex::new(answers),
            asked: Mutex::default(),
        }
    }

    /// Every request asked so far, in order.
    pub fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Approver for ScriptedApprover {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            self.asked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request.clone());
            self.answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()
                .unwrap_or(Approval::DontAllow)
        })
    }
}
