// langchain_ollama_test.mjs: drives `cpulm serve`'s Ollama API with LangChain's ChatOllama
// (@langchain/ollama): invoke, stream (equal to invoke), token usage, and structured output
// with a JSON schema (validated with ajv). Usage:
//   node langchain_ollama_test.mjs BASE_URL API_KEY PACKAGE_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { harness } from './client_harness.mjs';

const [baseUrl, apiKey, pkgDir] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const { ChatOllama } = await import(pathToFileURL(require.resolve('@langchain/ollama')).href);
const Ajv2020 = require('ajv/dist/2020').default;
const ajv = new Ajv2020({ strict: false, allErrors: true });

const headers = { Authorization: `Bearer ${apiKey}` };
const model = 'stories260K';
const { test, done } = harness('langchain_ollama');

const llm = new ChatOllama({ model, baseUrl, headers, temperature: 0, numPredict: 12, seed: 1 });
const prompt = [['system', 'Tell a story.'], ['human', 'A cat']];
let text;

await test('invoke', async () => {
  const r = await llm.invoke(prompt);
  assert.equal(typeof r.content, 'string');
  assert.ok(r.content.length > 0);
  assert.ok(r.usage_metadata.input_tokens > 0);
  assert.ok(r.usage_metadata.output_tokens > 0 && r.usage_metadata.output_tokens <= 12);
  text = r.content;
});

await test('stream equals invoke', async () => {
  let joined = '';
  for await (const chunk of await llm.stream(prompt)) joined += chunk.content;
  assert.equal(joined, text);
});

await test('withStructuredOutput (JSON schema)', async () => {
  const schema = {
    title: 'pet',
    type: 'object',
    properties: { kind: { type: 'string', enum: ['cat', 'dog'] }, age: { type: 'integer', minimum: 1, maximum: 20 } },
    required: ['kind', 'age'],
    additionalProperties: false,
  };
  const validate = ajv.compile(schema);
  const structured = new ChatOllama({ model, baseUrl, headers, temperature: 0.9, seed: 3, numPredict: 100 })
    .withStructuredOutput(schema);
  const v = await structured.invoke('Describe a pet.');
  assert.ok(validate(v), JSON.stringify(validate.errors) + ' ' + JSON.stringify(v));
});

done();
