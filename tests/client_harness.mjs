// client_harness.mjs: what the npm-client tests (tests/*_test.mjs) share: named async
// checks that count failures instead of stopping, the closing line ctest-style runners read
// ("NAME: N passed, N failed", exit 1 on any failure), and /v1/embeddings fetched directly
// as the reference a client's vectors must equal.
import assert from 'node:assert/strict';

export function harness(label) {
  let passed = 0, failed = 0;
  return {
    async test(name, fn) {
      try {
        await fn();
        passed++;
      } catch (e) {
        failed++;
        console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      }
    },
    done() {
      console.log(`${label}: ${passed} passed, ${failed} failed`);
      process.exit(failed ? 1 : 0);
    },
  };
}

// The float vectors /v1/embeddings gives for input (a string or an array of them).
export async function rawEmbeddings(baseUrl, apiKey, input) {
  const r = await fetch(baseUrl + '/v1/embeddings', {
    method: 'POST', headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ input }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).data.map((d) => d.embedding);
}

export function assertClose(a, b, tol = 1e-6) {
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) < tol, `${i}: ${a[i]} vs ${b[i]}`);
}
