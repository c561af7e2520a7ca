#!/bin/sh
# schema_prop_test.sh PROP_BINARY: the JSON-schema property test. cpulm-schema-prop draws
# random schemas (fixed seed, so a failure reproduces), compiles each and samples 3 outputs
# per schema at temperature 1; schema_prop_check.mjs validates every output with ajv and
# checks that refusals name a keyword. ajv comes from npm into $CPULM_NPM_DIR; no node,
# npm or registry: skipped (77). SCHEMA_PROP_COUNT / SCHEMA_PROP_SEED override the run.
PROP=$1
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${CPULM_SHARED:-$HERE/../../shared}
MODEL=$SHARED/models/stories260K.gguf
COUNT=${SCHEMA_PROP_COUNT:-2000}
SEED=${SCHEMA_PROP_SEED:-1}
NPM_DIR=${CPULM_NPM_DIR:-$(mktemp -d)}
[ -f "$MODEL" ] || { echo "skip: $MODEL not found"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "skip: node/npm not installed"; exit 77; }
if [ ! -d "$NPM_DIR/node_modules/ajv-formats" ]; then
  timeout 20 npm view ajv version >/dev/null 2>&1 || { echo "skip: npm cannot reach the registry"; exit 77; }
  mkdir -p "$NPM_DIR"
  (cd "$NPM_DIR" && { [ -f package.json ] || echo '{"private":true}' >package.json; } &&
   timeout 240 npm install --no-audit --no-fund ajv ajv-formats >npm.log 2>&1) ||
    { echo "skip: npm install failed: $(tail -n 3 "$NPM_DIR/npm.log")"; exit 77; }
fi
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
timeout 240 "$PROP" "$MODEL" --count "$COUNT" --seed "$SEED" --samples 3 >"$OUT" || {
  echo "FAIL: cpulm-schema-prop exited with $?"; exit 1; }
timeout 120 node "$HERE/schema_prop_check.mjs" "$NPM_DIR" "$COUNT" <"$OUT"
