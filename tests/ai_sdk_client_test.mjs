// ai_sdk_client_test.mjs: drives `cpulm serve` with the Vercel `ai` SDK through its
// OpenAI-compatible provider (@ai-sdk/openai-compatible), or with PROVIDER "openai" through
// @ai-sdk/openai's chat and embedding models (a baseURL; its default model speaks the
// Responses API, which cpulm does not serve): generateText, streamText (equal
// text, usage), a forced tool call with its arguments validated, a tool loop (call, result,
// answer), structured output (generateObject with a JSON schema, validated with ajv),
// embed / embedMany (vectors equal /v1/embeddings) and typed errors. Usage:
//   node ai_sdk_client_test.mjs BASE_URL API_KEY PACKAGE_DIR [chat|embed] [compatible|openai]
// "embed": only the embedding tests (the server runs with --embeddings).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { assertClose, harness, rawEmbeddings } from './client_harness.mjs';

const [baseUrl, apiKey, pkgDir, only, flavor = 'compatible'] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const ai = await load('ai');
// the two providers behind one face: chat and embedding models of a base URL and key
async function makeProvider(key) {
  if (flavor === 'openai') {
    const { createOpenAI } = await load('@ai-sdk/openai');
    const p = createOpenAI({ baseURL: baseUrl + '/v1', apiKey: key });
    return { chatModel: (m) => p.chat(m), textEmbeddingModel: (m) => p.embedding(m) };
  }
  const { createOpenAICompatible } = await load('@ai-sdk/openai-compatible');
  return createOpenAICompatible({
    name: 'cpulm', baseURL: baseUrl + '/v1', apiKey: key, includeUsage: true, supportsStructuredOutputs: true,
  });
}
const Ajv2020 = require('ajv/dist/2020').default;
const ajv = new Ajv2020({ strict: false, allErrors: true });

const provider = await makeProvider(apiKey);
const model = provider.chatModel('stories260K');
const { test, done } = harness(flavor === 'openai' ? 'ai_sdk_openai' : 'ai_sdk_client');

const common = { model, maxRetries: 0, temperature: 0, maxOutputTokens: 16, seed: 1 };
const chat = { system: 'Tell a story.', messages: [{ role: 'user', content: 'A cat' }] };

async function chatTests() {
  let text;
  await test('generateText', async () => {
    const r = await ai.generateText({ ...common, ...chat });
    assert.equal(typeof r.text, 'string');
    assert.ok(r.text.length > 0);
    assert.ok(['stop', 'length'].includes(r.finishReason), r.finishReason);
    assert.ok(r.usage.inputTokens > 0, JSON.stringify(r.usage));
    assert.ok(r.usage.outputTokens > 0 && r.usage.outputTokens <= 16, JSON.stringify(r.usage));
    text = r.text;
  });

  await test('streamText equals generateText, with usage', async () => {
    const r = ai.streamText({ ...common, ...chat, onError: ({ error }) => { throw error; } });
    let joined = '';
    for await (const part of r.textStream) joined += part;
    assert.equal(joined, text);
    const usage = await r.usage;
    assert.ok(usage.outputTokens > 0 && usage.outputTokens <= 16, JSON.stringify(usage));
    assert.ok(['stop', 'length'].includes(await r.finishReason));
  });

  await test('generateText with a prompt string and stop sequences', async () => {
    const r = await ai.generateText({ ...common, maxOutputTokens: 40, prompt: 'Once upon a time' });
    const word = r.text.split(/\s+/).filter((w) => /^[a-z]{4,}$/.test(w))[1];
    assert.ok(word, r.text);
    const s = await ai.generateText({ ...common, maxOutputTokens: 40, prompt: 'Once upon a time', stopSequences: [word, 'zzz'] });
    assert.equal(s.finishReason, 'stop');
    assert.equal(s.text, r.text.slice(0, r.text.indexOf(word)));
  });

  const weatherSchema = {
    type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
    required: ['city', 'unit'], additionalProperties: false,
  };
  const validWeather = ajv.compile(weatherSchema);
  const tools = {
    get_weather: ai.tool({ description: 'Current weather in a city', inputSchema: ai.jsonSchema(weatherSchema) }),
  };

  await test('forced tool call: toolCalls with validated input', async () => {
    const r = await ai.generateText({
      ...common, maxOutputTokens: 120, temperature: 0.9, seed: 3, tools,
      toolChoice: { type: 'tool', toolName: 'get_weather' },
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    });
    assert.equal(r.finishReason, 'tool-calls');
    assert.equal(r.toolCalls.length, 1);
    assert.equal(r.toolCalls[0].toolName, 'get_weather');
    assert.ok(validWeather(r.toolCalls[0].input), JSON.stringify(r.toolCalls[0].input));
  });

  await test('streamed tool call equals the whole one', async () => {
    const req = {
      ...common, maxOutputTokens: 120, temperature: 0.9, seed: 2, tools, toolChoice: 'required',
      messages: [{ role: 'user', content: 'Weather in Rome?' }],
    };
    const whole = await ai.generateText(req);
    const r = ai.streamText({ ...req, onError: ({ error }) => { throw error; } });
    const calls = [];
    let deltas = 0;
    for await (const part of r.fullStream) {
      if (part.type === 'tool-call') calls.push(part);
      if (part.type === 'tool-input-delta') deltas++;
    }
    assert.equal(calls.length, 1);
    assert.ok(deltas >= 1);
    assert.equal(calls[0].toolName, whole.toolCalls[0].toolName);
    assert.deepEqual(calls[0].input, whole.toolCalls[0].input);
    assert.equal(await r.finishReason, 'tool-calls');
  });

  await test('tool loop: the tool runs, its result goes back, an answer follows', async () => {
    let ran = 0;
    const looping = {
      get_weather: ai.tool({
        description: 'Current weather in a city', inputSchema: ai.jsonSchema(weatherSchema),
        execute: async (input) => { ran++; assert.ok(validWeather(input)); return { temp: 21, unit: input.unit }; },
      }),
    };
    const r = await ai.generateText({
      ...common, maxOutputTokens: 60, temperature: 0.9, seed: 4, tools: looping,
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'none' }),
      stopWhen: ai.stepCountIs(2), messages: [{ role: 'user', content: 'Weather in Oslo?' }],
    });
    assert.equal(ran, 1);
    assert.equal(r.steps.length, 2);
    assert.equal(r.steps[0].finishReason, 'tool-calls');
    assert.equal(r.steps[0].toolResults[0].output.temp, 21);
    // the second request carried the call and its result back
    const body = r.steps[1].request.body;
    const sent = (typeof body === 'string' ? JSON.parse(body) : body).messages;
    assert.equal(sent[1].tool_calls[0].function.name, 'get_weather');
    assert.equal(sent[2].role, 'tool');
    assert.equal(sent[2].tool_call_id, sent[1].tool_calls[0].id);
    assert.ok(r.steps[1].usage.inputTokens > 0);
    assert.ok(['stop', 'length'].includes(r.steps[1].finishReason), r.steps[1].finishReason);
  });

  const petSchema = {
    type: 'object', properties: { kind: { type: 'string', enum: ['cat', 'dog'] }, age: { type: 'integer', minimum: 1, maximum: 20 },
      name: { type: 'string', maxLength: 10 } },
    required: ['kind', 'age', 'name'], additionalProperties: false,
  };
  const validPet = ajv.compile(petSchema);

  await test('generateObject (json_schema) validates', async () => {
    for (const seed of [1, 2, 3]) {
      const r = await ai.generateObject({
        ...common, maxOutputTokens: 120, temperature: 0.9, seed, schema: ai.jsonSchema(petSchema), schemaName: 'pet',
        prompt: 'Describe a pet.',
      });
      assert.ok(validPet(r.object), JSON.stringify(r.object) + JSON.stringify(validPet.errors));
      assert.equal(r.finishReason, 'stop');
    }
  });

  await test('generateText with Output.object validates', async () => {
    const r = await ai.generateText({
      ...common, maxOutputTokens: 120, temperature: 0.9, seed: 5,
      output: ai.Output.object({ schema: ai.jsonSchema(petSchema) }), prompt: 'Describe a pet.',
    });
    assert.ok(validPet(r.output), JSON.stringify(r.output));
  });

  await test('streamObject: the final object validates', async () => {
    const r = ai.streamObject({
      ...common, maxOutputTokens: 120, temperature: 0.9, seed: 6, schema: ai.jsonSchema(petSchema), prompt: 'A pet',
      onError: ({ error }) => { throw error; },
    });
    let partials = 0;
    for await (const _ of r.partialObjectStream) partials++;
    assert.ok(partials >= 1);
    assert.ok(validPet(await r.object));
  });

  await test('bad parameter -> APICallError 400', async () => {
    await assert.rejects(ai.generateText({ ...common, temperature: 5, prompt: 'x' }),
      (e) => ai.APICallError.isInstance(e) && e.statusCode === 400 && /temperature/.test(e.message));
  });

  await test('wrong key -> APICallError 401', async () => {
    const bad = await makeProvider('wrong');
    await assert.rejects(ai.generateText({ ...common, model: bad.chatModel('stories260K'), prompt: 'x' }),
      (e) => ai.APICallError.isInstance(e) && e.statusCode === 401);
  });
}

async function embedTests() {
  const em = provider.textEmbeddingModel('stories260K');
  const raw = (input) => rawEmbeddings(baseUrl, apiKey, input);
  const close = assertClose;
  await test('embed', async () => {
    const r = await ai.embed({ model: em, value: 'Once upon a time', maxRetries: 0 });
    close(r.embedding, (await raw(['Once upon a time']))[0]);
    assert.ok(r.usage.tokens > 0);
    assert.ok(Math.abs(ai.cosineSimilarity(r.embedding, r.embedding) - 1) < 1e-6);
  });
  await test('embedMany', async () => {
    const values = ['Once upon a time', 'The cat', 'A dog ran'];
    const r = await ai.embedMany({ model: em, values, maxRetries: 0 });
    const want = await raw(values);
    assert.equal(r.embeddings.length, 3);
    for (let i = 0; i < 3; i++) close(r.embeddings[i], want[i]);
  });
}

if (only === 'embed') await embedTests();
else await chatTests();
done();
