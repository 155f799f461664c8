// A third-party client (the official TypeScript SDK) driving
// `mcpvisor gateway` (issue 13). Run from the peers directory, where
// @modelcontextprotocol/sdk is installed (it comes with server-everything):
//
//   node gateway-client.mjs stdio <mcpvisor> <config>   # spawns the gateway
//   node gateway-client.mjs http <url>                  # two clients at once
//
// Prints one JSON object per step on stdout ({"step": …, …}) and exits 0
// when every step held, 1 with {"step": "error", "message"} otherwise. The
// Rust test (chaos-tests/tests/all/gateway.rs) reads the steps and checks the
// backend's side (its request log, its processes).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const LIMIT_MS = 20000;
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

function client() {
  const c = new Client({ name: "sdk-gateway-client", version: "1.0.0" }, { capabilities: {} });
  c.changes = 0;
  c.waiters = [];
  c.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    c.changes += 1;
    for (const w of c.waiters.splice(0)) w();
  });
  return c;
}

const changed = (c) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no tools/list_changed within 20 s")), LIMIT_MS);
    c.waiters.push(() => {
      clearTimeout(t);
      resolve();
    });
  });

const text = (r) => (r.content || []).filter((b) => b.type === "text").map((b) => b.text).join("\n");

async function toolsWith(c, name) {
  const deadline = Date.now() + LIMIT_MS;
  for (;;) {
    const next = changed(c).catch(() => {});
    const { tools } = await c.listTools();
    if (tools.some((t) => t.name === name)) return tools;
    if (Date.now() > deadline) throw new Error(`${name} never listed; got ${tools.map((t) => t.name)}`);
    await next;
  }
}

async function stdio(mcpvisor, config) {
  const c = client();
  const transport = new StdioClientTransport({
    command: mcpvisor,
    args: ["--config", config, "gateway", "--stdio"],
    stderr: "inherit",
  });
  await c.connect(transport);
  const caps = c.getServerCapabilities();
  say({ step: "initialize", listChanged: caps?.tools?.listChanged === true });
  const tools = await toolsWith(c, "mcp__s__echo");
  const echo = tools.find((t) => t.name === "mcp__s__echo");
  say({ step: "list", names: tools.map((t) => t.name), echoSchema: echo.inputSchema });
  const r = await c.callTool({ name: "mcp__s__echo", arguments: { message: "from the sdk" } });
  say({ step: "call", isError: r.isError === true, text: text(r) });
  // A client cancel (AbortSignal): the SDK sends notifications/cancelled.
  const abort = new AbortController();
  const hung = c.callTool({ name: "mcp__s__hang", arguments: {} }, undefined, { signal: abort.signal });
  setTimeout(() => abort.abort("the user gave up"), 300);
  let cancelled = false;
  try {
    await hung;
  } catch (e) {
    cancelled = true;
  }
  say({ step: "cancel", cancelled });
  // The cancel reaches the backend asynchronously, on the same pipe as the
  // next request: with GATEWAY_CLIENT_WAIT_LOG (the backend's request log),
  // wait (at most 5 s) until it has arrived, so the crash cannot overtake it.
  const waitLog = process.env.GATEWAY_CLIENT_WAIT_LOG;
  if (waitLog) {
    const until = Date.now() + 5000;
    while (Date.now() < until) {
      let seen = "";
      try {
        seen = readFileSync(waitLog, "utf8");
      } catch {}
      if (seen.includes("cancelled")) break;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  // The backend crashes and is restarted while this client stays connected.
  const before = c.changes;
  const wait = changed(c);
  const crash = await c.callTool({ name: "mcp__s__crash", arguments: {} });
  await wait;
  let again;
  const deadline = Date.now() + LIMIT_MS;
  for (;;) {
    again = await c.callTool({ name: "mcp__s__echo", arguments: { message: "after the restart" } });
    if (!again.isError) break;
    if (Date.now() > deadline) throw new Error(`echo never worked again: ${text(again)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  say({
    step: "restart",
    crashIsError: crash.isError === true,
    listChanged: c.changes - before,
    againText: text(again),
  });
  await c.close();
}

async function http(url) {
  const a = client();
  const b = client();
  await a.connect(new StreamableHTTPClientTransport(new URL(url)));
  await b.connect(new StreamableHTTPClientTransport(new URL(url)));
  await toolsWith(a, "mcp__s__echo");
  await toolsWith(b, "mcp__s__echo");
  const [ra, rb] = await Promise.all([
    a.callTool({ name: "mcp__s__echo", arguments: { message: "client a" } }),
    b.callTool({ name: "mcp__s__echo", arguments: { message: "client b" } }),
  ]);
  say({ step: "two_clients", a: text(ra), b: text(rb) });
  // Both are told when the catalog changes (the backend adds a tool).
  const both = Promise.all([changed(a), changed(b)]);
  await a.callTool({ name: "mcp__s__add_tool", arguments: {} });
  await both;
  say({ step: "both_told", a: a.changes, b: b.changes });
  await a.close();
  await b.close();
}

const [mode, ...rest] = process.argv.slice(2);
try {
  if (mode === "stdio") await stdio(rest[0], rest[1]);
  else if (mode === "http") await http(rest[0]);
  else throw new Error(`unknown mode ${mode}`);
  say({ step: "done" });
  process.exit(0);
} catch (e) {
  say({ step: "error", message: String(e && e.stack ? e.stack : e) });
  process.exit(1);
}
