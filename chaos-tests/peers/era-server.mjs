// A server built on the TypeScript SDK 2.x (@modelcontextprotocol/server,
// the 2026-07-28 era), for the era tests (chaos-tests/tests/all/eras.rs).
// Copied into the peers directory, where the SDK is installed.
//
//   node era-server.mjs [--stateless-only]
//
// stdio. Tools: `echo` {text} answers the text; `add_tool` registers a tool
// `added` (a tool list change, announced on subscriptions/listen streams).
// With --stateless-only an `initialize` is refused with -32022 naming
// 2026-07-28 (serveStdio's `legacy: 'reject'`); otherwise both eras are served.
import { McpServer, fromJsonSchema } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

const legacy = process.argv.includes('--stateless-only') ? 'reject' : 'serve';
const text = fromJsonSchema({
  type: 'object',
  properties: { text: { type: 'string' } },
  required: ['text'],
});
const none = fromJsonSchema({ type: 'object', properties: {} });

serveStdio(() => {
  const server = new McpServer(
    { name: 'era-server', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true } } },
  );
  server.registerTool('echo', { description: 'Answers its text.', inputSchema: text },
    async ({ text }) => ({ content: [{ type: 'text', text }] }));
  server.registerTool('add_tool', { description: 'Registers the tool `added`.', inputSchema: none },
    async () => {
      server.registerTool('added', { description: 'Added at run time.', inputSchema: none },
        async () => ({ content: [{ type: 'text', text: 'added' }] }));
      return { content: [{ type: 'text', text: 'registered' }] };
    });
  return server;
}, { legacy });
