//! The official MCP Inspector's CLI (`@modelcontextprotocol/inspector`
//! 2.12.0, `--cli`: one process, one connection and one request per run) as
//! a client of `mcpvisor gateway`, in both eras it speaks
//! (`--protocol-era legacy`: `initialize`, 2025-11-25; `--protocol-era
//! modern`: `server/discover` and per-request `_meta`, 2026-07-28), over
//! stdio (the Inspector spawns `gateway --stdio`) and over streamable HTTP.
//!
//! The gateway fronts two backends: the TypeScript SDK 2.x era server
//! (`chaos-tests/peers/era-server.mjs`, spoken to in 2026-07-28) and
//! server-everything (2025-11-25); over HTTP also a second era server that
//! starts 2 s late. The first request each gateway gets is a `tools/list`,
//! which must hold every backend tool: the gateway waits for its backends
//! before its first answer (GW-3). Then a call to each backend,
//! a resource read and a prompt get. Skipped with a note when the peers are
//! not installed (`chaos-tests/peers/install.sh`).
//!
//! The Inspector has a `--config` flag of its own, so the gateway it spawns
//! is given its config in `MCPVISOR_CONFIG` (`-e`). Every process of a run
//! carries a tag in its environment (the Inspector's own, `-e` for the
//! gateway, `env` in the config for the backends), so whatever outlives a
//! run is found.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use mcpvisor_chaos::{HttpGateway, TempDir, tagged_processes, wait_gone};
use serde_json::{Value, json};

/// Each era the Inspector speaks: its `--protocol-era` and the version it
/// then negotiates.
const ERAS: [(&str, &str); 2] = [("legacy", "2025-11-25"), ("modern", "2026-07-28")];

/// The environment variable that tags every process of a run.
const TAG: &str = "MCPVISOR_INSPECTOR_TAG";

/// One Inspector run, at most (a run takes about 1 s; a 2026-07-28 run
/// over stdio about 3 s, see [`Setup::reaped`]).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The era server's tools (`chaos-tests/peers/era-server.mjs`).
const ERA_SERVER_TOOLS: [&str; 9] = [
    "add_prompt",
    "add_tool",
    "ask_forever",
    "ask_sampling",
    "bump",
    "confirm",
    "crash",
    "echo",
    "log",
];

/// server-everything's tools (2026.8.31) for a client declaring
/// elicitation, sampling and roots, as the gateway's backend connections do.
const EVERYTHING_TOOLS: [&str; 17] = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-roots-list",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "simulate-research-query",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-elicitation-request",
    "trigger-long-running-operation",
    "trigger-sampling-request",
    "trigger-url-elicitation",
];

/// The gateway's own shared resource tools.
const SHARED_TOOLS: [&str; 3] = [
    "list_mcp_resource_templates",
    "list_mcp_resources",
    "read_mcp_resource",
];

/// How long the backend `late` (HTTP only) sleeps before it starts: the
/// Inspector's first request reaches an HTTP gateway about 0.5 s after it
/// listens, when the other two backends may already be up.
const LATE_BY_S: u32 = 2;

/// Where the Inspector connects.
enum Target<'a> {
    /// It spawns `mcpvisor gateway --stdio` itself.
    Stdio,
    /// A gateway already serving streamable HTTP at this URL.
    Http(&'a str),
}

/// The peers, a config naming them, and a home directory for the Inspector
/// (it keeps `~/.mcp-inspector`), all under one temp directory.
struct Setup {
    /// The Node 22 the Inspector needs.
    node: PathBuf,
    /// The Inspector's entry point (its `mcp-inspector` bin).
    inspector: PathBuf,
    /// The gateway binary.
    mcpvisor: PathBuf,
    /// The temp directory: `mcpvisor.toml`, `home/`.
    work: TempDir,
    /// This test's value of [`TAG`].
    tag: String,
    /// Whether the config has the backend `late`.
    late: bool,
}

impl Setup {
    /// The backends `s` (the era server) and `ev` (server-everything), and
    /// with `late` a second era server that starts [`LATE_BY_S`] late.
    /// None (skipped with a note) when the peers are not installed.
    fn new(test: &str, late: bool) -> Option<Self> {
        let (Some(dir), Some(_), Some(_)) = (
            mcpvisor_chaos::inspector_dir(),
            mcpvisor_chaos::everything_dir(),
            mcpvisor_chaos::era_server_dir(),
        ) else {
            println!(
                "note: {test} SKIPPED (MCPVISOR_SKIP_PEERS=1): the MCP peers are not installed \
                 (run chaos-tests/peers/install.sh)"
            );
            return None;
        };
        let work = TempDir::new("inspector").unwrap();
        let tag = work.file_name().unwrap().to_string_lossy().into_owned();
        let script = mcpvisor_chaos::peers::peer_script(&dir, "era-server.mjs");
        let tagged = format!("trust = \"always\"\nenv = {{ {TAG} = {tag:?} }}\n");
        let mut toml = format!(
            "[servers.s]\ncommand = \"node\"\nargs = [{script:?}]\n{tagged}\n\
             [servers.ev]\ncommand = \"node\"\nargs = [{everything:?}, \"stdio\"]\n{tagged}",
            everything = mcpvisor_chaos::peers::everything_entry(&dir),
        );
        if late {
            let run = format!("sleep {LATE_BY_S}; exec node '{}'", script.display());
            toml +=
                &format!("\n[servers.late]\ncommand = \"sh\"\nargs = [\"-c\", {run:?}]\n{tagged}");
        }
        std::fs::write(work.join("mcpvisor.toml"), toml).unwrap();
        std::fs::create_dir(work.join("home")).unwrap();
        Some(Self {
            node: mcpvisor_chaos::peers::node(&dir),
            inspector: dir.join(
                "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
            ),
            mcpvisor: mcpvisor_chaos::ensure_mcpvisor_built().unwrap(),
            work,
            tag,
            late,
        })
    }

    /// Every tool the gateway serves, sorted.
    fn all_tools(&self) -> Vec<String> {
        let era_servers: &[&str] = if self.late { &["s", "late"] } else { &["s"] };
        let mut all: Vec<String> = era_servers
            .iter()
            .flat_map(|server| ERA_SERVER_TOOLS.map(|t| format!("mcp__{server}__{t}")))
            .chain(EVERYTHING_TOOLS.map(|t| format!("mcp__ev__{t}")))
            .chain(SHARED_TOOLS.map(String::from))
            .collect();
        all.sort_unstable();
        all
    }

    /// The gateway's config file.
    fn config(&self) -> PathBuf {
        self.work.join("mcpvisor.toml")
    }

    /// One Inspector run in `era` against `target`: `--method` and its
    /// options in `request`. The `result` it printed, or what went wrong.
    /// Over stdio, the gateway it spawned and its backends are gone after.
    async fn run(&self, era: &str, target: &Target<'_>, request: &[&str]) -> Result<Value, String> {
        let mut cmd = tokio::process::Command::new(&self.node);
        cmd.arg(&self.inspector)
            .args(["--cli", "--format", "json", "--protocol-era", era]);
        // The target first: `--tool-arg` and `--prompt-args` take every
        // argument after them.
        match target {
            Target::Stdio => {
                cmd.arg("-e")
                    .arg(format!("MCPVISOR_CONFIG={}", self.config().display()))
                    .arg("-e")
                    .arg(format!("{TAG}={}", self.tag))
                    .arg(&self.mcpvisor)
                    .args(["gateway", "--stdio"]);
            }
            Target::Http(url) => {
                cmd.args(["--transport", "http", "--server-url", url]);
            }
        }
        let out = tokio::time::timeout(
            RUN_LIMIT,
            cmd.args(request)
                .env("HOME", self.work.join("home"))
                .env(TAG, &self.tag)
                .env_remove("MCPVISOR_CONFIG")
                .env_remove("MCPVISOR_LOG")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| format!("the Inspector ran over {RUN_LIMIT:?}: {request:?}"))?
        .map_err(|e| format!("cannot run the Inspector: {e}"))?;
        if let Target::Stdio = target {
            self.reaped().await;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let failed = || {
            format!(
                "the Inspector ({era}, {request:?}) exited with {}:\n{stdout}\n{stderr}",
                out.status
            )
        };
        if !out.status.success() {
            return Err(failed());
        }
        // The gateway's stderr comes through the Inspector's: it stopped
        // its servers itself on stdin's end, in either era (the Inspector
        // sends SIGTERM 2 s after closing stdin, which a 2026-07-28 client's
        // open `subscriptions/listen` must not make it wait for).
        if let Target::Stdio = target
            && !stderr.contains("mcpvisor gateway: the client closed stdin; stopping every server")
        {
            return Err(failed());
        }
        let printed: Value = serde_json::from_str(stdout.trim()).map_err(|_| failed())?;
        printed.get("result").cloned().ok_or_else(failed)
    }

    /// Nothing of this test's runs is left: every process with its tag is
    /// gone within 5 s. Over stdio the Inspector ends the gateway itself:
    /// stdin closed, then SIGTERM after 2 s, then SIGKILL after 2 s more.
    async fn reaped(&self) {
        for pid in tagged_processes(TAG, &self.tag) {
            assert!(
                wait_gone(pid, Duration::from_secs(5)).await,
                "process {pid} ({}) outlived the Inspector's run",
                mcpvisor_chaos::cmdline_of(pid)
            );
        }
    }

    /// The first request to a fresh gateway: `tools/list`, then every
    /// other request, each checked; `era`'s version negotiated.
    async fn check_era(&self, (era, version): (&str, &str), target: &Target<'_>) {
        let listed = self
            .run(era, target, &["--method", "tools/list"])
            .await
            .unwrap();
        let mut names: Vec<&str> = listed["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{era}: {listed}"))
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, self.all_tools(), "{era}: the first tools/list");

        let opened = self
            .run(era, target, &["--method", "initialize"])
            .await
            .unwrap();
        assert_eq!(opened["protocolVersion"], version, "{era}: {opened}");
        assert_eq!(opened["serverInfo"]["name"], "mcpvisor-gateway", "{era}");

        let text = |text: &str| json!({"content": [{"type": "text", "text": text}]});
        let said = format!("said in {era}");
        let echoed = self
            .run(
                era,
                target,
                &[
                    "--method",
                    "tools/call",
                    "--tool-name",
                    "mcp__s__echo",
                    "--tool-arg",
                    &format!("text={said}"),
                ],
            )
            .await
            .unwrap();
        // The era server names its text in its result's `_meta`, which
        // comes through the gateway (ERA-7).
        assert_eq!(
            echoed["content"],
            text(&said)["content"],
            "{era}: the era server's echo"
        );
        assert_eq!(
            echoed["_meta"]["example.com/echoed"],
            said.as_str(),
            "{era}: {echoed}"
        );

        let echoed = self
            .run(
                era,
                target,
                &[
                    "--method",
                    "tools/call",
                    "--tool-name",
                    "mcp__ev__echo",
                    "--tool-arg",
                    "message=hi",
                ],
            )
            .await
            .unwrap();
        assert_eq!(echoed, text("Echo: hi"), "{era}: server-everything's echo");

        let read = self
            .run(
                era,
                target,
                &["--method", "resources/read", "--uri", "note://counter"],
            )
            .await
            .unwrap();
        assert_eq!(
            read["contents"],
            json!([{"uri": "note://counter", "text": "0"}]),
            "{era}: {read}"
        );
        // The backend speaks 2026-07-28 to the gateway: a 2025-11-25 client
        // gets none of that era's fields, nor the backend's server info.
        if era == "legacy" {
            for field in ["ttlMs", "cacheScope", "resultType", "_meta"] {
                assert!(read.get(field).is_none(), "{era}: {field} in {read}");
            }
        }

        let prompt = self
            .run(
                era,
                target,
                &[
                    "--method",
                    "prompts/get",
                    "--prompt-name",
                    "mcp__ev__args-prompt",
                    "--prompt-args",
                    "city=Paris",
                ],
            )
            .await
            .unwrap();
        assert_eq!(
            prompt["messages"],
            json!([{"role": "user", "content": {"type": "text", "text": "What's weather in Paris?"}}]),
            "{era}: {prompt}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_calls_reads_and_gets_through_a_stdio_gateway_in_both_eras() {
    // Each run spawns a gateway of its own and lists its tools at once
    // (a tools/call lists them first too), before the backends are up.
    let Some(setup) = Setup::new("the_inspector_cli_…_stdio_gateway", false) else {
        return;
    };
    for era in ERAS {
        setup.check_era(era, &Target::Stdio).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_calls_reads_and_gets_through_an_http_gateway_in_both_eras() {
    // A fresh gateway per era, asked for its tools as soon as it listens,
    // before its backend `late` has even started.
    let Some(setup) = Setup::new("the_inspector_cli_…_http_gateway", true) else {
        return;
    };
    for era in ERAS {
        let gateway = HttpGateway::start(&setup.config(), &[], Duration::from_secs(20))
            .await
            .unwrap();
        setup.check_era(era, &Target::Http(&gateway.url())).await;
        gateway.stop().await.unwrap();
        setup.reaped().await;
    }
}
