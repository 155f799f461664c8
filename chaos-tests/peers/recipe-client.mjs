// A client recipe of docs/gateway.md run as its client runs it: the
// official TypeScript SDK's stdio transport (what Claude Code and VS Code
// use) starts the recipe's command with its args and env, and lists tools.
//
//   node recipe-client.mjs '{"command": …, "args": […], "env": {…}}'
//
// Prints {"tools": [names]} and exits 0, or {"error": message} and exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

try {
  const spec = JSON.parse(process.argv[2]);
  const client = new Client({ name: "recipe-client", version: "1.0.0" }, { capabilities: {} });
  const transport = new StdioClientTransport({
    command: spec.command,
    args: spec.args || [],
    env: { ...process.env, ...(spec.env || {}) },
    cwd: spec.cwd,
    stderr: "inherit",
  });
  await client.connect(transport);
  const { tools } = await client.listTools();
  say({ tools: tools.map((t) => t.name) });
  await client.close();
  process.exit(0);
} catch (e) {
  say({ error: String(e && e.stack ? e.stack : e) });
  process.exit(1);
}
