//! `computer-native` on a real X server (SEAT-4, SEAT-9, SEAT-11): Xvfb,
//! started by the test, and the test's own X client — a red window that
//! has the focus and records its pointer and key events — checking what
//! the provider's tools really did: the screenshot's pixels, the pointer's
//! position, the button and key events; the display's single owner, and
//! the seat left empty without a display.

// Test code: panicking on an unexpected error is the point (allowed in tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::os::fd::FromRawFd as _;
use std::sync::Arc;
use std::time::Duration;

use mcpvisor::providers::computer_native::{ComputerNative, ComputerNativeConfig};
use mcpvisor::{CallOptions, FileAttachmentStore, Runtime, Scope, ToolOutcome, TrustMode};
use mcpvisor_chaos::{ensure_mcpvisor_built, unique_temp_path};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

const W: u16 = 640;
const H: u16 = 480;

/// Xvfb on a display it picks itself (`-displayfd`); killed on drop.
struct Xvfb {
    child: std::process::Child,
    display: String,
}

impl Xvfb {
    fn start() -> Option<Self> {
        let found = ["/usr/bin/Xvfb"]
            .iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(exe) = found else {
            let opted_out = std::env::var("MCPVISOR_SKIP_X").is_ok_and(|v| v == "1");
            assert!(
                opted_out,
                "Xvfb is not installed (Debian: apt-get install xvfb); run the tests with \
                 MCPVISOR_SKIP_X=1 to skip the computer-native tests"
            );
            eprintln!("skipped: no Xvfb (MCPVISOR_SKIP_X=1)");
            return None;
        };
        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two fds into the array; both are ours.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (read_fd, write_fd) = (fds[0], fds[1]);
        let child = std::process::Command::new(exe)
            .args(["-displayfd", &write_fd.to_string()])
            .args([
                "-screen",
                "0",
                &format!("{W}x{H}x24"),
                "-nolisten",
                "tcp",
                "-br",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // SAFETY: both fds came from pipe() above and are closed once here.
        unsafe { libc::close(write_fd) };
        let mut reader = unsafe { std::fs::File::from_raw_fd(read_fd) };
        // Xvfb writes the display number once it accepts connections.
        let mut number = String::new();
        let mut byte = [0u8; 1];
        while reader.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            number.push(byte[0] as char);
        }
        assert!(!number.is_empty(), "Xvfb did not report its display");
        Some(Self {
            child,
            display: format!(":{number}"),
        })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test's own X client: a red 200x150 window at (0, 0) with the focus,
/// whose pointer and key events arrive on `events`.
struct Probe {
    conn: Arc<RustConnection>,
    root: xproto::Window,
    events: mpsc::UnboundedReceiver<Event>,
    min_keycode: u8,
    per: u8,
    keysyms: Vec<u32>,
}

impl Probe {
    fn open(display: &str) -> Self {
        let (conn, screen) = x11rb::connect(Some(display)).unwrap();
        let conn = Arc::new(conn);
        let s = conn.setup().roots[screen].clone();
        let win = conn.generate_id().unwrap();
        let aux = xproto::CreateWindowAux::new()
            .background_pixel(0x00ff_0000)
            .event_mask(
                xproto::EventMask::KEY_PRESS
                    | xproto::EventMask::BUTTON_PRESS
                    | xproto::EventMask::STRUCTURE_NOTIFY,
            );
        conn.create_window(
            s.root_depth,
            win,
            s.root,
            0,
            0,
            200,
            150,
            0,
            xproto::WindowClass::INPUT_OUTPUT,
            s.root_visual,
            &aux,
        )
        .unwrap();
        conn.map_window(win).unwrap();
        conn.flush().unwrap();
        // Mapped (MapNotify) before the focus is set.
        loop {
            if let Event::MapNotify(_) = conn.wait_for_event().unwrap() {
                break;
            }
        }
        conn.set_input_focus(xproto::InputFocus::POINTER_ROOT, win, x11rb::CURRENT_TIME)
            .unwrap();
        conn.clear_area(false, win, 0, 0, 0, 0).unwrap();
        conn.get_input_focus().unwrap().reply().unwrap();
        let (min, max) = (conn.setup().min_keycode, conn.setup().max_keycode);
        let map = conn
            .get_keyboard_mapping(min, max - min + 1)
            .unwrap()
            .reply()
            .unwrap();
        let (tx, events) = mpsc::unbounded_channel();
        let reader = conn.clone();
        std::thread::spawn(move || {
            while let Ok(e) = reader.wait_for_event() {
                if tx.send(e).is_err() {
                    break;
                }
            }
        });
        Self {
            conn,
            root: s.root,
            events,
            min_keycode: min,
            per: map.keysyms_per_keycode,
            keysyms: map.keysyms,
        }
    }

    /// The first keysym of a keycode.
    fn keysym(&self, code: u8) -> u32 {
        let i = usize::from(code - self.min_keycode) * usize::from(self.per);
        self.keysyms[i]
    }

    /// The next `n` key presses, as keysyms.
    async fn key_presses(&mut self, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        while out.len() < n {
            match tokio::time::timeout(Duration::from_secs(5), self.events.recv()).await {
                Ok(Some(Event::KeyPress(k))) => out.push(self.keysym(k.detail)),
                Ok(Some(_)) => {}
                _ => panic!("only {} of {n} key presses arrived: {out:x?}", out.len()),
            }
        }
        out
    }

    async fn button_press(&mut self) -> xproto::ButtonPressEvent {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.events.recv()).await {
                Ok(Some(Event::ButtonPress(b))) => return b,
                Ok(Some(_)) => {}
                _ => panic!("no button press arrived"),
            }
        }
    }

    fn pointer(&self) -> (i16, i16) {
        let p = self.conn.query_pointer(self.root).unwrap().reply().unwrap();
        (p.root_x, p.root_y)
    }
}

fn provider(display: &str) -> Arc<ComputerNative> {
    let mut c = ComputerNativeConfig::new("computer", display);
    c.trust = TrustMode::Always;
    Arc::new(ComputerNative::new(c))
}

async fn call(rt: &Runtime, scope: &Scope, tool: &str, args: Value) -> ToolOutcome {
    rt.wait_ready(scope, "computer", Duration::from_secs(10))
        .await
        .unwrap();
    rt.call(
        scope,
        &format!("mcp__computer__{tool}"),
        Some(args),
        CallOptions {
            images: true,
            ..Default::default()
        },
    )
    .await
}

/// SEAT-11 for computer-native: the screenshot is an admitted PNG of the
/// screen's size whose pixels show the test's red window; the pointer
/// moves where asked; a click arrives as a button press at its point; text
/// and keys arrive as the key presses that make them; bad coordinates and
/// unknown keys are clear errors.
#[tokio::test]
async fn screenshots_pointer_clicks_and_keys_really_happen_on_the_display() {
    let Some(x) = Xvfb::start() else { return };
    let mut probe = Probe::open(&x.display);
    let store = unique_temp_path("computer-shots");
    let rt = Runtime::builder()
        .provider(provider(&x.display))
        .attachments(Arc::new(FileAttachmentStore::new(store.clone())))
        .activate(Scope::Global)
        .start()
        .await
        .unwrap();
    let g = Scope::Global;
    let tools: Vec<String> = rt.tools(&g).iter().map(|t| t.name.clone()).collect();
    assert_eq!(
        tools,
        [
            "mcp__computer__screenshot",
            "mcp__computer__mouse_move",
            "mcp__computer__click",
            "mcp__computer__type",
            "mcp__computer__key"
        ]
    );
    assert!(
        rt.tools(&g)[0]
            .description
            .as_deref()
            .unwrap()
            .contains("cannot be undone")
    );

    let shot = call(&rt, &g, "screenshot", json!({})).await;
    assert!(shot.is_ok(), "{}", shot.projection);
    let path = shot.images.first().expect("no saved image").path.clone();
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (u32::from(W), u32::from(H)));
    let px = |x: usize, y: usize| {
        let i = (y * info.width as usize + x) * 3;
        (buf[i], buf[i + 1], buf[i + 2])
    };
    assert_eq!(
        px(10, 10),
        (255, 0, 0),
        "the red window is not in the screenshot"
    );
    assert_eq!(
        px(400, 300),
        (0, 0, 0),
        "the black root is not in the screenshot"
    );

    let moved = call(&rt, &g, "mouse_move", json!({"x": 30, "y": 40})).await;
    assert!(moved.is_ok(), "{}", moved.projection);
    assert_eq!(probe.pointer(), (30, 40));

    let clicked = call(&rt, &g, "click", json!({"x": 50, "y": 60})).await;
    assert!(clicked.is_ok(), "{}", clicked.projection);
    let b = probe.button_press().await;
    assert_eq!((b.event_x, b.event_y, b.detail), (50, 60, 1));

    let typed = call(&rt, &g, "type", json!({"text": "Hi!"})).await;
    assert!(typed.is_ok(), "{}", typed.projection);
    const SHIFT: u32 = 0xffe1;
    assert_eq!(
        probe.key_presses(5).await,
        vec![SHIFT, 'h' as u32, 'i' as u32, SHIFT, '1' as u32],
        "not the key presses that type \"Hi!\""
    );
    let key = call(&rt, &g, "key", json!({"key": "Return"})).await;
    assert!(key.is_ok(), "{}", key.projection);
    assert_eq!(probe.key_presses(1).await, vec![0xff0d]);

    // CALL-4 / SEAT-11: refused before anything was sent to the display.
    let off = call(&rt, &g, "click", json!({"x": 700, "y": 10})).await;
    assert_eq!(off.kind, mcpvisor::OutcomeKind::InvalidArguments);
    assert_eq!(off.side_effects, mcpvisor::SideEffects::None);
    assert!(
        off.projection.contains("off the screen, which is 640x480"),
        "{}",
        off.projection
    );
    let bad = call(&rt, &g, "key", json!({"key": "Hyper_Z"})).await;
    assert_eq!(bad.kind, mcpvisor::OutcomeKind::InvalidArguments);
    assert!(
        bad.projection.contains("unknown key \"Hyper_Z\""),
        "{}",
        bad.projection
    );
    let report = rt.shutdown(Duration::from_secs(10)).await;
    assert!(report.is_clean(), "{report:?}");
    let _ = std::fs::remove_dir_all(&store);
}

/// SEAT-9 for the display: the first activation to act owns it; the
/// others see the tools masked until it ends.
#[tokio::test]
async fn one_activation_owns_the_display_and_the_others_see_the_tools_masked() {
    let Some(x) = Xvfb::start() else { return };
    let rt = Runtime::builder()
        .provider(provider(&x.display))
        .start()
        .await
        .unwrap();
    let (a, b) = (Scope::Agent("a".into()), Scope::Agent("b".into()));
    let act_a = rt.open_activation(a.clone()).await.unwrap();
    let act_b = rt.open_activation(b.clone()).await.unwrap();
    assert_eq!(rt.tools(&b).len(), 5);
    assert!(
        call(&rt, &a, "mouse_move", json!({"x": 1, "y": 1}))
            .await
            .is_ok()
    );
    wait_tools(&rt, &b, 0).await;
    assert_eq!(rt.tools(&a).len(), 5);
    act_a.close().await.unwrap();
    wait_tools(&rt, &b, 5).await;
    assert!(
        call(&rt, &b, "mouse_move", json!({"x": 2, "y": 2}))
            .await
            .is_ok()
    );
    drop(act_b);
    assert!(rt.shutdown(Duration::from_secs(10)).await.is_clean());
}

async fn wait_tools(rt: &Runtime, scope: &Scope, n: usize) {
    mcpvisor_chaos::wait_tool_count(rt, scope, |c| c == n).await;
}

/// Where no display is configured (and there is no $DISPLAY), the seat
/// stays empty and the CLI says so; with one, `status` shows the holder.
#[tokio::test]
async fn without_a_display_the_computer_seat_stays_empty() {
    let dir = unique_temp_path("computer-nodisplay");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mcpvisor.toml"),
        "[providers.computer]\nkind = \"computer-native\"\n",
    )
    .unwrap();
    let bin = ensure_mcpvisor_built().unwrap();
    let out = tokio::process::Command::new(bin)
        .arg("status")
        .current_dir(&dir)
        .env_remove("DISPLAY")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the computer_use seat stays empty"),
        "{stderr}"
    );
    assert!(stdout.contains("Seat(computer_use) empty"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
