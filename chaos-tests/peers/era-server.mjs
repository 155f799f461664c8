// A server built on the TypeScript SDK 2.x (@modelcontextprotocol/server,
// the 2026-07-28 era), for the era tests (chaos-tests/tests/all/eras.rs).
// Copied into the peers directory, where the SDK is installed.
//
//   node era-server.mjs [--stateless-only]
//
// stdio. Tools: `echo` {text} answers the text; `add_tool` registers a tool
// `added` (a tool list change, announced on subscriptions/listen streams);
// `add_prompt` registers a prompt `added_prompt` (a prompt list change);
// `log` sends two log messages, "quiet" at info and "loud" at warning;
// `confirm` {what} asks the client to confirm (an `input_required` result
// with an elicitation and a request state), and answers "confirmed WHAT
// (state STATE)" once an accepted answer comes back (with two progress
// notifications first when the call has a progress token); `ask_sampling` asks for
// a sampling answer; `ask_forever` asks again on every round. The prompt
// `confirm_prompt` asks for the same confirmation before its messages, and
// the resource `note://guarded` before its text (a stateless request that
// declared no elicitation is not asked). The
// resource `note://counter` can be subscribed to; `bump` raises it and sends
// `notifications/resources/updated` for it. `crash` exits the process.
// With --stateless-only an `initialize` is refused with -32022 naming
// 2026-07-28 (serveStdio's `legacy: 'reject'`); otherwise both eras are served.
import { McpServer, acceptedContent, fromJsonSchema, inputRequired } from '@modelcontextprotocol/server';
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
    { capabilities: { tools: { listChanged: true }, prompts: {}, resources: { subscribe: true }, logging: {} } },
  );
  // The session era's resources/subscribe and /unsubscribe (the SDK
  // answers the stateless era's subscriptions/listen itself).
  for (const method of ['resources/subscribe', 'resources/unsubscribe']) {
    server.server.setRequestHandler(method, async () => ({}));
  }
  let counter = 0;
  server.registerResource('counter', 'note://counter', { description: 'A counter `bump` raises.' },
    async (uri) => ({ contents: [{ uri: uri.href, text: String(counter) }] }));
  server.registerTool('bump', { description: 'Raises note://counter and says it changed.', inputSchema: none },
    async () => {
      counter += 1;
      await server.server.sendResourceUpdated({ uri: 'note://counter' });
      return { content: [{ type: 'text', text: String(counter) }] };
    });
  server.registerTool('crash', { description: 'Exits the process (status 3) mid-call.', inputSchema: none },
    async () => process.exit(3));
  server.registerTool('echo', { description: 'Answers its text (and names it in its result\'s _meta).', inputSchema: text },
    async ({ text }) => ({ content: [{ type: 'text', text }], _meta: { 'example.com/echoed': text } }));
  server.registerTool('log', { description: 'Logs "quiet" at info, then "loud" at warning.', inputSchema: none },
    async () => {
      await server.server.sendLoggingMessage({ level: 'info', logger: 'tool', data: 'quiet' });
      await server.server.sendLoggingMessage({ level: 'warning', logger: 'tool', data: 'loud' });
      return { content: [{ type: 'text', text: 'logged' }] };
    });
  server.registerTool('add_prompt', { description: 'Registers the prompt `added_prompt`.', inputSchema: none },
    async () => {
      server.registerPrompt('added_prompt', { description: 'Added at run time.' },
        async () => ({ messages: [{ role: 'user', content: { type: 'text', text: 'added' } }] }));
      return { content: [{ type: 'text', text: 'registered' }] };
    });
  server.registerTool('add_tool', { description: 'Registers the tool `added`.', inputSchema: none },
    async () => {
      server.registerTool('added', { description: 'Added at run time.', inputSchema: none },
        async () => ({ content: [{ type: 'text', text: 'added' }] }));
      return { content: [{ type: 'text', text: 'registered' }] };
    });
  const what = fromJsonSchema({
    type: 'object',
    properties: { what: { type: 'string' } },
    required: ['what'],
  });
  server.registerTool('confirm', { description: 'Asks for a confirmation first.', inputSchema: what },
    async ({ what }, ctx) => {
      const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
      if (answer?.confirm !== true) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: `Confirm ${what}?`,
              requestedSchema: {
                type: 'object',
                properties: { confirm: { type: 'boolean', default: true } },
                required: ['confirm'],
              },
            }),
          },
          requestState: `state-of-${what}`,
        });
      }
      const state = ctx.mcpReq.requestState ? ctx.mcpReq.requestState() : undefined;
      // Progress after the answer, when the call asked for it.
      const progressToken = ctx.mcpReq._meta?.progressToken;
      if (progressToken !== undefined) {
        for (const progress of [1, 2]) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 2, message: `confirming ${progress} of 2` },
          });
        }
      }
      return { content: [{ type: 'text', text: `confirmed ${what} (state ${state})` }] };
    });
  server.registerTool('ask_sampling', { description: 'Asks for a sampling answer.', inputSchema: none },
    async () => inputRequired({
      inputRequests: {
        sample: inputRequired.createMessage({
          messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }],
          maxTokens: 10,
        }),
      },
    }));
  server.registerPrompt('confirm_prompt', { description: 'Asks for a confirmation first.' },
    async (ctx) => {
      const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
      if (answer?.confirm !== true) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: 'Confirm the prompt?',
              requestedSchema: {
                type: 'object',
                properties: { confirm: { type: 'boolean', default: true } },
                required: ['confirm'],
              },
            }),
          },
          requestState: 'prompt-state',
        });
      }
      const state = ctx.mcpReq.requestState ? ctx.mcpReq.requestState() : undefined;
      return {
        messages: [{ role: 'user', content: { type: 'text', text: `prompt confirmed (state ${state})` } }],
      };
    });
  server.registerResource('guarded', 'note://guarded', { description: 'Asks for a confirmation before its text.' },
    async (uri, ctx) => {
      // A stateless request says what its client can answer: a client
      // that declared no elicitation is not asked.
      const declared = ctx.mcpReq.envelope?.['io.modelcontextprotocol/clientCapabilities'];
      if (ctx.mcpReq.envelope && !declared?.elicitation) {
        return { contents: [{ uri: uri.href, text: 'not asked: the request declared no elicitation' }] };
      }
      const answer = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
      if (answer?.confirm !== true) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: 'Confirm the read?',
              requestedSchema: {
                type: 'object',
                properties: { confirm: { type: 'boolean', default: true } },
                required: ['confirm'],
              },
            }),
          },
          requestState: 'read-state',
        });
      }
      return { contents: [{ uri: uri.href, text: 'guarded text' }] };
    });
  let round = 0;
  server.registerTool('ask_forever', { description: 'Asks again on every round.', inputSchema: none },
    async () => inputRequired({ requestState: `round-${++round}` }));
  return server;
}, { legacy });
