//! Getting a browser: Chromium found and launched in its own process group
//! with a throwaway profile, or an existing one attached over CDP; the
//! CDP session; and the sweep of what a killed runtime left behind.

use super::*;

/// The places Chromium is looked for when no executable is configured.
pub(super) const CHROMIUM_CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
];

pub(super) fn chromium(config: &BrowserNativeConfig) -> Result<PathBuf, BrowserError> {
    chromium_for(config.executable.as_deref())
}

/// The configured Chromium, else `$MCPVISOR_CHROMIUM`, else the first of
/// the usual places that exists.
pub(crate) fn chromium_for(executable: Option<&std::path::Path>) -> Result<PathBuf, BrowserError> {
    if let Some(exe) = executable {
        return Ok(exe.to_path_buf());
    }
    if let Some(exe) = std::env::var_os("MCPVISOR_CHROMIUM") {
        return Ok(PathBuf::from(exe));
    }
    CHROMIUM_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or(BrowserError::NoChromium)
}

/// The stderr lines kept for errors.
pub(super) const STDERR_TAIL: usize = 20;

pub(super) async fn launch(
    config: &BrowserNativeConfig,
    activation: &ActivationId,
) -> Result<BrowserSession, BrowserError> {
    let exe = chromium(config)?;
    let profile = config.profile_root.join(profile_name(activation));
    std::fs::create_dir_all(&profile).map_err(|source| BrowserError::Profile {
        path: profile.clone(),
        source,
    })?;
    // One tag per launch: what this browser started is found, and killed,
    // when it exits, without touching a browser launched after it.
    let tag = format!(
        "{}/{:016x}",
        activation.process_tag("browser"),
        rand::random::<u64>()
    );
    let mut cmd = crate::process::command(&exe);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-breakpad",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
    ])
    .arg(format!(
        "--window-size={},{}",
        config.window.0, config.window.1
    ))
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(&config.extra_args)
    .arg("about:blank")
    .env(TAG_VAR, &tag);
    // Everything Chromium writes outside its profile (dconf's cache, a
    // crash database) goes inside it, and is removed with it.
    let home = profile.join("home");
    std::fs::create_dir_all(&home).map_err(|source| BrowserError::Home {
        path: home.clone(),
        source,
    })?;
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_DATA_HOME", home.join(".local/share"));
    // Chromium's crash handlers run in sessions of their own (out of
    // reach of the group kill) and outlive a browser that dies: swept by
    // the tag when the leader has been reaped, however it ended.
    let sweep_tag = tag.clone();
    let on_exit = Box::new(move || {
        tokio::spawn(async move {
            let swept = crate::process::kill_tagged(&sweep_tag, false, None);
            let _ =
                crate::process::still_running(&swept.killed, crate::process::SWEPT_EXIT_WAIT).await;
        });
    });
    let (mut group, pipes) = ProcessGroup::spawn_notifying(&cmd, on_exit).map_err(|source| {
        let _ = std::fs::remove_dir_all(&profile);
        BrowserError::Start {
            exe: exe.clone(),
            source,
        }
    })?;
    let pid = group.pid();
    drop(pipes.stdin);
    let mut stdout = pipes.stdout;
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
    });
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let (ws_tx, ws_rx) = tokio::sync::oneshot::channel::<String>();
    let tail = stderr.clone();
    let mut lines = tokio::io::BufReader::new(pipes.stderr).lines();
    tokio::spawn(async move {
        let mut ws_tx = Some(ws_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("DevTools listening on ")
                && let Some(tx) = ws_tx.take()
            {
                let _ = tx.send(url.trim().to_owned());
            }
            if let Ok(mut t) = tail.lock() {
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
    });
    let connected = connect(config, &exe, ws_rx, &mut group).await;
    let cdp = match connected {
        Ok(c) => c,
        Err(why) => {
            // One cleanup for every failed step: the group is killed and
            // reaped, the profile removed.
            group.kill_and_reap().await;
            let _ = std::fs::remove_dir_all(&profile);
            let tail = stderr
                .lock()
                .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            return Err(if tail.is_empty() {
                why
            } else {
                BrowserError::Stderr {
                    why: Box::new(why),
                    tail,
                }
            });
        }
    };
    let reaped = group.unreaped().reaped;
    Ok(BrowserSession {
        pid,
        tag: Some(tag),
        profile,
        cancel: CancellationToken::new(),
        reaped,
        timeout: config.action_timeout,
        live: tokio::sync::Mutex::new(Some(Live {
            browser: cdp.browser,
            page: cdp.page,
            handler: cdp.handler,
            generation: 0,
            valid: None,
        })),
        group: tokio::sync::Mutex::new(Some(group)),
        stderr,
        attached: None,
    })
}

/// `attach`: this activation's session on the configured browser, once it
/// is the one live owner (SEAT-9). Nothing is launched: the session is a
/// page of our own on the browser, closed at the end; the browser stays.
pub(super) async fn attach(
    config: &BrowserNativeConfig,
    endpoint: &str,
    state: &Arc<Exclusive>,
    activation: &ActivationId,
) -> Result<BrowserSession, BrowserError> {
    state.claim(activation)?;
    let ws = match tokio::time::timeout(config.action_timeout, websocket_url(endpoint)).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            state.release(activation);
            return Err(e);
        }
        Err(_) => {
            state.release(activation);
            return Err(BrowserError::EndpointTimeout {
                endpoint: endpoint.to_owned(),
            });
        }
    };
    let cdp = match cdp_session(config, &ws).await {
        Ok(c) => c,
        Err(e) => {
            state.release(activation);
            return Err(e);
        }
    };
    // The other activations' tools are masked now.
    state.changed(activation);
    Ok(BrowserSession {
        pid: 0,
        tag: None,
        profile: PathBuf::new(),
        cancel: CancellationToken::new(),
        reaped: cdp.gone,
        timeout: config.action_timeout,
        live: tokio::sync::Mutex::new(Some(Live {
            browser: cdp.browser,
            page: cdp.page,
            handler: cdp.handler,
            generation: 0,
            valid: None,
        })),
        group: tokio::sync::Mutex::new(None),
        stderr: Arc::default(),
        attached: Some((state.clone(), activation.clone())),
    })
}

/// The browser's WebSocket URL from `<endpoint>/json/version` (an
/// `http://` endpoint), or the endpoint itself (`ws://`).
pub(super) async fn websocket_url(endpoint: &str) -> Result<String, BrowserError> {
    if endpoint.starts_with("ws://") || endpoint.starts_with("wss://") {
        return Ok(endpoint.to_owned());
    }
    let url = format!("{}/json/version", endpoint.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(BrowserError::HttpClient)?;
    let answer = client
        .get(&url)
        .send()
        .await
        .map_err(|source| BrowserError::Unreachable {
            url: url.clone(),
            source,
        })?;
    let v: Value = answer
        .json()
        .await
        .map_err(|source| BrowserError::NotJson {
            url: url.clone(),
            source,
        })?;
    v.get("webSocketDebuggerUrl")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or(BrowserError::NoWebSocketUrl { url })
}

/// The launched browser's DevTools endpoint (announced on its stderr),
/// the CDP connection, its event loop, and a page: each step bounded.
pub(super) async fn connect(
    config: &BrowserNativeConfig,
    exe: &std::path::Path,
    ws_rx: tokio::sync::oneshot::Receiver<String>,
    group: &mut ProcessGroup,
) -> Result<Cdp, BrowserError> {
    let ws = match tokio::time::timeout(config.launch_timeout, ws_rx).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(_)) => {
            let exit = group.wait(Some(Duration::from_secs(2))).await;
            let how = exit
                .map(|e| e.describe())
                .unwrap_or_else(|| "closed its stderr".into());
            return Err(BrowserError::Exited {
                exe: exe.to_path_buf(),
                how,
            });
        }
        Err(_) => {
            return Err(BrowserError::NotAnnounced {
                exe: exe.to_path_buf(),
                limit: config.launch_timeout,
            });
        }
    };
    cdp_session(config, &ws).await
}

/// A CDP connection, its event loop (which flags `gone` when the
/// connection ends), and a fresh page of our own.
pub(super) struct Cdp {
    browser: Browser,
    page: Page,
    handler: tokio::task::JoinHandle<()>,
    gone: tokio::sync::watch::Receiver<bool>,
}

pub(super) async fn cdp_session(
    config: &BrowserNativeConfig,
    ws: &str,
) -> Result<Cdp, BrowserError> {
    let handler_config = chromiumoxide::handler::HandlerConfig {
        request_timeout: config.action_timeout,
        viewport: None,
        ..Default::default()
    };
    let (browser, mut handler) = tokio::time::timeout(
        config.action_timeout,
        Browser::connect_with_config(ws.to_owned(), handler_config),
    )
    .await
    .map_err(|_| BrowserError::DevToolsTimeout { ws: ws.to_owned() })?
    .map_err(|source| BrowserError::DevTools {
        ws: ws.to_owned(),
        source,
    })?;
    let (gone_tx, gone) = tokio::sync::watch::channel(false);
    let handler = tokio::spawn(async move {
        while let Some(event) = handler.next().await {
            if let Err(e) = event {
                tracing::debug!("cdp: {e}");
            }
        }
        let _ = gone_tx.send(true);
    });
    let page = tokio::time::timeout(config.action_timeout, browser.new_page("about:blank"))
        .await
        .map_err(|_| BrowserError::PageTimeout)
        .and_then(|p| p.map_err(BrowserError::Page));
    match page {
        Ok(page) => Ok(Cdp {
            browser,
            page,
            handler,
            gone,
        }),
        Err(e) => {
            handler.abort();
            Err(e)
        }
    }
}

/// Kill the browsers of runtimes that are gone: a profile directory
/// `mcpvisor-browser-<pid>-…` whose runtime pid no longer runs marks them.
/// Returns the killed pids; the stale directories are removed once the
/// killed browsers are gone (waiting up to 2 s for them).
pub fn sweep_orphans(profile_root: &std::path::Path) -> Vec<u32> {
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let owner_of = |name: &str| -> Option<u32> {
        name.strip_prefix(PROFILE_PREFIX)?
            .split('-')
            .next()?
            .parse()
            .ok()
    };
    let marker = format!(
        "--user-data-dir={}/{PROFILE_PREFIX}",
        profile_root.display()
    );
    let mut killed = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            for arg in cmdline.split(|b| *b == 0) {
                let arg = String::from_utf8_lossy(arg);
                if let Some(rest) = arg.strip_prefix(&marker)
                    && let Some(owner) = owner_of(&format!("{PROFILE_PREFIX}{rest}"))
                    && !alive(owner)
                    && let Ok(pid_t) = i32::try_from(pid)
                {
                    crate::process::kill_pid(pid_t);
                    killed.push(pid);
                    break;
                }
            }
        }
    }
    // A SIGKILLed browser may still write into its profile until it is
    // dead (seen in CI: the directory was recreated under the removal), so
    // its directory goes once the killed are gone, up to 2 s.
    let running = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
            })
            == Some(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while killed.iter().any(running) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if let Ok(dir) = std::fs::read_dir(profile_root) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(owner) = owner_of(&name)
                && !alive(owner)
                && std::fs::remove_dir_all(entry.path()).is_err()
            {
                // A file that appeared during the removal: once more.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    killed
}
