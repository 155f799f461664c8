// A third-party client (the TypeScript SDK 2.x, @modelcontextprotocol/client)
// calling one tool many times through a load balancer in front of gateway
// replicas (issue 35). Copied into the peers directory, where the SDK is
// installed.
//
//   node replica-client.mjs <url> <tool> <calls> <concurrency> <arguments JSON> [--mode auto|legacy] [--meta JSON]
//
// `--meta` is sent as each call's `_meta` (a W3C `traceparent`, say, or a
// gateway's `io.mcpvisor/handle`); a result's handle is reported.
//
// It connects once (version negotiation `auto` by default: 2026-07-28,
// stateless, so every call is a request of its own for the balancer to
// place), then makes <calls> calls of <tool>, at most <concurrency> at
// once, each bounded by 60 s. Prints one JSON object: {"protocol_version",
// "outcomes": [{"ok": true, "text", "handle"} | {"ok": false, "error",
// "code", "data"}, ...]} in
// call order; exit status 0 whatever the outcomes (the test judges them),
// 1 with {"error"} when the client could not connect.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const argv = process.argv.slice(2);
const at = argv.indexOf('--mode');
const mode = at >= 0 ? argv.splice(at, 2)[1] : 'auto';
const metaAt = argv.indexOf('--meta');
const meta = metaAt >= 0 ? JSON.parse(argv.splice(metaAt, 2)[1]) : undefined;
const [url, tool, calls, concurrency, args] = argv;

const textOf = (content) =>
  (content || [])
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('\n');

async function main() {
  const client = new Client(
    { name: 'ts-replica-client', version: '1.0.0' },
    { versionNegotiation: { mode } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const outcomes = new Array(Number(calls));
  let next = 0;
  const worker = async () => {
    while (next < outcomes.length) {
      const i = next++;
      try {
        const r = await client.callTool(
          { name: tool, arguments: JSON.parse(args), ...(meta ? { _meta: meta } : {}) },
          { timeout: 60_000 },
        );
        const handle = r._meta?.['io.mcpvisor/handle'];
        outcomes[i] = r.isError
          ? { ok: false, error: `isError: ${textOf(r.content)}`, handle }
          : { ok: true, text: textOf(r.content), handle };
      } catch (e) {
        outcomes[i] = { ok: false, error: String(e?.message ?? e), code: e?.code, data: e?.data };
      }
    }
  };
  await Promise.all(Array.from({ length: Number(concurrency) }, worker));
  process.stdout.write(
    JSON.stringify({ protocol_version: client.getNegotiatedProtocolVersion(), outcomes }) + '\n',
  );
  await client.close().catch(() => {});
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String(e?.stack ?? e) }) + '\n');
  process.exit(1);
});
