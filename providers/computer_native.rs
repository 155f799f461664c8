//! `computer-native` (SEAT-4): screenshots and input on an X display, in
//! pure Rust (x11rb, with XTEST for input). Only where a display is
//! configured: without one the `computer_use` seat stays empty.
//!
//! The display is one desktop: one live activation owns it at a time (the
//! first to act), and the others see the tools masked until the owner ends
//! (the same rule as an attached browser, SEAT-9). The owner's session
//! resource is its X connection. It starts no process, and closing the
//! session closes the connection. X requests are blocking, so each action
//! runs on a blocking thread, bounded by the action timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectError, ReplyError};
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use super::{Exclusive, ToolFailure};
use crate::messages::config::ServerConfig;
use crate::messages::seat::{
    ActivationId, Opener, ProviderInfo, SeatKind, SeatProvider, SessionResource, SessionsHandle,
};
use crate::messages::status::ShutdownReport;
use crate::messages::trust::TrustMode;

/// The guidance every tool description carries (SEAT-6).
pub const GUIDANCE: &str = "Take a screenshot before acting and check it after; coordinates are screen pixels from the top left; a completed click or keypress cannot be undone.";

/// `computer-native`'s settings (the `[providers.computer]` table).
#[derive(Debug, Clone)]
pub struct ComputerNativeConfig {
    /// The provider's name (the mounted server's name).
    pub name: String,
    /// The X display (`:99`).
    pub display: String,
    /// Trust of the tools.
    pub trust: TrustMode,
    /// Every action's timeout.
    pub action_timeout: Duration,
}

impl ComputerNativeConfig {
    /// Defaults for a provider named `name` on `display`.
    pub fn new(name: impl Into<String>, display: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            display: display.into(),
            trust: TrustMode::Ask,
            action_timeout: Duration::from_secs(10),
        }
    }
}

/// The provider.
#[derive(Debug, Clone)]
pub struct ComputerNative {
    config: Arc<ComputerNativeConfig>,
    owner: Arc<Exclusive>,
}

impl ComputerNative {
    /// A provider for the configured display.
    pub fn new(config: ComputerNativeConfig) -> Self {
        Self {
            config: Arc::new(config),
            owner: Arc::new(Exclusive::new("the X display")),
        }
    }
}

impl SeatProvider for ComputerNative {
    fn info(&self) -> ProviderInfo {
        ProviderInfo {
            name: self.config.name.clone(),
            kind: "computer-native".into(),
            seat: SeatKind::ComputerUse,
        }
    }

    fn mount(&self, _: &ActivationId, sessions: SessionsHandle) -> Result<ServerConfig, String> {
        let config = self.config.clone();
        let owner = self.owner.clone();
        let timeout = self.config.action_timeout * 2;
        Ok(super::in_process_mount(
            &self.config.name,
            self.config.trust,
            timeout,
            move || DesktopTools {
                sessions: sessions.clone(),
                config: config.clone(),
                owner: owner.clone(),
            },
        ))
    }

    fn opener(&self) -> Option<Opener> {
        let config = self.config.clone();
        let owner = self.owner.clone();
        Some(Arc::new(move |activation: ActivationId| {
            let config = config.clone();
            let owner = owner.clone();
            Box::pin(async move {
                owner.claim(&activation).map_err(|e| e.to_string())?;
                let display = config.display.clone();
                let opened = tokio::time::timeout(
                    config.action_timeout,
                    tokio::task::spawn_blocking(move || Desktop::connect(&display)),
                )
                .await;
                let desktop = match opened {
                    Ok(Ok(Ok(d))) => d,
                    Ok(Ok(Err(e))) => {
                        owner.release(&activation);
                        return Err(e.to_string());
                    }
                    Ok(Err(e)) => {
                        owner.release(&activation);
                        return Err(DesktopError::Task(e).to_string());
                    }
                    Err(_) => {
                        owner.release(&activation);
                        return Err(DesktopError::Timeout {
                            display: config.display.clone(),
                        }
                        .to_string());
                    }
                };
                // The other activations' tools are masked now.
                owner.changed(&activation);
                Ok(Arc::new(DesktopSession {
                    desktop: Mutex::new(Some(Arc::new(desktop))),
                    owner,
                    activation,
                    timeout: config.action_timeout,
                }) as Arc<dyn SessionResource>)
            }) as BoxFuture<'static, _>
        }))
    }
}

/// Why the X display could not be opened or an X action failed.
#[derive(Debug, thiserror::Error)]
enum DesktopError {
    /// No connection to the display.
    #[error("cannot connect to the X display {display}: {source}")]
    Connect {
        display: String,
        source: ConnectError,
    },
    /// The display has not the screen its name asks for.
    #[error("the X display {display} has no screen {screen}")]
    NoScreen { display: String, screen: usize },
    /// The display lacks XTEST (synthetic input).
    #[error("the X display {display} has no XTEST extension: {source}")]
    NoXtest { display: String, source: ReplyError },
    /// A request while connecting failed.
    #[error("X display {display}: {source}")]
    Setup { display: String, source: ReplyError },
    /// The blocking task that connects panicked or was cancelled.
    #[error("the X connection task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The display did not answer within the action timeout.
    #[error("the X display {display} did not answer in time")]
    Timeout { display: String },
    /// An X request of an action failed.
    #[error("the X request failed: {0}")]
    Request(ReplyError),
    /// The keyboard map has no Shift key (needed to type upper case).
    #[error("the display has no Shift key")]
    NoShift,
    /// The screen's pixels are not in a format the screenshot reads.
    #[error(
        "the display's depth is {depth} ({bytes} bytes for {width}x{height}): only 24-bit TrueColor (Xvfb -screen 0 WxHx24) is supported"
    )]
    Depth {
        depth: u8,
        bytes: usize,
        width: usize,
        height: usize,
    },
    /// The screenshot could not be encoded.
    #[error("cannot encode the PNG: {0}")]
    Png(png::EncodingError),
}

/// One X connection and what input needs of the display.
struct Desktop {
    conn: RustConnection,
    root: xproto::Window,
    width: u16,
    height: u16,
    min_keycode: u8,
    keysyms_per_keycode: u8,
    keysyms: Vec<u32>,
}

impl Desktop {
    fn connect(display: &str) -> Result<Self, DesktopError> {
        let (conn, screen) =
            x11rb::connect(Some(display)).map_err(|source| DesktopError::Connect {
                display: display.to_owned(),
                source,
            })?;
        let setup = conn.setup();
        let s = setup
            .roots
            .get(screen)
            .ok_or_else(|| DesktopError::NoScreen {
                display: display.to_owned(),
                screen,
            })?;
        let (root, width, height) = (s.root, s.width_in_pixels, s.height_in_pixels);
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let x = |e: ReplyError| DesktopError::Setup {
            display: display.to_owned(),
            source: e,
        };
        conn.xtest_get_version(2, 2)
            .map_err(|e| x(e.into()))?
            .reply()
            .map_err(|source| DesktopError::NoXtest {
                display: display.to_owned(),
                source,
            })?;
        let map = conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(|e| x(e.into()))?
            .reply()
            .map_err(x)?;
        Ok(Self {
            conn,
            root,
            width,
            height,
            min_keycode: min,
            keysyms_per_keycode: map.keysyms_per_keycode,
            keysyms: map.keysyms,
        })
    }

    fn err(e: impl Into<ReplyError>) -> DesktopError {
        DesktopError::Request(e.into())
    }

    /// A round trip: every request before it was processed.
    fn sync(&self) -> Result<(), DesktopError> {
        self.conn
            .get_input_focus()
            .map_err(Self::err)?
            .reply()
            .map_err(Self::err)?;
        Ok(())
    }

    fn check_point(&self, x: i64, y: i64) -> Result<(i16, i16), ToolFailure> {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) {
            return Err(ToolFailure::refused(format!(
                "({x}, {y}) is off the screen, which is {}x{} (0..{}, 0..{})",
                self.width,
                self.height,
                self.width - 1,
                self.height - 1
            )));
        }
        Ok((x as i16, y as i16))
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), DesktopError> {
        self.conn
            .xtest_fake_input(kind, detail, x11rb::CURRENT_TIME, self.root, x, y, 0)
            .map_err(Self::err)?;
        Ok(())
    }

    fn move_to(&self, x: i16, y: i16) -> Result<(), DesktopError> {
        self.fake(xproto::MOTION_NOTIFY_EVENT, 0, x, y)
    }

    fn click(&self, x: i16, y: i16, button: u8) -> Result<(), DesktopError> {
        self.move_to(x, y)?;
        self.fake(xproto::BUTTON_PRESS_EVENT, button, 0, 0)?;
        self.fake(xproto::BUTTON_RELEASE_EVENT, button, 0, 0)?;
        self.sync()
    }

    /// The keycode with `keysym` in its first (or, with shift, second)
    /// column.
    fn keycode(&self, keysym: u32) -> Option<(u8, bool)> {
        let per = usize::from(self.keysyms_per_keycode.max(1));
        for (i, syms) in self.keysyms.chunks(per).enumerate() {
            let code = self.min_keycode.checked_add(u8::try_from(i).ok()?)?;
            if syms.first() == Some(&keysym) {
                return Some((code, false));
            }
            if syms.get(1) == Some(&keysym) {
                return Some((code, true));
            }
        }
        None
    }

    fn tap(&self, keys: &[(u8, bool)]) -> Result<(), DesktopError> {
        for (code, _) in keys {
            self.fake(xproto::KEY_PRESS_EVENT, *code, 0, 0)?;
        }
        for (code, _) in keys.iter().rev() {
            self.fake(xproto::KEY_RELEASE_EVENT, *code, 0, 0)?;
        }
        Ok(())
    }

    fn shift(&self) -> Result<(u8, bool), DesktopError> {
        self.keycode(XK_SHIFT_L).ok_or(DesktopError::NoShift)
    }

    fn type_text(&self, text: &str) -> Result<usize, ToolFailure> {
        // Every character is checked before any is typed.
        let mut plan = Vec::new();
        for c in text.chars() {
            let keysym = char_keysym(c);
            let key = self.keycode(keysym).ok_or_else(|| {
                ToolFailure::refused(format!(
                    "cannot type {c:?}: no key of this display's keyboard map makes it; nothing was typed"
                ))
            })?;
            plan.push(key);
        }
        let typed = || -> Result<(), DesktopError> {
            let shift = self.shift()?;
            for key in &plan {
                if key.1 {
                    self.tap(&[shift, *key])?;
                } else {
                    self.tap(&[*key])?;
                }
            }
            self.sync()
        };
        typed().map_err(failed)?;
        Ok(plan.len())
    }

    /// `Return`, `ctrl+a`, `shift+Tab`, `a`…
    fn key(&self, combo: &str) -> Result<(), ToolFailure> {
        let mut keys = Vec::new();
        for part in combo.split('+').map(str::trim) {
            let keysym = named_keysym(part)
                .or_else(|| {
                    let mut cs = part.chars();
                    match (cs.next(), cs.next()) {
                        (Some(c), None) => Some(char_keysym(c)),
                        _ => None,
                    }
                })
                .ok_or_else(|| {
                    ToolFailure::refused(format!(
                        "unknown key {part:?} (names: Return, Tab, Escape, BackSpace, Delete, Home, End, Page_Up, Page_Down, Left, Right, Up, Down, F1..F12, space, ctrl, shift, alt, super, or one character)"
                    ))
                })?;
            let key = self.keycode(keysym).ok_or_else(|| {
                ToolFailure::refused(format!(
                    "no key of this display's keyboard map makes {part:?}"
                ))
            })?;
            keys.push(key);
        }
        self.tap(&keys).and_then(|()| self.sync()).map_err(failed)
    }

    /// The root window as a PNG.
    fn screenshot(&self) -> Result<Vec<u8>, DesktopError> {
        let image = self
            .conn
            .get_image(
                xproto::ImageFormat::Z_PIXMAP,
                self.root,
                0,
                0,
                self.width,
                self.height,
                !0,
            )
            .map_err(Self::err)?
            .reply()
            .map_err(Self::err)?;
        let (w, h) = (usize::from(self.width), usize::from(self.height));
        if image.depth != 24 && image.depth != 32 || image.data.len() < w * h * 4 {
            return Err(DesktopError::Depth {
                depth: image.depth,
                bytes: image.data.len(),
                width: w,
                height: h,
            });
        }
        // ZPixmap at depth 24 is 32 bits per pixel, BGRX (least significant byte first).
        let mut rgb = Vec::with_capacity(w * h * 3);
        for px in image.data.chunks_exact(4).take(w * h) {
            rgb.extend_from_slice(&[px[2], px[1], px[0]]);
        }
        let mut out = Vec::new();
        {
            let mut encoder =
                png::Encoder::new(&mut out, u32::from(self.width), u32::from(self.height));
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(DesktopError::Png)?;
            writer.write_image_data(&rgb).map_err(DesktopError::Png)?;
        }
        Ok(out)
    }
}

/// An X action's error as the tool's failure.
fn failed(e: DesktopError) -> ToolFailure {
    ToolFailure::failed(e.to_string())
}

const XK_SHIFT_L: u32 = 0xffe1;

/// The keysym of a character: Latin-1 is its code point, the rest
/// `0x01000000 + code point`.
fn char_keysym(c: char) -> u32 {
    match c {
        '\n' => 0xff0d,
        '\t' => 0xff09,
        c if (c as u32) < 0x100 => c as u32,
        c => 0x0100_0000 + c as u32,
    }
}

fn named_keysym(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    Some(match lower.as_str() {
        "return" | "enter" => 0xff0d,
        "tab" => 0xff09,
        "escape" | "esc" => 0xff1b,
        "backspace" => 0xff08,
        "delete" | "del" => 0xffff,
        "home" => 0xff50,
        "left" => 0xff51,
        "up" => 0xff52,
        "right" => 0xff53,
        "down" => 0xff54,
        "page_up" | "pageup" => 0xff55,
        "page_down" | "pagedown" => 0xff56,
        "end" => 0xff57,
        "space" => 0x20,
        "shift" => XK_SHIFT_L,
        "ctrl" | "control" => 0xffe3,
        "alt" => 0xffe9,
        "super" | "meta" => 0xffeb,
        f if f.starts_with('f') && f.len() > 1 => {
            let n: u32 = f[1..].parse().ok()?;
            if !(1..=12).contains(&n) {
                return None;
            }
            0xffbe + n - 1
        }
        _ => return None,
    })
}

/// The owner's session: its X connection.
struct DesktopSession {
    desktop: Mutex<Option<Arc<Desktop>>>,
    owner: Arc<Exclusive>,
    activation: ActivationId,
    timeout: Duration,
}

impl SessionResource for DesktopSession {
    fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    fn interrupt(&self) {}

    fn close(self: Arc<Self>) -> BoxFuture<'static, ShutdownReport> {
        Box::pin(async move {
            // Dropping the last handle closes the connection.
            let desktop = self.desktop.lock().ok().and_then(|mut d| d.take());
            drop(desktop);
            self.owner.release(&self.activation);
            ShutdownReport::default()
        })
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl DesktopSession {
    /// Run one X action on a blocking thread, bounded by the timeout.
    async fn run<T: Send + 'static>(
        &self,
        what: &str,
        action: impl FnOnce(&Desktop) -> Result<T, ToolFailure> + Send + 'static,
    ) -> Result<T, ToolFailure> {
        let desktop = self
            .desktop
            .lock()
            .ok()
            .and_then(|d| d.clone())
            .ok_or_else(|| ToolFailure::not_done("the desktop session was closed"))?;
        match tokio::time::timeout(
            self.timeout,
            tokio::task::spawn_blocking(move || action(&desktop)),
        )
        .await
        {
            Ok(Ok(r)) => r.map_err(|f| ToolFailure {
                text: format!("{what} failed: {}", f.text),
                ..f
            }),
            Ok(Err(e)) => Err(ToolFailure::failed(format!("{what} failed: {e}"))),
            Err(_) => Err(ToolFailure::timed_out(format!(
                "{what} did not finish within {} ms; whether it took effect is unknown: take a screenshot to see",
                self.timeout.as_millis()
            ))),
        }
    }
}

/// The tools of one activation: an MCP server over an in-process stream.
#[derive(Clone)]
struct DesktopTools {
    sessions: SessionsHandle,
    config: Arc<ComputerNativeConfig>,
    owner: Arc<Exclusive>,
}

fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Tool {
    super::tool(name, description, GUIDANCE, props, required)
}

fn coord(args: &Map<String, Value>, key: &str, tool: &str) -> Result<i64, ToolFailure> {
    args.get(key)
        .and_then(Value::as_i64)
        .ok_or_else(|| ToolFailure::refused(format!("{tool} needs the integer argument {key:?}")))
}

impl DesktopTools {
    fn tools() -> Vec<Tool> {
        let xy = json!({"x": {"type": "integer"}, "y": {"type": "integer"}});
        let mut click = xy.clone();
        if let Some(o) = click.as_object_mut() {
            o.insert(
                "button".into(),
                json!({"type": "string", "enum": ["left", "middle", "right"]}),
            );
        }
        vec![
            tool(
                "screenshot",
                "A PNG screenshot of the whole X display.",
                json!({}),
                &[],
            ),
            tool("mouse_move", "Move the pointer to (x, y).", xy, &["x", "y"]),
            tool(
                "click",
                "Move the pointer to (x, y) and click (left by default).",
                click,
                &["x", "y"],
            ),
            tool(
                "type",
                "Type the text with the keyboard into whatever has the focus.",
                json!({"text": {"type": "string"}}),
                &["text"],
            ),
            tool(
                "key",
                "Press a key or a combination: Return, Tab, Escape, ctrl+a, shift+Tab, F5…",
                json!({"key": {"type": "string"}}),
                &["key"],
            ),
        ]
    }

    async fn run(
        &self,
        name: &str,
        args: &Map<String, Value>,
    ) -> Result<Vec<ContentBlock>, ToolFailure> {
        if !Self::tools().iter().any(|t| t.name == name) {
            return Err(ToolFailure::refused(format!(
                "no tool {name:?} in this provider"
            )));
        }
        let text_arg = |key: &str| super::text_arg(args, name, key);
        // Arguments are checked before the display is claimed.
        let (x, y) = match name {
            "mouse_move" | "click" => (coord(args, "x", name)?, coord(args, "y", name)?),
            _ => (0, 0),
        };
        let button = match args.get("button").and_then(Value::as_str) {
            None | Some("left") => 1,
            Some("middle") => 2,
            Some("right") => 3,
            Some(b) => {
                return Err(ToolFailure::refused(format!(
                    "button {b:?}: expected left, middle or right"
                )));
            }
        };
        let text = match name {
            "type" => Some(text_arg("text")?),
            "key" => Some(text_arg("key")?),
            _ => None,
        };
        let resource = self
            .sessions
            .acquire(self.config.action_timeout + Duration::from_secs(2))
            .await
            .map_err(|e| ToolFailure::not_done(e.to_string()))?;
        let session = resource
            .as_any()
            .downcast::<DesktopSession>()
            .map_err(|_| ToolFailure::not_done("the session resource is not a desktop"))?;
        match name {
            "screenshot" => {
                let png = session
                    .run("screenshot", |d| d.screenshot().map_err(failed))
                    .await?;
                let data = base64::engine::general_purpose::STANDARD.encode(&png);
                Ok(vec![ContentBlock::image(data, "image/png")])
            }
            "mouse_move" => {
                session
                    .run("mouse_move", move |d| {
                        let (x, y) = d.check_point(x, y)?;
                        d.move_to(x, y).and_then(|()| d.sync()).map_err(failed)
                    })
                    .await?;
                Ok(vec![ContentBlock::text(format!(
                    "the pointer is at ({x}, {y})"
                ))])
            }
            "click" => {
                session
                    .run("click", move |d| {
                        let (x, y) = d.check_point(x, y)?;
                        d.click(x, y, button).map_err(failed)
                    })
                    .await?;
                Ok(vec![ContentBlock::text(format!(
                    "clicked at ({x}, {y}); take a screenshot to see the result (a click cannot be undone)"
                ))])
            }
            "type" => {
                let text = text.unwrap_or_default();
                let n = session.run("type", move |d| d.type_text(&text)).await?;
                Ok(vec![ContentBlock::text(format!("typed {n} character(s)"))])
            }
            _ => {
                let combo = text.unwrap_or_default();
                let shown = combo.clone();
                session.run("key", move |d| d.key(&combo)).await?;
                Ok(vec![ContentBlock::text(format!("pressed {shown}"))])
            }
        }
    }
}

impl ServerHandler for DesktopTools {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        rmcp::model::ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                format!("mcpvisor {}", self.config.name),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "The X display {} (computer-native), one activation at a time. {GUIDANCE}",
                self.config.display
            ))
    }

    #[allow(clippy::field_reassign_with_default)] // ListToolsResult is non_exhaustive
    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut page = ListToolsResult::default();
        if !self.owner.masked_for(&self.sessions.activation) {
            page.tools = Self::tools();
        }
        Ok(page)
    }

    async fn on_initialized(&self, ctx: rmcp::service::NotificationContext<RoleServer>) {
        self.owner
            .register(self.sessions.activation.clone(), ctx.peer);
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        Ok(super::tool_result(self.run(&request.name, &args).await))
    }
}
