// openai_embed_test.mjs: `cpulm serve --embeddings` through the official `openai` npm
// package's embeddings.create: a string (the client asks for base64 and decodes it), an
// array of strings as floats, token ids, usage, and a typed 400. The vectors must match
// `cpulm embed --json` for the same inputs. Usage:
//   node openai_embed_test.mjs BASE_URL API_KEY OPENAI_PACKAGE_DIR EXPECTED.json
// (EXPECTED.json: `cpulm embed --json -p "Once upon a time" -p "The cat"` output.)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { harness } from './client_harness.mjs';

const [baseURL, apiKey, pkgDir, expectedFile] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { default: OpenAI } = await import(pathToFileURL(require.resolve('openai')).href);
const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey, maxRetries: 0, timeout: 60000 });
const expected = JSON.parse(readFileSync(expectedFile, 'utf8')).data.map((d) => d.embedding);
const model = 'stories260K';
const { test, done } = harness('openai_embed');

function close(v, want) {
  assert.equal(v.length, want.length);
  for (let j = 0; j < v.length; j++) assert.ok(Math.abs(v[j] - want[j]) < 1e-5, `component ${j}: ${v[j]} vs ${want[j]}`);
  const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
}

await test('string_input_default_base64', async () => {
  const r = await client.embeddings.create({ model, input: 'Once upon a time' });
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].object, 'embedding');
  assert.equal(r.data[0].index, 0);
  close(r.data[0].embedding, expected[0]);
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens);
});

await test('array_input_float', async () => {
  const r = await client.embeddings.create({ model, input: ['Once upon a time', 'The cat'], encoding_format: 'float' });
  assert.equal(r.data.length, 2);
  close(r.data[0].embedding, expected[0]);
  close(r.data[1].embedding, expected[1]);
  assert.equal(r.data[1].index, 1);
});

await test('token_inputs', async () => {
  const a = await client.embeddings.create({ model, input: [[1, 400, 300], [1, 300]], encoding_format: 'float' });
  const b = await client.embeddings.create({ model, input: [1, 300], encoding_format: 'float' });
  assert.equal(a.data.length, 2);
  assert.equal(a.usage.prompt_tokens, 5);
  close(a.data[1].embedding, b.data[0].embedding);
});

await test('bad_input_400', async () => {
  await assert.rejects(client.embeddings.create({ model, input: 5 }), (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

done();
