// ollama_client_test.mjs: drives `cpulm serve`'s Ollama API with the official `ollama` npm
// package: list, ps, show, version; generate and chat, streamed (NDJSON) and not, equal to
// each other and to the OpenAI route's greedy text; options (num_predict, temperature,
// seed, stop); format "json" and a JSON schema (validated with ajv); errors as
// ResponseError with the status. Usage:
//   node ollama_client_test.mjs BASE_URL API_KEY PACKAGE_DIR
// (packages are resolved from PACKAGE_DIR, where the test script installed them).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { harness } from './client_harness.mjs';

const [baseURL, apiKey, pkgDir] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { Ollama } = await import(pathToFileURL(require.resolve('ollama')).href);
const Ajv2020 = require('ajv/dist/2020').default;
const ajv = new Ajv2020({ strict: false, allErrors: true });

const embedOnly = process.argv[5] === 'embed'; // a server with --embeddings: /api/embed only
const headers = { Authorization: `Bearer ${apiKey}` };
const ollama = new Ollama({ host: baseURL, headers });
const model = 'stories260K';
const { test, done } = harness('ollama_client');

async function collect(it) {
  const parts = [];
  for await (const p of it) parts.push(p);
  return parts;
}

// the OpenAI route's greedy completion: the same engine must give the same text
async function openaiText(prompt, max_tokens) {
  const r = await fetch(baseURL + '/v1/completions', {
    method: 'POST',
    headers: { ...headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens, temperature: 0 }),
  });
  return (await r.json()).choices[0].text;
}

if (embedOnly) {
  await test('embed', async () => {
    const r = await ollama.embed({ model, input: ['Once upon a time', 'The cat'] });
    assert.equal(r.embeddings.length, 2);
    for (const v of r.embeddings) {
      assert.ok(v.length > 0);
      assert.ok(Math.abs(v.reduce((a, x) => a + x * x, 0) - 1) < 1e-4); // L2-normalized
    }
    const one = await ollama.embed({ model, input: 'The cat' });
    assert.deepEqual(one.embeddings[0], r.embeddings[1]);
    assert.ok(one.prompt_eval_count > 0);
  });
  done();
}

await test('list', async () => {
  const r = await ollama.list();
  assert.equal(r.models.length, 1);
  assert.equal(r.models[0].name, model);
  assert.equal(r.models[0].details.format, 'gguf');
  assert.equal(r.models[0].details.family, 'llama');
  assert.ok(r.models[0].size > 0 && /^[0-9a-f]{64}$/.test(r.models[0].digest));
});

await test('ps', async () => {
  const r = await ollama.ps();
  assert.equal(r.models[0].name, model);
});

await test('show', async () => {
  const r = await ollama.show({ model });
  assert.equal(r.details.family, 'llama');
  assert.equal(r.model_info['general.architecture'], 'llama');
  assert.equal(r.model_info['llama.context_length'], 2048);
  assert.ok(r.capabilities.includes('completion'));
});

await test('version', async () => {
  const r = await ollama.version();
  assert.match(r.version, /^\d+\.\d+\.\d+/);
});

const opts = { temperature: 0, num_predict: 12 };
let genText;
await test('generate raw, not streamed, equals the OpenAI route', async () => {
  const r = await ollama.generate({ model, prompt: 'Once upon a time', raw: true, options: opts });
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'length');
  assert.equal(r.eval_count, 12);
  assert.equal(r.prompt_eval_count, 5);
  assert.ok(r.total_duration > 0 && r.eval_duration >= 0 && r.prompt_eval_duration >= 0);
  assert.match(r.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/);
  assert.equal(r.response, await openaiText('Once upon a time', 12));
  genText = r.response;
});

await test('generate streamed equals not streamed', async () => {
  const parts = await collect(
    await ollama.generate({ model, prompt: 'Once upon a time', raw: true, options: opts, stream: true }));
  const last = parts[parts.length - 1];
  assert.equal(last.done, true);
  assert.equal(last.eval_count, 12);
  assert.ok(parts.slice(0, -1).every((p) => p.done === false));
  assert.equal(parts.map((p) => p.response).join(''), genText);
});

await test('generate with a stop option', async () => {
  const r = await ollama.generate({ model, prompt: 'Once upon a time', raw: true,
                                    options: { ...opts, num_predict: 40, stop: ['Lily'] } });
  assert.equal(r.done_reason, 'stop');
  assert.ok(!r.response.includes('Lily'));
});

const messages = [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'A cat' }];
let chatText;
await test('chat not streamed', async () => {
  const r = await ollama.chat({ model, messages, options: { ...opts, seed: 7 } });
  assert.equal(r.message.role, 'assistant');
  assert.ok(r.message.content.length > 0);
  assert.equal(r.done, true);
  assert.ok(r.prompt_eval_count > 0 && r.eval_count > 0 && r.eval_count <= 12);
  chatText = r.message.content;
});

await test('chat streamed equals not streamed', async () => {
  const parts = await collect(
    await ollama.chat({ model, messages, options: { ...opts, seed: 7 }, stream: true }));
  assert.equal(parts[parts.length - 1].done, true);
  assert.ok(parts.every((p) => p.message.role === 'assistant'));
  assert.equal(parts.map((p) => p.message.content).join(''), chatText);
});

await test('chat seeded sampling repeats', async () => {
  const o = { temperature: 1, top_k: 0, seed: 42, num_predict: 16 };
  const a = await ollama.chat({ model, messages, options: o });
  const b = await ollama.chat({ model, messages, options: o });
  assert.equal(a.message.content, b.message.content);
});

await test('chat format: JSON schema', async () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 1, maximum: 9 } },
    required: ['name', 'age'],
    additionalProperties: false,
  };
  const validate = ajv.compile(schema);
  for (const seed of [1, 2, 3]) {
    const r = await ollama.chat({ model, messages, format: schema,
                                  options: { temperature: 0.9, seed, num_predict: 200 } });
    const v = JSON.parse(r.message.content);
    assert.ok(validate(v), JSON.stringify(validate.errors) + ' ' + r.message.content);
    assert.equal(r.done_reason, 'stop');
  }
});

await test('generate format: json', async () => {
  const r = await ollama.generate({ model, prompt: 'A pet', format: 'json',
                                    options: { temperature: 0.9, seed: 5, num_predict: 200 } });
  const v = JSON.parse(r.response);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
});

await test('errors are ResponseError with the status', async () => {
  await assert.rejects(ollama.chat({ model, messages, options: { mirostat: 2 } }), (e) => {
    assert.equal(e.status_code, 400);
    assert.match(e.error, /mirostat/);
    return true;
  });
  await assert.rejects(ollama.chat({ model, messages: 'hi' }), (e) => e.status_code === 400);
  await assert.rejects(ollama.generate({ model, prompt: 'x', images: ['aGk='] }),
                       (e) => e.status_code === 400 && /images/.test(e.error));
});

done();
