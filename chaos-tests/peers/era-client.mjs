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
//
// With `--read URI` it then reads URI: "read", the text of its contents.
//
// With `--prompt NAME KEY=VALUE` it then gets the prompt NAME with that one
// argument: "prompt", the text of its first message.
//
// With `--change ADD_TOOL` it registers a tool list-changed handler before
// connecting (the Client option `listChanged`, without the SDK's own
// refresh: on a 2025-11-25 connection it handles
// notifications/tools/list_changed, on a 2026-07-28 one the SDK opens a
// subscriptions/listen stream for it), calls ADD_TOOL, and after each
// change heard from then on lists again, until the list differs from its
// first one (20 s at most): "change": {"heard" (changes heard since the
// call), "early" (changes heard before it), "listen" (whether the SDK's
// listen stream was open), "tools" (the new list)}.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const LIMIT_MS = 20_000;
const argv = process.argv.slice(2);

// The values after `flag` (count of them), taken out of argv; undefined
// when the flag is absent.
function option(flag, count = 1) {
  const at = argv.indexOf(flag);
  if (at < 0) return undefined;
  return argv.splice(at, count + 1).slice(1);
}

const mode = option('--mode')?.[0] ?? 'auto';
const read = option('--read')?.[0];
const prompt = option('--prompt', 2);
const change = option('--change')?.[0];

// Tool list changes heard: how many, and a waiter for the next one.
const heard = { count: 0, next: undefined, errors: [] };

// The next change heard, or false after `ms`.
function nextChange(ms) {
  let timer;
  return new Promise((resolve) => {
    heard.next = () => resolve(true);
    timer = setTimeout(() => resolve(false), ms);
  }).finally(() => {
    heard.next = undefined;
    clearTimeout(timer);
  });
}

function textOf(content) {
  return content
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('\n');
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
  const options = { versionNegotiation: { mode } };
  if (change !== undefined) {
    options.listChanged = {
      tools: {
        autoRefresh: false,
        debounceMs: 0,
        onChanged: (error) => {
          if (error) {
            heard.errors.push(String(error));
            return;
          }
          heard.count += 1;
          heard.next?.();
        },
      },
    };
  }
  const client = new Client({ name: 'ts-era-client', version: '1.0.0' }, options);
  client.onerror = (e) => heard.errors.push(String(e));
  await client.connect(transport);
  try {
    const listed = await client.listTools();
    const tools = listed.tools.map((t) => t.name);
    const progress = [];
    const result = await client.callTool(
      { name: tool, arguments: { message: 'from ts' } },
      { onprogress: (p) => progress.push([p.progress, p.total ?? null]) },
    );
    const out = {
      protocol_version: client.getNegotiatedProtocolVersion(),
      tools,
      call: { is_error: Boolean(result.isError), text: textOf(result.content) },
      progress,
    };
    if (read !== undefined) {
      const got = await client.readResource({ uri: read });
      out.read = got.contents.map((c) => c.text ?? '').join('\n');
    }
    if (prompt !== undefined) {
      const [name, pair] = prompt;
      const eq = pair.indexOf('=');
      const got = await client.getPrompt({
        name,
        arguments: { [pair.slice(0, eq)]: pair.slice(eq + 1) },
      });
      const first = got.messages[0]?.content;
      out.prompt = first?.type === 'text' ? first.text : null;
    }
    if (change !== undefined) {
      const early = heard.count;
      const first = JSON.stringify(tools);
      const deadline = Date.now() + LIMIT_MS;
      const left = () => Math.max(0, deadline - Date.now());
      const added = await client.callTool({ name: change, arguments: {} });
      let now = tools;
      // A change heard during the call (counted) is waited for no more.
      let waiting = heard.count === early ? nextChange(left()) : Promise.resolve(true);
      while (JSON.stringify(now) === first) {
        if (!(await waiting)) {
          throw new Error(
            `no new tool list within ${LIMIT_MS} ms (${heard.count - early} changes heard); ` +
              `${change} said ${JSON.stringify(textOf(added.content))}; ` +
              `errors: [${heard.errors.join('; ')}]`,
          );
        }
        waiting = nextChange(left());
        const listed = await client.listTools(undefined, { cacheMode: 'refresh' });
        now = listed.tools.map((t) => t.name);
      }
      out.change = {
        heard: heard.count - early,
        early,
        listen: client.autoOpenedSubscription !== undefined,
        tools: now,
      };
    }
    return out;
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
