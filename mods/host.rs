//! What the host does for a mod that asks: `spawn` (a process in its own
//! group, output bounded), `http` (a fetch through the endpoint checks) and
//! the log lines it wrote.

use super::*;

/// The output a spawned process may leave, per stream.
pub(super) const SPAWN_OUTPUT: u64 = 64 << 10;

/// `host.spawn(cmd, args)`: the process runs in a group of its own through
/// the runtime's process-group owner, and is reaped before this returns;
/// one still running at the handler's deadline is killed and reaped.
pub(super) fn host_spawn(
    io: Option<&tokio::runtime::Handle>,
    cmd: &str,
    args: &str,
    limit: Duration,
    tag: Option<&str>,
) -> Value {
    let Some(io) = io else {
        return json!({"error": "spawn needs the runtime's tokio runtime (the mod host was started outside one)"});
    };
    if limit.is_zero() {
        return json!({"error": format!("spawn {cmd:?}: the handler's deadline has passed")});
    }
    let args: Vec<String> = match serde_json::from_str::<Vec<Value>>(args) {
        Ok(a) => a
            .into_iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect(),
        Err(e) => return json!({"error": format!("spawn's args must be an array of strings: {e}")}),
    };
    io.block_on(async move {
        use tokio::io::AsyncReadExt as _;
        let mut command = crate::process::command(cmd);
        command.args(&args);
        if let Some(tag) = tag {
            command.env(crate::process::TAG_VAR, tag);
        }
        let (mut group, pipes) = match crate::process::ProcessGroup::spawn(&command) {
            Ok(g) => g,
            Err(e) => return json!({"error": format!("cannot spawn {cmd:?}: {e}")}),
        };
        drop(pipes.stdin);
        let mut stdout = pipes.stdout;
        let mut stderr = pipes.stderr;
        let out = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stdout).take(SPAWN_OUTPUT).read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        let err = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stderr).take(SPAWN_OUTPUT).read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        match group.wait(Some(limit)).await {
            Some(exit) => json!({
                "code": exit.code(),
                "stdout": out.await.unwrap_or_default(),
                "stderr": err.await.unwrap_or_default(),
            }),
            None => {
                let pid = group.pid();
                group.kill_and_reap().await;
                json!({"error": format!(
                    "{cmd:?} (pid {pid}) still ran at the handler's deadline ({} ms): killed and reaped",
                    limit.as_millis()
                )})
            }
        }
    })
}

/// `host.fetch(url, init)`: an HTTP request to an endpoint that passes the
/// one endpoint validator (TRUST-3), bounded by the handler's deadline.
pub(super) fn host_fetch(
    io: Option<&tokio::runtime::Handle>,
    url: &str,
    init: &str,
    limit: Duration,
) -> Value {
    if let Err(e) = crate::messages::trust::validate_endpoint(url) {
        return json!({"error": e.to_string()});
    }
    let Some(io) = io else {
        return json!({"error": "fetch needs the runtime's tokio runtime (the mod host was started outside one)"});
    };
    if limit.is_zero() {
        return json!({"error": format!("fetch {url}: the handler's deadline has passed")});
    }
    let init: Value = serde_json::from_str(init).unwrap_or(Value::Null);
    let method = init["method"].as_str().unwrap_or("GET").to_uppercase();
    let body = init["body"].as_str().map(str::to_owned);
    let url = url.to_owned();
    io.block_on(async move {
        let client = match reqwest::Client::builder().timeout(limit).build() {
            Ok(c) => c,
            Err(e) => return json!({"error": format!("no HTTP client: {e}")}),
        };
        let method = match reqwest::Method::from_bytes(method.as_bytes()) {
            Ok(m) => m,
            Err(_) => return json!({"error": format!("unknown method {method:?}")}),
        };
        let mut req = client.request(method, &url);
        if let Some(b) = body {
            req = req.body(b);
        }
        match req.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.text().await {
                    Ok(text) => json!({"status": status, "body": text}),
                    Err(e) => json!({"error": format!("{url}: the body could not be read: {e}")}),
                }
            }
            Err(e) => json!({"error": format!("{url}: {e}")}),
        }
    })
}

pub(super) fn take_logs(ctx: &rquickjs::Ctx<'_>) -> Vec<String> {
    let logs: String = ctx
        .eval("JSON.stringify(globalThis.__mcpvisor_logs || []); ")
        .unwrap_or_default();
    let _ = ctx.eval::<(), _>("globalThis.__mcpvisor_logs = [];");
    serde_json::from_str(&logs).unwrap_or_default()
}
