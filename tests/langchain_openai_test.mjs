// langchain_openai_test.mjs: drives `cpulm serve`'s OpenAI API with LangChain's ChatOpenAI
// and OpenAIEmbeddings (@langchain/openai): invoke, stream (equal to invoke, usage), stop,
// bound tools (a forced call, its args validated with ajv, then the ToolMessage turn),
// withStructuredOutput (json_schema and function calling), batch, embedQuery /
// embedDocuments (equal to /v1/embeddings). Usage:
//   node langchain_openai_test.mjs BASE_URL API_KEY PACKAGE_DIR [embed]
// "embed": only the embedding tests (the server runs with --embeddings).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { assertClose, harness, rawEmbeddings } from './client_harness.mjs';

const [baseUrl, apiKey, pkgDir, only] = process.argv.slice(2);
const require = createRequire(pkgDir + '/package.json');
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const { ChatOpenAI, OpenAIEmbeddings } = await load('@langchain/openai');
const { HumanMessage, SystemMessage, ToolMessage } = await load('@langchain/core/messages');
const Ajv2020 = require('ajv/dist/2020').default;
const ajv = new Ajv2020({ strict: false, allErrors: true });

const model = 'stories260K';
const configuration = { baseURL: baseUrl + '/v1' };
const { test, done } = harness('langchain_openai');

const chatModel = (opts) => new ChatOpenAI({ model, apiKey, configuration, maxRetries: 0, temperature: 0, maxTokens: 16, ...opts });

async function chatTests() {
  const llm = chatModel({ streamUsage: true });
  const prompt = [new SystemMessage('Tell a story.'), new HumanMessage('A cat')];
  let text;

  await test('invoke', async () => {
    const r = await llm.invoke(prompt);
    assert.equal(typeof r.content, 'string');
    assert.ok(r.content.length > 0);
    assert.ok(r.usage_metadata.input_tokens > 0);
    assert.ok(r.usage_metadata.output_tokens > 0 && r.usage_metadata.output_tokens <= 16);
    assert.ok(['stop', 'length'].includes(r.response_metadata.finish_reason));
    text = r.content;
  });

  await test('stream equals invoke, with usage', async () => {
    let joined = '', usage;
    for await (const chunk of await llm.stream(prompt)) {
      joined += chunk.content;
      if (chunk.usage_metadata) usage = chunk.usage_metadata;
    }
    assert.equal(joined, text);
    assert.ok(usage && usage.output_tokens > 0 && usage.output_tokens <= 16, JSON.stringify(usage));
  });

  await test('batch of two', async () => {
    const r = await llm.batch([prompt, [new HumanMessage('A dog')]]);
    assert.equal(r.length, 2);
    assert.equal(r[0].content, text);
    assert.ok(r[1].content.length > 0);
  });

  await test('stop sequence', async () => {
    const word = text.split(/\s+/).filter((w) => /^[A-Za-z]{3,}$/.test(w))[1];
    assert.ok(word, text);
    const r = await llm.invoke(prompt, { stop: [word] });
    assert.equal(r.response_metadata.finish_reason, 'stop');
    assert.equal(r.content, text.slice(0, text.indexOf(word)));
  });

  const weather = {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
      required: ['city', 'unit'], additionalProperties: false },
  };
  const validWeather = ajv.compile(weather.parameters);

  await test('bindTools: forced call, then the ToolMessage turn', async () => {
    const bound = chatModel({ temperature: 0.9, seed: 3, maxTokens: 120 })
      .bindTools([{ type: 'function', function: weather }], { tool_choice: 'get_weather' });
    const ask = [new HumanMessage('Weather in Paris?')];
    const r = await bound.invoke(ask);
    assert.equal(r.tool_calls.length, 1);
    const call = r.tool_calls[0];
    assert.equal(call.name, 'get_weather');
    assert.ok(validWeather(call.args), JSON.stringify(call.args));
    assert.ok(/^call_/.test(call.id));
    assert.equal(r.response_metadata.finish_reason, 'tool_calls');
    const next = await chatModel({ maxTokens: 8 }).bindTools([{ type: 'function', function: weather }])
      .invoke([...ask, r, new ToolMessage({ tool_call_id: call.id, content: '{"temp": 21}' })]);
    assert.ok(next.usage_metadata.input_tokens > 0);
  });

  await test('bindTools streamed: tool_call_chunks concatenate to the call', async () => {
    const bound = chatModel({ temperature: 0, maxTokens: 120 }) // (ChatOpenAI sends no seed)
      .bindTools([{ type: 'function', function: weather }], { tool_choice: 'required' });
    const ask = [new HumanMessage('Weather in Rome?')];
    const whole = await bound.invoke(ask);
    let acc;
    for await (const chunk of await bound.stream(ask)) acc = acc ? acc.concat(chunk) : chunk;
    assert.equal(acc.tool_calls.length, 1);
    assert.deepEqual(acc.tool_calls[0].args, whole.tool_calls[0].args);
    assert.equal(acc.tool_calls[0].name, whole.tool_calls[0].name);
  });

  const pet = {
    title: 'pet', type: 'object',
    properties: { kind: { type: 'string', enum: ['cat', 'dog'] }, age: { type: 'integer', minimum: 1, maximum: 20 } },
    required: ['kind', 'age'], additionalProperties: false,
  };
  const validPet = ajv.compile(pet);
  for (const method of ['jsonSchema', 'functionCalling', 'jsonMode']) {
    await test(`withStructuredOutput (${method})`, async () => {
      const structured = chatModel({ temperature: 0.9, seed: 3, maxTokens: 100 }).withStructuredOutput(pet, { method });
      for (const ask of ['Describe a pet.', 'A pet, please.']) {
        const v = await structured.invoke(ask);
        if (method !== 'jsonMode') assert.ok(validPet(v), JSON.stringify(v) + JSON.stringify(validPet.errors));
        else assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), JSON.stringify(v));
      }
    });
  }

  await test('bad parameter -> 400 error naming it', async () => {
    await assert.rejects(chatModel({ temperature: 5 }).invoke('x'), (e) => e.status === 400 && /temperature/.test(e.message));
  });
}

async function embedTests() {
  const raw = (input) => rawEmbeddings(baseUrl, apiKey, input);
  const close = assertClose;
  const emb = new OpenAIEmbeddings({ model, apiKey, configuration, maxRetries: 0, batchSize: 2 });
  await test('embedQuery', async () => {
    close(await emb.embedQuery('Once upon a time'), (await raw(['Once upon a time']))[0]);
  });
  await test('embedDocuments (batched by 2)', async () => {
    const docs = ['Once upon a time', 'The cat', 'A dog ran'];
    const got = await emb.embedDocuments(docs);
    const want = await raw(docs);
    assert.equal(got.length, 3);
    for (let i = 0; i < 3; i++) close(got[i], want[i]);
  });
}

if (only === 'embed') await embedTests();
else await chatTests();
done();
