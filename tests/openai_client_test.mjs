// openai_client_test.mjs: drives `cpulm serve` with the official `openai` npm package:
// chat and legacy completions, streaming (with usage) and not, n > 1, seeds, stop
// sequences, logprobs, the model list and typed errors. Usage:
//   node openai_client_test.mjs BASE_URL API_KEY OPENAI_PACKAGE_DIR
// (the package is resolved from OPENAI_PACKAGE_DIR, where the test script installed it).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [baseURL, apiKey, pkgDir] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);

const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey, maxRetries: 0, timeout: 60000 });
const model = 'stories260K';
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

console.log(`openai_client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
