// gptoss_openai_test.mjs: the official `openai` npm client against `cpulm serve` with a
// gpt-oss model and the harmony template: reasoning (the analysis channel) and tool calls
// (commentary to=functions.NAME), non-streamed and streamed, and a second turn with the
// tool's result answered on the final channel. The model is a random synthetic file, so
// each request carries a grammar that makes it write harmony's message structure; the
// letters inside are the model's own choice (greedy). Usage:
//   node gptoss_openai_test.mjs BASE_URL OPENAI_PACKAGE_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [baseURL, pkgDir] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);
const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'none', maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;

async function test(name, fn) {
  try {
    await fn();
    passed++;
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const ANALYSIS = '"<|channel|>analysis<|message|>" [a-z ]{3,12} "<|end|><|start|>assistant"';
const CALL = `root ::= ${ANALYSIS} "<|channel|>commentary to=functions.get_weather <|constrain|>json` +
  '<|message|>{\\"city\\": \\"" [a-z]{2,8} "\\"}"';
const FINAL = `root ::= ${ANALYSIS} "<|channel|>final<|message|>" [a-z ]{3,20}`;
const user = [{ role: 'user', content: 'Weather in Paris?' }];
const base = { model: 'tiny', tools, temperature: 0, max_tokens: 200, reasoning_effort: 'low' };

let call;
await test('tool call with reasoning, non-streamed', async () => {
  const r = await client.chat.completions.create({ ...base, messages: user, grammar: CALL });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.match(m.reasoning_content, /^[a-z ]{3,12}$/);
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.match(JSON.parse(m.tool_calls[0].function.arguments).city, /^[a-z]{2,8}$/);
  call = m;
});

await test('tool call with reasoning, streamed: the deltas add up to the same', async () => {
  const stream = await client.chat.completions.create({ ...base, messages: user, grammar: CALL, stream: true });
  let reasoning = '', name = '', args = '', finish = null, content = '';
  for await (const c of stream) {
    const d = c.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? '';
    content += d.content ?? '';
    for (const tc of d.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      args += tc.function?.arguments ?? '';
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, '');
  assert.equal(reasoning, call.reasoning_content);
  assert.equal(name, 'get_weather');
  assert.deepEqual(JSON.parse(args), JSON.parse(call.tool_calls[0].function.arguments));
});

await test('second turn: the tool result, a final answer', async () => {
  const messages = [...user, { role: 'assistant', content: null, tool_calls: call.tool_calls },
    { role: 'tool', tool_call_id: call.tool_calls[0].id, content: '18C, sunny' }];
  const r = await client.chat.completions.create({ ...base, messages, grammar: FINAL });
  const m = r.choices[0].message;
  assert.match(m.content, /^[a-z ]{3,20}$/);
  assert.match(m.reasoning_content, /^[a-z ]{3,12}$/);
  assert.ok(!m.tool_calls || m.tool_calls.length === 0);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

console.log(`gptoss_openai: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
