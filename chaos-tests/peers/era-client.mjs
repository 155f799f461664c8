// A third-party client of the 2026-07-28 era (the TypeScript SDK 2.x,
// @modelcontextprotocol/client) driving `mcpvisor gateway`. Copied into the
// peers directory, where the SDK is installed.
//
//   node era-client.mjs stdio <mcpvisor> <config> <tool> [--mode auto|legacy]
//   node era-client.mjs http <url> <tool> [--mode auto|legacy]
//
// It connects in the given version-negotiation mode (default `auto`), lists
// the tools ONCE (a client that lists once), calls <tool> with
// {"message": "from ts"} asking for progress, and prints one JSON object:
// {"protocol_version", "tools", "call": {"is_error", "text"}, "progress":
// [[progress, total], ...]}; on failure {"error": "..."} and exit status 1.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const argv = process.argv.slice(2);
let mode = 'auto';
const at = argv.indexOf('--mode');
if (at >= 0) {
  mode = argv[at + 1];
  argv.splice(at, 2);
}

async function main() {
  const [how, ...rest] = argv;
  let transport;
  let tool;
  if (how === 'stdio') {
    const [mcpvisor, config, t] = rest;
    tool = t;
    transport = new StdioClientTransport({
      command: mcpvisor,
      args: ['--config', config, 'gateway', '--stdio'],
      stderr: 'ignore',
    });
  } else {
    const [url, t] = rest;
    tool = t;
    transport = new StreamableHTTPClientTransport(new URL(url));
  }
  const client = new Client(
    { name: 'ts-era-client', version: '1.0.0' },
    { versionNegotiation: { mode } },
  );
  await client.connect(transport);
  try {
    const listed = await client.listTools();
    const tools = listed.tools.map((t) => t.name);
    const progress = [];
    const result = await client.callTool(
      { name: tool, arguments: { message: 'from ts' } },
      { onprogress: (p) => progress.push([p.progress, p.total ?? null]) },
    );
    const text = result.content
      .filter((b) => b.type === 'text')
      .map((b) => b.text)
      .join('\n');
    return {
      protocol_version: client.getNegotiatedProtocolVersion(),
      tools,
      call: { is_error: Boolean(result.isError), text },
      progress,
    };
  } finally {
    await client.close();
  }
}

main().then(
  (out) => {
    process.stdout.write(JSON.stringify(out) + '\n');
    process.exit(0);
  },
  (e) => {
    process.stdout.write(JSON.stringify({ error: String(e && e.stack ? e.stack : e) }) + '\n');
    process.exit(1);
  },
);
