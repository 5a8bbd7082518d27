// The MCP TypeScript SDK's client (the one the inspector CLI is built on,
// taken from its node_modules) over streamable HTTP, on 2025-11-25 with a
// session. It prints one JSON line once connected, then one when the
// server sends `notifications/tools/list_changed` (or when SECS pass
// without one), with the tools and an `echo` call as they are then.
//
//   node ts_client.mjs SDK_DIR URL SECS
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [sdk, url, secs] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdk, 'dist/esm', file)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { ToolListChangedNotificationSchema } = await load('types.js');

const say = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
const client = new Client({ name: 'reson-tests', version: '0.0.0' });
let heard;
const changed = new Promise((resolve) => { heard = resolve; });
client.setNotificationHandler(ToolListChangedNotificationSchema, () => heard(true));
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const names = async () => (await client.listTools()).tools.map((t) => t.name);
say({ ready: true, protocol: transport.protocolVersion, session: transport.sessionId ?? null, tools: await names() });

const timeout = new Promise((resolve) => setTimeout(() => resolve(false), Number(secs) * 1000));
const got = await Promise.race([changed, timeout]);
const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
say({ changed: got, tools: await names(), echo: echo.content[0].text });
await client.close();
process.exit(0);
