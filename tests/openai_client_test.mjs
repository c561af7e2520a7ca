// openai_client_test.mjs: drives `cpulm serve` with the official `openai` npm package:
// chat and legacy completions, streaming (with usage) and not, n > 1, seeds, stop
// sequences, logprobs, the model list and typed errors; structured outputs (json_schema
// on held-out schemas at temperature 0.9, json_object) validated with ajv; tool calls
// (named, required, streamed, a second turn with the tool result). Usage:
//   node openai_client_test.mjs BASE_URL API_KEY OPENAI_PACKAGE_DIR
// (the package is resolved from OPENAI_PACKAGE_DIR, where the test script installed it).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { harness } from './client_harness.mjs';

const [baseURL, apiKey, pkgDir] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey, maxRetries: 0, timeout: 60000 });
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default ?? require('ajv-formats');
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const model = 'stories260K';
const { test, done } = harness('openai_client');

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

const messages = [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'A cat' }];

await test('models.list', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, model);
});

let chatText;
await test('chat non-streaming', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  chatText = r.choices[0].message.content;
});

await test('chat streaming equals non-streaming, with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = await collect(stream);
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, chatText);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finishes.length, 1);
  const last = chunks[chunks.length - 1];
  assert.equal(last.choices.length, 0);
  assert.ok(last.usage.completion_tokens > 0);
});

let complText;
await test('completions non-streaming', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.choices[0].text.startsWith(', there was a little girl named Lily'), r.choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  complText = r.choices[0].text;
});

await test('completions streaming', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0, stream: true,
  });
  const chunks = await collect(stream);
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), complText);
  assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'length');
});

await test('seeded sampling is reproducible; n choices', async () => {
  const req = { model, messages, max_tokens: 20, temperature: 1.0, seed: 42, n: 2 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
});

await test('stop sequence', async () => {
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: ['Lily', 'zzz'],
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.choices[0].text.endsWith('named '), r.choices[0].text);
});

await test('chat logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token); // greedy picks the most likely token
    assert.ok(t.logprob <= 0);
  }
});

await test('bad parameter -> BadRequestError 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
  );
});

await test('wrong key -> AuthenticationError 401', async () => {
  const bad = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

await test('concurrent streams all complete', async () => {
  const runs = [];
  for (let i = 0; i < 6; i++) {
    runs.push(client.chat.completions.create({
      model, messages: [{ role: 'user', content: `Story ${i}` }], max_tokens: 16, temperature: 0, stream: true,
    }).then(collect));
  }
  const all = await Promise.all(runs);
  for (const chunks of all) assert.equal(chunks.filter((c) => c.choices[0]?.finish_reason).length, 1);
});

// ---- structured outputs: every reply parses, validates and stops by itself ----

const HELD_OUT = [
  { type: 'object', additionalProperties: false, required: ['id', 'date', 'lines', 'paid'],
    properties: {
      id: { type: 'string', format: 'uuid' }, date: { type: 'string', format: 'date' }, paid: { type: 'boolean' },
      lines: { type: 'array', minItems: 1, maxItems: 3, items: { type: 'object', additionalProperties: false,
        required: ['sku', 'qty', 'price'], properties: {
          sku: { type: 'string', pattern: '^[A-Z]{3}[0-9]{2}$' }, qty: { type: 'integer', minimum: 1, maximum: 99 },
          price: { type: 'number', minimum: 0, maximum: 1000 } } } } } },
  { type: 'array', items: { enum: ['low', 'mid', 'high'] }, minItems: 1, maxItems: 4 },
  { oneOf: [
    { type: 'object', properties: { cat: { const: 'a' }, n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['cat', 'n'], additionalProperties: false },
    { type: 'object', properties: { cat: { const: 'b' }, s: { type: 'string', maxLength: 6 } }, required: ['cat', 's'], additionalProperties: false }] },
  { type: 'object', required: ['at', 'temp', 'note'], properties: {
    at: { type: 'string', format: 'date-time' }, temp: { type: ['number', 'null'], exclusiveMinimum: -100, exclusiveMaximum: 100 },
    note: { type: 'string', minLength: 2, maxLength: 10 } } },
  { type: 'integer', minimum: -1000, maximum: -10 },
  { $defs: { who: { type: 'object', properties: { first: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 0, maximum: 150 } },
                    required: ['first', 'age'], additionalProperties: false } },
    type: 'object', properties: { owner: { $ref: '#/$defs/who' }, pets: { type: 'array', maxItems: 2, items: { $ref: '#/$defs/who' } } },
    required: ['owner', 'pets'], additionalProperties: false },
];

await test('json_schema outputs validate (held-out schemas, temperature 0.9)', async () => {
  for (const [k, schema] of HELD_OUT.entries()) {
    const validate = ajv.compile(schema);
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model, messages, max_tokens: 200, temperature: 0.9, seed,
        response_format: { type: 'json_schema', json_schema: { name: `s${k}`, strict: true, schema } },
      });
      const text = r.choices[0].message.content;
      assert.equal(r.choices[0].finish_reason, 'stop', `schema ${k} seed ${seed}: ${text}`);
      const value = JSON.parse(text);
      assert.ok(validate(value), `schema ${k} seed ${seed}: ${text}: ${JSON.stringify(validate.errors)}`);
    }
  }
});

// A random-weight model never wants to close a free-form object: without budget-aware
// closing these replies would be cut by max_tokens mid-object (finish_reason "length").
await test('json_object output parses and stops within max_tokens; streamed the same', async () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const req = { model, messages, max_tokens: 64, temperature: 0.9, seed, response_format: { type: 'json_object' } };
    const r = await client.chat.completions.create(req);
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: ${text}`);
    assert.ok(r.usage.completion_tokens <= 64);
    const v = JSON.parse(text);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), text);
    if (seed !== 1) continue;
    const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), text);
  }
});

await test('oneOf with overlapping branches -> 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages, response_format: { type: 'json_schema',
      json_schema: { name: 'x', schema: { oneOf: [{ type: 'integer' }, { type: 'number' }] } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /'oneOf' branches 0 and 1 may match/.test(e.message),
  );
});

await test('unsupported schema keyword -> 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages, response_format: { type: 'json_schema',
      json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', not: { const: 'x' } } } } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /'not' at #\/properties\/a/.test(e.message),
  );
});

// ---- tools ----

const weatherParams = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
                        required: ['city', 'unit'], additionalProperties: false };
const addParams = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city', parameters: weatherParams } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers', parameters: addParams } },
];
const validators = { get_weather: ajv.compile(weatherParams), add: ajv.compile(addParams) };
const toolMessages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.ok(/^call_/.test(call.id), call.id);
  const args = JSON.parse(call.function.arguments);
  assert.ok(validators[call.function.name](args), `${call.function.name} ${call.function.arguments}`);
}

let firstCall;
await test('forced (named) tool call', async () => {
  const r = await client.chat.completions.create({
    model, messages: toolMessages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    temperature: 0.9, seed: 3, max_tokens: 200,
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  checkCall(m.tool_calls[0]);
  firstCall = m;
});

await test('tool_choice required', async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model, messages: toolMessages, tools, tool_choice: 'required', parallel_tool_calls: false,
      temperature: 0.9, seed, max_tokens: 200,
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    checkCall(r.choices[0].message.tool_calls[0]);
  }
});

await test('streamed tool calls (delta.tool_calls as OpenAI streams them)', async () => {
  const req = { model, messages: toolMessages, tools, tool_choice: 'required', parallel_tool_calls: false,
                temperature: 0.9, seed: 2, max_tokens: 200 };
  const whole = await client.chat.completions.create(req);
  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  const deltas = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  assert.ok(deltas.length >= 2);
  const head = deltas[0];
  assert.equal(head.index, 0);
  assert.ok(head.id && head.type === 'function' && head.function.name && head.function.arguments === '', JSON.stringify(head));
  for (const d of deltas.slice(1)) assert.ok(d.id === undefined && d.function.name === undefined && typeof d.function.arguments === 'string');
  const args = deltas.map((d) => d.function.arguments).join('');
  const call = { id: head.id, type: 'function', function: { name: head.function.name, arguments: args } };
  checkCall(call);
  assert.deepEqual(call.function, whole.choices[0].message.tool_calls[0].function);
  const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(fin[0].choices[0].finish_reason, 'tool_calls');
});

await test('second turn with the tool result', async () => {
  assert.ok(firstCall, 'needs the forced call');
  const call = firstCall.tool_calls[0];
  const r = await client.chat.completions.create({
    model, tools, temperature: 0, max_tokens: 16,
    messages: [...toolMessages, firstCall, { role: 'tool', tool_call_id: call.id, content: '{"temp": 21, "unit": "c"}' }],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
});

await test('tool_choice none: plain content', async () => {
  const r = await client.chat.completions.create({ model, messages: toolMessages, tools, tool_choice: 'none', temperature: 0, max_tokens: 8 });
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

done();
