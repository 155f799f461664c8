//! `browser-native` with real Chromium (SEAT-4..8, SEAT-11): the flow
//! through `mcpvisor call --batch`, two activations with their own
//! browsers, a browser that crashes mid-action, a stale token, the
//! screenshot as an admitted PNG, and cleanup on every path (close,
//! shutdown, a browser whose group will not die on SIGTERM, the sweep of a
//! dead runtime's browsers). Pages are served on 127.0.0.1 by the test.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use mcpvisor::providers::browser_native::{BrowserNative, BrowserNativeConfig, sweep_orphans};
use mcpvisor::{OutcomeKind, Runtime, Scope, SeatKind, ToolOutcome, TrustMode};
use mcpvisor_chaos::{
    chromium, ensure_mcpvisor_built, process_alive, processes_with_arg, unique_temp_path, wait_gone,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const FORM: &str = r#"<!doctype html><html><head><title>Form page</title></head><body>
<h1>Hello</h1>
<input id="name" aria-label="Name" placeholder="your name">
<button id="go" onclick="document.getElementById('out').innerText = 'hi ' + document.getElementById('name').value">Greet</button>
<div id="out">nothing yet</div>
<a href="/other">Other page</a>
</body></html>"#;

/// A local site: `/` the form, `/other` a second page, `/hang` a request
/// that is never answered (its arrival is announced on the channel).
pub(crate) struct Site {
    pub(crate) addr: SocketAddr,
    hung: mpsc::UnboundedReceiver<()>,
    /// Requests of `/other` so far.
    others: Arc<std::sync::atomic::AtomicUsize>,
    /// Lets the hung requests answer at last.
    release: Arc<tokio::sync::Notify>,
    _task: tokio::task::JoinHandle<()>,
}

pub(crate) async fn site() -> Site {
    let (tx, hung) = mpsc::unbounded_channel();
    let others = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = others.clone();
    let release = Arc::new(tokio::sync::Notify::new());
    let released = release.clone();
    let app = Router::new()
        .route("/", get(|| async { Html(FORM) }))
        .route(
            "/other",
            get(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Html("<title>Other</title><p>the other page</p>") }
            }),
        )
        .route(
            "/hang",
            get(move || {
                let (tx, released) = (tx.clone(), released.clone());
                async move {
                    let _ = tx.send(());
                    released.notified().await;
                    Html("<title>Released</title>")
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(mcpvisor::gateway::no_delay(listener), app).await;
    });
    Site {
        addr,
        hung,
        others,
        release,
        _task: task,
    }
}

/// A provider whose browsers' profiles live under `root` (so the test can
/// look for what is left of them).
fn provider(root: &Path, tweak: impl FnOnce(&mut BrowserNativeConfig)) -> Arc<BrowserNative> {
    std::fs::create_dir_all(root).unwrap();
    let mut c = BrowserNativeConfig::new("browser");
    c.trust = TrustMode::Always;
    c.profile_root = root.to_path_buf();
    tweak(&mut c);
    Arc::new(BrowserNative::new(c).unwrap())
}

async fn call(rt: &Runtime, scope: &Scope, tool: &str, args: Value) -> ToolOutcome {
    rt.wait_ready(scope, "browser", Duration::from_secs(10))
        .await
        .unwrap();
    rt.call(
        scope,
        &format!("mcp__browser__{tool}"),
        Some(args),
        Default::default(),
    )
    .await
}

/// The pids the browser seat's resources own.
async fn browser_pids(rt: &Runtime) -> Vec<u32> {
    rt.seats()
        .await
        .into_iter()
        .find(|s| s.seat == "browser_use")
        .map(|s| s.pids)
        .unwrap_or_default()
}

/// Nothing of the profiles under `root` runs or remains on disk.
async fn assert_nothing_left(root: &Path) {
    let marker = root.display().to_string();
    for pid in processes_with_arg(&marker) {
        assert!(
            wait_gone(pid, Duration::from_secs(5)).await,
            "browser process {pid} of {marker} is still running"
        );
    }
    let left: Vec<_> = std::fs::read_dir(root)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "profile directories left: {left:?}");
}

/// The token of the element whose line contains `needle` in a snapshot.
fn token_of(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no element {needle:?} in:\n{snapshot}"));
    line.trim_start_matches('[')
        .split(']')
        .next()
        .unwrap()
        .to_owned()
}

/// Width and height of a PNG (its IHDR), after checking its signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

/// `mcpvisor call --batch -` run in a directory of its own with a config,
/// driven one line at a time: `step` writes a call and waits for its
/// outcome line. The browser's profile (TMPDIR) is under the directory,
/// so `finish` can check that nothing of it is left.
struct Batch {
    dir: std::path::PathBuf,
    tmp: std::path::PathBuf,
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    out: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Batch {
    fn start(tag: &str, toml: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with(tag, toml, env, &[], &[])
    }

    /// With `extra` arguments to `call --batch`, and `files` (name, text)
    /// written beside the config.
    fn start_with(
        tag: &str,
        toml: &str,
        env: &[(&str, &str)],
        extra: &[&str],
        files: &[(&str, &str)],
    ) -> Self {
        let dir = unique_temp_path(tag);
        // Short: Chromium's socket under it must fit a Unix socket path.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tmp = std::env::temp_dir().join(format!("mvb-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mcpvisor.toml"), toml).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let bin = ensure_mcpvisor_built().unwrap();
        let mut child = tokio::process::Command::new(bin)
            .args(["call", "--batch", "-", "--images", "--attachments"])
            .arg(dir.join("shots"))
            .args(extra)
            .current_dir(&dir)
            .env("TMPDIR", &tmp)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            dir,
            tmp,
            child,
            stdin,
            out,
        }
    }

    async fn step(&mut self, line: Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(90), self.out.next_line())
            .await
            .expect("no outcome within 90 s")
            .unwrap()
            .expect("the batch ended early");
        serde_json::from_str(&answer).unwrap()
    }

    /// Close stdin, wait for the exit; nothing of the browsers is left.
    async fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_nothing_left(&self.tmp).await;
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.tmp);
        status.code()
    }
}

/// The admitted image of a screenshot outcome: a real PNG file; its size.
fn admitted_png(shot: &Value) -> (u32, u32) {
    assert_eq!(shot["outcome"], "ok", "{shot}");
    let path = shot["images"][0]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("no admitted image: {shot}"));
    png_size(&std::fs::read(path).unwrap())
}

/// The `[ref=eN]` of the snapshot line containing `needle` (playwright).
fn playwright_ref(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{snapshot}"));
    let at = line.find("[ref=").unwrap() + 5;
    line[at..].split(']').next().unwrap().to_owned()
}

/// The `uid=N_M` of the snapshot line containing `needle` (devtools).
fn devtools_uid(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{snapshot}"));
    let at = line.find("uid=").unwrap() + 4;
    line[at..].split_whitespace().next().unwrap().to_owned()
}

/// SEAT-4/5/11 for `browser-playwright-mcp`: the pinned @playwright/mcp,
/// mounted per activation, driven through `call --batch` over a pipe:
/// navigate, snapshot, type, click, a fresh snapshot that shows the click,
/// a screenshot admitted as a PNG. The host's PLAYWRIGHT_MCP_* variables
/// never reach the server, and nothing is left after the run.
#[tokio::test]
async fn playwright_mcp_runs_the_flow_per_activation_through_call_batch() {
    let Some(_) = chromium() else { return };
    let Some(peers) = mcpvisor_chaos::browser_peers_dir() else {
        return;
    };
    let site = site().await;
    let toml = format!(
        "[providers.browser]\nkind = \"browser-playwright-mcp\"\nversion = \"0.0.83\"\npackage_dir = {:?}\ntrust = \"always\"\n",
        peers.display().to_string()
    );
    // Host variables that would change the browser: scrubbed.
    let mut batch = Batch::start(
        "browser-playwright",
        &toml,
        &[
            ("PLAYWRIGHT_MCP_HEADLESS", "false"),
            ("PLAYWRIGHT_MCP_ISOLATED", "false"),
        ],
    );
    let url = format!("http://{}/", site.addr);
    let nav = batch
        .step(json!({"name": "mcp__browser__browser_navigate", "args": {"url": url}}))
        .await;
    assert_eq!(nav["outcome"], "ok", "{nav}");
    let servers = processes_with_arg("@playwright/mcp");
    assert!(!servers.is_empty(), "no @playwright/mcp process found");
    for pid in servers {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&env).contains("PLAYWRIGHT_MCP_"),
            "process {pid} got a PLAYWRIGHT_MCP_ variable of the host"
        );
    }
    let snap = batch
        .step(json!({"name": "mcp__browser__browser_snapshot"}))
        .await;
    let text = snap["projection"].as_str().unwrap().to_owned();
    let (name, greet) = (
        playwright_ref(&text, "textbox \"Name\""),
        playwright_ref(&text, "button \"Greet\""),
    );
    let typed = batch
        .step(json!({"name": "mcp__browser__browser_type", "args": {"target": name, "element": "Name", "text": "Ada"}}))
        .await;
    assert_eq!(typed["outcome"], "ok", "{typed}");
    let clicked = batch
        .step(json!({"name": "mcp__browser__browser_click", "args": {"target": greet, "element": "Greet"}}))
        .await;
    assert_eq!(clicked["outcome"], "ok", "{clicked}");
    let again = batch
        .step(json!({"name": "mcp__browser__browser_snapshot"}))
        .await;
    assert!(
        again["projection"].as_str().unwrap().contains("hi Ada"),
        "{again}"
    );
    let shot = batch
        .step(json!({"name": "mcp__browser__browser_take_screenshot", "args": {"type": "png", "scale": "css"}}))
        .await;
    let (w, h) = admitted_png(&shot);
    assert!(w >= 300 && h >= 200, "{w}x{h}");
    assert_eq!(batch.finish().await, Some(0));
}

/// SEAT-4/5/11 for `browser-devtools-mcp`: the pinned chrome-devtools-mcp,
/// same flow (its tools take a pageId and element uids).
#[tokio::test]
async fn devtools_mcp_runs_the_flow_per_activation_through_call_batch() {
    let Some(_) = chromium() else { return };
    let Some(peers) = mcpvisor_chaos::browser_peers_dir() else {
        return;
    };
    let site = site().await;
    let toml = format!(
        "[providers.browser]\nkind = \"browser-devtools-mcp\"\nversion = \"1.11.0\"\npackage_dir = {:?}\ntrust = \"always\"\n",
        peers.display().to_string()
    );
    let mut batch = Batch::start("browser-devtools", &toml, &[]);
    let url = format!("http://{}/", site.addr);
    let nav = batch
        .step(json!({"name": "mcp__browser__navigate_page", "args": {"pageId": 1, "type": "url", "url": url}}))
        .await;
    assert_eq!(nav["outcome"], "ok", "{nav}");
    let snap = batch
        .step(json!({"name": "mcp__browser__take_snapshot", "args": {"pageId": 1}}))
        .await;
    let text = snap["projection"].as_str().unwrap().to_owned();
    let (name, greet) = (
        devtools_uid(&text, "textbox \"Name\""),
        devtools_uid(&text, "button \"Greet\""),
    );
    let typed = batch
        .step(json!({"name": "mcp__browser__fill", "args": {"pageId": 1, "uid": name, "value": "Ada"}}))
        .await;
    assert_eq!(typed["outcome"], "ok", "{typed}");
    let clicked = batch
        .step(json!({"name": "mcp__browser__click", "args": {"pageId": 1, "uid": greet}}))
        .await;
    assert_eq!(clicked["outcome"], "ok", "{clicked}");
    let again = batch
        .step(json!({"name": "mcp__browser__take_snapshot", "args": {"pageId": 1}}))
        .await;
    assert!(
        again["projection"].as_str().unwrap().contains("hi Ada"),
        "{again}"
    );
    let shot = batch
        .step(json!({"name": "mcp__browser__take_screenshot", "args": {"pageId": 1, "format": "png"}}))
        .await;
    let (w, h) = admitted_png(&shot);
    assert!(w >= 300 && h >= 200, "{w}x{h}");
    assert_eq!(batch.finish().await, Some(0));
}

/// SEAT-11 end to end through the CLI: a pipe drives `call --batch -` one
/// line at a time (each outcome arrives before the next line is written),
/// in one activation, with `--images`: the flow works, a stale token is a
/// clear error, the screenshot is an admitted PNG of the window's width,
/// and nothing of the browser is left after the process exits.
#[tokio::test]
async fn a_pipe_drives_navigate_snapshot_type_click_screenshot_through_call_batch() {
    let Some(_) = chromium() else { return };
    let site = site().await;
    let mut batch = Batch::start(
        "browser-cli",
        "[providers.browser]\nkind = \"browser-native\"\ntrust = \"always\"\nwindow = [1024, 700]\n",
        &[],
    );
    let mut step = async |line: Value| batch.step(line).await;
    let nav = step(json!({"name": "mcp__browser__navigate", "args": {"url": format!("http://{}/", site.addr)}})).await;
    assert_eq!(nav["outcome"], "ok", "{nav}");
    assert!(
        nav["projection"].as_str().unwrap().contains("Form page"),
        "{nav}"
    );
    let snap = step(json!({"name": "mcp__browser__snapshot"})).await;
    let text = snap["projection"].as_str().unwrap().to_owned();
    assert!(text.contains("textbox \"Name\""), "{text}");
    assert!(text.contains("button \"Greet\""), "{text}");
    let (name, greet) = (
        token_of(&text, "textbox \"Name\""),
        token_of(&text, "\"Greet\""),
    );
    assert!(name.starts_with("g1e"), "{name}");
    let typed =
        step(json!({"name": "mcp__browser__type", "args": {"token": name, "text": "Ada"}})).await;
    assert_eq!(typed["outcome"], "ok", "{typed}");
    let clicked = step(json!({"name": "mcp__browser__click", "args": {"token": greet}})).await;
    assert_eq!(clicked["outcome"], "ok", "{clicked}");
    let again = step(json!({"name": "mcp__browser__snapshot"})).await;
    let text2 = again["projection"].as_str().unwrap();
    assert!(text2.contains("hi Ada"), "the click did not run: {text2}");
    assert!(text2.contains("snapshot g2"), "{text2}");
    // The first snapshot's token is stale now.
    // CALL-4 / SEAT-11: refused before acting, so nothing happened.
    let stale = step(json!({"name": "mcp__browser__click", "args": {"token": greet}})).await;
    assert_eq!(stale["outcome"], "invalid_arguments", "{stale}");
    assert_eq!(stale["side_effects"], "none", "{stale}");
    let why = stale["projection"].as_str().unwrap();
    assert!(
        why.contains("stale") && why.contains("take a new snapshot"),
        "{why}"
    );
    let shot = step(json!({"name": "mcp__browser__screenshot"})).await;
    let (w, h) = admitted_png(&shot);
    assert_eq!(w, 1024, "the screenshot is not the window's width");
    assert!(h > 350 && h <= 700, "height {h}");
    // A line that is not a call is answered, and the batch goes on.
    let bad = step(json!(["not", "a", "call"])).await;
    assert_eq!(bad["kind"], "bad_input", "{bad}");
    // Exit 1: the stale click and the bad line did not end ok.
    assert_eq!(batch.finish().await, Some(1));
}

/// SEAT-7/8: two activations in launch mode each get their own browser
/// (independent pages), and closing an activation reaps its browser.
#[tokio::test]
async fn two_activations_get_their_own_browsers_and_closing_one_reaps_it() {
    let Some(_) = chromium() else { return };
    let site = site().await;
    let root = unique_temp_path("browser-two");
    let rt = Runtime::builder()
        .provider(provider(&root, |_| {}))
        .start()
        .await
        .unwrap();
    let (a, b) = (Scope::Agent("a".into()), Scope::Agent("b".into()));
    let act_a = rt.open_activation(a.clone()).await.unwrap();
    let act_b = rt.open_activation(b.clone()).await.unwrap();
    let url_a = format!("http://{}/", site.addr);
    let url_b = format!("http://{}/other", site.addr);
    let (na, nb) = tokio::join!(
        call(&rt, &a, "navigate", json!({"url": url_a})),
        call(&rt, &b, "navigate", json!({"url": url_b}))
    );
    assert!(
        na.is_ok() && nb.is_ok(),
        "{} / {}",
        na.projection,
        nb.projection
    );
    let pids = browser_pids(&rt).await;
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_ne!(pids[0], pids[1]);
    // What the browsers write outside their profiles (dconf's
    // cache, a crash database) goes to a home inside them; and their
    // crash handlers (in sessions of their own) die with them (below).
    let ours = processes_homed_under(&root);
    assert!(ours.len() >= 2, "the browsers' HOME is not under {root:?}");
    // Each activation sees its own page.
    let sa = call(&rt, &a, "snapshot", json!({})).await;
    let sb = call(&rt, &b, "snapshot", json!({})).await;
    assert!(sa.projection.contains("Form page"), "{}", sa.projection);
    assert!(
        sb.projection.contains("the other page"),
        "{}",
        sb.projection
    );
    // evaluate is off by default.
    assert!(
        !rt.tools(&a).iter().any(|t| t.name.ends_with("__evaluate")),
        "evaluate is offered by default"
    );
    let homes: Vec<(u32, std::path::PathBuf)> =
        pids.iter().map(|p| (*p, home_of(*p).unwrap())).collect();
    let report = act_a.close().await.unwrap();
    assert_eq!(report.processes_reaped.len(), 1, "{report:?}");
    let gone = report.processes_reaped[0];
    // Nothing the closed browser started lives on (its crash handlers
    // left its group: the tag sweep takes them).
    let (_, home) = homes.iter().find(|(p, _)| *p == gone).unwrap();
    let left = processes_homed_under(home);
    assert!(
        left.is_empty(),
        "the closed browser's processes live on: {left:?}"
    );
    assert!(pids.contains(&gone));
    // Reported reaped means reaped: not running, and not even a zombie.
    assert!(
        !Path::new(&format!("/proc/{gone}")).exists(),
        "closed browser {gone} was reported reaped but is still in /proc"
    );
    assert_eq!(browser_pids(&rt).await.len(), 1);
    // The other activation's browser is untouched.
    let still = call(&rt, &b, "snapshot", json!({})).await;
    assert!(still.is_ok(), "{}", still.projection);
    drop(act_b);
    let report = rt.shutdown(Duration::from_secs(20)).await;
    assert!(report.is_clean(), "{report:?}");
    assert_nothing_left(&root).await;
    let left = processes_homed_under(&root);
    assert!(
        left.is_empty(),
        "processes of the browsers live on: {left:?}"
    );
}

/// The `MCPVISOR_TAG` in process `pid`'s environment.
fn tag_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"MCPVISOR_TAG="))
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

/// The `HOME` in process `pid`'s environment.
fn home_of(pid: u32) -> Option<std::path::PathBuf> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"HOME="))
        .map(|h| std::path::PathBuf::from(String::from_utf8_lossy(h).into_owned()))
}

/// Processes whose `HOME` is under `root` (a browser's, and whatever it
/// started).
fn processes_homed_under(root: &Path) -> Vec<u32> {
    let wanted = format!("HOME={}", root.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|v| v.starts_with(wanted.as_bytes()))
            })
        })
        .collect()
}

/// CALL-4: a navigation to a page that never answers ends at the action
/// timeout, effects unknown, and its tab is replaced by a blank one, so the
/// session's next actions work instead of timing out behind it.
#[tokio::test]
async fn a_navigation_that_never_loads_times_out_and_the_next_actions_still_work() {
    let Some(_) = chromium() else { return };
    let mut site = site().await;
    let root = unique_temp_path("browser-hang");
    let rt = Runtime::builder()
        .provider(provider(&root, |c| {
            c.action_timeout = Duration::from_secs(2);
        }))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let g = Scope::Global;
    let hung = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/hang", site.addr)}),
    )
    .await;
    site.hung.recv().await.unwrap();
    assert_eq!(hung.kind, OutcomeKind::Timeout, "{}", hung.projection);
    assert_eq!(hung.side_effects, mcpvisor::SideEffects::Unknown);
    assert!(
        hung.projection.contains("did not finish within 2000 ms")
            && hung.projection.contains("replaced by a blank one"),
        "{}",
        hung.projection
    );
    let snap = call(&rt, &g, "snapshot", json!({})).await;
    assert!(
        snap.is_ok(),
        "the page still held the session: {}",
        snap.projection
    );
    let next = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/other", site.addr)}),
    )
    .await;
    assert!(next.is_ok(), "{}", next.projection);
    let report = rt.shutdown(Duration::from_secs(20)).await;
    assert!(report.is_clean(), "{report:?}");
    assert_nothing_left(&root).await;
}

/// CALL-4 / SEAT-11: a browser killed in the middle of an action ends the
/// call at once with what happened (effects unknown), and the next call
/// gets a new browser. The screenshot goes through CALL-7 as an image.
#[tokio::test]
async fn a_browser_killed_mid_action_fails_that_call_and_the_next_gets_a_new_browser() {
    let Some(_) = chromium() else { return };
    let mut site = site().await;
    let root = unique_temp_path("browser-crash");
    let rt = Runtime::builder()
        .provider(provider(&root, |_| {}))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let g = Scope::Global;
    let first = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/", site.addr)}),
    )
    .await;
    assert!(first.is_ok(), "{}", first.projection);
    let old = browser_pids(&rt).await;
    assert_eq!(old.len(), 1);
    let hanging = {
        let rt = rt.clone();
        let url = format!("http://{}/hang", site.addr);
        tokio::spawn(
            async move { call(&rt, &Scope::Global, "navigate", json!({"url": url})).await },
        )
    };
    // The browser is in the middle of the navigation: kill it.
    site.hung.recv().await.unwrap();
    let tag = tag_of(old[0]).expect("the browser carries its tag");
    let started = tokio::time::Instant::now();
    unsafe {
        libc::kill(old[0] as i32, libc::SIGKILL);
    }
    let out = hanging.await.unwrap();
    // Nothing the killed browser started outlives it, not even
    // its crash handlers, which run in sessions of their own.
    for p in mcpvisor_chaos::tagged_processes("MCPVISOR_TAG", &tag) {
        assert!(
            mcpvisor_chaos::wait_gone(p, Duration::from_secs(5)).await,
            "process {p} of the killed browser lives on"
        );
    }
    assert_eq!(
        out.kind,
        OutcomeKind::TransportLostDuringCall,
        "{}",
        out.projection
    );
    assert_eq!(out.side_effects, mcpvisor::SideEffects::Unknown);
    assert!(
        out.projection
            .contains("the browser exited during navigate"),
        "{}",
        out.projection
    );
    assert!(out.projection.contains("unknown"), "{}", out.projection);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the crash was noticed only after {:?}",
        started.elapsed()
    );
    let next = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/other", site.addr)}),
    )
    .await;
    assert!(next.is_ok(), "{}", next.projection);
    let new = browser_pids(&rt).await;
    assert_eq!(new.len(), 1);
    assert_ne!(new, old);
    let shot = rt
        .call(
            &g,
            "mcp__browser__screenshot",
            None,
            mcpvisor::CallOptions::default(),
        )
        .await;
    assert!(shot.is_ok(), "{}", shot.projection);
    assert_eq!(shot.side_effects, mcpvisor::SideEffects::Applied);
    // Without an image-capable route the model sees a placeholder, never
    // the base64 (CALL-7).
    assert!(shot.projection.contains("image/png"), "{}", shot.projection);
    assert!(shot.projection.len() < 400, "{}", shot.projection);
    let report = rt.shutdown(Duration::from_secs(20)).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(report.processes_reaped.contains(&new[0]), "{report:?}");
    assert_nothing_left(&root).await;
}

/// SEAT-10 / RECO-7: a browser whose process group will not die on
/// SIGTERM (its launcher ignores it and lingers) is still reaped by the
/// shutdown (SIGKILL), and reported reaped only then.
#[tokio::test]
async fn a_browser_that_ignores_sigterm_is_killed_and_reaped_at_shutdown() {
    let Some(chrome) = chromium() else { return };
    let site = site().await;
    let root = unique_temp_path("browser-stubborn");
    std::fs::create_dir_all(&root).unwrap();
    let launcher = root.with_extension("launcher.sh");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\ntrap '' TERM\n{} \"$@\"\nsleep 1000\n",
            chrome.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rt = Runtime::builder()
        .provider(provider(&root, |c| c.executable = Some(launcher.clone())))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let nav = call(
        &rt,
        &Scope::Global,
        "navigate",
        json!({"url": format!("http://{}/", site.addr)}),
    )
    .await;
    assert!(nav.is_ok(), "{}", nav.projection);
    let pids = browser_pids(&rt).await;
    assert_eq!(pids.len(), 1);
    let started = tokio::time::Instant::now();
    let report = rt.shutdown(Duration::from_secs(20)).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(report.processes_reaped.contains(&pids[0]), "{report:?}");
    assert!(!process_alive(pids[0]));
    // It took the SIGTERM grace and the SIGKILL: it did not just exit.
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Nothing of its process group runs (the lingering launcher, its sleep).
    let group = mcpvisor_chaos::processes_in_group(pids[0]);
    assert!(group.is_empty(), "{group:?} of group {} still run", pids[0]);
    assert_nothing_left(&root).await;
    let _ = std::fs::remove_file(&launcher);
}

/// The sweep: a browser left by a runtime that is gone (its profile
/// directory names a pid that no longer runs) is killed, and its profile
/// directory removed, when a provider is made.
#[tokio::test]
async fn browsers_of_a_dead_runtime_are_swept_by_their_profile_directory() {
    let Some(chrome) = chromium() else { return };
    let root = unique_temp_path("browser-sweep");
    // A pid above the kernel's maximum: no runtime has it.
    let profile = root.join("mcpvisor-browser-4194999-act-1-deadbeef");
    std::fs::create_dir_all(&profile).unwrap();
    let mut orphan = std::process::Command::new(&chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A live runtime's profile is left alone.
    let mine = root.join(format!(
        "mcpvisor-browser-{}-act-9-live",
        std::process::id()
    ));
    std::fs::create_dir_all(&mine).unwrap();
    let pid = orphan.id();
    // Whatever happens below, the test's own browser does not outlive it.
    struct KillOnDrop(String);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            for p in processes_with_arg(&self.0) {
                unsafe {
                    libc::kill(p as i32, libc::SIGKILL);
                }
            }
        }
    }
    let _guard = KillOnDrop(profile.display().to_string());
    let marker = profile.display().to_string();
    // Chromium is up once its helper processes (zygotes, renderer) run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while processes_with_arg(&marker).len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "chromium did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = sweep_orphans(&root);
    assert!(killed.contains(&pid), "{killed:?} does not have {pid}");
    let status = tokio::task::spawn_blocking(move || orphan.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success());
    for p in processes_with_arg(&marker) {
        assert!(wait_gone(p, Duration::from_secs(5)).await, "{p} still runs");
    }
    assert!(
        !profile.exists(),
        "the dead runtime's profile was not removed"
    );
    assert!(mine.exists(), "a live runtime's profile was removed");
    let _ = std::fs::remove_dir_all(&root);
}

/// The seat is one provider: a browser provider registered twice is
/// refused naming the holder, and after a release the seat is free and
/// nothing of the old browsers runs.
#[tokio::test]
async fn release_closes_every_browser_before_the_seat_is_free() {
    let Some(_) = chromium() else { return };
    let site = site().await;
    let root = unique_temp_path("browser-release");
    let rt = Runtime::builder()
        .provider(provider(&root, |_| {}))
        .start()
        .await
        .unwrap();
    let err = rt
        .register_provider(provider(&root, |_| {}))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("held by provider \"browser\""),
        "{err}"
    );
    let scope = Scope::Agent("r".into());
    let activation = rt.open_activation(scope.clone()).await.unwrap();
    let nav = call(
        &rt,
        &scope,
        "navigate",
        json!({"url": format!("http://{}/", site.addr)}),
    )
    .await;
    assert!(nav.is_ok(), "{}", nav.projection);
    let pids = browser_pids(&rt).await;
    let report = rt.release_provider(SeatKind::BrowserUse).await.unwrap();
    assert_eq!(report.processes_reaped, pids);
    assert!(mcpvisor_chaos::alive(&pids).is_empty());
    assert!(rt.tools(&scope).is_empty(), "the tools were not withdrawn");
    rt.register_provider(provider(&root, |c| c.evaluate = true))
        .await
        .unwrap();
    rt.wait_ready(&scope, "browser", Duration::from_secs(10))
        .await
        .unwrap();
    let eval = call(&rt, &scope, "evaluate", json!({"expression": "6 * 7"})).await;
    assert!(eval.is_ok(), "{}", eval.projection);
    assert_eq!(eval.projection.trim(), "42");
    drop(activation);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    assert_nothing_left(&root).await;
}

/// TRUST-1: switched off, no process runs — the providers' browsers
/// included; switched on, the next call opens a fresh browser.
#[tokio::test]
async fn the_off_switch_closes_the_browsers_and_on_again_opens_a_fresh_one() {
    let Some(_) = chromium() else { return };
    let site = site().await;
    let root = unique_temp_path("browser-off");
    let rt = Runtime::builder()
        .provider(provider(&root, |_| {}))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let url = format!("http://{}/", site.addr);
    let nav = call(&rt, &Scope::Global, "navigate", json!({"url": url})).await;
    assert!(nav.is_ok(), "{}", nav.projection);
    let before = browser_pids(&rt).await;
    let report = rt.set_enabled(false).await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.processes_reaped, before, "{report:?}");
    assert!(browser_pids(&rt).await.is_empty());
    assert!(rt.tools(&Scope::Global).is_empty());
    rt.set_enabled(true).await;
    let again = call(&rt, &Scope::Global, "navigate", json!({"url": url})).await;
    assert!(again.is_ok(), "{}", again.projection);
    let after = browser_pids(&rt).await;
    assert_eq!(after.len(), 1);
    assert_ne!(after, before);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    assert_nothing_left(&root).await;
}

/// A browser started outside the runtime (the test owns it), with its
/// DevTools on a free loopback port; killed on drop.
struct External {
    child: std::process::Child,
    endpoint: String,
    profile: std::path::PathBuf,
}

impl External {
    async fn start(chrome: &Path) -> Self {
        let profile = unique_temp_path("external-chrome");
        std::fs::create_dir_all(&profile).unwrap();
        let child = std::process::Command::new(chrome)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        // Chromium writes its port to DevToolsActivePort once it listens.
        let file = profile.join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.lines().next().map(str::to_owned))
                .filter(|p| !p.is_empty())
            {
                break p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no DevToolsActivePort"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            profile,
        }
    }
}

impl Drop for External {
    fn drop(&mut self) {
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

use std::os::unix::process::CommandExt as _;

async fn wait_tools(rt: &Runtime, scope: &Scope, f: impl Fn(usize) -> bool) {
    mcpvisor_chaos::wait_tool_count(rt, scope, f).await;
}

/// SEAT-9: in attach mode one live activation owns the configured browser;
/// while it does, the other activations see the tools masked (absent, not
/// failing); when the owner ends, they come back. The browser is not ours:
/// it still runs after the runtime's shutdown, and only our page is gone.
#[tokio::test]
async fn in_attach_mode_one_activation_owns_the_browser_and_the_others_see_the_tools_masked() {
    let Some(chrome) = chromium() else { return };
    let site = site().await;
    let external = External::start(&chrome).await;
    let root = unique_temp_path("browser-attach");
    let rt = Runtime::builder()
        .provider(provider(&root, |c| {
            c.attach = Some(external.endpoint.clone())
        }))
        .start()
        .await
        .unwrap();
    let (a, b) = (Scope::Agent("a".into()), Scope::Agent("b".into()));
    let act_a = rt.open_activation(a.clone()).await.unwrap();
    let act_b = rt.open_activation(b.clone()).await.unwrap();
    assert_eq!(rt.tools(&a).len(), 7);
    assert_eq!(rt.tools(&b).len(), 7);
    let url = format!("http://{}/", site.addr);
    let nav = call(&rt, &a, "navigate", json!({"url": url})).await;
    assert!(nav.is_ok(), "{}", nav.projection);
    // `a` owns it: `b`'s tools are masked.
    wait_tools(&rt, &b, |n| n == 0).await;
    assert_eq!(rt.tools(&a).len(), 7, "the owner's tools were masked");
    let snap = call(&rt, &a, "snapshot", json!({})).await;
    assert!(snap.projection.contains("Form page"), "{}", snap.projection);
    // Nothing was launched: no pid is owned.
    assert!(browser_pids(&rt).await.is_empty());
    // The owner ends: `b` gets the tools back and can use the browser.
    let report = act_a.close().await.unwrap();
    assert!(report.processes_reaped.is_empty(), "{report:?}");
    wait_tools(&rt, &b, |n| n == 7).await;
    let nav_b = call(
        &rt,
        &b,
        "navigate",
        json!({"url": format!("http://{}/other", site.addr)}),
    )
    .await;
    assert!(nav_b.is_ok(), "{}", nav_b.projection);
    drop(act_b);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    // Not ours to kill: the external browser still runs.
    assert!(
        process_alive(external.child.id()),
        "the attached browser was killed"
    );
    // An endpoint off loopback over plain HTTP is refused (TRUST-3).
    let mut c = BrowserNativeConfig::new("browser");
    c.attach = Some("http://192.0.2.7:9222".into());
    let err = BrowserNative::new(c).unwrap_err();
    assert!(
        matches!(err, mcpvisor::providers::ProviderError::Config(_)),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("192.0.2.7"), "{err}");
}

/// SEAT-5/9 for an MCP-backed provider in attach mode: @playwright/mcp
/// connected to a browser started elsewhere is mounted for one activation
/// at a time; the other's tools are masked (not mounted) until the first
/// ends; the browser survives the runtime.
#[tokio::test]
async fn an_attached_playwright_server_is_mounted_for_one_activation_at_a_time() {
    use mcpvisor::providers::mcp_browser::{McpBrowser, McpBrowserConfig, McpBrowserKind};
    let Some(chrome) = chromium() else { return };
    let Some(peers) = mcpvisor_chaos::browser_peers_dir() else {
        return;
    };
    let site = site().await;
    let external = External::start(&chrome).await;
    let work = std::env::temp_dir().join(format!("mva-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let mut c = McpBrowserConfig::new("browser", McpBrowserKind::Playwright);
    c.package_dir = Some(peers);
    c.trust = TrustMode::Always;
    c.attach = Some(external.endpoint.clone());
    c.work_root = work.clone();
    let rt = Runtime::builder()
        .provider(Arc::new(McpBrowser::new(c).unwrap()))
        .start()
        .await
        .unwrap();
    let (a, b) = (Scope::Agent("a".into()), Scope::Agent("b".into()));
    let act_a = rt.open_activation(a.clone()).await.unwrap();
    let act_b = rt.open_activation(b.clone()).await.unwrap();
    assert_eq!(act_a.mounted().len(), 1);
    assert!(
        act_b.mounted().is_empty(),
        "both activations got the attached browser"
    );
    assert!(rt.tools(&b).is_empty());
    let url = format!("http://{}/", site.addr);
    let nav = rt
        .call(
            &a,
            "mcp__browser__browser_navigate",
            Some(json!({"url": url})),
            Default::default(),
        )
        .await;
    assert!(nav.is_ok(), "{}", nav.projection);
    act_a.close().await.unwrap();
    // `b` is mounted now, and drives the same browser.
    wait_tools(&rt, &b, |n| n > 0).await;
    rt.wait_ready(&b, "browser", Duration::from_secs(30))
        .await
        .unwrap();
    let snap = rt
        .call(
            &b,
            "mcp__browser__browser_snapshot",
            None,
            Default::default(),
        )
        .await;
    assert!(snap.is_ok(), "{}", snap.projection);
    drop(act_b);
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    assert!(
        process_alive(external.child.id()),
        "the attached browser was killed"
    );
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "working directories left: {left:?}");
    let _ = std::fs::remove_dir_all(&work);
}

/// The provider's tools go through the call pipeline like any server's:
/// trust (`ask` by default: with no one to ask and no `--yes`, refused
/// before any browser starts), then the PreToolUse hooks (a deny never
/// reaches the browser); `status` shows the seat, its holder and the run's
/// activation.
#[tokio::test]
async fn provider_tools_pass_trust_and_hooks_and_the_seat_shows_in_status() {
    let Some(_) = chromium() else { return };
    let site = site().await;
    let toml = "[providers.browser]\nkind = \"browser-native\"\n[hooks]\nclaude = \"cc.json\"\n";
    let deny = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no browsing there"}}'"#;
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "mcp__browser__navigate", "hooks": [
        {"type": "command", "command": deny}]}]}})
    .to_string();
    let files = [("cc.json", hooks.as_str())];
    // Trust `ask`, nobody to ask: refused, and no browser was started.
    let mut asked = Batch::start_with("browser-trust", toml, &[], &[], &files);
    let snap = asked.step(json!({"name": "mcp__browser__snapshot"})).await;
    assert_ne!(snap["outcome"], "ok", "{snap}");
    assert!(
        processes_with_arg(&asked.tmp.display().to_string()).is_empty(),
        "a refused call started a browser"
    );
    assert_eq!(asked.finish().await, Some(1));
    // --yes: the hook still denies navigate; other tools run.
    let mut yes = Batch::start_with("browser-hooks", toml, &[], &["--yes"], &files);
    let url = format!("http://{}/", site.addr);
    let nav = yes
        .step(json!({"name": "mcp__browser__navigate", "args": {"url": url}}))
        .await;
    assert_eq!(nav["outcome"], "denied_by_hook", "{nav}");
    assert!(
        nav["projection"]
            .as_str()
            .unwrap()
            .contains("no browsing there"),
        "{nav}"
    );
    let snap = yes.step(json!({"name": "mcp__browser__snapshot"})).await;
    assert_eq!(snap["outcome"], "ok", "{snap}");
    assert!(
        snap["projection"].as_str().unwrap().contains("about:blank"),
        "the denied navigate reached the browser: {snap}"
    );
    assert_eq!(yes.finish().await, Some(1));
    // status: the seat, its holder and kind, the run's one activation.
    let dir = unique_temp_path("browser-status");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mcpvisor.toml"),
        "[providers.browser]\nkind = \"browser-native\"\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(ensure_mcpvisor_built().unwrap())
        .args(["--json", "status"])
        .current_dir(&dir)
        .output()
        .await
        .unwrap();
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seat = all
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["seat"] == "browser_use")
        .unwrap_or_else(|| panic!("no browser_use seat in {all}"));
    assert_eq!(seat["holder"], "browser");
    assert_eq!(seat["kind"], "browser-native");
    assert_eq!(seat["activations"].as_array().unwrap().len(), 1, "{seat}");
    let server = all
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["server"] == "browser")
        .unwrap_or_else(|| panic!("no browser server in {all}"));
    assert_eq!(server["state"], "ready", "{server}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SEAT-5: an MCP-backed provider is pinned (another installed version is
/// refused, naming both) and starts strictly: a server that fails to start
/// fails `open_activation` with its own words, and nothing stays mounted.
#[tokio::test]
async fn an_mcp_backed_provider_is_pinned_and_a_failed_start_fails_the_activation() {
    use mcpvisor::providers::mcp_browser::{McpBrowser, McpBrowserConfig, McpBrowserKind};
    let Some(_) = chromium() else { return };
    let dir = unique_temp_path("mcp-strict");
    let pkg = dir.join("node_modules/@playwright/mcp");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("package.json"), r#"{"version": "0.0.83"}"#).unwrap();
    std::fs::write(
        pkg.join("cli.js"),
        "console.error('fatal: no browser for you'); process.exit(3);\n",
    )
    .unwrap();
    let mut c = McpBrowserConfig::new("browser", McpBrowserKind::Playwright);
    c.package_dir = Some(dir.clone());
    c.trust = TrustMode::Always;
    let mut wrong = c.clone();
    wrong.version = "0.0.82".into();
    let err = McpBrowser::new(wrong).unwrap_err();
    assert!(
        matches!(err, mcpvisor::providers::ProviderError::Package(_)),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(
        err.contains("\"0.0.83\"") && err.contains("0.0.82"),
        "{err}"
    );
    let rt = Runtime::builder()
        .provider(Arc::new(McpBrowser::new(c).unwrap()))
        .start()
        .await
        .unwrap();
    let scope = Scope::Agent("s".into());
    let err = rt.open_activation(scope.clone()).await.unwrap_err();
    assert!(err.to_string().contains("no browser for you"), "{err}");
    assert!(rt.tools(&scope).is_empty());
    // The failed activation is gone: the scope can be activated again.
    let again = rt.open_activation(scope.clone()).await.unwrap_err();
    assert!(again.to_string().contains("no browser for you"), "{again}");
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    let _ = std::fs::remove_dir_all(&dir);
}

/// SEAT-8: one activation's actions run one at a time, and one whose
/// caller gave up while it waited behind another is skipped, never run:
/// after the first ends, the page is not where the skipped one would have
/// taken it.
#[tokio::test]
async fn a_queued_action_whose_caller_gave_up_is_skipped() {
    let Some(_) = chromium() else { return };
    let mut site = site().await;
    let root = unique_temp_path("browser-queue");
    let rt = Runtime::builder()
        .provider(provider(&root, |_| {}))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let g = Scope::Global;
    let first = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/", site.addr)}),
    )
    .await;
    assert!(first.is_ok(), "{}", first.projection);
    // A holds the activation's browser on a page that never answers.
    let holding = {
        let (rt, url) = (rt.clone(), format!("http://{}/hang", site.addr));
        tokio::spawn(
            async move { call(&rt, &Scope::Global, "navigate", json!({"url": url})).await },
        )
    };
    site.hung.recv().await.unwrap();
    // B queues behind it, and its caller gives up.
    let mut events = rt.subscribe();
    let cancel = mcpvisor::CancellationToken::new();
    let queued = {
        let (rt, url, cancel) = (
            rt.clone(),
            format!("http://{}/other", site.addr),
            cancel.clone(),
        );
        tokio::spawn(async move {
            let options = mcpvisor::CallOptions {
                cancel: Some(cancel),
                ..Default::default()
            };
            rt.call(
                &Scope::Global,
                "mcp__browser__navigate",
                Some(json!({"url": url})),
                options,
            )
            .await
        })
    };
    loop {
        if let Ok(mcpvisor::RuntimeEvent::CallStarted { .. }) = events.recv().await {
            break;
        }
    }
    cancel.cancel();
    let b = queued.await.unwrap();
    assert_eq!(b.kind, OutcomeKind::Cancelled, "{}", b.projection);
    // A's page answers now: A ends, then B has its turn.
    site.release.notify_waiters();
    let a = holding.await.unwrap();
    assert!(a.is_ok(), "{}", a.projection);
    // C queues after where B was: once it ran, B had its turn, and the
    // site never saw B's page.
    let c = call(
        &rt,
        &g,
        "navigate",
        json!({"url": format!("http://{}/", site.addr)}),
    )
    .await;
    assert!(c.is_ok(), "{}", c.projection);
    assert_eq!(
        site.others.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the skipped navigate ran"
    );
    assert!(rt.shutdown(Duration::from_secs(20)).await.is_clean());
    assert_nothing_left(&root).await;
}
