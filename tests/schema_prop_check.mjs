// schema_prop_check.mjs: checks the lines of cpulm-schema-prop (tests/schema_prop.c) with
// ajv, a JSON-schema validator independent of cpulm. Every output of a compiled schema must
// parse and validate, and must have ended by itself; every refused schema's message must
// name one of the schema's keywords in quotes ('enum', 'minimum', ...). Prints a summary
// and, for each failure, the line to reproduce it (the schema and the output).
//   cpulm-schema-prop MODEL --count N | node schema_prop_check.mjs AJV_PACKAGE_DIR MIN_SCHEMAS
import { createRequire } from 'node:module';
import readline from 'node:readline';
import path from 'node:path';

const [pkgDir, minSchemas] = process.argv.slice(2);
const require = createRequire(path.resolve(pkgDir, 'package.json'));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default ?? require('ajv-formats');
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);

// Every key used as a keyword anywhere in the schema (property names are data, not keywords).
function keywords(s, out = new Set()) {
  if (Array.isArray(s)) s.forEach((x) => keywords(x, out));
  else if (s && typeof s === 'object')
    for (const [k, v] of Object.entries(s)) {
      out.add(k);
      if (k === 'properties' || k === '$defs' || k === 'definitions') {
        if (v && typeof v === 'object') Object.values(v).forEach((x) => keywords(x, out));
      } else if (k !== 'enum' && k !== 'const') keywords(v, out);
    }
  return out;
}

let schemas = 0, refused = 0, outputs = 0, failures = 0;
const fail = (what, line) => {
  failures++;
  if (failures <= 20) console.log(`FAIL ${what}\n  ${line.slice(0, 2000)}`);
};
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  const r = JSON.parse(line);
  schemas++;
  if (r.error !== undefined) {
    refused++;
    const named = [...keywords(r.schema)].some((k) => r.error.includes(`'${k}'`));
    if (!named) fail(`schema ${r.id}: refusal names no keyword of the schema: ${r.error}`, line);
    continue;
  }
  let validate;
  try {
    validate = ajv.compile(r.schema);
  } catch (e) {
    fail(`schema ${r.id}: ajv cannot compile it (${e.message}) but cpulm did`, line);
    continue;
  }
  if (r.unfinished) fail(`schema ${r.id}: ${r.unfinished} output(s) did not end by themselves`, line);
  for (const o of r.outputs) {
    outputs++;
    let v;
    try {
      v = JSON.parse(o);
    } catch (e) {
      fail(`schema ${r.id}: output is not JSON: ${JSON.stringify(o)}`, line);
      continue;
    }
    if (!validate(v))
      fail(`schema ${r.id}: invalid output ${JSON.stringify(o)}: ${ajv.errorsText(validate.errors)}`, line);
  }
}
const accepted = schemas - refused;
console.log(`schema_prop: ${schemas} schemas (${accepted} compiled, ${refused} refused), ` +
            `${outputs} outputs checked, ${failures} failures`);
// the test must not pass by refusing: most random schemas are satisfiable and supported
if (schemas < Number(minSchemas)) { console.log(`FAIL fewer than ${minSchemas} schemas`); process.exit(1); }
if (accepted < schemas * 0.6) { console.log('FAIL fewer than 60% of the schemas compiled'); process.exit(1); }
process.exit(failures ? 1 : 0);
